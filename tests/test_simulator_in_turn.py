"""Blocks run their CUDA threads in turn, in one Python thread: one after another when they cannot wait for
each other, barrier by barrier with cuda.syncthreads() statements (gpulab.simulator.in_turn reads the kernel,
gpulab.simulator.blocks runs it)."""

from __future__ import annotations

import threading
import time
import types

import numpy as np
import pytest
from numba import cuda, float32

from gpulab import simulator
from gpulab.simulator import blocks, in_turn
from gpulab.simulator.in_turn import independent_threads, plan
from gpulab.source import py_func


@cuda.jit(device=True)
def _plain(x):
    return 2 * x


@cuda.jit(device=True)
def _waits(x):
    cuda.syncthreads()
    return x


@cuda.jit
def _calls_plain(out):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = _plain(i)


@cuda.jit
def _calls_waits(out):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = _waits(i)


def _fn(kernel):
    return py_func(kernel)


def test_kernels_that_cannot_wait_are_independent_and_those_that_can_are_not():
    @cuda.jit
    def add(a, b, out):
        i = cuda.grid(1)
        if i < out.size:
            out[i] = a[i] + b[i]

    @cuda.jit
    def tiled(a, out):
        s = cuda.shared.array(16, np.float32)
        s[cuda.threadIdx.x] = a[cuda.grid(1)]
        cuda.syncthreads()
        out[cuda.grid(1)] = s[15 - cuda.threadIdx.x]

    @cuda.jit
    def counted(out):
        out[0] = cuda.syncthreads_count(1)

    @cuda.jit
    def in_a_loop(out):
        for _ in range(3):
            if cuda.threadIdx.x == 0:
                cuda.syncthreads()

    assert independent_threads(_fn(add))
    assert independent_threads(_fn(_calls_plain))
    for k in (tiled, counted, in_a_loop, _calls_waits):
        assert not independent_threads(_fn(k)), k
    assert not independent_threads(add)  # not a Python function: Numba's threads, as before


def test_barriers_are_found_through_closures_modules_containers_and_redefinitions():
    def make(helper):
        @cuda.jit
        def k(out):
            out[cuda.grid(1)] = helper(1)

        return k

    assert independent_threads(_fn(make(_plain)))
    assert not independent_threads(_fn(make(_waits)))  # through a closure cell

    mod = types.ModuleType("learner_helpers")
    mod.load = _waits
    g = {"cuda": cuda, "helpers": mod, "OPS": (_plain, _waits)}
    exec("def via_module(out):\n    out[0] = helpers.load(1)\n", g)  # noqa: S102
    exec("def via_tuple(out):\n    out[0] = OPS[0](1)\n", g)  # noqa: S102
    assert not independent_threads(g["via_module"])
    assert not independent_threads(g["via_tuple"])

    class Callable:  # a callable object of the learner's is not read: not independent
        def __call__(self, x):
            return x

    g2 = {"cuda": cuda, "f": Callable()}
    exec("def k(out):\n    out[0] = f(1)\n", g2)  # noqa: S102
    assert not independent_threads(g2["k"])

    # A notebook redefines the device function a kernel calls: read again at the next launch.
    g3 = {"cuda": cuda, "helper": _plain}
    exec("def k(out):\n    out[0] = helper(1)\n", g3)  # noqa: S102
    assert independent_threads(g3["k"])
    g3["helper"] = _waits
    assert not independent_threads(g3["k"])


