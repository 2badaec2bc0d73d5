"""Harness on 1-D elementwise exercises: right kernels pass, each usual mistake gets its verdict;
bool outputs and NaN expected values are really compared. In gpu mode the kernels run on the GPU; the
verdicts that only the simulator can give (an IndexError naming the thread, a stopped infinite loop) skip."""

from __future__ import annotations

import math

import numpy as np
import pytest
from numba import cuda

import gpulab
from gpulab.exercises import check_kernel, random_arrays


def add_inputs(n, rng):
    return random_arrays(rng, n, n)


def check_add(kernel, **kw):
    opts = dict(spec=lambda a, b: a + b, inputs=add_inputs, sizes=[0, 1, 7, 100, 300], threads=[128, 32])
    opts.update(kw)
    return check_kernel(kernel, **opts)


@cuda.jit
def add_good(a, b, out):
    i = cuda.grid(1)
    if i < out.shape[0]:
        out[i] = a[i] + b[i]


@cuda.jit
def add_grid_stride(a, b, out):
    for i in range(cuda.grid(1), out.shape[0], cuda.gridsize(1)):
        out[i] = a[i] + b[i]


@cuda.jit
def add_no_guard(a, b, out):
    i = cuda.grid(1)
    out[i] = a[i] + b[i]


@cuda.jit
def add_no_guard_line_per_read(a, b, out):
    i = cuda.grid(1)
    s = a[i]
    s += b[i]
    out[i] = s


@cuda.jit
def add_no_guard_named_index(a, b, out):
    tid = cuda.grid(1)
    s = a[tid]
    out[tid] = s + b[tid]


@cuda.jit
def add_off_by_one(a, b, out):
    i = cuda.grid(1)
    if i < out.shape[0] - 1:
        out[i] = a[i] + b[i]


@cuda.jit
def add_does_nothing(a, b, out):
    pass


@cuda.jit
def add_shifted(a, b, out):
    i = cuda.grid(1)
    if 0 < i < out.shape[0]:
        out[i] = a[i - 1] + b[i - 1]
    elif i == 0 and out.shape[0] > 0:
        out[0] = a[out.shape[0] - 1] + b[out.shape[0] - 1]


@cuda.jit
def add_hangs(a, b, out):
    i = cuda.grid(1)
    while i < out.shape[0]:
        out[i] = a[i] + b[i]  # forgot to advance i


@cuda.jit
def add_placeholder(a, b, out):
    raise NotImplementedError


def test_correct_kernel_passes_with_several_block_sizes():
    res = check_add(add_good, threads=[128, 32, 256, 1], points=2)
    assert res.passed and res.score == 2 and res.max_score == 2
    assert res.status == "passed" and bool(res)
    assert "races" in str(res)


def test_grid_stride_loop_is_accepted_with_a_small_fixed_grid():
    res = check_add(add_grid_stride, threads=None, launch=lambda a, b, out: (2, 32), sizes=[0, 1, 50, 200, 1000])
    assert res.passed, res


@pytest.mark.skipif(
    gpulab.is_gpu(),
    reason="the verdict names the thread from the simulator's IndexError; on a GPU nothing checks an index (gpu mode's "
    "verdict comes from guard zones: the test below)",
)
def test_missing_bounds_guard_names_thread_block_and_fix():
    res = check_add(add_no_guard)
    assert res.status == "failed" and res.score == 0
    assert "indexed past the end" in res.message and "of block" in res.message
    assert "missing bounds guard" in res.hint
    # size 0 fails first (any thread is past the end), with the first block size: the launch that failed
    assert "size=0" in res.message and "launch: add_no_guard[(1,), (128,)]" in res.message
    later = check_add(add_no_guard, sizes=[128, 7])  # 128 fits 128 threads; 7 with the second block size fails
    assert "launch: add_no_guard[(1,), (32,)]" in later.message
    assert "`if i < out.shape[0]:`" in res.hint  # the line indexes three arrays: the usual example


