"""gpulab.simulator: the locked shared-array allocation, the one access-logging view, barrier counts,
atomic marks, and the instruments the harness and trace use."""

from __future__ import annotations

import sys
import threading
import time

import numpy as np
import block_threads
import pytest
from numba import cuda, float32, int32

from gpulab import simulator
from gpulab.simulator import Access, flat_indices, instrument, watch
from gpulab.source import kernel_source, py_func, standalone_source
from gpulab.trace import trace

TPB = 16
TPB_PAD = TPB + 1  # a constant Numba sees whole (TPB + 1 inside a kernel does not compile for a GPU)


def _shared_ids(method, threads=64):
    import threading

    import numpy as np
    from numba.cuda.simulator import kernelapi

    shared = kernelapi.FakeCUDAShared(0)
    ids, barrier = [], threading.Barrier(threads)

    def worker():
        barrier.wait()
        ids.append(id(method(shared, (4, 4), np.float32)))  # one source line, as in a kernel

    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        ts = [threading.Thread(target=worker) for _ in range(threads)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
    finally:
        sys.setswitchinterval(old)
    return ids


def test_simulator_shared_array_is_one_array_per_block_under_thread_switches():
    from numba.cuda.simulator import kernelapi

    assert getattr(kernelapi.FakeCUDAShared.array, "_gpulab_locked", False)
    for _ in range(5):
        assert len(set(_shared_ids(kernelapi.FakeCUDAShared.array))) == 1


def test_flat_indices_one_rule_for_every_view():
    assert flat_indices((1, 2), (3, 4)) == [6]
    assert flat_indices(-1, (5,)) == [4]
    assert flat_indices((0, slice(None)), (2, 3)) == [0, 1, 2]
    # zero-length axes: nothing is touched, whatever the index (the two old views disagreed here)
    assert flat_indices((0, 0), (0, 4)) == [] and flat_indices(0, (0,)) == []
    assert flat_indices(slice(None), (3, 0)) == []


def _run_in_block(fn):
    """Call ``fn`` from a thread that looks like a simulator thread of block (0, 0, 0)."""
    import threading
    from types import SimpleNamespace

    th = threading.Thread(target=fn)
    th.blockIdx = SimpleNamespace(x=0, y=0, z=0)
    th.threadIdx = SimpleNamespace(x=3, y=0, z=0)
    th.start()
    th.join()


def test_watched_view_logs_reads_and_writes_and_ignores_zero_length_arrays():
    log: list = []
    a = watch(np.zeros((2, 3), np.float32), "a", log)
    empty = watch(np.zeros((0, 4), np.float32), "e", log)
    errors = []

    def body():
        a[1, 2] = 5.0
        _ = a[0, 1]
        try:
            empty[0, 0] = 1.0
        except IndexError as exc:  # numpy's own error, not one from the logging
            errors.append(exc)

    _run_in_block(body)
    assert [(x.array, x.kind, x.index, x.thread) for x in log] == [("a", "w", 5, (3, 0, 0)), ("a", "r", 1, (3, 0, 0))]
    assert len(errors) == 1
    _ = a[0, 0]  # outside a kernel thread: not logged
    assert len(log) == 2


@cuda.jit
def _sync_in_branch(out):
    buf = cuda.shared.array(TPB, float32)
    tx = cuda.threadIdx.x
    buf[tx] = tx
    if tx < 4:
        cuda.syncthreads()  # only some threads: the bug the barrier counts reveal
    out[tx] = buf[tx]


@cuda.jit
def _atomic_and_sync(out, total):
    buf = cuda.shared.array((TPB, TPB_PAD), float32)
    tx = cuda.threadIdx.x
    buf[tx, 0] = 1.0
    cuda.syncthreads()  # wait until buf is written
    cuda.atomic.add(total, 0, buf[tx, 0])
    out[tx] = buf[tx, 0]


def test_barrier_counts_per_thread_show_a_barrier_inside_a_branch():
    out = np.zeros(TPB, np.float32)
    with instrument() as ins:
        _sync_in_branch[1, TPB](out)
    block, (t_hi, n_hi), (t_lo, n_lo) = ins.unequal_barriers()
    assert block == (0, 0, 0) and n_hi == 1 and n_lo == 0 and t_hi[0] < 4 <= t_lo[0]


def test_instruments_record_shared_bytes_per_block_accesses_and_atomics():
    out, total = np.zeros(2 * TPB, np.float32), np.zeros(1, np.float32)
    with instrument(watch_shared=True) as ins:
        _atomic_and_sync[2, TPB](out, total)
    assert ins.unequal_barriers() is None and set(ins.barriers.values()) == {1}
    assert ins.shared_bytes_per_block() == TPB * (TPB + 1) * 4  # per block, not summed over blocks
    ((label, log, shape),) = ins.shared_logs.values()
    assert label == "buf" and shape == (TPB, TPB + 1)
    writes = [a for a in log if a.kind == "w"]
    assert len(writes) == 2 * TPB and all(a.epoch == 0 and a.line > 0 for a in writes)
    assert all(a.epoch == 1 for a in log if a.kind == "r")
    assert total[0] == 2 * TPB
    # trace sees atomics through the same view: the atomic's read and write are marked
    total[0] = 0
    log2 = trace(_atomic_and_sync, 1, TPB, out, total, names=["out", "total"])
    marked = [a for a in log2.accesses if a.array == "total"]
    assert marked and all(a.atomic for a in marked) and isinstance(marked[0], Access)


def test_nothing_is_recorded_without_instruments():
    out = np.zeros(TPB, np.float32)
    ins = simulator.Instruments()
    _sync_in_branch[1, TPB](out)
    assert ins.barriers == {} and not simulator._ACTIVE


def test_py_func_and_sources_live_in_one_place():
    fn = py_func(_sync_in_branch)
    assert fn.__name__ == "_sync_in_branch" and py_func(fn) is fn
    assert kernel_source(_sync_in_branch).startswith("@cuda.jit\ndef _sync_in_branch(out):")
    module = standalone_source(_sync_in_branch)
    assert "TPB = 16" in module and "from numba import float32" in module


def test_simulated_wraps_the_python_function_and_refuses_other_objects():
    import pytest

    k = simulator.simulated(_sync_in_branch)
    assert k.fn is py_func(_sync_in_branch)
    with pytest.raises(TypeError, match="expects a @cuda.jit kernel"):
        simulator.simulated(lambda x: x)


# --------------------------------------------------------------------------------------------------
# gpulab.simulator.blocks: barriers on events (numba-cuda's semantics, without its polling loop)


def test_blocks_run_on_events_and_barriers_keep_their_order():
    from numba.cuda.simulator import kernel as sim_kernel

    from gpulab.simulator.blocks import run_block

    assert sim_kernel.BlockManager.run is run_block

    @cuda.jit
    def reverse(x, out):
        s = cuda.shared.array(64, float32)
        t = cuda.threadIdx.x
        for _ in range(3):  # three rounds of write, barrier, read, barrier
            s[t] = x[t]
            cuda.syncthreads()
            out[t] = s[63 - t]
            cuda.syncthreads()

    x = np.arange(64, dtype=np.float32)
    out = np.zeros_like(x)
    reverse[1, 64](x, out)
    assert np.array_equal(out, x[::-1])


def test_threads_that_return_early_do_not_hold_a_barrier():
    @cuda.jit
    def early(out):
        t = cuda.threadIdx.x
        if t % 2:
            return
        cuda.syncthreads()
        out[t] = cuda.syncthreads_count(1)

    out = np.zeros(32, dtype=np.int32)
    early[2, 32](out)
    assert list(out[::2]) == [16] * 16 and not out[1::2].any()


def test_an_error_in_one_thread_aborts_the_block_and_is_raised():
    @cuda.jit
    def boom(out):
        t = cuda.threadIdx.x
        if t == 5:
            raise ValueError("thread five")
        cuda.syncthreads()
        out[t] = 1

    out = np.zeros(16, dtype=np.int32)
    start = time.monotonic()
    with pytest.raises(ValueError, match="thread five"):
        boom[1, 16](out)
    assert time.monotonic() - start < 10
    _no_block_threads_within(10)  # the other threads were released from the barrier and ended


@pytest.fixture(autouse=True)
def _earlier_block_threads():
    """The block threads alive before each test (another file's leftovers): not this test's to wait for."""
    global _BEFORE
    _BEFORE = block_threads.alive()
    yield


_BEFORE: set = set()


def _no_block_threads_within(seconds: float) -> None:
    block_threads.wait_ended(_BEFORE, seconds, "simulator threads of this test")


def test_a_thread_that_outlives_its_failed_launch_notes_nothing_into_a_later_recording(monkeypatch):
    """On Numba's threads the launcher waits at most a second for the other threads of a failed block. One still
    running after that (here held until a recording has begun, then ending with a shuffle) must count nowhere in
    that recording: not its barrier count, its warp call, nor its read of a lane that had returned."""
    from gpulab.simulator import blocks, warps

    monkeypatch.setattr(blocks, "plan", lambda fn: None)  # every block on Numba's threads
    go, got = threading.Event(), []

    @cuda.jit
    def fails(x):
        sim = cuda  # the simulator's `cuda`: this module's is the real one again once the launch has raised
        t = cuda.threadIdx.x
        if t == 0:
            x[1000] = 1.0  # IndexError
        elif t == 1:
            go.wait(30)
            got.append(sim.shfl_down_sync(0xFFFFFFFF, 1.0, 1))  # lane 2 has returned: undefined (NaN)

    @cuda.jit
    def ones(out):
        out[cuda.threadIdx.x] = 1

    x = np.zeros(4)
    with pytest.raises(IndexError):
        fails[1, 4](x)
    leaving = [th for th in threading.enumerate() if type(th).__name__ == "BlockThread" and th.is_alive()]
    assert leaving, "thread 1 waits for the event"
    with instrument() as ins, warps.undefined_reads() as notes:
        ones[1, 1](np.zeros(1))
        go.set()
        for th in leaving:
            th.join(30)
    assert np.isnan(got).tolist() == [True], ("thread 1 made its shuffle while the recording was open", leaving)
    assert (list(ins.barriers), dict(ins.warp_ops), notes) == ([((0, 0, 0), (0, 0, 0))], {}, [])  # `ones` alone


def test_no_thread_runs_past_a_barrier_the_failed_thread_never_reached():
    """The failing thread is the last one the barrier waits for: the others must not be let through."""
    passed = []

    @cuda.jit
    def late_failure(out):
        t = cuda.threadIdx.x
        if t == 3:
            x = 0
            for k in range(20000):  # arrive last
                x += k
            raise ValueError("thread three")
        cuda.syncthreads()
        passed.append(t)

    for _ in range(3):
        with pytest.raises(ValueError, match="thread three"):
            late_failure[1, 4](np.zeros(4, dtype=np.int32))
    _no_block_threads_within(10)
    assert passed == []


def test_a_stuck_kernel_is_stopped_and_the_next_launch_works():
    """One thread sleeps in C (the harness cannot interrupt it), another waits at a barrier: the harness's
    deadline still ends the launch promptly, and the simulator is usable afterwards (numba's kernel
    context and the module's `cuda` global restored)."""
    from gpulab.exercises.run import Hang, run_with_deadline

    @cuda.jit
    def stuck(out):
        t = cuda.threadIdx.x
        if t == 0:
            time.sleep(9)
        cuda.syncthreads()
        out[t] = 1

    start = time.monotonic()
    with pytest.raises(Hang):
        run_with_deadline(lambda: stuck[1, 2](np.zeros(2, dtype=np.int32)), 1.0)
    assert time.monotonic() - start < 8.5  # the harness's two rounds of stop requests (~5 s), not the 9 s sleep

    @cuda.jit
    def ones(out):
        out[cuda.grid(1)] = 1

    out = np.zeros(8, dtype=np.int32)
    ones[2, 4](out)
    assert out.tolist() == [1] * 8
    _no_block_threads_within(15)


@cuda.jit
def _reads_before_writing(out, ints):
    buf = cuda.shared.array(4, float32)
    acc = cuda.local.array(2, float32)
    count = cuda.local.array(1, int32)
    tx = cuda.threadIdx.x
    if tx < 2:
        buf[tx] = 1.0  # buf[2] and buf[3] are never written
    cuda.syncthreads()  # the two writes are done
    acc[1] = 0.0  # acc[0] is never written
    out[tx] = buf[tx] + acc[0] * 0.0 if tx == 0 else buf[tx]
    count[0] = 7
    ints[tx] = count[0]


def test_shared_and_local_arrays_start_as_nan_so_an_unwritten_read_shows():
    out = np.zeros(4, np.float32)
    ints = np.zeros(4, np.int32)
    _reads_before_writing[1, 4](out, ints)
    assert np.isnan(out[0])  # acc[0] * 0.0 is nan, not 0: the unwritten local value shows
    assert out[1] == 1.0 and np.isnan(out[2:]).all()
    assert (ints == 7).all()  # written before it was read: the integer filler (0xBAADF00D) never shows


_TPB = 32  # as test_exercises_reduce's check_block_sum launches


@cuda.jit
def _block_sum_unpadded(x, partial):
    buf = cuda.shared.array(_TPB, float32)
    tx = cuda.threadIdx.x
    i = cuda.grid(1)
    if i < x.shape[0]:
        buf[tx] = x[i]  # the last block's padding is never written
    cuda.syncthreads()  # the block's values are in buf
    s = _TPB // 2
    while s > 0:
        if tx < s:
            buf[tx] += buf[tx + s]
        cuda.syncthreads()  # this level is done
        s //= 2
    if tx == 0:
        partial[cuda.blockIdx.x] = buf[0]


def test_an_unwritten_shared_read_gets_the_hint_that_names_it():
    from test_exercises_reduce import check_block_sum

    res = check_block_sum(_block_sum_unpadded)
    assert not res.passed and "nan" in res.message
    assert "read buf[16]" in res.hint and "which no thread of its block wrote" in res.hint, res  # located
    assert "floats start as nan" in res.hint and "past the end of the data" in res.hint, res
