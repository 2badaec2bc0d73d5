"""The kernel exercises of lesson 12 (transformers on the GPU) as data. Reference answers: :mod:`.answers_12` and,
for the fused kernel, :func:`gpulab.transformer.flash.flash_attention_kernel`. The lesson's fourth exercise, the
attention backward pass written in NumPy (``attention_backward``), is in :mod:`.ex_12_backward`.

A lesson checks one with ``lessons.check("12", "scores", attention_scores_kernel)``:

* ``scores``: ``s = (q @ k.T) * scale``, ``-inf`` above the causal diagonal (one thread per score);
* ``online_softmax``: a row softmax that reads each element twice (one pass for a running maximum and
  a rescaled running sum, merged across the block, then the normalising pass), on logits up to 1e4
  and with masked (-inf) entries;
* ``flash``: the fused attention kernel (``flash_attention_kernel(q, k, v, scale, causal, out)``), on
  sizes that are not multiples of the tile, causal masks with m > n, and logits past ``exp``'s float32
  range, with a budget that only a fused kernel meets: q read once, k and v once per block of query rows.

The specs and input makers are importable for the lesson's later cells and for lab12.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..exercises import Budget, Problem, Tree
from ..kernels._launch import ceil_div
from ..problems import grid_2d, lab12
from ..transformer import flash
from ..transformer.attention import SCORES_BLOCK, attention_reference, causal_mask, default_scale
from . import answers_12 as _a
from .exercise import Exercise

__all__ = [
    "BLOCK",
    "EXERCISES_LIST",
    "flash_inputs",
    "flash_spec",
    "online_softmax_spec",
    "scores_inputs",
    "scores_spec",
    "softmax_inputs",
]

BLOCK = SCORES_BLOCK  # (16, 8): (x, y) threads per block of the scores kernel, x along the keys; attention_naive uses it too
SHIFT = 1.0e4  # softmax rows are shifted by up to +-SHIFT (the max must be subtracted)


_uniform = lab12.uniform_inputs


# --- scores -------------------------------------------------------------------------------------------


def scores_inputs(size: tuple[int, int, int, int], rng: np.random.Generator) -> tuple[Any, ...]:
    """``size = (n, m, d, causal)`` -> ``(q, k, scale, causal)``."""
    n, m, d, causal = size
    return _uniform(rng, (n, d)), _uniform(rng, (m, d)), np.float32(default_scale(d)), np.int32(causal)


def scores_spec(q: np.ndarray, k: np.ndarray, scale: Any, causal: Any) -> np.ndarray:
    """``(q @ k.T) * scale``, ``-inf`` where key j > query i + (m - n) when causal."""
    s = (q @ k.T) * q.dtype.type(scale)
    if int(causal):
        s = np.where(causal_mask(q.shape[0], k.shape[0]), s, -np.inf)
    return s.astype(q.dtype)


def _scores_unscaled(q: np.ndarray, k: np.ndarray, scale: Any, causal: Any) -> np.ndarray:
    return scores_spec(q, k, 1.0, causal)


def _scores_mask_zero(q: np.ndarray, k: np.ndarray, scale: Any, causal: Any) -> np.ndarray:
    s = scores_spec(q, k, scale, causal)
    return np.where(np.isneginf(s), 0, s).astype(q.dtype)


def _scores_mistaken_mask(q: np.ndarray, k: np.ndarray, scale: Any, causal: Any, **mask: Any) -> np.ndarray:
    """The scores, masked when causal by ``causal_mask(n, m, **mask)``: a mistaken mask's model."""
    s = scores_spec(q, k, scale, 0)
    if not int(causal):
        return s
    return np.where(causal_mask(*s.shape, **mask), s, -np.inf).astype(q.dtype)


def _scores_no_offset(q: np.ndarray, k: np.ndarray, scale: Any, causal: Any) -> np.ndarray:
    return _scores_mistaken_mask(q, k, scale, causal, offset=0)


def _scores_permissive(q: np.ndarray, k: np.ndarray, scale: Any, causal: Any) -> np.ndarray:
    return _scores_mistaken_mask(q, k, scale, causal, offset=k.shape[0] - q.shape[0] + 1)


def _scores_strict(q: np.ndarray, k: np.ndarray, scale: Any, causal: Any) -> np.ndarray:
    return _scores_mistaken_mask(q, k, scale, causal, strict=True)


# --- online softmax -----------------------------------------------------------------------------------


