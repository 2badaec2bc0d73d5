"""Hints that two learner reviews (2026-12-03) found sending a learner to the wrong fix: each test is a learner's
kernel from the review, and checks that the hint names the real cause and fix (and no longer the wrong one)."""

from __future__ import annotations

import math

from numba import cuda, float32

from gpulab import lessons
from gpulab.lessons.answers_05_10 import K, TPB
from gpulab.lessons.answers_12 import SOFTMAX_TPB
from gpulab.source import define

NAMESPACE = {"cuda": cuda, "float32": float32, "math": math, "TPB": TPB, "K": K, "SOFTMAX_TPB": SOFTMAX_TPB}


def _check(lesson: str, name: str, source: str):
    fn_name = source.split("def ", 1)[1].split("(", 1)[0]
    return lessons.check(lesson, name, define(source, fn_name, dict(NAMESPACE)))


MATVEC_ADDS_INTO_Y = """
@cuda.jit
def matvec_kernel(A, x, y):
    i = cuda.grid(1)
    if i < y.size:
        for k in range(A.shape[1]):
            y[i] += A[i, k] * x[k]
"""


def test_matvec_adding_into_y_is_told_y_is_not_zeroed():
    # A4: the first case is 1x1, one output element: it was told "nothing was written to y ... guard too strict?"
    res = _check("03", "matvec", MATVEC_ADDS_INTO_Y)
    assert not res.passed, res
    assert "adds into it" in res.hint and "local variable" in res.hint, res
    assert "nothing was written" not in res.hint and "too strict" not in res.hint, res


BIAS_GRAD_ADDS_INTO_DB = """
@cuda.jit
def bias_grad_kernel(dout, db):
    o = cuda.grid(1)
    if o < db.size:
        for n in range(dout.shape[0]):
            db[o] += dout[n, o]
"""


def test_bias_grad_adding_into_db_is_told_db_is_not_zeroed():
    # B4: the first case is (1, 1): one element of db, which disabled the "adds into it" hint
    res = _check("08", "bias_grad", BIAS_GRAD_ADDS_INTO_DB)
    assert not res.passed, res
    assert "adds into it" in res.hint and "local variable" in res.hint, res
    assert "nothing was written" not in res.hint, res


def _online_softmax_source() -> str:
    import inspect

    from gpulab.lessons import answers_12

    return "@cuda.jit\n" + inspect.getsource(answers_12.online_softmax_kernel.py_func)


_GUARD = "        if new_max != -math.inf:  # a masked (-inf) entry adds nothing\n            run_sum = run_sum"
SOFTMAX_NO_GUARD = _online_softmax_source().replace(_GUARD, "        if True:\n            run_sum = run_sum")


def test_online_softmax_without_the_minus_inf_guard_is_told_about_minus_inf_minus_minus_inf():
    # B2: the nan comes from -inf - (-inf) on masked rows; the hint led with exp(x) overflowing above 88.7
    assert _GUARD in _online_softmax_source()
    res = _check("12", "online_softmax", SOFTMAX_NO_GUARD)
    assert not res.passed, res
    assert "the input holds -inf" in res.hint and "-inf - (-inf) is nan" in res.hint, res
    assert "if new_max != -math.inf:" in res.hint and not res.hint.split(". ")[0].endswith("88.7"), res
    assert res.hint.index("-inf - (-inf)") < res.hint.find("88.7") or "88.7" not in res.hint, res


SCORES_MASKS_THE_DIAGONAL = """
@cuda.jit
def scores_kernel(q, k, scale, causal, s):
    j, i = cuda.grid(2)
    n = q.shape[0]
    m = k.shape[0]
    if i < n and j < m:
        if causal != 0 and j >= i + (m - n):
            s[i, j] = -math.inf
        else:
            acc = float32(0.0)
            for c in range(q.shape[1]):
                acc += q[i, c] * k[j, c]
            s[i, j] = acc * scale
"""


def test_a_causal_mask_failure_states_a_finite_allowed_error():
    # B7: the bound is inf where the expected score is -inf; the message said "up to inf here"
    res = _check("12", "scores", SCORES_MASKS_THE_DIAGONAL)
    assert not res.passed and "allowed error" in res.message, res
    assert "up to inf" not in res.message, res
    bound = float(res.message.split("terms, up to ", 1)[1].split(" here", 1)[0])
    assert 0 < bound < 1e-3, res


SQUARED_DIFF_READS_TWICE = """
@cuda.jit
def squared_diff_kernel(x, y, out):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = (x[i] - y[i]) * (x[i] - y[i])
"""


def test_squared_diff_reading_x_twice_is_told_to_keep_it_in_a_local_variable():
    # A1: an elementwise kernel over its read budget was told to stage x in shared memory
    res = _check("06", "squared_diff", SQUARED_DIFF_READS_TWICE)
    assert res.status == "over budget", res
    assert "an element of x was read from global memory 2 times (limit 1" in res.message, res
    assert "at most 2 times" not in res.message, res
    assert "one thread read the same element of x 2 times" in res.hint and "local variable" in res.hint, res
    assert "`v = x[i]`" in res.hint and "a repeated expression likewise" in res.hint, res
    assert "d = x[i] - y[i]" not in res.hint, res  # no example that is this exercise's answer
    assert "shared memory" not in res.hint and "window" not in res.hint, res


