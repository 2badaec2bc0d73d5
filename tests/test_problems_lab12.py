"""Lab 12's problems (``gpulab.problems.lab12``): the inputs are hard where they must be (logits past
float32 ``exp``'s range, causal offsets, chunks with no visible key), correct kernels score full marks,
and the known mistakes get their hint. The solution notebook itself runs under nbval in `make test`
(tests/nbval_checks.py: its CPU budget and full marks)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from numba import cuda, float32

from gpulab import problems
from gpulab.transformer import flash
from kernel_edits import edited_kernel

L = problems.lab12
TPB = L.TPB


@cuda.jit
def scale_mask_no_offset(s, scale, causal, out):
    j, i = cuda.grid(2)
    if i < s.shape[0] and j < s.shape[1]:
        out[i, j] = -math.inf if (causal != 0 and j > i) else s[i, j] * scale


@cuda.jit
def softmax_backward_diagonal(p, dp, ds):
    row = cuda.blockIdx.x
    for j in range(cuda.threadIdx.x, p.shape[1], TPB):
        ds[row, j] = p[row, j] * dp[row, j]  # the mistake: no row sum


@cuda.jit
def combine_kernel(mx, sm, o, out):
    c, i = cuda.grid(2)
    if i < out.shape[0] and c < out.shape[1]:
        top = float32(-math.inf)
        for t in range(mx.shape[0]):
            top = max(top, mx[t, i])
        num = float32(0.0)
        den = float32(0.0)
        for t in range(mx.shape[0]):
            w = math.exp(mx[t, i] - top)
            num += w * o[t, i, c]
            den += w * sm[t, i]
        out[i, c] = num / den


@cuda.jit
def combine_without_rescale(mx, sm, o, out):
    c, i = cuda.grid(2)
    if i < out.shape[0] and c < out.shape[1]:
        num = float32(0.0)
        den = float32(0.0)
        for t in range(mx.shape[0]):
            num += o[t, i, c]
            den += sm[t, i]
        out[i, c] = num / den


def test_inputs_are_hard_where_they_must_be():
    rng = np.random.default_rng(0)
    q, k, v, scale, causal = L.flash_lse_inputs(L.FLASH_LSE.sizes[-1], rng)
    assert np.abs(q @ k.T * scale).max() > 89 and causal == 1 and k.shape[0] > q.shape[0]  # exp(89) = inf
    mx, sm, o = L.combine_inputs((2, 5, 9, 3), rng)
    assert np.isneginf(mx).any() and (sm[np.isneginf(mx)] == 0).all()  # a chunk with no visible key
    assert any(s[0] % L.BQ and s[1] % L.BK for s in L.FLASH_LSE.sizes)  # ragged tiles in both directions


def test_combine_spec_is_attention_over_all_the_keys():
    """Merging the chunks' (max, sum, output) gives exactly the attention of the whole row."""
    rng = np.random.default_rng(3)
    size = (3, 9, 40, 20)
    mx, sm, o = L.combine_inputs(size, rng)
    rng = np.random.default_rng(3)
    q, k, v = (rng.uniform(-1, 1, s) for s in ((9, 8), (40, 8), (40, 20)))
    from gpulab.transformer.attention import attention_reference

    ref = attention_reference((q * 100).astype(np.float32), k.astype(np.float32), v.astype(np.float32), causal=True)
    np.testing.assert_allclose(L.combine_spec(mx, sm, o), ref, rtol=1e-4, atol=1e-5)


def test_correct_combine_scores_full_marks_and_the_unrescaled_sum_gets_its_hint():
    good = L.COMBINE.check(combine_kernel)
    assert good.passed and good.score == L.COMBINE.points, good
    bad = L.COMBINE.check(combine_without_rescale)
    assert not bad.passed and "exp(mx_t - M)" in bad.hint, bad


@pytest.mark.parametrize(
    "problem,kernel,hint",
    [
        (L.SCALE_MASK, scale_mask_no_offset, "offset m - n"),
        (L.SOFTMAX_BACKWARD, softmax_backward_diagonal, "only the diagonal"),
    ],
)
def test_mistakes_get_their_hint(problem, kernel, hint):
    res = problem.check(kernel)
    assert not res.passed and hint in res.hint, res