def softmax_inputs(size: tuple[int, int, int], rng: np.random.Generator) -> np.ndarray:
    """``size = (rows, cols, masked)``: values in [-20, 20], rows after the first shifted by up to +-1e4;
    masked: -inf above the causal diagonal (cols >= rows, so every row keeps a finite entry)."""
    rows, cols, masked = size
    shift = rng.uniform(-SHIFT, SHIFT, size=(rows, 1))
    shift[0] = 0.0
    x = (shift + rng.uniform(-20.0, 20.0, size=(rows, cols))).astype(np.float32)
    if masked:
        x[~causal_mask(rows, cols)] = -np.inf
    return x


def online_softmax_spec(x: np.ndarray) -> np.ndarray:
    """Row softmax (row maximum subtracted; -inf entries get 0)."""
    e = np.exp(x - x.max(axis=1, keepdims=True))
    return (e / e.sum(axis=1, keepdims=True)).astype(x.dtype)


def _thread_partials(x: np.ndarray, rescale: bool) -> tuple[np.ndarray, np.ndarray]:
    """Each thread's (running max, running sum) over columns tx, tx + TPB, ... (rows x TPB)."""
    tpb = _a.SOFTMAX_TPB
    rows, cols = x.shape
    mx = np.full((rows, tpb), -np.inf)
    sm = np.zeros((rows, tpb))
    for j in range(cols):
        t = j % tpb
        new = np.maximum(mx[:, t], x[:, j])
        with np.errstate(invalid="ignore"):
            alpha = np.where(np.isneginf(new), 1.0, np.exp(mx[:, t] - new)) if rescale else 1.0
            term = np.where(np.isneginf(new), 0.0, np.exp(x[:, j] - new))
        sm[:, t] = sm[:, t] * alpha + term
        mx[:, t] = new
    return mx, sm


def _softmax_from(x: np.ndarray, mx: np.ndarray, total: np.ndarray) -> np.ndarray:
    return (np.exp(x - mx.max(axis=1, keepdims=True)) / total[:, None]).astype(x.dtype)


def _softmax_no_loop_rescale(x: np.ndarray) -> np.ndarray:
    mx, sm = _thread_partials(x.astype(np.float64), rescale=False)
    top = mx.max(axis=1, keepdims=True)
    with np.errstate(invalid="ignore"):
        total = np.where(np.isneginf(mx), 0.0, sm * np.exp(mx - top)).sum(axis=1)
    return _softmax_from(x, mx, total)


def _softmax_no_merge_rescale(x: np.ndarray) -> np.ndarray:
    mx, sm = _thread_partials(x.astype(np.float64), rescale=True)
    return _softmax_from(x, mx, sm.sum(axis=1))


ONLINE_HINT = (
    "one pass for the maximum, one for the sum, one to normalise read each element three times; the budget allows "
    "two. Fold the first two passes into one: each thread keeps a running maximum and a running sum, and when the "
    "maximum grows it multiplies the sum by exp(old max - new max) before adding exp(x - new max). Merge the "
    "threads' (max, sum) pairs the same way, then normalise in the second pass."
)


# --- fused attention ----------------------------------------------------------------------------------


# The fused attention exercise draws the same inputs as lab12's challenge (q scaled by logit_scale: 200
# gives scores past 88, where float32 exp overflows, and a key tile whose maximum lies more than 88 below the
# one before: alpha = exp(old max - new max) overflows unless new max is the running maximum).
flash_inputs = lab12.flash_lse_inputs


def flash_spec(q: np.ndarray, k: np.ndarray, v: np.ndarray, scale: Any, causal: Any) -> np.ndarray:
    """Attention in float64 (:func:`~gpulab.transformer.attention.attention_reference`), as q's dtype."""
    return attention_reference(q, k, v, causal=bool(int(causal)), scale=float(scale)).astype(q.dtype)


def _kv_reads(size: Any) -> int:
    return ceil_div(size[0], flash.BQ)  # once per block of BQ query rows