@pytest.mark.skipif(gpulab.is_gpu(), reason="the line comes from the simulator's IndexError")
def test_bounds_guard_hint_names_the_array_the_failing_line_indexes():
    res = check_add(add_no_guard_line_per_read)
    assert "at line" in res.message and "`s = a[i]`" in res.message
    assert "guard with `if i < a.shape[0]:` on the array that line indexes" in res.hint
    named = check_add(add_no_guard_named_index)  # the line's own index, not the i of the usual example
    assert "guard with `if tid < a.shape[0]:` on the array that line indexes" in named.hint


def test_off_by_one_guard():
    res = check_add(add_off_by_one, sizes=[7, 100])
    assert not res.passed and "last element was never written" in res.hint
    assert "out[6]: expected" in res.message  # the kernel's own name for the output


def test_off_by_one_at_size_one_points_at_the_guard():
    res = check_add(add_off_by_one, sizes=[1, 7])
    assert not res.passed and "single element" in res.hint and "i < n - 1" in res.hint


def test_output_untouched():
    res = check_add(add_does_nothing, sizes=[7, 100])
    assert not res.passed and "output untouched" in res.hint


@cuda.jit
def add_into_out(a, b, out):
    i = cuda.grid(1)
    if i < out.shape[0]:
        out[i] += a[i] + b[i]  # as if out started at 0


def test_adding_into_an_output_is_named_not_called_untouched():
    """nan + x is nan and the most negative float + x rounds back to it, so both fills look never written: a run
    started at 0 tells a kernel that adds into its output from one that never writes it."""
    res = check_add(add_into_out, sizes=[7, 100])
    assert not res.passed and "adds into it (`out[i] += ...`)" in res.hint and "untouched" not in res.hint
    assert "out[i] = acc" in res.hint
    nothing = check_add(add_does_nothing, sizes=[7, 100])
    assert "output untouched" in nothing.hint  # a kernel that never writes keeps its verdict


@cuda.jit
def copy_adding_into_out(a, out):
    t = cuda.grid(1)
    out[t] += a[t]


@cuda.jit
def copy_into_first(a, out):
    t = cuda.grid(1)
    out[0] += a[t]


@cuda.jit
def copy_adding_into_res(a, res):
    t = cuda.grid(1)
    if t < res.size:
        res[t] += a[t]


def _check_copy(kernel, sizes=(7, 100)):
    return check_kernel(
        kernel, spec=lambda a: a.copy(), inputs=lambda n, rng: random_arrays(rng, n), sizes=list(sizes), threads=[32]
    )


def test_adding_into_an_output_hint_writes_the_kernels_own_element():
    """The hint quotes the `+=` as the kernel writes it (its output's name and index), not a fixed `y[j]`; a kernel
    whose source cannot be read gets a neutral `out[...]`."""
    whole = (32, 96)  # whole blocks: no thread past the end, no guard needed
    out = _check_copy(copy_adding_into_out, sizes=whole)
    assert not out.passed and "adds into it (`out[t] += ...`)" in out.hint and "`out[t] = acc`" in out.hint
    first = _check_copy(copy_into_first, sizes=whole)  # every thread adds into out[0]
    if gpulab.is_gpu():  # no race check on a GPU: the constant index is named before the hint about adding
        assert not first.passed and first.hint.startswith("Every thread adds into the same element, `out[0]`")
        assert "its own (`out[i]` with `i = cuda.grid(1)`) and write it with `=`" in first.hint
        assert "acc" not in first.hint  # not the accumulate-then-write advice, which would keep out[0]
    else:  # the simulator saw two threads write out[0]: the race is the verdict
        assert not first.passed and "both wrote out[0]" in first.hint and "adds into it" not in first.hint
    res = _check_copy(copy_adding_into_res)
    assert not res.passed and "res looks unwritten, but the kernel adds into it (`res[t] += ...`)" in res.hint
    assert "`res[t] = acc` once" in res.hint and "[j]" not in res.hint
    namespace = {"cuda": cuda}
    exec("def no_source(a, res):\n    t = cuda.grid(1)\n    if t < res.size:\n        res[t] += a[t]\n", namespace)
    blind = _check_copy(cuda.jit(namespace["no_source"]))
    assert not blind.passed and "adds into it (`res[...] += ...`)" in blind.hint and "`res[...] = acc`" in blind.hint


