"""Lab 12 · transformers: scores scaled and masked, the softmax's backward, merging partial softmaxes
(split-K / FlashDecoding), and a fused attention kernel that also writes the row log-sum-exp.

Logits reach past float32 ``exp``'s range (scores above 88), so every exponent must have the row's
maximum subtracted; causal masks use the offset ``m - n`` (query i sees keys ``j <= i + m - n``), so
checks with more keys than queries catch a mask without it. The fused kernel's budget (q read once, k
and v once per block of ``BQ`` query rows) is met only by a kernel that never stores the scores.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..exercises import Budget, Problem, Tree
from ..kernels._launch import blocks_for, ceil_div
from ..transformer.attention import attention_reference, causal_mask, default_scale
from ._common import launch_2d
from ._flash import FLASH_MISTAKES
from ._flash import _flash_no_offset as _flash_no_offset  # the mistakes' models, named in the tests
from ._flash import _flash_no_rescale as _flash_no_rescale
from ._flash import _flash_tiles as _flash_tiles
from ._flash import _flash_unnormalised as _flash_unnormalised
from ._flash import masked_scores as _masked_scores

__all__ = [
    "BK",
    "BQ",
    "COMBINE",
    "COMBINE_BLOCK",
    "DMAX",
    "FLASH_LSE",
    "FLASH_MISTAKES",
    "MASK_BLOCK",
    "SCALE_MASK",
    "SOFTMAX_BACKWARD",
    "TPB",
    "combine_inputs",
    "combine_spec",
    "flash_lse_inputs",
    "flash_lse_spec",
    "scale_mask_inputs",
    "scale_mask_spec",
    "softmax_backward_inputs",
    "softmax_backward_spec",
    "uniform_inputs",
]

TPB = 32  # threads per block (= per row) of the softmax backward
MASK_BLOCK = (16, 8)  # x along the keys, y along the queries
COMBINE_BLOCK = (16, 8)  # x along the output columns, y along the rows
BQ = 16  # fused kernel: query rows per block (threadIdx.y)
BK = 16  # keys per tile (threadIdx.x)
DMAX = 64  # the largest d and dv the fused kernel must handle


def uniform_inputs(rng: np.random.Generator, shape: Any, scale: float = 1.0) -> np.ndarray:
    """float32 uniform in [-scale, scale) (the inputs of lab12 and lesson 12's exercises)."""
    return (rng.uniform(-1.0, 1.0, size=shape) * scale).astype(np.float32)


# --- 1 · scale and mask -------------------------------------------------------------------------------


def scale_mask_inputs(size: tuple[int, int, int], rng: np.random.Generator) -> tuple[Any, ...]:
    """``(n, m, causal)`` -> ``(s, scale, causal)``: raw scores up to +-30."""
    n, m, causal = size
    return uniform_inputs(rng, (n, m), 30.0), np.float32(0.125), np.int32(causal)


def scale_mask_spec(s: np.ndarray, scale: Any, causal: Any) -> np.ndarray:
    out = s * s.dtype.type(scale)
    return np.where(causal_mask(*s.shape), out, -np.inf).astype(s.dtype) if int(causal) else out


def _mistaken_mask(s: np.ndarray, scale: Any, causal: Any, **mask: Any) -> np.ndarray:
    """``s`` scaled and, when causal, masked by ``causal_mask(n, m, **mask)``: a mistaken mask's model."""
    out = s * s.dtype.type(scale)
    return np.where(causal_mask(*s.shape, **mask), out, -np.inf).astype(s.dtype) if int(causal) else out


def _mask_no_offset(s: np.ndarray, scale: Any, causal: Any) -> np.ndarray:
    return _mistaken_mask(s, scale, causal, offset=0)


def _mask_strict(s: np.ndarray, scale: Any, causal: Any) -> np.ndarray:
    return _mistaken_mask(s, scale, causal, strict=True)


def _mask_permissive(s: np.ndarray, scale: Any, causal: Any) -> np.ndarray:
    n, m = s.shape
    return _mistaken_mask(s, scale, causal, offset=m - n + 1)


def _mask_offset_reversed(s: np.ndarray, scale: Any, causal: Any) -> np.ndarray:
    n, m = s.shape
    return _mistaken_mask(s, scale, causal, offset=n - m) if int(causal) and m != n else np.full(1, np.nan)


def _mask_finite(s: np.ndarray, scale: Any, causal: Any) -> list[np.ndarray]:
    """A known mistake: masked scores set to a large negative number (the usual ones) instead of -inf."""
    out = scale_mask_spec(s, scale, causal)
    masked = np.isneginf(out)
    if not masked.any():
        return []
    return [np.where(masked, s.dtype.type(big), out) for big in (-1e4, -1e9, -1e10, -1e20, -1e30, -3.4028235e38)]


SCALE_MASK = Problem(
    "lab12.scale_mask",
    ptx="auto",  # a GPU must accept it: compiled for the types of the first case's arguments
    spec=scale_mask_spec,
    inputs=scale_mask_inputs,
    sizes=[(1, 1, 0), (5, 9, 1), (20, 33, 1), (17, 17, 0)],
    gpu_sizes=[(1, 1, 0), (20, 33, 1), (2048, 2048, 1), (1000, 3000, 1)],
    launch=launch_2d(MASK_BLOCK),  # one thread per score, x along the keys
    rtol=1e-6,
    atol=0.0,
    mistakes={
        "masked scores must be -inf (exp(-inf) = 0), not 0: exp(0) = 1 still gives the key weight.": lambda s, sc, c: (
            np.where(np.isneginf(scale_mask_spec(s, sc, c)), 0, scale_mask_spec(s, sc, c))
        ),
        "with m > n keys, query i sees keys j <= i + (m - n): the mask needs the offset m - n.": _mask_no_offset,
        "query i also sees key i + (m - n), its own position: mask j > i + (m - n), not >=.": _mask_strict,
        "one key too many is visible per row: query i sees keys j <= i + (m - n), so mask j > i + (m - n), "
        "not j > i + (m - n) + 1 (key i + (m - n) + 1 is in query i's future).": _mask_permissive,
        "the mask's offset has the wrong sign: with n queries and m >= n keys, query i sees keys "
        "j <= i + (m - n) (m - n keys are cached before the first query), not j <= i + (n - m).": (
            _mask_offset_reversed
        ),
        "the scores are not scaled: multiply every score by scale, out[i, j] = s[i, j] * scale (the masked ones "
        "are -inf either way).": lambda s, sc, c: scale_mask_spec(s, np.float32(1.0), c),
        "masked scores must be -inf, not a large negative number: the check asks for exactly -inf (`-math.inf`), "
        "which exp turns into exactly 0 whatever the row's other scores are.": _mask_finite,
    },
    budget=Budget(sectors={"s": 2.0, "out": 2.0}),
    points=2,
)


# --- 2 · softmax backward -----------------------------------------------------------------------------


def softmax_backward_inputs(size: tuple[int, int, int], rng: np.random.Generator) -> tuple[Any, ...]:
    """``(rows, cols, masked)`` -> ``(p, dp)``: p a row softmax (zeros above the causal diagonal)."""
    rows, cols, masked = size
    s = rng.uniform(-3.0, 3.0, size=(rows, cols))
    if masked:
        s = np.where(causal_mask(rows, cols), s, -np.inf)
    e = np.exp(s - s.max(axis=1, keepdims=True))
    return (e / e.sum(axis=1, keepdims=True)).astype(np.float32), uniform_inputs(rng, (rows, cols))


def softmax_backward_spec(p: np.ndarray, dp: np.ndarray) -> np.ndarray:
    """``ds = p * (dp - sum(p * dp, axis=1))``, computed in float64."""
    p64, dp64 = p.astype(np.float64), dp.astype(np.float64)
    return (p64 * (dp64 - (p64 * dp64).sum(axis=1, keepdims=True))).astype(p.dtype)


def _softmax_backward_own_slot(p: np.ndarray, dp: np.ndarray) -> np.ndarray:
    """Each thread reads its own slot of the tree's shared array after the tree (``sh[tx]``, not ``sh[0]``): only
    slot 0 holds the row's sum of p * dp; slot t holds what the tree's levels added into it."""
    p64, dp64 = p.astype(np.float64), dp.astype(np.float64)
    rows, cols = p.shape
    sh = np.zeros((rows, TPB))
    for j in range(cols):
        sh[:, j % TPB] += p64[:, j] * dp64[:, j]
    stride = TPB // 2
    while stride > 0:
        sh[:, :stride] += sh[:, stride : 2 * stride]
        stride //= 2
    return (p64 * (dp64 - sh[:, np.arange(cols) % TPB])).astype(p.dtype)


SOFTMAX_BACKWARD = Problem(
    "lab12.softmax_backward",
    ptx="auto",  # a GPU must accept it: compiled for the types of the first case's arguments
    spec=softmax_backward_spec,
    inputs=softmax_backward_inputs,
    sizes=[(1, 1, 0), (3, 5, 0), (4, 70, 1), (6, 33, 1)],
    gpu_sizes=[(1, 1, 0), (4, 70, 1), (4096, 1000, 0), (1024, 1024, 1)],
    launch=lambda p, dp, ds: (p.shape[0], TPB),  # one block per row
    rtol=1e-4,
    # |ds| is p times an O(1) difference, and p is ~1e-3 in a row of 1000 (median |ds| 1e-4; 1e-7 under a causal
    # mask): atol 1e-5 let a lost thread partial of the row's sum pass in 87 % of the elements. The float32 orders
    # (tree, one thread, atomics; FMA; p*dp - p*dot) use at most 3.4 % of 1e-7 (tests/test_gpu_sizes_tolerances.py).
    atol=1e-7,
    mistakes={
        "ds = p * dp is only the diagonal of the softmax's Jacobian: subtract the row's sum of p * dp, "
        "ds = p * (dp - sum_j p[j] * dp[j]).": lambda p, dp: (p * dp).astype(p.dtype),
        "subtract the row's sum of p * dp (one number per row), not p * dp element by element.": lambda p, dp: (
            p * (dp - p * dp)
        ).astype(p.dtype),
        "after the tree only slot 0 of the shared array holds the row's whole sum of p * dp; the other slots hold "
        "partial sums. Each thread read its own slot (tx): every thread reads slot 0, after the tree's last "
        "cuda.syncthreads().": _softmax_backward_own_slot,
    },
    # each thread its columns (p and dp read twice: the dot product, then ds) and the dot product's partial sums
    # combined by a shared-memory tree, not by one thread's loop over the row or over the partials
    budget=Budget(
        reads_per_element={"p": 2, "dp": 2},
        reads_per_thread=lambda s: 4 * ceil_div(s[1], TPB),
        shared_bytes=TPB * 4,
        shared_reads_per_thread=Tree(),
    ),
    points=3,
)


# --- 3 · merging partial softmaxes --------------------------------------------------------------------


def combine_inputs(size: tuple[int, int, int, int], rng: np.random.Generator) -> tuple[Any, ...]:
    """``(splits, n, m, dv)`` -> ``(mx, sm, o)``: causal attention of n queries over m keys cut into
    ``splits`` chunks; per chunk and row: the maximum score ``mx`` (-inf when the chunk is all masked),
    ``sm = sum exp(s - mx)`` and ``o = sum exp(s - mx) v`` (unnormalised). Scores reach past 100."""
    splits, n, m, dv = size
    d = 8
    q, k, v = uniform_inputs(rng, (n, d), 100.0), uniform_inputs(rng, (m, d)), uniform_inputs(rng, (m, dv))
    s = _masked_scores(q, k, default_scale(d), True)
    chunk = ceil_div(m, splits)
    mx = np.full((splits, n), -np.inf)
    sm = np.zeros((splits, n))
    o = np.zeros((splits, n, dv))
    for t in range(splits):
        part = s[:, t * chunk : (t + 1) * chunk]
        if part.shape[1] == 0:
            continue
        mx[t] = part.max(axis=1)
        with np.errstate(invalid="ignore"):
            e = np.where(np.isneginf(mx[t])[:, None], 0.0, np.exp(part - mx[t][:, None]))
        sm[t] = e.sum(axis=1)
        o[t] = e @ v[t * chunk : (t + 1) * chunk].astype(np.float64)
    return mx.astype(np.float32), sm.astype(np.float32), o.astype(np.float32)


def combine_spec(mx: np.ndarray, sm: np.ndarray, o: np.ndarray) -> np.ndarray:
    """``out = sum_t exp(mx_t - M) o_t / sum_t exp(mx_t - M) sm_t`` with ``M = max_t mx_t`` (float64)."""
    mx64 = mx.astype(np.float64)
    w = np.exp(mx64 - mx64.max(axis=0, keepdims=True))  # (splits, n); 0 for an all-masked chunk
    return ((w[:, :, None] * o).sum(axis=0) / (w * sm).sum(axis=0)[:, None]).astype(o.dtype)


def _combine_weights(mx: np.ndarray) -> np.ndarray:
    mx64 = mx.astype(np.float64)
    return np.exp(mx64 - mx64.max(axis=0, keepdims=True))  # (splits, n)


def _combine_weighted(mx: np.ndarray, o: np.ndarray) -> np.ndarray:
    """``sum_t exp(mx_t - M) o_t``: the merged output before the division (float64)."""
    return (_combine_weights(mx)[:, :, None] * o).sum(axis=0)


COMBINE = Problem(
    "lab12.combine",
    ptx="auto",  # a GPU must accept it: compiled for the types of the first case's arguments
    spec=combine_spec,
    inputs=combine_inputs,
    sizes=[(1, 1, 1, 1), (2, 5, 9, 3), (3, 9, 40, 20), (4, 6, 30, 17)],
    gpu_sizes=[(1, 1, 1, 1), (3, 9, 40, 20), (8, 1024, 8192, 64), (16, 2048, 4096, 128)],
    launch=launch_2d(COMBINE_BLOCK),  # one thread per output element, x along its columns
    rtol=1e-4,
    atol=1e-6,
    mistakes={
        "the partial sums are relative to different maxima: weight each split by exp(mx_t - M), "
        "M the largest, before adding (sum o_t / sum sm_t mixes scales).": lambda mx, sm, o: (
            o.sum(axis=0) / sm.sum(axis=0)[:, None]
        ).astype(o.dtype),
        "the denominator must be weighted too: out = sum_t exp(mx_t - M) o_t / sum_t exp(mx_t - M) sm_t (each sm_t "
        "is relative to its own maximum mx_t, like o_t).": lambda mx, sm, o: (
            _combine_weighted(mx, o) / sm.astype(np.float64).sum(axis=0)[:, None]
        ).astype(o.dtype),
        "the denominator is the sum of the weights exp(mx_t - M): it must be the weighted sum of the chunks' sums, "
        "sum_t exp(mx_t - M) sm_t (sm_t adds up the chunk's exponentials).": lambda mx, sm, o: (
            _combine_weighted(mx, o) / _combine_weights(mx).sum(axis=0)[:, None]
        ).astype(o.dtype),
        "out is not normalised: divide the weighted sum of the o_t by the weighted sum of the sm_t, "
        "sum_t exp(mx_t - M) sm_t.": lambda mx, sm, o: _combine_weighted(mx, o).astype(o.dtype),
    },
    budget=Budget(sectors={"o": 2.0, "out": 2.0}),
    points=3,
)


# --- challenge · fused attention with the row log-sum-exp ---------------------------------------------


def flash_lse_inputs(size: tuple[int, int, int, int, int, float], rng: np.random.Generator) -> tuple[Any, ...]:
    """``(n, m, d, dv, causal, logit_scale)`` -> ``(q, k, v, scale, causal)``; q scaled by logit_scale."""
    n, m, d, dv, causal, big = size
    return (
        uniform_inputs(rng, (n, d), big),
        uniform_inputs(rng, (m, d)),
        uniform_inputs(rng, (m, dv)),
        np.float32(default_scale(d)),
        np.int32(causal),
    )


def flash_lse_spec(q: np.ndarray, k: np.ndarray, v: np.ndarray, scale: Any, causal: Any) -> tuple[np.ndarray, ...]:
    """``(out, lse)``: attention and ``lse[i] = log(sum_j exp(s[i, j]))`` over the visible keys (float64)."""
    s = _masked_scores(q, k, float(scale), bool(int(causal)))
    top = s.max(axis=1)
    lse = top + np.log(np.exp(s - top[:, None]).sum(axis=1))
    out = attention_reference(q, k, v, causal=bool(int(causal)), scale=float(scale))
    return out.astype(q.dtype), lse.astype(q.dtype)


def _lse_without_max(q: np.ndarray, k: np.ndarray, v: np.ndarray, scale: Any, causal: Any) -> np.ndarray:
    s = _masked_scores(q, k, float(scale), bool(int(causal)))
    return (flash_lse_spec(q, k, v, scale, causal)[1] - s.max(axis=1)).astype(q.dtype)


def _kv_reads(size: Any) -> int:
    return ceil_div(size[0], BQ)


FLASH_LSE = Problem(
    "lab12.flash_lse",
    spec=flash_lse_spec,
    inputs=flash_lse_inputs,
    # the largest case (traced for races and the budget) is one block with two key tiles, the last ragged
    sizes=[(1, 1, 1, 1, 0, 1.0), (5, 7, 3, 4, 0, 1.0), (17, 17, 2, 2, 1, 1.0), (3, 21, 4, 3, 1, 200.0)],
    gpu_sizes=[
        (1, 1, 1, 1, 0, 1.0),
        (17, 17, 2, 2, 1, 1.0),
        (1024, 1024, 64, 64, 1, 100.0),
        (1000, 1500, 64, 48, 1, 1.0),
    ],
    launch=lambda q, k, v, scale, causal, out, lse: (blocks_for(q.shape[0], BQ), (BK, BQ)),
    # logits of a few hundred carry float32 rounding of ~1e-3 (a d-term dot product): out and lse err by that much
    rtol=1e-4,
    atol=1e-3,
    mistakes={
        **FLASH_MISTAKES,  # each returns out
        "lse is the log of the row's sum of exp(s): row_max + log(row_sum), not log(row_sum) alone.": _lse_without_max,
    },  # a mistake spec returns the output it explains (its shape tells which)
    budget=Budget(reads_per_element={"q": 1, "k": _kv_reads, "v": _kv_reads}),
    ptx="void(float32[:, :], float32[:, :], float32[:, :], float32, int32, float32[:, :], float32[:])",
    points=4,
)