def _exercises() -> list[Exercise]:
    return [
        Exercise(
            "12",
            "scores",
            Problem(
                "attention_scores_kernel",
                scores_spec,
                scores_inputs,
                sizes=[(1, 1, 1, 0), (5, 7, 3, 0), (17, 20, 8, 1), (20, 20, 5, 1)],
                gpu_sizes=[(1, 1, 1, 0), (17, 20, 8, 1), (1024, 1024, 64, 1), (1000, 1500, 64, 1)],
                launch=lambda q, k, scale, causal, s: grid_2d(s.shape[0], s.shape[1], BLOCK),
                ptx="auto",  # a GPU must compile it too (NVVM, ptxas; sm_75), for the first case's argument types
                reduction=lambda q, k, scale, causal: q.shape[1],
                out_names=["s"],
                # the one-key-too-many mask before the zero mask: its model demands -inf past the extra key, while
                # the zero mask's (0 where -inf is expected) matched that kernel too as long as the allowed error
                # there was infinite (before exercises/explain.py took the largest finite bound)
                mistakes={
                    "the scores are not scaled: multiply the dot product by scale (1 / sqrt(d)).": _scores_unscaled,
                    "one key too many is visible per row: query i sees keys j <= i + (m - n), so mask "
                    "j > i + (m - n), not j > i + (m - n) + 1 (key i + (m - n) + 1 is in query i's future).": (
                        _scores_permissive
                    ),
                    "masked scores must be -inf, not 0: exp(0) = 1 would still give those keys weight.": _scores_mask_zero,
                    "with more keys than queries (m > n), query i sees keys up to i + (m - n), not i.": _scores_no_offset,
                    "query i also sees key i + (m - n), its own position: mask j > i + (m - n), not >=.": _scores_strict,
                },
                budget=Budget(sectors={"s": 2.0}),  # x along the keys: neighbouring threads write neighbouring scores
            ),
            _a.attention_scores_kernel,
        ),
        Exercise(
            "12",
            "online_softmax",
            Problem(
                "online_softmax_kernel",
                online_softmax_spec,
                softmax_inputs,
                sizes=[(1, 1, 0), (3, 5, 0), (4, 70, 1), (6, 33, 1)],
                gpu_sizes=[(1, 1, 0), (4, 70, 1), (4096, 1000, 0), (1024, 1024, 1)],
                launch=lambda x, out: (x.shape[0], _a.SOFTMAX_TPB),
                ptx="auto",
                rtol=1e-4,
                atol=1e-6,
                out_names=["out"],
                mistakes={
                    "the running sum must be rescaled when the maximum grows: run_sum * exp(old max - new max) "
                    "before adding exp(x - new max).": _softmax_no_loop_rescale,
                    "merging two threads' sums: rescale each to the larger maximum, sum1 * exp(m1 - m) + "
                    "sum2 * exp(m2 - m), before adding.": _softmax_no_merge_rescale,
                },
                # each thread its columns (2 passes) and the 32 (max, sum) pairs merged by a tree: 4 shared reads
                # per thread and step (22 in all), not one thread's loop over the pairs (64)
                budget=Budget(
                    reads_per_element={"x": 2},
                    reads_per_thread=lambda s: 2 * ceil_div(s[1], _a.SOFTMAX_TPB),
                    shared_reads_per_thread=Tree(per_step=6, what="a tree of (max, sum) pairs"),
                    # a thread reading its columns 3 times is the three-pass softmax (max, sum, normalise), whose fix
                    # is the online softmax, not the generic advice (a local array, shared memory)
                    hint={"budget: reads of x": ONLINE_HINT, "budget: global reads per thread": ONLINE_HINT},
                ),
            ),
            _a.online_softmax_kernel,
        ),
        Exercise(
            "12",
            "flash",
            Problem(
                "flash_attention_kernel",
                flash_spec,
                flash_inputs,
                # the largest case (the race check's) is one block with two key tiles, the last one ragged
                sizes=[(1, 1, 1, 1, 0, 1.0), (5, 7, 3, 4, 0, 1.0), (17, 17, 2, 2, 1, 1.0), (3, 21, 4, 3, 1, 200.0)],
                gpu_sizes=[
                    (1, 1, 1, 1, 0, 1.0),
                    (18, 35, 16, 16, 1, 100.0),
                    (1024, 1024, 64, 64, 1, 1.0),
                    (1000, 1500, 64, 64, 1, 100.0),
                ],
                launch=lambda q, k, v, scale, causal, out: flash.launch_config(q.shape[0]),
                ptx="auto",
                rtol=1e-4,
                atol=1e-3,
                out_names=["out"],  # logits of a few hundred: ~1e-3 rounding
                mistakes=dict(lab12.FLASH_MISTAKES),
                budget=Budget(reads_per_element={"q": 1, "k": _kv_reads, "v": _kv_reads}),
            ),
            flash.flash_attention_kernel,
        ),
    ]


EXERCISES_LIST: list[Exercise] = _exercises()