@pytest.mark.parametrize("block", [(8,), (4, 3), (2, 3, 4)])
def test_threads_in_turn_see_the_same_indices_as_numba_threads(block):
    """Every index the kernel can read, for 1-, 2- and 3-D blocks and grids, equals the threaded run's."""

    @cuda.jit(device=True)
    def body(out):
        tx, ty, tz = cuda.threadIdx.x, cuda.threadIdx.y, cuda.threadIdx.z
        bx, by, bz = cuda.blockIdx.x, cuda.blockIdx.y, cuda.blockIdx.z
        flat_t = tx + cuda.blockDim.x * (ty + cuda.blockDim.y * tz)
        flat_b = bx + cuda.gridDim.x * (by + cuda.gridDim.y * bz)
        n = cuda.blockDim.x * cuda.blockDim.y * cuda.blockDim.z
        row = flat_b * n + flat_t
        out[row, 0], out[row, 1], out[row, 2] = tx, ty, tz
        out[row, 3], out[row, 4], out[row, 5] = bx, by, bz
        out[row, 6] = cuda.laneid

    @cuda.jit
    def in_turn(out):
        body(out)

    @cuda.jit
    def threaded(out):
        body(out)
        if out.shape[0] < 0:
            cuda.syncthreads()  # never reached: only there to keep a Python thread per CUDA thread

    assert independent_threads(_fn(in_turn)) and not independent_threads(_fn(threaded))
    grid = (2,) * len(block)
    rows = int(np.prod(grid) * np.prod(block))
    a, b = np.full((rows, 7), -1, np.int64), np.full((rows, 7), -1, np.int64)
    in_turn[grid, block](a)
    threaded[grid, block](b)
    assert (a >= 0).all()
    np.testing.assert_array_equal(a, b)


def test_instruments_count_every_thread_and_errors_name_the_failing_thread():
    @cuda.jit
    def fails_at_5(out):
        i = cuda.grid(1)
        if i == 5:
            raise ValueError("five")
        out[i] = i

    out = np.zeros(16, np.int64)
    with pytest.raises(ValueError, match=r"tid=\[5, 0, 0\] ctaid=\[0, 0, 0\]: five"):
        fails_at_5[2, 8](out)

    @cuda.jit
    def ok(out):
        i = cuda.grid(1)
        out[i] = i

    with simulator.instrument() as ins:
        ok[2, 8](out)
    assert len(ins.barriers) == 16 and set(ins.barriers.values()) == {0}


def test_a_barrier_that_could_not_be_read_stops_with_a_clear_error():
    g = {"cuda": cuda, "getattr": getattr}
    exec('def sneaky(out):\n    getattr(cuda, "sync" + "threads")()\n    out[0] = 1\n', g)  # noqa: S102
    assert independent_threads(g["sneaky"])  # the one case the reading cannot see
    kernel = cuda.jit(g["sneaky"])
    with pytest.raises(RuntimeError, match="in turn, with the barriers it read.*as a statement"):
        kernel[1, 4](np.zeros(4, np.int32))


def test_a_stuck_thread_in_turn_is_stopped_by_the_harness():
    from gpulab.exercises.run import Hang, run_with_deadline

    @cuda.jit
    def spins(out):
        i = cuda.grid(1)
        while out[0] == 0:  # nobody sets it
            i += 1

    start = time.monotonic()
    with pytest.raises(Hang):
        run_with_deadline(lambda: spins[1, 4](np.zeros(4, np.int32)), 1.0)
    assert time.monotonic() - start < 8
    deadline = time.monotonic() + 10
    while [t for t in threading.enumerate() if type(t).__name__ == "BlockThread" and t.is_alive()]:
        assert time.monotonic() < deadline, "the simulator thread still runs"
        time.sleep(0.05)


def test_threads_in_turn_cost_a_fraction_of_a_python_thread_each():
    """The reason for all this: the same kernel with and without a (never reached) barrier."""

    @cuda.jit
    def relu(x, y):
        i = cuda.grid(1)
        if i < y.size:
            y[i] = max(x[i], 0.0)

    @cuda.jit
    def relu_threaded(x, y):
        i = cuda.grid(1)
        if i < y.size:
            y[i] = max(x[i], 0.0)
        if y.size < 0:
            _sync()  # a barrier in a device function: Numba's threads

    x = np.random.default_rng(0).standard_normal(1024).astype(np.float32)
    y = np.empty_like(x)

    def cpu(k):
        best = float("inf")
        for _ in range(3):
            t0 = time.process_time()
            k[8, 128](x, y)
            best = min(best, time.process_time() - t0)
        return best

    turn, threaded = cpu(relu), cpu(relu_threaded)
    np.testing.assert_array_equal(y, np.maximum(x, 0))
    assert turn * 4 < threaded, (turn, threaded)
    assert blocks.THREAD_DONE and in_turn.WAITS  # installed by harden(); the names it looks for


TPB = 8