def test_fused_challenge_names_a_log_sum_exp_without_the_maximum():
    def lse_without_max(q, k, v, scale, causal, out, lse):
        o, l_ = L.flash_lse_spec(q, k, v, scale, causal)
        s = (q.astype(np.float64) @ k.T.astype(np.float64)) * float(scale)
        if causal:
            s = np.where(
                np.arange(k.shape[0])[None, :] <= np.arange(q.shape[0])[:, None] + k.shape[0] - q.shape[0], s, -np.inf
            )
        out[...], lse[...] = o, l_ - s.max(axis=1)

    # built on the check's own spec: trusted (no own-code stage), a test of the mistake's hint
    res = L.FLASH_LSE.check(host=lse_without_max, race_check=False, budget=None, ptx=None, trusted=True)
    assert not res.passed and "row_max + log(row_sum)" in res.hint, res


@pytest.mark.parametrize(
    "mistake, hint",
    [
        ("_flash_no_rescale", "alpha = exp(old max - new max)"),
        ("_flash_unnormalised", "out = acc / row_sum"),
        ("_flash_no_offset", "keys up to i + (m - n)"),
    ],
)
def test_fused_challenge_names_the_lessons_attention_mistakes(mistake, hint):
    """Lesson 12's fused exercise and this challenge share the mistakes (problems.lab12.FLASH_MISTAKES): a kernel
    whose out makes one of them, with a right lse, gets that mistake's hint here too."""
    wrong = getattr(L, mistake)

    def kernel_with_the_mistake(q, k, v, scale, causal, out, lse):
        out[...] = wrong(q, k, v, scale, causal)
        lse[...] = L.flash_lse_spec(q, k, v, scale, causal)[1]

    res = L.FLASH_LSE.check(host=kernel_with_the_mistake, race_check=False, budget=None, ptx=None, trusted=True)
    assert not res.passed and hint in res.hint, res


def test_the_mistakes_tile_like_the_lessons_kernel():
    from gpulab.lessons import ex_12
    from gpulab.transformer import flash

    assert L.BK == flash.BK  # _flash_no_rescale tiles the keys by lab12.BK for both kernels
    (fused,) = [e for e in ex_12.EXERCISES_LIST if e.name == "flash"]
    assert dict(fused.problem.mistakes) == L.FLASH_MISTAKES


def test_fused_budget_allows_one_read_of_q_and_one_of_k_v_per_query_block():
    budget = L.FLASH_LSE.budget
    assert budget.reads_per_element["q"] == 1
    assert budget.reads_per_element["k"]((40, 50, 8, 8, 1, 1.0)) == math.ceil(40 / L.BQ) == 3
    assert (L.BQ, L.BK, L.DMAX) == (flash.BQ, flash.BK, flash.DMAX)  # the lab's tiles are the library's


@cuda.jit
def softmax_backward_two_shared_arrays(p, dp, ds):
    buf = cuda.shared.array(TPB, float32)
    dots = cuda.shared.array(TPB, float32)  # the waste: a second array for one number
    row = cuda.blockIdx.x
    tx = cuda.threadIdx.x
    acc = float32(0.0)
    for j in range(tx, p.shape[1], TPB):
        acc += p[row, j] * dp[row, j]
    buf[tx] = acc
    cuda.syncthreads()  # wait until every partial sum is stored
    s = TPB // 2
    while s > 0:
        if tx < s:
            buf[tx] += buf[tx + s]
        cuda.syncthreads()  # wait until this halving step is complete
        s //= 2
    dots[tx] = buf[0]
    for j in range(tx, p.shape[1], TPB):
        ds[row, j] = p[row, j] * (dp[row, j] - dots[tx])


def test_too_much_shared_memory_in_a_row_reduction_gets_a_reduction_hint():
    # before: "allocate only the tiles you need: TILE*TILE elements per input", a tiling hint, for a reduction
    res = L.SOFTMAX_BACKWARD.check(softmax_backward_two_shared_arrays)
    assert res.status == "over budget" and "256 bytes" in str(res), res
    assert "128 bytes here, 32 float32 values" in res.hint and "block reduction" in res.hint, res.hint


