"""Blocks whose threads cannot wait for one another run their CUDA threads in turn, in one Python thread
(gpulab.simulator.independent decides, gpulab.simulator.blocks runs them)."""

from __future__ import annotations

import threading
import time
import types

import numpy as np
import pytest
from numba import cuda

from gpulab import simulator
from gpulab.simulator import blocks, independent
from gpulab.simulator.independent import independent_threads
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
    with pytest.raises(RuntimeError, match="one after another.*cuda.syncthreads\\(\\) directly"):
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
            cuda.syncthreads()

    x = np.random.default_rng(0).standard_normal(1024).astype(np.float32)
    y = np.empty_like(x)

    def cpu(k):
        best = float("inf")
        for _ in range(3):
            t0 = time.process_time()
            k[8, 128](x, y)
            best = min(best, time.process_time() - t0)
        return best

    in_turn, threaded = cpu(relu), cpu(relu_threaded)
    np.testing.assert_array_equal(y, np.maximum(x, 0))
    assert in_turn * 4 < threaded, (in_turn, threaded)
    assert blocks.THREAD_DONE and independent.WAITS  # installed by harden(), read by the tests above