def test_shifted_by_one():
    res = check_add(add_shifted, sizes=[7, 100])
    assert not res.passed and "shifted by one element" in res.hint, res


@pytest.mark.skipif(gpulab.is_simulator(), reason="the guard zones are gpu mode's (the simulator raises IndexError)")
def test_missing_bounds_guard_on_a_gpu_is_caught_by_the_guard_zone_and_the_gpu_stays_usable():
    """At size 0 every thread of add_no_guard reads past its (empty) inputs and writes past out: the inputs'
    guard zones keep those reads off CuPy's null pointer, the output's guard zone shows the writes."""
    res = check_add(add_no_guard)
    assert res.status == "failed" and "wrote past the end of out" in res.message, res
    assert "missing bounds guard" in res.hint
    assert check_add(add_good).passed  # no illegal address: the CUDA context still works


@pytest.mark.skipif(
    gpulab.is_gpu(),
    reason="only the simulator can stop a kernel that never ends; on a GPU it would keep spinning and block every "
    "later launch of this test process",
)
def test_hang_is_stopped_and_reported():
    res = check_add(add_hangs, sizes=[3], timeout=1.0)
    assert res.status == "timeout" and res.score == 0
    assert "did not finish within 1 s" in res.message and "infinite loop" in res.hint


@pytest.mark.skipif(gpulab.is_gpu(), reason="the simulator's speed is what makes a big case time out")
def test_a_case_too_big_for_the_simulator_is_named_as_such_not_as_a_loop(monkeypatch):
    """A case of millions of threads times out in the simulator by its size alone: the hint says so first. (Shown
    here with the threshold lowered to 2,048 threads, on a kernel that hangs: stopping a launch of a million
    threads mid-run takes long and leaves its threads to stop in their own time.)"""
    from gpulab.simulator import limits

    monkeypatch.setattr(limits, "WARN_THREADS", 2048)
    res = check_add(add_hangs, sizes=[2048], threads=1024, timeout=0.5)
    assert res.status == "timeout", res
    assert res.hint.startswith("this input is large for the simulator: the launch runs 2,048 threads"), res.hint
    assert "Check with smaller sizes (sizes=[7, 1000])" in res.hint
    assert "If smaller sizes time out too, look for an infinite loop" in res.hint
    small = check_add(add_hangs, sizes=[3], timeout=1.0)
    assert small.hint.startswith("an infinite loop?") and "large" not in small.hint


def test_placeholder_is_not_implemented_not_a_crash():
    res = check_add(add_placeholder)
    assert res.status == "not implemented" and res.score == 0 and "not implemented yet" in res.message


def test_not_implemented_in_a_host_function():
    def my_host(a, b, out):
        raise NotImplementedError

    res = check_add(None, threads=None, host=my_host)
    assert res.status == "not implemented"


def test_inputs_are_fresh_for_every_run():
    @cuda.jit
    def double_in_place_then_copy(x, out):
        i = cuda.grid(1)
        if i < x.shape[0]:
            x[i] = 2 * x[i]
            out[i] = x[i]

    res = check_kernel(
        double_in_place_then_copy,
        spec=lambda x: 2 * x,
        inputs=lambda n, rng: random_arrays(rng, n),
        sizes=[5, 40],
        threads=[32, 8],
    )
    assert res.passed, res


# --- bool outputs and NaN expected values ---------------------------------------------------------


@cuda.jit
def greater(a, b, mask):
    i = cuda.grid(1)
    if i < mask.shape[0]:
        mask[i] = a[i] > b[i]


