"""Warp calls and barriers inside device functions run in turn (gpulab.simulator.in_turn reads the device functions
a kernel calls, transitively, and recompiles each that waits as a generator): the same results, counts, undefined
reads and errors as the same calls written in the kernel's body, and as Numba's threads."""

from __future__ import annotations

import re
import time

import numpy as np
import pytest
from numba import cuda, float32

from gpulab import runtime, simulator
from gpulab.simulator import blocks, in_turn, warps
from gpulab.source import py_func

pytestmark = pytest.mark.skipif(not runtime.is_simulator(), reason="the simulator's schedules")

FULL = 0xFFFFFFFF


# Each pair: the kernel with its warp calls written in its body, and the same calls in device functions, each warp
# call on a line of the same text (the messages name the line of the call, wherever it is).


@cuda.jit
def sum_body(x, out):
    i = cuda.grid(1)
    v = x[i] if i < x.size else float32(0)
    for off in (16, 8, 4, 2, 1):
        v += cuda.shfl_down_sync(FULL, v, off)
    if cuda.laneid == 0:
        out[i // 32] = v


@cuda.jit(device=True)
def warp_sum(v):
    for off in (16, 8, 4, 2, 1):
        v += cuda.shfl_down_sync(FULL, v, off)
    return v


@cuda.jit
def sum_device(x, out):
    i = cuda.grid(1)
    v = warp_sum(x[i] if i < x.size else float32(0))
    if cuda.laneid == 0:
        out[i // 32] = v


@cuda.jit(device=True)
def block_sum(v, sums):  # a device function calling a device function, and a barrier: two levels
    v = warp_sum(v)
    if cuda.laneid == 0:
        sums[cuda.threadIdx.x // 32] = v
    cuda.syncthreads()  # every warp's sum is in sums
    return sums[0] + sums[1]


@cuda.jit
def two_levels_body(x, out):
    sums = cuda.shared.array(2, float32)
    i = cuda.grid(1)
    v = x[i]
    for off in (16, 8, 4, 2, 1):
        v += cuda.shfl_down_sync(FULL, v, off)
    if cuda.laneid == 0:
        sums[cuda.threadIdx.x // 32] = v
    cuda.syncthreads()  # every warp's sum is in sums
    out[i] = sums[0] + sums[1]


@cuda.jit
def two_levels_device(x, out):
    sums = cuda.shared.array(2, float32)
    i = cuda.grid(1)
    out[i] = block_sum(x[i], sums)


@cuda.jit
def scan_xor_broadcast_body(x, out, src):
    i = cuda.grid(1)
    v = x[i]
    offset = 1
    while offset < 32:
        u = cuda.shfl_up_sync(FULL, v, offset)
        if cuda.laneid >= offset:
            v += u
        offset *= 2
    out[0, i] = v
    w = x[i]
    m = 16
    while m > 0:
        w += cuda.shfl_xor_sync(FULL, w, m)
        m //= 2
    out[1, i] = w
    out[2, i] = cuda.shfl_sync(FULL, x[i], src)


@cuda.jit(device=True)
def scan(v):
    offset = 1
    while offset < 32:
        u = cuda.shfl_up_sync(FULL, v, offset)
        if cuda.laneid >= offset:
            v += u
        offset *= 2
    return v


@cuda.jit(device=True)
def butterfly(w):
    m = 16
    while m > 0:
        w += cuda.shfl_xor_sync(FULL, w, m)
        m //= 2
    return w


@cuda.jit(device=True)
def broadcast(v, src):
    return cuda.shfl_sync(FULL, v, src)


@cuda.jit
def scan_xor_broadcast_device(x, out, src):
    i = cuda.grid(1)
    out[0, i] = scan(x[i])
    out[1, i] = butterfly(x[i])
    out[2, i] = broadcast(x[i], src)


@cuda.jit
def votes_body(x, out):
    i = cuda.grid(1)
    p = x[i] > 0
    out[i, 0] = cuda.ballot_sync(FULL, p)
    out[i, 1] = cuda.all_sync(FULL, p)
    out[i, 2] = cuda.any_sync(FULL, p)
    out[i, 3] = cuda.eq_sync(FULL, p)
    out[i, 4] = cuda.match_any_sync(FULL, x[i])
    m, same = cuda.match_all_sync(FULL, x[i])
    out[i, 5] = m
    out[i, 6] = same
    cuda.syncwarp(FULL)
    out[i, 7] = cuda.activemask()
    out[i, 8] = cuda.lanemask_lt()


@cuda.jit(device=True)
def votes(x, out, i):
    p = x[i] > 0
    out[i, 0] = cuda.ballot_sync(FULL, p)
    out[i, 1] = cuda.all_sync(FULL, p)
    out[i, 2] = cuda.any_sync(FULL, p)
    out[i, 3] = cuda.eq_sync(FULL, p)
    out[i, 4] = cuda.match_any_sync(FULL, x[i])
    m, same = cuda.match_all_sync(FULL, x[i])
    out[i, 5] = m
    out[i, 6] = same
    cuda.syncwarp(FULL)
    out[i, 7] = cuda.activemask()
    out[i, 8] = cuda.lanemask_lt()


@cuda.jit
def votes_device(x, out):
    votes(x, out, cuda.grid(1))


@cuda.jit
def active_in_branch_body(x, out):  # activemask and a shuffle inside a guard: the lanes that took the branch
    i = cuda.grid(1)
    if i < x.size:
        mask = cuda.activemask()
        out[i, 0] = mask
        out[i, 1] = cuda.shfl_down_sync(mask, x[i], 1)


@cuda.jit(device=True)
def active_down(v):
    mask = cuda.activemask()
    return mask, cuda.shfl_down_sync(mask, v, 1)


@cuda.jit
def active_in_branch_device(x, out):
    i = cuda.grid(1)
    if i < x.size:
        out[i, 0], out[i, 1] = active_down(x[i])


@cuda.jit
def returned_lanes_body(x, out):  # the mistake: lanes past the end return before the shuffles (undefined reads)
    i = cuda.grid(1)
    if i >= x.size:
        return
    v = x[i]
    for m in (16, 8, 4, 2, 1):
        v += cuda.shfl_xor_sync(FULL, v, m)
    out[i] = v


@cuda.jit(device=True)
def xor_sum(v):
    for m in (16, 8, 4, 2, 1):
        v += cuda.shfl_xor_sync(FULL, v, m)
    return v


@cuda.jit
def returned_lanes_device(x, out):
    i = cuda.grid(1)
    if i >= x.size:
        return
    out[i] = xor_sum(x[i])


@cuda.jit
def own_lane_missing_body(x, out):
    i = cuda.grid(1)
    out[i] = cuda.shfl_down_sync(0x0000FFFF, x[i], 1)  # lanes 16-31 call with a mask without themselves


@cuda.jit(device=True)
def low_half_down(v):
    return cuda.shfl_down_sync(0x0000FFFF, v, 1)  # lanes 16-31 call with a mask without themselves


@cuda.jit
def own_lane_missing_device(x, out):
    i = cuda.grid(1)
    out[i] = low_half_down(x[i])


@cuda.jit
def split_calls_body(x, out):  # lanes of one warp at two different shuffles
    i = cuda.grid(1)
    if cuda.laneid < 16:
        out[i] = cuda.shfl_down_sync(FULL, x[i], 1)
    else:
        out[i] = cuda.shfl_up_sync(FULL, x[i], 1)


@cuda.jit(device=True)
def down_one(v):
    return cuda.shfl_down_sync(FULL, v, 1)


@cuda.jit(device=True)
def up_one(v):
    return cuda.shfl_up_sync(FULL, v, 1)


@cuda.jit
def split_calls_device(x, out):
    i = cuda.grid(1)
    if cuda.laneid < 16:
        out[i] = down_one(x[i])
    else:
        out[i] = up_one(x[i])


@cuda.jit
def shuffle_or_barrier_body(x, out):  # half the warp at a shuffle, the other half at a barrier
    i = cuda.grid(1)
    v = x[i]
    if cuda.laneid < 16:
        v += cuda.shfl_down_sync(FULL, v, 1)
    cuda.syncthreads()
    out[i] = v


@cuda.jit(device=True)
def barrier():
    cuda.syncthreads()


@cuda.jit
def shuffle_or_barrier_device(x, out):
    i = cuda.grid(1)
    v = x[i]
    if cuda.laneid < 16:
        v = down_added(v)
    barrier()
    out[i] = v


@cuda.jit(device=True)
def down_added(v):
    v += cuda.shfl_down_sync(FULL, v, 1)
    return v


def _f32(n):
    return np.arange(n, dtype=np.float32) - 7


# name -> (kernel in the body, kernel with device functions, arguments maker, grid, block)
CASES = {
    "warp sums, partial last warp": (sum_body, sum_device, lambda: (_f32(150), np.zeros(5, np.float32)), 1, 150),
    "two levels and a barrier": (
        two_levels_body,
        two_levels_device,
        lambda: (_f32(128), np.zeros(128, np.float32)),
        2,
        64,
    ),
    "scan, butterfly, broadcast": (
        scan_xor_broadcast_body,
        scan_xor_broadcast_device,
        lambda: (_f32(64), np.zeros((3, 64), np.float32), 37),
        2,
        32,
    ),
    "votes and matches": (
        votes_body,
        votes_device,
        lambda: (np.arange(64) % 3 - 1, np.zeros((64, 9), np.int64)),
        1,
        64,
    ),
    "activemask in a branch": (
        active_in_branch_body,
        active_in_branch_device,
        lambda: (np.arange(20, dtype=np.int64), np.zeros((20, 2), np.int64)),
        1,
        32,
    ),
    "lanes that returned": (
        returned_lanes_body,
        returned_lanes_device,
        lambda: (_f32(20), np.zeros(20, np.float32)),
        1,
        32,
    ),
    "a mask without the caller": (
        own_lane_missing_body,
        own_lane_missing_device,
        lambda: (_f32(32), np.zeros(32, np.float32)),
        1,
        32,
    ),
    "lanes at different calls": (
        split_calls_body,
        split_calls_device,
        lambda: (_f32(32), np.zeros(32, np.float32)),
        1,
        32,
    ),
    "a shuffle against a barrier": (
        shuffle_or_barrier_body,
        shuffle_or_barrier_device,
        lambda: (_f32(64), np.zeros(64, np.float32)),
        1,
        64,
    ),
}


def _numba_threads(monkeypatch):
    monkeypatch.setattr(blocks, "plan", lambda fn: None)


_LINE = re.compile(r"line \d+( `[^`]*`)?")  # a line named in a message: its number, and its text when known


def _outcome(kernel, make, grid, block, lines=True):
    """What a launch gave: the arrays (as bytes: NaN fillers compare equal), or the error's type and words, with
    the warp calls counted, each thread's barriers and the undefined reads noted; ``lines=False``: every line
    named as `line N` (the body's calls and the device functions' are on different lines)."""
    args = make()
    error = None
    with simulator.instrument() as ins, warps.undefined_reads() as notes:
        try:
            kernel[grid, block](*args)
        except RuntimeError as exc:
            error = (type(exc).__name__, str(exc))
    arrays = [a.tobytes() for a in args if isinstance(a, np.ndarray)]

    def named(text):
        return text if lines else _LINE.sub("line N", text)

    return {
        "arrays": None if error else arrays,
        "error": error and (error[0], named(error[1])),
        "warp_ops": dict(ins.warp_ops),
        "barriers": None if error else dict(ins.barriers),
        "notes": sorted(named(n) for n in notes),
    }


_CALLER = re.compile(r"the calling lane \d+ \(thread \([^)]*\)\)")  # a mask without the caller: which lane called


def _no_thread(outcome):
    """An error's words without the thread that raised it: on Numba's threads, whichever got there first (its
    ``tid=... ctaid=...``, and which of the lanes a mask leaves out called first)."""
    return outcome["error"][0], _CALLER.sub("the calling lane L", outcome["error"][1].split(": ", 1)[1])


@pytest.mark.parametrize("case", list(CASES))
def test_device_functions_run_in_turn_with_what_the_body_gives(case, monkeypatch):
    body, device, make, grid, block = CASES[case]
    assert in_turn.plan(py_func(device))[1] is True, "the device functions' waits are read: a generator"
    in_body, in_device = _outcome(body, make, grid, block, False), _outcome(device, make, grid, block, False)
    assert in_device == in_body
    _numba_threads(monkeypatch)
    threads_body, threads_device = _outcome(body, make, grid, block, False), _outcome(device, make, grid, block)
    if in_device["error"] is None:  # the same results, counts and reads, whichever schedule
        assert _outcome(device, make, grid, block) == threads_device
        assert in_device == threads_body
    else:  # Numba's threads stop where they stand when one raises: the same error, counts may differ
        assert _no_thread(in_device) == _no_thread(threads_body)
        assert _no_thread(_outcome(device, make, grid, block)) == _no_thread(threads_device)


def test_the_cases_say_what_they_should():
    """The outcomes compared above are the interesting ones: results, undefined reads and each kind of error."""
    got = {case: _outcome(CASES[case][1], *CASES[case][2:]) for case in CASES}
    assert got["warp sums, partial last warp"]["error"] is None
    assert "which does not exist" in got["warp sums, partial last warp"]["notes"][0]
    assert "`v += cuda.shfl_down_sync(FULL, v, off)`" in got["warp sums, partial last warp"]["notes"][0]
    assert "which did not make the call" in got["lanes that returned"]["notes"][0]
    assert "does not name the calling lane 16" in got["a mask without the caller"]["error"][1]
    assert "`return cuda.shfl_down_sync(0x0000FFFF, v, 1)  #" in got["a mask without the caller"]["error"][1]
    assert "met at different warp calls" in got["lanes at different calls"]["error"][1]
    stuck = got["a shuffle against a barrier"]["error"][1]
    assert "lanes 0-15 wait in cuda.shfl_down_sync" in stuck and "wait at cuda.syncthreads() at line" in stuck
    assert "`cuda.syncthreads()`" in stuck and "`v += cuda.shfl_down_sync(FULL, v, 1)`" in stuck
    assert got["two levels and a barrier"]["warp_ops"] == {"shfl_down_sync": 5 * 128}
    assert set(got["two levels and a barrier"]["barriers"].values()) == {1}


@cuda.jit(device=True)
def countdown(v, n):  # recursion through a device function that waits: Numba's threads, as written
    if n == 0:
        return v
    return countdown(v + cuda.shfl_xor_sync(FULL, v, n), n // 2)


@cuda.jit
def recursive_kernel(x, out):
    i = cuda.grid(1)
    out[i] = countdown(x[i], 16)


@cuda.jit(device=True)
def apply(f, v):  # a device function passed as an argument: not read, Numba's threads
    return f(v)


@cuda.jit
def passed_kernel(x, out):
    i = cuda.grid(1)
    out[i] = apply(warp_sum, x[i])


@cuda.jit
def keyword_call_kernel(x, out):  # a device function called with a keyword: the simulator's own error, on threads
    i = cuda.grid(1)
    out[i] = warp_sum(v=x[i])


def test_what_the_reading_leaves_to_numbas_threads_still_runs_there():
    x = np.arange(32, dtype=np.float32)
    for k in (recursive_kernel, passed_kernel, keyword_call_kernel):
        assert in_turn.plan(py_func(k)) is None, py_func(k).__name__
    out = np.zeros(32, np.float32)
    recursive_kernel[1, 32](x, out)
    assert (out == x.sum()).all()
    passed_kernel[1, 32](x, out)
    assert out[0] == x.sum()
    with pytest.raises(TypeError, match="unexpected keyword argument 'v'"):
        keyword_call_kernel[1, 32](x, out)


def test_a_device_function_named_like_a_wait_is_read_as_a_device_function():
    @cuda.jit
    def kernel(x, out):
        i = cuda.grid(1)
        out[i] = x[i]
        block_sync()
        out[i] += x[31 - i]

    kernel.py_func.__globals__["block_sync"] = barrier  # the test module's globals: the kernel's
    assert in_turn.plan(kernel.py_func)[1] is True
    out = np.zeros(32, np.float32)
    kernel[1, 32](np.arange(32, dtype=np.float32), out)
    assert (out == 31).all()


block_sync = barrier


def test_warp_calls_in_a_device_function_cost_about_what_they_cost_in_the_body():
    """The reason for all this (measured 2026-12-02, 2 cores, 4 blocks of 256: 28 us per thread in the body,
    473 us in a device function on Numba's threads, 30 us in turn). A generous bound, in this process."""
    x = np.ones(1024, np.float32)
    out = np.zeros(32, np.float32)

    def cpu(kernel):
        best = float("inf")
        for _ in range(3):
            t0 = time.process_time()
            kernel[4, 256](x, out)
            best = min(best, time.process_time() - t0)
        assert (out == 32).all()
        return best

    body, device = cpu(sum_body), cpu(sum_device)
    assert device < 3 * body, (body, device)


TPB = 64


@cuda.jit
def block_sums_body(x, partial):  # the mistake: warp 0 reads the warps' sums without waiting for them
    warp_sums = cuda.shared.array(2, float32)
    i = cuda.grid(1)
    v = x[i] if i < x.size else float32(0)
    for off in (16, 8, 4, 2, 1):
        v += cuda.shfl_down_sync(FULL, v, off)
    if cuda.laneid == 0:
        warp_sums[cuda.threadIdx.x // 32] = v
    if cuda.threadIdx.x == 0:
        partial[cuda.blockIdx.x] = warp_sums[0] + warp_sums[1]


@cuda.jit
def block_sums_device(x, partial):
    warp_sums = cuda.shared.array(2, float32)
    i = cuda.grid(1)
    v = warp_sum(x[i] if i < x.size else float32(0))
    if cuda.laneid == 0:
        warp_sums[cuda.threadIdx.x // 32] = v
    if cuda.threadIdx.x == 0:
        partial[cuda.blockIdx.x] = warp_sums[0] + warp_sums[1]


@cuda.jit
def guarded_body(x, partial):  # the classic mistake: lanes past the end take no part in the shuffles
    i = cuda.grid(1)
    if i < x.size:
        v = x[i]
        for off in (16, 8, 4, 2, 1):
            v += cuda.shfl_down_sync(FULL, v, off)
        if cuda.laneid == 0:
            partial[i // 32] = v


@cuda.jit
def guarded_device(x, partial):
    i = cuda.grid(1)
    if i < x.size:
        v = warp_sum(x[i])
        if cuda.laneid == 0:
            partial[i // 32] = v


def _problem(name, per, launch):
    from gpulab.exercises import Problem, random_arrays

    return Problem(
        name,
        lambda x: np.add.reduceat(x, np.arange(0, x.size, per)).astype(x.dtype),
        lambda n, rng: random_arrays(rng, n),
        sizes=[40, 100],
        launch=launch,
        out_names=["partial"],
        ptx=None,
    )


@pytest.mark.parametrize(
    ("body", "device", "per"),
    [(block_sums_body, block_sums_device, TPB), (guarded_body, guarded_device, 32)],
    ids=["a missing barrier", "a guard around the shuffles"],
)
def test_the_harness_gives_the_same_verdict_for_warp_calls_in_a_device_function(body, device, per):
    problem = _problem(py_func(body).__name__, per, lambda x, partial: ((x.size + TPB - 1) // TPB, TPB))
    in_body = problem.check(body)
    problem = _problem(py_func(device).__name__, per, lambda x, partial: ((x.size + TPB - 1) // TPB, TPB))
    in_device = problem.check(device)
    assert in_body.status == in_device.status == "failed", (in_body, in_device)

    def same(text):  # the kernels' names and lines aside
        return re.sub(r"lines? \d+( and \d+)?", "line N", _LINE.sub("line N", text.replace("_device", "_body")))

    assert same(in_device.hint) == same(in_body.hint), (in_body.hint, in_device.hint)
    assert same(in_device.message) == same(in_body.message)


def test_a_device_function_of_another_module_runs_in_turn_with_the_simulators_cuda_and_math(tmp_path, monkeypatch):
    """Its module's ``cuda`` and ``math`` are the simulator's while the block runs (as numba-cuda's device call sets
    them), and the real ones again after the launch, also after a launch that failed."""
    import importlib
    import math

    (tmp_path / "warp_helpers.py").write_text(
        "import math\n"
        "from numba import cuda\n\n\n"
        "@cuda.jit(device=True)\n"
        "def warp_max_exp(v, mask):\n"
        "    for m in (16, 8, 4, 2, 1):\n"
        "        v = max(v, cuda.shfl_xor_sync(mask, v, m))\n"
        "    return math.exp(v) if cuda.laneid >= 0 else v  # exp(1000.0) is inf in CUDA, an error in Python\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    helpers = importlib.import_module("warp_helpers")
    monkeypatch.setitem(globals(), "helpers_max_exp", helpers.warp_max_exp)
    how = in_turn.plan(py_func(other_module_kernel))
    assert how[1] is True and how[0]._gpulab_swaps == [helpers.warp_max_exp.fn]
    x = np.zeros(32, np.float32)
    x[3] = 1000.0
    out = np.zeros(32, np.float32)
    other_module_kernel[1, 32](x, out, FULL)
    assert np.isinf(out).all()
    assert helpers.math is math and helpers.cuda is cuda  # restored
    with pytest.raises(RuntimeError, match="does not name the calling lane 16"):
        other_module_kernel[1, 32](x, out, 0x0000FFFF)
    assert helpers.math is math and helpers.cuda is cuda


helpers_max_exp = None


@cuda.jit
def other_module_kernel(x, out, mask):
    i = cuda.grid(1)
    out[i] = helpers_max_exp(x[i], mask)
