"""Blocks run their CUDA threads in turn, in one Python thread: one after another when they cannot wait for
each other, barrier by barrier with cuda.syncthreads() statements (gpulab.simulator.in_turn reads the kernel,
gpulab.simulator.blocks runs it)."""

from __future__ import annotations

import contextlib
import time
import traceback
import types

import block_threads
import numpy as np
import pytest
from numba import cuda, float32, int32

from gpulab import simulator
from gpulab.simulator import blocks
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


@contextlib.contextmanager
def numba_threads():
    """Blocks run on Numba's threads, a Python thread per CUDA thread (how kernels gpulab cannot read run)."""
    saved = blocks.plan
    blocks.plan = lambda fn: None
    try:
        yield
    finally:
        blocks.plan = saved


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
    assert not independent_threads(add)  # the dispatcher, not its Python function: not read, so not independent
    assert plan(add) is None


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


@cuda.jit(device=True)
def _indices(out):
    tx, ty, tz = cuda.threadIdx.x, cuda.threadIdx.y, cuda.threadIdx.z
    bx, by, bz = cuda.blockIdx.x, cuda.blockIdx.y, cuda.blockIdx.z
    flat_t = tx + cuda.blockDim.x * (ty + cuda.blockDim.y * tz)
    flat_b = bx + cuda.gridDim.x * (by + cuda.gridDim.y * bz)
    row = flat_b * cuda.blockDim.x * cuda.blockDim.y * cuda.blockDim.z + flat_t
    out[row, 0], out[row, 1], out[row, 2] = tx, ty, tz
    out[row, 3], out[row, 4], out[row, 5] = bx, by, bz
    out[row, 6] = cuda.laneid


@cuda.jit
def _indices_in_turn(out):
    _indices(out)


@cuda.jit
def _indices_barrier_by_barrier(out):
    cuda.syncthreads()
    _indices(out)
    cuda.syncthreads()


@cuda.jit
def _indices_device_barrier(out):
    _indices(out)
    _sync()  # a barrier in a device function: a generator too


@pytest.mark.parametrize("block", [(8,), (4, 3), (2, 3, 4), (40,)])
def test_threads_in_turn_see_the_same_indices_as_numba_threads(block):
    """Every index the kernel can read (laneid too), for 1-, 2- and 3-D blocks and grids, both ways of running
    in turn (a barrier in the kernel or in a device function), equals the threaded run's."""
    assert plan(_fn(_indices_in_turn))[1] is False
    assert plan(_fn(_indices_barrier_by_barrier))[1] is True
    assert plan(_fn(_indices_device_barrier))[1] is True
    grid = (2,) * len(block)
    rows = int(np.prod(grid) * np.prod(block))
    runs = []
    for k in (_indices_in_turn, _indices_barrier_by_barrier, _indices_device_barrier, _indices_in_turn):
        out = np.full((rows, 7), -1, np.int64)
        if len(runs) == 3:
            with numba_threads():
                k[grid, block](out)
        else:
            k[grid, block](out)
        runs.append(out)
    assert (runs[0] >= 0).all()
    for run in runs[:3]:
        np.testing.assert_array_equal(run, runs[3])


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

    before = block_threads.alive()  # another file's leftovers, if any, are not this test's
    start = time.monotonic()
    with pytest.raises(Hang):
        run_with_deadline(lambda: spins[1, 4](np.zeros(4, np.int32)), 1.0)
    assert time.monotonic() - start < 12  # the deadline, then up to two rounds of stop requests
    block_threads.wait_ended(before, 10, "the stuck kernel's simulator threads")


