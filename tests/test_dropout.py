"""Random numbers on the GPU: gpulab's host generator (gpulab.xoroshiro, installed in the simulator by
gpulab.simulator.xoroshiro) against numba-cuda's own, and lesson 08's dropout exercise (gpulab.lessons.dropout):
the exact check, each named mistake, PTX."""

from __future__ import annotations

import time
import warnings

import numpy as np
import pytest
from numba import cuda, float32

import gpulab
from gpulab import lessons
from gpulab.lessons import dropout
from gpulab.lessons.answers_05_10 import dropout_forward_kernel
from gpulab import xoroshiro
from gpulab.source import define

sim_only = pytest.mark.skipif(not gpulab.is_simulator(), reason="compares with numba's simulator-mode originals")


def _numba(name):
    """numba-cuda's own function ``name`` of numba.cuda.random (object mode in the simulator: warnings off)."""
    import numba.cuda.random as ncr

    return getattr(ncr, "_gpulab_originals", {}).get(name, getattr(ncr, name))


def _quiet(fn, *args):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return fn(*args)


@sim_only
@pytest.mark.parametrize("n,seed,start", [(1, 0, 0), (2, 1, 0), (33, 12345, 0), (17, 2**64 - 1, 1), (9, 7, 5)])
def test_states_equal_numba_cudas_cpu_init(n, seed, start):
    ours, theirs = np.empty(n, xoroshiro.DTYPE), np.empty(n, xoroshiro.DTYPE)
    xoroshiro.init_states_cpu(ours, seed, start)
    _quiet(_numba("init_xoroshiro128p_states_cpu"), theirs, seed, start)
    assert np.array_equal(ours, theirs)


@sim_only
def test_jump_equals_numba_cudas_jump_and_a_later_subsequence():
    a = np.empty(6, xoroshiro.DTYPE)
    xoroshiro.init_states_cpu(a, 5)
    xoroshiro.uniform_float32_streams(a, 3)  # states that have drawn: a jump keeps their offset
    theirs = a.copy()
    for i in range(theirs.size):
        for _ in range(3):
            _quiet(_numba("xoroshiro128p_jump"), theirs, i)
    assert np.array_equal(xoroshiro.jump(a, 3), theirs)
    fresh, later = np.empty(6, xoroshiro.DTYPE), np.empty(6, xoroshiro.DTYPE)
    xoroshiro.init_states_cpu(fresh, 5)
    xoroshiro.init_states_cpu(later, 5, 2001 * 6)  # DataParallel's worker 1 with seed 2 starts here
    assert np.array_equal(xoroshiro.jump(fresh, 2001 * 6), later)
    assert xoroshiro.jump(fresh[:0], 1).shape == (0,)


def test_create_states_is_silent_fast_and_the_same_numbers():
    from numba.cuda.random import create_xoroshiro128p_states

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # any NumbaWarning or overflow RuntimeWarning fails
        states = create_xoroshiro128p_states(1024, seed=1)
        start = time.perf_counter()
        create_xoroshiro128p_states(4096, seed=2)
        seconds = time.perf_counter() - start
    host = np.asarray(states.copy_to_host())
    assert np.array_equal(host.view(np.uint64), dropout.new_states(1024, seed=1))
    # numba's object-mode fallback took 14.9 s for 4096 states on 2 cores, gpulab's 30 ms (a GPU: milliseconds)
    assert seconds < 3.0, f"4096 states took {seconds:.2f} s"


@sim_only
def test_draws_equal_numba_cudas_and_the_vectorised_replay():
    a = np.empty(8, xoroshiro.DTYPE)
    xoroshiro.init_states_cpu(a, 3)
    b, c = a.copy(), a.copy()
    theirs32 = [_quiet(_numba("xoroshiro128p_uniform_float32"), a, i % 8) for i in range(40)]
    theirs64 = [_quiet(_numba("xoroshiro128p_uniform_float64"), a, i % 8) for i in range(8)]
    ours32 = [xoroshiro.uniform_float32(b, i % 8) for i in range(40)]
    ours64 = [xoroshiro.uniform_float64(b, i % 8) for i in range(8)]
    assert ours32 == theirs32 and ours64 == theirs64 and np.array_equal(a, b)
    assert np.array_equal(xoroshiro.uniform_float32_streams(c, 5).ravel(), np.array(ours32, np.float32))