@cuda.jit
def _tiled_sum(x, out):  # two barriers per step, a barrier count that differs by nothing between threads
    buf = cuda.shared.array(8, float32)
    t = cuda.threadIdx.x
    acc = float32(0.0)
    for step in range(3):
        buf[t] = x[cuda.blockIdx.x * 24 + step * 8 + t]
        cuda.syncthreads()
        acc += buf[(t + 1) % 8]
        cuda.syncthreads()
    out[cuda.grid(1)] = acc


@cuda.jit(device=True)
def _sync():
    cuda.syncthreads()


@cuda.jit
def _tiled_sum_threads(x, out):  # the same, its barriers in a device function: Numba's threads
    buf = cuda.shared.array(8, float32)
    t = cuda.threadIdx.x
    acc = float32(0.0)
    for step in range(3):
        buf[t] = x[cuda.blockIdx.x * 24 + step * 8 + t]
        _sync()
        acc += buf[(t + 1) % 8]
        _sync()
    out[cuda.grid(1)] = acc


def test_barrier_statements_run_barrier_by_barrier_with_the_same_results_and_counts():
    gen, is_gen = plan(_fn(_tiled_sum))
    assert is_gen and gen is not _fn(_tiled_sum)
    assert plan(_fn(_tiled_sum_threads)) is None
    x = np.random.default_rng(1).standard_normal(48).astype(np.float32)
    a, b = np.zeros(16, np.float32), np.zeros(16, np.float32)
    with simulator.instrument(watch_shared=True) as ins:
        _tiled_sum[2, 8](x, a)
    with simulator.instrument(watch_shared=True) as ins_threads:
        _tiled_sum_threads[2, 8](x, b)
    np.testing.assert_array_equal(a, b)
    want = x.reshape(2, 3, 8)[:, :, [1, 2, 3, 4, 5, 6, 7, 0]].sum(axis=1, dtype=np.float32).ravel()
    np.testing.assert_allclose(a, want, rtol=1e-6)
    assert ins.barriers == ins_threads.barriers and set(ins.barriers.values()) == {6}
    assert ins.unequal_barriers() is None

    # Each access carries the epoch it was made in: the same records, whatever the order they came in.
    def accesses(instruments):
        ((_, log, _),) = instruments.shared_logs.values()
        return sorted((a.kind, a.block, a.thread, a.index, a.epoch) for a in log)

    assert accesses(ins) == accesses(ins_threads) and len(accesses(ins)) == 2 * 16 * 3


def test_a_barrier_inside_a_branch_is_still_counted():
    @cuda.jit
    def branchy(out):
        t = cuda.threadIdx.x
        if t < 4:
            cuda.syncthreads()
        out[t] = t

    with simulator.instrument() as ins:
        branchy[1, 8](np.zeros(8, np.int32))
    assert ins.unequal_barriers() is not None


def test_reversed_order_is_another_schedule():
    @cuda.jit
    def last_writer_wins(out):  # a write race: which thread wins depends on the schedule
        out[0] = cuda.threadIdx.x

    out = np.zeros(1, np.int32)
    last_writer_wins[1, 8](out)
    assert out[0] == 7
    with blocks.reversed_order():
        last_writer_wins[1, 8](out)
    assert out[0] == 0


def test_a_kernel_whose_file_changed_keeps_numbas_threads(tmp_path, monkeypatch):
    import importlib
    import linecache

    src = (
        "from numba import cuda, float32\n\n@cuda.jit\ndef rev(x, out):\n"
        "    buf = cuda.shared.array(4, float32)\n    buf[cuda.threadIdx.x] = x[cuda.threadIdx.x]\n"
        "    cuda.syncthreads()\n    out[cuda.threadIdx.x] = buf[3 - cuda.threadIdx.x]\n"
    )
    (tmp_path / "learner_rev.py").write_text(src)
    monkeypatch.syspath_prepend(str(tmp_path))
    mod = importlib.import_module("learner_rev")
    (tmp_path / "learner_rev.py").write_text(src.replace("3 - cuda", "cuda"))  # edited, not re-imported
    linecache.checkcache()
    assert plan(_fn(mod.rev)) is None
    out = np.zeros(4, np.float32)
    mod.rev[1, 4](np.arange(4, dtype=np.float32), out)
    assert out.tolist() == [3, 2, 1, 0]  # the code that was defined, not the file as it is now