def test_threads_in_turn_cost_a_fraction_of_a_python_thread_each():
    """The reason for all this: the same kernel with and without a (never reached) barrier."""

    @cuda.jit
    def relu(x, y):
        i = cuda.grid(1)
        if i < y.size:
            y[i] = max(x[i], 0.0)

    x = np.random.default_rng(0).standard_normal(1024).astype(np.float32)
    y = np.empty_like(x)

    def cpu(k):
        best = float("inf")
        for _ in range(3):
            t0 = time.process_time()
            k[8, 128](x, y)
            best = min(best, time.process_time() - t0)
        return best

    assert plan(_fn(relu)) is not None
    turn = cpu(relu)
    with numba_threads():
        threaded = cpu(relu)
    np.testing.assert_array_equal(y, np.maximum(x, 0))
    assert turn * 4 < threaded, (turn, threaded)  # measured 2026-12-01 on 2 cores: 6.6 us against 0.3 ms


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
def _tiled_sum_device(x, out):  # the same, its barriers in a device function: in turn too
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
    assert plan(_fn(_tiled_sum_device))[1] is True
    x = np.random.default_rng(1).standard_normal(48).astype(np.float32)
    a, b, c = np.zeros(16, np.float32), np.zeros(16, np.float32), np.zeros(16, np.float32)
    with simulator.instrument(watch_shared=True) as ins:
        _tiled_sum[2, 8](x, a)
    with simulator.instrument(watch_shared=True) as ins_device:
        _tiled_sum_device[2, 8](x, b)
    with numba_threads(), simulator.instrument(watch_shared=True) as ins_threads:
        _tiled_sum_device[2, 8](x, c)
    np.testing.assert_array_equal(a, c)
    np.testing.assert_array_equal(b, c)
    want = x.reshape(2, 3, 8)[:, :, [1, 2, 3, 4, 5, 6, 7, 0]].sum(axis=1, dtype=np.float32).ravel()
    np.testing.assert_allclose(a, want, rtol=1e-6)
    assert ins.barriers == ins_device.barriers == ins_threads.barriers and set(ins.barriers.values()) == {6}
    assert ins.unequal_barriers() is None

    # Each access carries the epoch it was made in: the same records, whatever the order they came in.
    def accesses(instruments):
        ((_, log, _),) = instruments.shared_logs.values()
        return sorted((a.kind, a.block, a.thread, a.index, a.epoch) for a in log)

    assert accesses(ins) == accesses(ins_device) == accesses(ins_threads) and len(accesses(ins)) == 2 * 16 * 3


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


def test_barriers_reached_through_nested_modules_partials_and_namespaces_keep_numbas_threads():
    import functools

    pkg, sub = types.ModuleType("learner_pkg"), types.ModuleType("learner_pkg.sub")
    pkg.sub, sub.barrier = sub, _waits
    for name, obj in [
        ("pkg", pkg),
        ("part", functools.partial(_waits, 0)),
        ("ns", types.SimpleNamespace(barrier=_waits)),
    ]:
        g = {"cuda": cuda, name: obj}
        call = {"pkg": "pkg.sub.barrier(1)", "part": "part()", "ns": "ns.barrier(1)"}[name]
        exec(f"def k(out):\n    out[0] = {call}\n", g)  # noqa: S102
        assert plan(g["k"]) is None, name
    g = {"cuda": cuda, "pkg": pkg}
    sub.barrier = _plain
    exec("def k(out):\n    out[0] = pkg.sub.barrier(1)\n", g)  # noqa: S102
    assert plan(g["k"]) == (g["k"], False)  # followed all the way down: nothing waits


def _factory(n):
    @cuda.jit
    def reverse_plus(x, out, m=n):  # default values are the factory's: one code object, two kernels
        buf = cuda.shared.array(4, float32)
        t = cuda.threadIdx.x
        buf[t] = x[t]
        cuda.syncthreads()
        out[t] = buf[3 - t] + m

    return reverse_plus


def test_kernels_sharing_one_code_keep_their_own_default_values():
    k10, k20 = _factory(10), _factory(20)
    assert plan(_fn(k10))[1] is True
    x, a, b = np.arange(4, dtype=np.float32), np.zeros(4, np.float32), np.zeros(4, np.float32)
    k10[1, 4](x, a)
    k20[1, 4](x, b)
    assert a.tolist() == [13, 12, 11, 10] and b.tolist() == [23, 22, 21, 20]


def test_barrier_by_barrier_names_the_failing_thread_and_its_line():
    @cuda.jit
    def fails_after_the_barrier(out):
        buf = cuda.shared.array(8, float32)
        buf[cuda.threadIdx.x] = 1
        cuda.syncthreads()
        if cuda.threadIdx.x == 6:
            out[100] = buf[0]  # out of bounds
        out[cuda.threadIdx.x] = buf[7 - cuda.threadIdx.x]

    assert plan(_fn(fails_after_the_barrier))[1] is True
    with pytest.raises(IndexError, match=r"tid=\[6, 0, 0\] ctaid=\[0, 0, 0\]") as info:
        fails_after_the_barrier[2, 8](np.zeros(16, np.float32))
    frames = [f for f in traceback.extract_tb(info.value.__traceback__) if f.name == "fails_after_the_barrier"]
    assert frames and frames[-1].line == "out[100] = buf[0]  # out of bounds"


def test_a_stuck_thread_barrier_by_barrier_is_stopped_and_the_spin_wait_is_explained():
    from gpulab.exercises.run import Hang, run_with_deadline

    @cuda.jit
    def waits_for_thread_one(flag, out):  # thread 0 spins until thread 1 writes: never, in turn
        t = cuda.threadIdx.x
        cuda.syncthreads()
        if t == 1:
            flag[0] = 1
        while flag[0] == 0:
            pass
        out[t] = 1

    assert plan(_fn(waits_for_thread_one))[1] is True
    start = time.monotonic()
    with pytest.raises(Hang):
        run_with_deadline(lambda: waits_for_thread_one[1, 2](np.zeros(1, np.int32), np.zeros(2, np.int32)), 1.0)
    assert time.monotonic() - start < 12