@sim_only
def test_draws_in_a_simulated_kernel_are_silent_and_replayed_exactly():
    from numba.cuda.random import xoroshiro128p_normal_float32, xoroshiro128p_uniform_float32

    @cuda.jit
    def draw(states, out, normal):
        t = cuda.grid(1)
        for i in range(t, out.size, cuda.gridsize(1)):
            out[i] = xoroshiro128p_uniform_float32(states, t)
        normal[t] = xoroshiro128p_normal_float32(states, t)

    words = dropout.new_states(64, seed=5)
    out, normal = np.zeros(300, np.float32), np.zeros(64, np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        draw[2, 32](dropout.as_states(words.copy()), out, normal)
    replay = xoroshiro.uniform_float32_streams(words.view(xoroshiro.DTYPE).copy(), 5).ravel()[:300]
    assert np.array_equal(out, replay) and np.isfinite(normal).all()


def test_the_reference_kernel_passes_and_the_reference_replays_the_grid_stride_order():
    result = lessons.exercise("08", "dropout_forward").check(dropout_forward_kernel, trusted=True)
    assert result.passed, result
    x = np.ones(200, np.float32)
    words = dropout.new_states(dropout.THREADS, seed=0)
    y, mask = dropout.dropout_reference(x, words, np.float32(0.5))
    u = xoroshiro.uniform_float32_streams(words.view(xoroshiro.DTYPE).copy(), 3)
    assert mask[dropout.THREADS + 7] == (u[1, 7] >= 0.5) and set(np.unique(y)) <= {0.0, 2.0}


HEADER = "@cuda.jit\ndef dropout_forward_kernel(x, states, p, y, mask):\n"
CORRECT_LOOP = "    tid = cuda.grid(1)\n    for i in range(tid, x.size, cuda.gridsize(1)):\n"
DRAW = "        u = xoroshiro128p_uniform_float32(states, tid)\n"
KEEP = (
    "        if {cond}:\n"
    "            y[i] = {kept}\n"
    "            mask[i] = 1\n"
    "        else:\n"
    "            y[i] = float32(0.0)\n"
    "            mask[i] = 0\n"
)
GOOD_KEEP = KEEP.format(cond="u >= p", kept="x[i] / (float32(1.0) - p)")

MISTAKES = [
    ("no_scaling", CORRECT_LOOP + DRAW + KEEP.format(cond="u >= p", kept="x[i]"), "1 / (1 - p)"),
    ("inverted", CORRECT_LOOP + DRAW + KEEP.format(cond="u < p", kept="x[i] / (float32(1.0) - p)"), "swapped"),
    ("times_keep", CORRECT_LOOP + DRAW + KEEP.format(cond="u >= p", kept="x[i] * (float32(1.0) - p)"), "x * (1 - p)"),
    (
        "no_else",
        CORRECT_LOOP
        + DRAW
        + "        if u >= p:\n            y[i] = x[i] / (float32(1.0) - p)\n            mask[i] = 1\n",
        "never written",
    ),
    (
        "thread_idx",
        "    tid = cuda.grid(1)\n    for i in range(tid, x.size, cuda.gridsize(1)):\n"
        "        u = xoroshiro128p_uniform_float32(states, cuda.threadIdx.x)\n" + GOOD_KEEP,
        "cuda.threadIdx.x",
    ),
    (
        "one_draw",
        "    tid = cuda.grid(1)\n    u = xoroshiro128p_uniform_float32(states, tid)\n"
        "    for i in range(tid, x.size, cuda.gridsize(1)):\n" + GOOD_KEEP,
        "repeats every cuda.gridsize(1)",
    ),
    (
        "no_grid_stride",
        "    tid = cuda.grid(1)\n    if tid < x.size:\n        i = tid\n" + DRAW + GOOD_KEEP,
        "must loop",
    ),
]


@pytest.mark.parametrize("label,body,words", MISTAKES, ids=[m[0] for m in MISTAKES])
def test_each_named_mistake_gets_its_hint(label, body, words):
    from numba.cuda.random import xoroshiro128p_uniform_float32

    ns = {"cuda": cuda, "float32": float32, "xoroshiro128p_uniform_float32": xoroshiro128p_uniform_float32}
    kernel = define(HEADER + body, "dropout_forward_kernel", ns)
    result = lessons.check("08", "dropout_forward", kernel)
    if label == "thread_idx" and not gpulab.is_simulator():  # on a GPU the blocks race for the shared states:
        assert not result.passed, result  # a mix of draws, which no replay names
        return
    assert not result.passed and words in result.hint, (label, result)


def test_the_keep_bound_holds_for_the_reference_and_refuses_an_inverted_mask():
    x = np.ones(20_000, np.float32)
    words = dropout.new_states(dropout.THREADS, seed=11)
    for p in (0.1, 0.5):
        kept = dropout.dropout_reference(x, words, np.float32(p))[1].mean()
        assert abs(kept - (1 - p)) <= dropout.keep_bound(x.size, p)
    assert abs(0.1 - 0.9) > dropout.keep_bound(x.size, 0.1)
    assert dropout.state_bytes(64 * 4096) == 4 * 2**20


@pytest.mark.ptx
def test_the_reference_kernel_compiles_to_ptx_without_a_driver():
    import inspect

    from gpulab import ptx
    from gpulab.lessons import answers_05_10

    sig = dict((k, s) for k, s in answers_05_10.PTX_SIGNATURES)[dropout_forward_kernel]
    res = ptx.compile_source(inspect.getsource(answers_05_10), "dropout_forward_kernel", sig, ccs=[(7, 5), (9, 0)])
    assert res == {"7.5": "ok", "9.0": "ok"}, res


@sim_only  # on a GPU the draws past the states read and write other memory: not a test to run there
def test_states_indexed_by_the_element_are_told_one_state_per_thread():
    # states[i] with i the element: right while every thread has one element, past the states after that
    from numba.cuda.random import xoroshiro128p_uniform_float32

    ns = {"cuda": cuda, "float32": float32, "xoroshiro128p_uniform_float32": xoroshiro128p_uniform_float32}
    body = CORRECT_LOOP + "        u = xoroshiro128p_uniform_float32(states, i)\n" + GOOD_KEEP
    result = lessons.check("08", "dropout_forward", define(HEADER + body, "dropout_forward_kernel", ns))
    assert not result.passed and "one state per thread of the grid" in result.hint, result
    assert "bounds guard" not in result.hint, result


@sim_only
def test_an_ordinary_bounds_error_on_a_line_that_draws_is_not_blamed_on_the_states():
    from numba.cuda.random import xoroshiro128p_uniform_float32

    ns = {"cuda": cuda, "float32": float32, "xoroshiro128p_uniform_float32": xoroshiro128p_uniform_float32}
    body = (
        "    tid = cuda.grid(1)\n    for i in range(tid, x.size + 1, cuda.gridsize(1)):\n"  # one element too far
        "        y[i] = x[i] * xoroshiro128p_uniform_float32(states, tid)\n"  # x[i] past its end, on a drawing line
        "        mask[i] = 1\n"
    )
    result = lessons.check("08", "dropout_forward", define(HEADER + body, "dropout_forward_kernel", ns))
    assert not result.passed and "runs past its states" not in result.hint, result


@sim_only  # a race: the simulator's schedules show it; on a GPU the outcome is timing
def test_threads_sharing_one_state_are_told_so():
    from numba.cuda.random import xoroshiro128p_uniform_float32

    ns = {"cuda": cuda, "float32": float32, "xoroshiro128p_uniform_float32": xoroshiro128p_uniform_float32}
    body = CORRECT_LOOP + "        u = xoroshiro128p_uniform_float32(states, 0)\n" + GOOD_KEEP
    result = lessons.check("08", "dropout_forward", define(HEADER + body, "dropout_forward_kernel", ns))
    assert not result.passed and "same generator state" in result.hint, result
