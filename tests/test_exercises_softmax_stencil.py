"""Harness on softmax and stencil/convolution exercises: overflow, unwritten columns, halos, shifted
windows, a missing barrier after the halo load, a flipped filter."""

from __future__ import annotations

import math

import numpy as np
from numba import cuda, float32

from gpulab.exercises import check_kernel, random_arrays

TPB = 32
TPB_HALO = TPB + 2  # a shared array's size must be a constant Numba sees whole, not TPB + 2 in the kernel


# --- softmax: one thread per row -------------------------------------------------------------------


def softmax_spec(x):
    e = np.exp(x.astype(np.float64) - x.max(axis=1, keepdims=True))
    return (e / e.sum(axis=1, keepdims=True)).astype(np.float32)


def large_inputs(s, rng):
    return random_arrays(rng, s, low=-1000.0, high=1000.0)  # far beyond exp's float32 range (88.7)


def check_softmax(kernel, **kw):
    opts = dict(
        spec=softmax_spec,
        inputs=large_inputs,
        sizes=[(3, 5), (40, 7)],
        launch=lambda x, out: ((x.shape[0] + 31) // 32, 32),
        rtol=1e-5,
        atol=1e-6,
    )
    opts.update(kw)
    return check_kernel(kernel, **opts)


@cuda.jit
def softmax_rows(x, out):
    r = cuda.grid(1)
    if r < x.shape[0]:
        m = x[r, 0]
        for j in range(1, x.shape[1]):
            m = max(m, x[r, j])
        s = 0.0
        for j in range(x.shape[1]):
            s += math.exp(x[r, j] - m)
        for j in range(x.shape[1]):
            out[r, j] = math.exp(x[r, j] - m) / s


@cuda.jit
def softmax_no_max(x, out):
    r = cuda.grid(1)
    if r < x.shape[0]:
        s = 0.0
        for j in range(x.shape[1]):
            s += math.exp(x[r, j])  # overflows for x > 88.7 (float32)
        for j in range(x.shape[1]):
            out[r, j] = math.exp(x[r, j]) / s


@cuda.jit
def softmax_skips_last_column(x, out):
    r = cuda.grid(1)
    if r < x.shape[0]:
        m = x[r, 0]
        for j in range(1, x.shape[1]):
            m = max(m, x[r, j])
        s = 0.0
        for j in range(x.shape[1]):
            s += math.exp(x[r, j] - m)
        for j in range(x.shape[1] - 1):  # off by one: the last column is never written
            out[r, j] = math.exp(x[r, j] - m) / s


@cuda.jit
def softmax_not_normalised(x, out):
    r = cuda.grid(1)
    if r < x.shape[0]:
        m = x[r, 0]
        for j in range(1, x.shape[1]):
            m = max(m, x[r, j])
        for j in range(x.shape[1]):
            out[r, j] = math.exp(x[r, j] - m)  # forgot to divide by the sum


def test_softmax_passes_on_large_inputs():
    res = check_softmax(softmax_rows)
    assert res.passed, res


def test_softmax_without_max_subtraction_overflows_and_says_so():
    res = check_softmax(softmax_no_max)
    assert not res.passed and res.status == "failed"
    assert "overflow" in res.hint and "subtract the row's maximum" in res.hint, res


def test_softmax_non_finite_values_from_overflow_are_named():
    from gpulab.exercises.diagnose import Judge, diagnose
    from gpulab.exercises.problem import Case

    x = np.array([[500.0, 1.0]], np.float32)
    case = Case((1, 2), 0, (x,), (softmax_spec(x),))
    got = np.array([[np.nan, 0.0]], np.float32)  # what a GPU computes: inf / inf
    _, hint = diagnose(
        got, case.expected[0], 1e-6, case, Judge(softmax_spec, 1e-5, ["x"]), "out", np.zeros(got.shape, bool)
    )
    assert "out[0, 0] is nan where a finite value is expected" in hint and "|x| = 500" in hint


def test_softmax_last_column_never_written():
    res = check_softmax(softmax_skips_last_column)
    assert not res.passed and "elements of out were never written (first: (0, 4))" in res.hint, res


def test_softmax_not_normalised_gets_the_exercises_named_mistake():
    def unnormalised(x):
        return np.exp(x.astype(np.float64) - x.max(axis=1, keepdims=True)).astype(np.float32)

    res = check_softmax(
        softmax_not_normalised,
        mistakes={"divide by the row's sum of exponentials": unnormalised},
        inputs=lambda s, rng: random_arrays(rng, s, low=-3.0, high=3.0),
    )
    assert not res.passed and res.hint == "divide by the row's sum of exponentials"


# --- 1-D stencil: (x[i-1] + x[i] + x[i+1]) / 3 with zeros outside ----------------------------------


def stencil_spec(x):
    p = np.concatenate([[0], x, [0]]).astype(np.float32)
    return ((p[:-2] + p[1:-1] + p[2:]) / np.float32(3)).astype(np.float32)


def check_stencil(kernel, **kw):
    opts = dict(spec=stencil_spec, inputs=lambda n, rng: random_arrays(rng, n), sizes=[5, 70], threads=TPB)
    opts.update(kw)
    return check_kernel(kernel, **opts)


@cuda.jit
def stencil(x, out):
    i = cuda.grid(1)
    n = x.shape[0]
    if i < n:
        left = x[i - 1] if i > 0 else 0.0
        right = x[i + 1] if i + 1 < n else 0.0
        out[i] = (left + x[i] + right) / 3


@cuda.jit
def stencil_skips_borders(x, out):
    i = cuda.grid(1)
    if 0 < i < x.shape[0] - 1:  # the border elements are never written
        out[i] = (x[i - 1] + x[i] + x[i + 1]) / 3


@cuda.jit
def stencil_shifted_window(x, out):
    i = cuda.grid(1)
    n = x.shape[0]
    if i < n:
        a = x[i] if i < n else 0.0
        b = x[i + 1] if i + 1 < n else 0.0
        c = x[i + 2] if i + 2 < n else 0.0
        out[i] = (a + b + c) / 3  # window starts at i instead of i - 1


@cuda.jit
def stencil_left_wraps(x, out):
    i = cuda.grid(1)
    n = x.shape[0]
    if i < n:
        right = x[i + 1] if i + 1 < n else 0.0
        out[i] = (x[i - 1] + x[i] + right) / 3  # x[-1] is the LAST element in Python, not a zero


@cuda.jit
def stencil_shared(x, out):
    buf = cuda.shared.array(TPB_HALO, float32)
    tx = cuda.threadIdx.x
    i = cuda.grid(1)
    n = x.shape[0]
    buf[tx + 1] = x[i] if i < n else 0.0
    if tx == 0:
        buf[0] = x[i - 1] if 0 < i <= n else 0.0
        buf[TPB + 1] = x[i + TPB] if i + TPB < n else 0.0
    cuda.syncthreads()  # wait until the tile and its halo are loaded
    if i < n:
        out[i] = (buf[tx] + buf[tx + 1] + buf[tx + 2]) / 3


@cuda.jit
def stencil_shared_no_sync(x, out):
    buf = cuda.shared.array(TPB_HALO, float32)
    tx = cuda.threadIdx.x
    i = cuda.grid(1)
    n = x.shape[0]
    buf[tx + 1] = x[i] if i < n else 0.0
    if tx == 0:
        buf[0] = x[i - 1] if 0 < i <= n else 0.0
        buf[TPB + 1] = x[i + TPB] if i + TPB < n else 0.0
    if i < n:  # (missing: the barrier after the halo load)
        out[i] = (buf[tx] + buf[tx + 1] + buf[tx + 2]) / 3


def test_stencils_pass():
    assert check_stencil(stencil).passed
    res = check_stencil(stencil_shared)
    assert res.passed, res


def test_stencil_borders_never_written():
    res = check_stencil(stencil_skips_borders)
    assert not res.passed and "2 elements of out were never written (first: 0)" in res.hint, res


def test_stencil_window_shifted():
    res = check_stencil(stencil_shifted_window)
    assert not res.passed and "shifted by one element" in res.hint, res


def test_stencil_left_border_wraps_around():
    res = check_stencil(stencil_left_wraps)
    assert not res.passed and "only the first element is wrong" in res.hint, res


def test_stencil_missing_barrier_after_the_halo_load():
    res = check_stencil(stencil_shared_no_sync)
    assert not res.passed and "shared memory race" in res.hint and "AFTER the load" in res.hint, res


# --- 2-D convolution: a flipped filter -------------------------------------------------------------


def correlate(img, w):
    k = w.shape[0]
    out = np.zeros((img.shape[0] - k + 1, img.shape[1] - k + 1), np.float64)
    for a in range(k):
        for b in range(k):
            out += w[a, b] * img[a : a + out.shape[0], b : b + out.shape[1]]
    return out.astype(np.float32)


@cuda.jit
def conv_flipped(img, w, out):
    c, r = cuda.grid(2)
    k = w.shape[0]
    if r < out.shape[0] and c < out.shape[1]:
        acc = 0.0
        for a in range(k):
            for b in range(k):
                acc += w[k - 1 - a, k - 1 - b] * img[r + a, c + b]  # a true convolution: the filter flipped
        out[r, c] = acc


def test_conv_flipped_filter_is_named_by_the_exercise():
    res = check_kernel(
        conv_flipped,
        spec=correlate,
        inputs=lambda s, rng: random_arrays(rng, (s, s + 2), (3, 3)),
        sizes=[6, 9],
        threads=(4, 4),
        reduction=9,
        mistakes={
            "the filter is flipped: deep learning's 'convolution' is a "
            "cross-correlation, w[a, b] * img[r + a, c + b]": lambda img, w: correlate(img, w[::-1, ::-1].copy())
        },
    )
    assert not res.passed and "filter is flipped" in res.hint, res


@cuda.jit
def norm_in_float32(x, out):
    """One thread sums the squares in float32: past 1.8e19 a square overflows (inf), no exp anywhere."""
    if cuda.grid(1) == 0:
        s = x[0] * x[0]
        for k in range(1, x.size):
            s += x[k] * x[k]
        out[0] = math.sqrt(s)


def test_an_overflow_without_exp_is_not_blamed_on_exp_alone():
    """Inputs past 88.7 and an inf result: the hint names exp's overflow only as one case and says what else
    overflows (a product or a sum past float32's range), since this kernel takes no exp."""
    res = check_kernel(
        norm_in_float32,
        lambda x: np.sqrt(np.sum(x.astype(np.float64) ** 2, keepdims=True)).astype(np.float32),
        inputs=lambda n, rng: (rng.uniform(-1e20, 1e20, n).astype(np.float32),),
        sizes=[5],
        threads=32,
        out_init=np.zeros(1, np.float32),
        race_check=False,
    )
    text = str(res)
    assert not res.passed and "is inf where a finite value is expected" in text, text
    assert "If your code takes exp" in text and "a product or a sum past float32's range (3.4e38" in text, text


# --- a per-element exercise whose first case has one output: not a reduction (s25 review of lesson 07) --------------


def window_sum_spec(x):
    return (x[:-2] + x[1:-1] + x[2:]).astype(np.float32)


@cuda.jit
def window_sum_one_short(x, out):
    i = cuda.grid(1)
    if i < x.size - 3:  # one short: the last window starts at x.size - 3
        out[i] = x[i] + x[i + 1] + x[i + 2]


def test_a_one_element_output_of_a_per_element_exercise_is_not_called_a_reduction():
    """The first case's output has one element (x of 3 values, windows of 3), the other case's 38. A guard one short
    lets no thread write it: the hint asks about the guard, never about a reduction's tree or cuda.atomic.add (the
    hint lesson 07's conv2d_single got before its sizes were reordered)."""
    res = check_kernel(
        window_sum_one_short,
        spec=window_sum_spec,
        inputs=lambda s, rng: random_arrays(rng, s),
        sizes=[(3,), (40,)],
        launch=lambda x, out: ((out.size + 31) // 32, 32),
        rtol=1e-5,
    )
    assert not res.passed
    assert "reduction" not in res.hint and "atomic" not in res.hint, res.hint
    assert "bounds guard too strict" in res.hint, res.hint


def test_a_reduction_with_n_0_and_n_1_edge_cases_keeps_the_reduction_hint():
    """Lab 05's block sum checks n = 0 and n = 1 too: its fan-in is read from its largest case (review of the first
    version, which took the smallest ratio over the cases and gave such a reduction the generic hint)."""
    from gpulab.exercises.check import run_problem
    from gpulab.problems.lab05 import BLOCK_SUM

    @cuda.jit
    def block_sum(x, partial):
        i = cuda.grid(1)
        if x.size == 1 and i == 0:  # right for n = 1 only: nothing written at the larger sizes
            partial[0] = x[0]

    res = run_problem(BLOCK_SUM, block_sum)
    assert not res.passed
    assert "A reduction's result is written once" in res.hint, res.hint