@cuda.jit
def greater_only_true(a, b, mask):
    i = cuda.grid(1)
    if i < mask.shape[0] and a[i] > b[i]:
        mask[i] = True  # the False elements are never written


@cuda.jit
def greater_only_false(a, b, mask):
    i = cuda.grid(1)
    if i < mask.shape[0] and not a[i] > b[i]:
        mask[i] = False  # the True elements are never written


def check_greater(kernel):
    return check_kernel(kernel, spec=lambda a, b: a > b, inputs=add_inputs, sizes=[7, 100], threads=32)


def test_bool_output_is_really_compared():
    assert check_greater(greater).passed
    for wrong in (greater_only_true, greater_only_false):
        res = check_greater(wrong)
        assert not res.passed, wrong
        assert "were never written" in res.hint and "mask" in res.hint, res


@cuda.jit
def positive_or_nan(x, out):
    i = cuda.grid(1)
    if i < out.shape[0]:
        out[i] = x[i] if x[i] > 0 else math.nan


@cuda.jit
def positive_only(x, out):
    i = cuda.grid(1)
    if i < out.shape[0] and x[i] > 0:
        out[i] = x[i]  # leaves the NaN elements unwritten


@cuda.jit
def positive_or_zero(x, out):
    i = cuda.grid(1)
    if i < out.shape[0]:
        out[i] = x[i] if x[i] > 0 else 0.0


def check_positive(kernel):
    return check_kernel(
        kernel,
        spec=lambda x: np.where(x > 0, x, np.float32(np.nan)).astype(np.float32),
        inputs=lambda n, rng: random_arrays(rng, n),
        sizes=[9, 64],
        threads=32,
    )


def test_nan_expected_agrees_with_nan_got_and_unwritten_nan_is_caught():
    assert check_positive(positive_or_nan).passed
    res = check_positive(positive_only)
    assert not res.passed and "were never written" in res.hint, res
    assert not check_positive(positive_or_zero).passed


@cuda.jit
def add_stride_by_block(a, b, out):
    for i in range(cuda.grid(1), out.shape[0], cuda.blockDim.x):  # every block walks the others' elements too
        out[i] = a[i] + b[i]


@cuda.jit
def count_into_one(a, b, out):
    i = cuda.grid(1)
    if i < a.shape[0]:
        out[0] += 1.0  # a lost update: read, add, write


def test_two_owners_of_one_element_are_told_about_the_index_not_atomics():
    res = check_add(add_stride_by_block, sizes=[300], threads=32)
    if gpulab.is_gpu():  # both owners write the same value: right on a GPU, which says where to look for races
        assert res.passed and "run this check in simulator mode" in str(res), res
    else:
        assert not res.passed and "exactly one owner" in res.hint and "atomic" not in res.hint, res
    lost = check_kernel(
        count_into_one,
        spec=lambda a, b: np.array([a.size], np.float32),
        inputs=add_inputs,
        sizes=[64],
        launch=lambda a, b, out: (2, 32),
        out_init=0,
    )
    assert not lost.passed, lost  # on a GPU the threads of a warp read the same value: far fewer than 64 adds land
    if not gpulab.is_gpu():  # the simulator saw the lost update (on a GPU the hint comes from the values alone)
        assert "cuda.atomic.add" in lost.hint, lost


@cuda.jit
def add_into_out_2d(a, b, out):
    j, i = cuda.grid(2)
    if j < out.shape[0] and i < out.shape[1]:
        out[j, i] += a[j, i] + b[j, i]


def test_adding_into_a_2d_output_names_both_indices():
    """A matrix output (matmul's C[j, i] += ...) is written with two indices: the hint says `out[j, i] = acc`."""
    res = check_kernel(
        add_into_out_2d,
        spec=lambda a, b: a + b,
        inputs=lambda shape, rng: random_arrays(rng, shape, shape),
        sizes=[(5, 7), (20, 33)],
        threads=[(16, 8)],
    )
    assert not res.passed and "adds into it (`out[j, i] += ...`)" in res.hint and "out[j, i] = acc" in res.hint