CONV_ALL_FILTERS_REREADS_X = """
@cuda.jit
def conv2d_all_filters_kernel(x, w, out):
    j, i = cuda.grid(2)
    if i < out.shape[1] and j < out.shape[2]:
        for f in range(w.shape[0]):
            s = float32(0.0)
            for a in range(K):
                for b in range(K):
                    s += x[i + a, j + b] * w[f, a, b]
            out[f, i, j] = s
"""


def test_conv_all_filters_rereading_the_window_per_filter_is_told_to_use_a_local_array():
    # B6: the exercise asks for the window in registers; the hint said to stage x in shared memory
    res = _check("07", "conv2d_all_filters", CONV_ALL_FILTERS_REREADS_X)
    assert res.status == "over budget", res
    assert "cuda.local.array((K, K), float32)" in res.hint and "once per filter" in res.hint, res
    assert "read the same 9 elements of x 3 times each" in res.hint, res
    assert "shared memory" not in res.hint, res


BLUR3_FROM_GLOBAL = """
@cuda.jit
def blur3_kernel(x, out):
    i = cuda.grid(1)
    n = x.size
    if i < n:
        left = x[i - 1] if i > 0 else 0.0
        right = x[i + 1] if i + 1 < n else 0.0
        out[i] = (left + x[i] + right) / 3.0
"""


def test_blur3_from_global_memory_is_still_told_to_stage_x_in_shared_memory():
    # the hint that was right: neighbouring threads read the same element, each once
    res = _check("04", "blur3", BLUR3_FROM_GLOBAL)
    assert res.status == "over budget", res
    assert "neighbouring threads read the same elements of x (up to 3 threads" in res.hint, res
    assert "stage x in shared memory" in res.hint and "local variable" not in res.hint, res


GRID_STRIDE_WITHOUT_THE_LOOP = """
@cuda.jit
def add_grid_stride_kernel(a, b, out):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = a[i] + b[i]
"""


def test_grid_stride_without_the_loop_is_told_the_grid_has_fewer_threads_than_elements():
    # A3: 64 threads, 65 elements: it was told "off-by-one in the bounds guard or in the number of blocks"
    res = _check("01", "grid_stride", GRID_STRIDE_WITHOUT_THE_LOOP)
    assert not res.passed, res
    assert "the launch has 64 threads for the 65 elements of out" in res.hint, res
    assert "cuda.gridsize(1)" in res.hint and "off-by-one" not in res.hint, res


SCAN_BLOCK_SUMS_INSIDE_THE_GUARD = """
@cuda.jit
def scan_block_kernel(x, out, block_sums):
    buf = cuda.shared.array((2, TPB), float32)
    tx = cuda.threadIdx.x
    i = cuda.grid(1)
    buf[0, tx] = x[i] if i < x.size else float32(0.0)
    cuda.syncthreads()
    src = 0
    off = 1
    while off < TPB:
        v = buf[src, tx]
        if tx >= off:
            v += buf[src, tx - off]
        buf[1 - src, tx] = v
        cuda.syncthreads()
        src = 1 - src
        off *= 2
    if i < out.size:
        out[i] = buf[src, tx]
        if tx == TPB - 1:
            block_sums[cuda.blockIdx.x] = buf[src, tx]
"""


def test_scan_writing_block_sums_inside_the_length_guard_is_told_the_last_thread_is_kept_out():
    # A6: it got the reduction's hint (`if tx == 0:`, "not inside a guard on block_sums's size")
    res = _check("05", "scan_block", SCAN_BLOCK_SUMS_INSIDE_THE_GUARD)
    assert not res.passed, res
    assert "each block's total of the scan" in res.hint and "cuda.blockDim.x - 1" in res.hint, res
    assert "`if i < x.size:`" in res.hint and "keeps the last thread out" in res.hint, res
    assert "tx == 0" not in res.hint, res


MAXPOOL_MISSES_A_CORNER = """
@cuda.jit
def maxpool2x2_kernel(x, out):
    j, i = cuda.grid(2)
    if i < out.shape[0] and j < out.shape[1]:
        m = x[2 * i, 2 * j]
        m = max(m, x[2 * i, 2 * j + 1])
        m = max(m, x[2 * i + 1, 2 * j])
        m = max(m, x[2 * i + 1, 2 * j])
        out[i, j] = m
"""


def test_maxpool_missing_a_window_position_is_not_called_an_off_by_one_at_the_edge():
    # B9: in a 2x3 output every element is at an edge; the wrong one was the last only by chance
    res = _check("07", "maxpool2x2", MAXPOOL_MISSES_A_CORNER)
    assert not res.passed, res
    assert "off-by-one at the edge" not in res.hint, res
    assert res.hint.startswith("one of the window's four positions is never read"), res  # the named mistake