@cuda.jit
def _add_after_the_last_thread(a, b, out):  # every thread spins until the block's last thread has set a flag
    ready = cuda.shared.array(1, int32)
    if cuda.threadIdx.x == cuda.blockDim.x - 1:
        ready[0] = 12345
    while ready[0] != 12345:
        pass
    i = cuda.grid(1)
    if i < out.shape[0]:
        out[i] = a[i] + b[i]


def test_the_harness_explains_a_spin_wait_on_another_thread():
    from gpulab.exercises import check_kernel

    res = check_kernel(
        _add_after_the_last_thread,
        spec=lambda a, b: a + b,
        inputs=lambda n, rng: (np.ones(n, np.float32), np.ones(n, np.float32)),
        sizes=[64],
        threads=[32],
        timeout=1.0,
    )
    assert res.status == "timeout", res
    assert "infinite loop" in res.hint and "waits in a loop for another thread" in res.hint, res.hint


def test_a_kernel_made_with_source_define_runs_in_turn():
    """gpulab.source.define keeps exec'd source readable: the kernel runs in turn (not a thread per CUDA thread),
    show_source shows it, and a name the source does not define is a clear error."""
    from gpulab.errors import UsageError
    from gpulab.simulator.in_turn import plan
    from gpulab.source import define, show_source

    src = (
        "def flip(x, out):\n"
        "    s = cuda.shared.array(8, float32)\n"
        "    t = cuda.threadIdx.x\n"
        "    s[t] = x[t]\n"
        "    cuda.syncthreads()\n"
        "    out[t] = s[7 - t]\n"
    )
    fn = define(src, "flip", {"cuda": cuda, "float32": np.float32})
    assert plan(fn) is not None and plan(fn)[1]  # read as a generator: barrier by barrier
    x, out = np.arange(8, dtype=np.float32), np.zeros(8, np.float32)
    cuda.jit(fn)[1, 8](x, out)
    assert np.array_equal(out, x[::-1])
    assert "s[t] = x[t]" in show_source(fn, display=False)
    with pytest.raises(UsageError, match="no function called 'flop'"):
        define(src, "flop", {"cuda": cuda})


def test_the_source_check_sees_a_method_call_on_an_imported_module_as_the_same_code():
    """Python 3.13 compiles ``cuda.grid(1)`` on a module the file imports as an attribute load and a PUSH_NULL, and
    on a name it cannot see imported (the function's source compiled alone, as the in-turn rewrite does) as a method
    load. Before gpulab left PUSH_NULL out, every kernel in a file (the lessons' packages, the course's kernels) kept
    Numba's threads on Python 3.13: 0.24 ms per CUDA thread instead of 7 us (tests/test_cooperative.py there)."""
    import types

    from gpulab.simulator.in_turn_source import _shape

    body = "def k(x, y):\n    i = cuda.grid(1)\n    cuda.syncthreads()\n    y[i] = math.sqrt(x[i])\n"

    def k_code(source: str) -> types.CodeType:
        module = compile(source, "<kernels>", "exec")
        return next(c for c in module.co_consts if isinstance(c, types.CodeType) and c.co_name == "k")

    with_imports = k_code("import math\nfrom numba import cuda\n" + body)
    alone = k_code("\n\n" + body)  # the same lines, the imports not in sight
    assert _shape(with_imports) == _shape(alone)


@pytest.mark.parametrize(
    ("before", "after"),
    [
        ("y[0] = (a or b) and c", "y[0] = a or (b and c)"),  # the same instructions, jumps landing elsewhere
        ("y[0] = x[0] // 2", "y[0] = x[0] // 2.0"),  # 2 == 2.0
        ("y[0] = -0.0", "y[0] = 0.0"),  # -0.0 == 0.0
        ("y[0] = x[(0, 1)]", "y[0] = x[(False, True)]"),
    ],
)
def test_the_source_check_tells_apart_codes_that_differ_in_a_jump_target_or_a_constant_type(before, after):
    """The check refuses a kernel whose file changed: ``_shape`` must tell these apart (it left jump targets out
    and compared constants with ==, so the edited source would have run in place of the kernel's code)."""
    import types

    from gpulab.simulator.in_turn_source import _shape

    def k_code(line: str) -> types.CodeType:
        module = compile(f"def k(a, b, c, x, y):\n    {line}\n", "<kernels>", "exec")
        return next(c for c in module.co_consts if isinstance(c, types.CodeType))

    assert _shape(k_code(before)) != _shape(k_code(after))
    assert _shape(k_code(before)) == _shape(k_code(before))