@pytest.mark.parametrize(
    "edit, hint",
    [
        (("            row_sum *= alpha\n", ""), "the running sum must be rescaled too"),
        (("acc[a] *= alpha", "acc[a] *= 1.0"), "the accumulator must be rescaled too"),
        (("key > row + offset", "key >= row + offset"), "mask key > i + (m - n), not >="),
        (("if key >= m or row >= n or (causal", "if row >= n or (causal"), "keys past the end"),
    ],
)
def test_the_fused_kernel_with_one_line_wrong_gets_that_lines_hint(edit, hint):
    """The library's fused kernel with one learner's mistake in it (half the online-softmax rescale, the causal
    mask one key short, the last tile's padding left unmasked): lesson 12's check names it."""
    import inspect
    import textwrap

    from gpulab import lessons
    from gpulab.source import define
    from gpulab.transformer import flash

    src = textwrap.dedent(inspect.getsource(flash.flash_attention_kernel.py_func))
    assert edit[0] in src
    kernel = define(src.replace(*edit), "flash_attention_kernel", dict(flash.__dict__))
    res = lessons.check("12", "flash", kernel)
    assert not res.passed and hint in res.hint, res


def test_a_causal_mask_one_key_short_is_named_not_called_an_overflow():
    """Before: 'out[0, 4] is inf where a finite value is expected: an overflow, a division by zero, ...'."""

    def strict(s, scale, causal, out):
        n, m = s.shape
        keep = np.arange(m)[None, :] < np.arange(n)[:, None] + (m - n)
        out[...] = np.where(keep, s * scale, -np.inf) if int(causal) else s * scale

    res = L.SCALE_MASK.check(host=strict, race_check=False, budget=None)
    assert not res.passed and "its own position" in res.hint and "overflow" not in res.hint, res


SCALE_MASK_SRC = """
@cuda.jit
def scale_mask_kernel(s, scale, causal, out):
    j, i = cuda.grid(2)
    n, m = s.shape
    if i < n and j < m:
        out[i, j] = -math.inf if (causal != 0 and j > i + (m - n)) else s[i, j] * scale
"""

COMBINE_SRC = """
@cuda.jit
def combine_kernel(mx, sm, o, out):
    c, i = cuda.grid(2)
    if i < out.shape[0] and c < out.shape[1]:
        top = float32(-math.inf)
        for t in range(mx.shape[0]):
            top = max(top, mx[t, i])
        num = float32(0.0)
        den = float32(0.0)
        for t in range(mx.shape[0]):
            w = math.exp(mx[t, i] - top)
            num += w * o[t, i, c]
            den += w * sm[t, i]
        out[i, c] = num / den
"""


@pytest.mark.parametrize(
    ("problem", "src", "name", "edit", "hint"),
    [
        (
            L.SCALE_MASK,
            SCALE_MASK_SRC,
            "scale_mask_kernel",
            ("i + (m - n)", "i + (n - m)"),
            "the mask's offset has the wrong sign",
        ),
        (
            L.SCALE_MASK,
            SCALE_MASK_SRC,
            "scale_mask_kernel",
            ("j > i + (m - n)", "j > i + (m - n) + 1"),
            "one key too many is visible per row",
        ),
        (
            L.SCALE_MASK,
            SCALE_MASK_SRC,
            "scale_mask_kernel",
            ("s[i, j] * scale", "s[i, j]"),
            "the scores are not scaled",
        ),
        (
            L.SCALE_MASK,
            SCALE_MASK_SRC,
            "scale_mask_kernel",
            ("-math.inf", "float32(-1e30)"),
            "masked scores must be -inf, not a large",
        ),
        (
            L.COMBINE,
            COMBINE_SRC,
            "combine_kernel",
            ("den += w * sm[t, i]", "den += sm[t, i]"),
            "the denominator must be weighted too",
        ),
        (
            L.COMBINE,
            COMBINE_SRC,
            "combine_kernel",
            ("den += w * sm[t, i]", "den += w"),
            "the denominator is the sum of the weights",
        ),
        (L.COMBINE, COMBINE_SRC, "combine_kernel", ("num / den", "num"), "out is not normalised"),
    ],
    ids=["offset-sign", "one-future-key", "no-scale", "finite-mask", "den-unweighted", "den-weights", "no-division"],
)
def test_one_line_mistakes_in_mask_and_combine_get_their_hint(problem, src, name, edit, hint):
    ns = {"cuda": cuda, "float32": float32, "math": math}
    right = problem.check(edited_kernel(src, name, ns))
    assert right.passed and right.score == problem.points, right
    res = problem.check(edited_kernel(src, name, ns, edit))
    assert not res.passed and res.score == 0 and res.hint.startswith(hint), res