SAXPY_X_Y_SWAPPED = """
@cuda.jit
def saxpy_kernel(alpha, x, y, out):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = alpha * y[i] + x[i]
"""


def test_saxpy_with_x_and_y_swapped_is_told_so():
    # A9: no hint at all
    res = _check("02", "saxpy", SAXPY_X_Y_SWAPPED)
    assert not res.passed, res
    assert res.hint.startswith("out is what you get with x and y exchanged"), res


LEAKY_RELU_BRANCHES_SWAPPED = """
@cuda.jit
def leaky_relu_kernel(x, out):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = 0.01 * x[i] if x[i] > 0 else x[i]
"""


def test_leaky_relu_with_its_branches_swapped_is_told_so():
    # A9: no hint at all
    res = _check("06", "leaky_relu", LEAKY_RELU_BRANCHES_SWAPPED)
    assert not res.passed, res  # the first case has one element: a wrong value there proves no constant factor
    assert "constant factor" not in res.hint, res
    kernel = define(LEAKY_RELU_BRANCHES_SWAPPED, "leaky_relu_kernel", dict(NAMESPACE))
    res = lessons.exercise("06", "leaky_relu").problem.check(kernel, sizes=[100])  # both signs: the swap shows
    assert "where x > 0 (" in res.hint and "it is 0.01 times the expected value" in res.hint, res
    assert "it is 100 times the expected value" in res.hint and "branches look swapped" in res.hint, res


def test_leaky_relu_with_a_wrong_slope_on_one_side_is_told_which_side():
    src = LEAKY_RELU_BRANCHES_SWAPPED.replace("0.01 * x[i] if x[i] > 0 else x[i]", "x[i] if x[i] > 0 else 0.02 * x[i]")
    res = lessons.exercise("06", "leaky_relu").problem.check(
        define(src, "leaky_relu_kernel", dict(NAMESPACE)), sizes=[100]
    )
    assert "where x > 0 (" in res.hint and ") it is right" in res.hint and "it is 2 times the expected" in res.hint, res
    assert "swapped" not in res.hint, res


# name -> (lesson, exercise, source): the review's kernels, for printing their verdicts by hand
REVIEW = {
    "A4 matvec adds into y": ("03", "matvec", MATVEC_ADDS_INTO_Y),
    "B4 bias_grad adds into db": ("08", "bias_grad", BIAS_GRAD_ADDS_INTO_DB),
    "B2 online_softmax no -inf guard": ("12", "online_softmax", SOFTMAX_NO_GUARD),
    "B7 scores mask the diagonal": ("12", "scores", SCORES_MASKS_THE_DIAGONAL),
    "A1 squared_diff reads twice": ("06", "squared_diff", SQUARED_DIFF_READS_TWICE),
    "B6 conv2d_all_filters rereads x": ("07", "conv2d_all_filters", CONV_ALL_FILTERS_REREADS_X),
    "blur3 from global memory": ("04", "blur3", BLUR3_FROM_GLOBAL),
    "A3 grid_stride without the loop": ("01", "grid_stride", GRID_STRIDE_WITHOUT_THE_LOOP),
    "A6 scan block_sums inside the guard": ("05", "scan_block", SCAN_BLOCK_SUMS_INSIDE_THE_GUARD),
    "B9 maxpool misses a corner": ("07", "maxpool2x2", MAXPOOL_MISSES_A_CORNER),
    "A9 saxpy x and y swapped": ("02", "saxpy", SAXPY_X_Y_SWAPPED),
    "A9 leaky_relu branches swapped": ("06", "leaky_relu", LEAKY_RELU_BRANCHES_SWAPPED),
}


ZERO_WHERE_NEGATIVE = LEAKY_RELU_BRANCHES_SWAPPED.replace(
    "0.01 * x[i] if x[i] > 0 else x[i]", "0.1 * x[i] if x[i] > 0 else 0.0"
)
SOFTMAX_ALL_ZERO = """
@cuda.jit
def softmax_zero(x, y):
    r = cuda.blockIdx.x
    if cuda.threadIdx.x == 0:
        for j in range(x.shape[1]):
            y[r, j] = 0.0
"""


def test_a_factor_of_zero_or_of_one_element_is_not_called_a_constant_factor():
    """Review of the review: a side written as 0 (factor 0) divided by zero in the hint (a traceback instead of a
    verdict), and a one-element side made any wrong value "a constant factor" (lab 05's softmax writing zeros was
    told to check the branches of its condition on x)."""
    from gpulab.problems.lab05_softmax import SOFTMAX

    kernel = define(ZERO_WHERE_NEGATIVE, "leaky_relu_kernel", dict(NAMESPACE))
    res = lessons.exercise("06", "leaky_relu").problem.check(kernel, sizes=[100])
    assert res.status == "failed" and "constant factor" not in res.hint, res
    res = SOFTMAX.check(define(SOFTMAX_ALL_ZERO, "softmax_zero", dict(NAMESPACE)))
    assert not res.passed and "constant factor" not in res.hint and "branch" not in res.hint, res
