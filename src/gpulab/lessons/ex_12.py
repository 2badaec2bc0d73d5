"""The exercises of lesson 12 (transformers on the GPU) as data. Reference answers: :mod:`.answers_12` and,
for the fused kernel, :func:`gpulab.transformer.flash.flash_attention_kernel`.

A lesson checks one with ``lessons.check("12", "scores", attention_scores_kernel)``:

* ``scores``: ``s = (q @ k.T) * scale``, ``-inf`` above the causal diagonal (one thread per score);
* ``online_softmax``: a row softmax that reads each element twice (one pass for a running maximum and
  a rescaled running sum, merged across the block, then the normalising pass), on logits up to 1e4
  and with masked (-inf) entries;
* ``flash``: the fused attention kernel (``flash_attention_kernel(q, k, v, scale, causal, out)``), on
  sizes that are not multiples of the tile, causal masks with m > n, and logits past ``exp``'s float32
  range, with a budget that only a fused kernel meets: q read once, k and v once per block of query rows;
* ``attention_backward``: a NumPy function ``attention_backward(dout, q, k, v) -> (dq, dk, dv)`` (no mask,
  scale ``1/sqrt(d)``), compared with :mod:`gpulab.transformer.backward` in float64, its named mistakes the
  four slips of the chain rule (the scale dropped, the softmax's row sum dropped, ``dS @ q`` for ``dS.T @ q``,
  the scores' gradient returned) and the forward pass's scale dropped.

The specs and input makers are importable for the lesson's later cells and for lab12.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..errors import UsageError
from ..exercises import Budget, Problem, Tree
from ..kernels._launch import ceil_div
from ..problems import grid_2d, lab12
from ..transformer import backward, flash
from ..transformer.attention import SCORES_BLOCK, attention_reference, causal_mask, default_scale
from . import answers_12 as _a
from .exercise import Exercise, _answer, as_host

__all__ = [
    "BLOCK",
    "EXERCISES_LIST",
    "backward_inputs",
    "backward_spec",
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


# --- the backward pass (a NumPy function) ------------------------------------------------------------


def backward_inputs(size: tuple[int, int], rng: np.random.Generator) -> tuple[np.ndarray, ...]:
    """``size = (n, d)`` -> ``(dout, q, k, v)``, each (n, d), standard normal float64."""
    n, d = size
    return tuple(rng.standard_normal((n, d)) for _ in range(4))


def backward_spec(dout: Any, q: Any, k: Any, v: Any) -> tuple[Any, Any, Any]:
    """gpulab's backward pass (:mod:`gpulab.transformer.backward`): ``(dq, dk, dv)`` of attention without a mask."""
    return backward.attention_backward(dout, backward.attention_forward(q, k, v)[1])


def _chain(dout: Any, q: Any, k: Any, v: Any, *, scale_scores: bool = True) -> tuple[Any, ...]:
    """The backward pass's pieces ``(p, dp, ds, scale)``, with the scores scaled or not in the forward pass."""
    cache = backward.attention_forward(q, k, v, scale=None if scale_scores else 1.0)[1]
    p, sc = cache.p, default_scale(q.shape[1])
    dp = dout @ v.T
    return p, dp, p * (dp - (dp * p).sum(axis=1, keepdims=True)), sc


def _permuted(dout: Any, q: Any, k: Any, v: Any) -> list[Any]:
    dq, dk, dv = backward_spec(dout, q, k, v)
    return [dk, dv]  # the first output that goes wrong holds one of the others (dk in dq's place, dv in dq's or dk's)


def _row_sum_axis0(dout: Any, q: Any, k: Any, v: Any) -> list[Any]:
    p, dp, _, sc = _chain(dout, q, k, v)
    ds = p * (dp - (dp * p).sum(axis=0, keepdims=True))
    return [ds @ k * sc, ds.T @ q * sc]


def _dv_untransposed(dout: Any, q: Any, k: Any, v: Any) -> Any:
    p, _, _, _ = _chain(dout, q, k, v)
    return p @ dout


def _softmax_axis0(dout: Any, q: Any, k: Any, v: Any) -> list[Any]:
    sc = default_scale(q.shape[1])
    s = q @ k.T * sc
    p = np.exp(s - s.max(axis=0, keepdims=True))
    p /= p.sum(axis=0, keepdims=True)  # each column sums to 1: a softmax over the queries
    dp = dout @ v.T
    ds = p * (dp - (dp * p).sum(axis=1, keepdims=True))
    return [ds @ k * sc, ds.T @ q * sc, p.T @ dout]


def _unscaled(dout: Any, q: Any, k: Any, v: Any) -> list[Any]:
    _, _, ds, _ = _chain(dout, q, k, v)
    return [ds @ k, ds.T @ q]  # dq or dk without the scale


def _no_row_sum(dout: Any, q: Any, k: Any, v: Any) -> list[Any]:
    p, dp, _, sc = _chain(dout, q, k, v)
    return [(p * dp) @ k * sc, (p * dp).T @ q * sc]  # dS = P * dP


def _dk_untransposed(dout: Any, q: Any, k: Any, v: Any) -> Any:
    _, _, ds, sc = _chain(dout, q, k, v)
    return ds @ q * sc


def _scores_gradient(dout: Any, q: Any, k: Any, v: Any) -> list[Any]:
    _, dp, ds, sc = _chain(dout, q, k, v)
    return [ds, ds.T, ds * sc, ds.T * sc, dp, dp.T]  # n x n: the same shape as dq only when n == d


def _forward_unscaled(dout: Any, q: Any, k: Any, v: Any) -> list[Any]:
    p, _, ds, sc = _chain(dout, q, k, v, scale_scores=False)
    return [p.T @ dout, ds @ k * sc, ds.T @ q * sc]


SCORES_HINT = (
    "dq, dk and dv are the gradients of the loss with respect to q, k and v, so each has the shape of its input, "
    "n x d; an n x n array is a gradient with respect to the scores S (or the weights P). Take the chain rule one "
    "step further, through S = q k^T / sqrt(d): a matmul, whose backward turns the n x n gradient into one for "
    "each of its two operands."
)
ONLINE_HINT = (
    "one pass for the maximum, one for the sum, one to normalise read each element three times; the budget allows "
    "two. Fold the first two passes into one: each thread keeps a running maximum and a running sum, and when the "
    "maximum grows it multiplies the sum by exp(old max - new max) before adding exp(x - new max). Merge the "
    "threads' (max, sum) pairs the same way, then normalise in the second pass."
)
BACKWARD_MISTAKES = {
    "the gradients are right but returned in another order: the caller unpacks them as dq, dk, dv, the order of "
    "the inputs q, k, v.": _permuted,
    "the forward pass divides the scores by sqrt(d), so the backward pass does too: the scale multiplies what "
    "flows from dS back to q and to k (lesson 08's rule for a matmul, with a constant factor in front).": _unscaled,
    "dS is not P * dP: each weight depends on every score of its row (the softmax divides by the row's sum), so the "
    "softmax's backward subtracts, in each row, the sum of P * dP before multiplying by P.": _no_row_sum,
    "S = q k^T: k enters transposed, so its gradient is the transpose of what the matmul rule gives for k^T. "
    "Check which axis of dS runs over the keys: dk's row j belongs to key j.": _dk_untransposed,
    "the softmax's backward subtracts each row's sum of P * dP (the keys one query attends to, axis=1): a sum over "
    "axis 0 runs down a column, over the queries.": _row_sum_axis0,
    "out = P v is a matmul with v its second operand, so v's gradient is the first operand, transposed, times dout "
    "(lesson 08's rule for a matmul): P times dout leaves P untransposed.": _dv_untransposed,
    "the weights are a softmax over each row (axis=1: the keys one query attends to), with the maximum and the sum "
    "taken over that axis; over axis 0 each column would sum to 1 instead.": _softmax_axis0,
    SCORES_HINT: _scores_gradient,
    "the weights P come from the scaled scores: divide q k^T by sqrt(d) before the softmax, as the forward "
    "pass does.": _forward_unscaled,
}


def _backward_host(fn: Any) -> Any:
    """The ``host=`` function for a learner's ``attention_backward``: an n x n result where an n x d gradient is
    expected (the scores' gradient returned) gets :data:`SCORES_HINT`, whatever its values."""

    def attention_backward(dout: Any, q: Any, k: Any, v: Any) -> Any:
        got = fn(dout, q, k, v)
        got = tuple(got) if isinstance(got, list) else got
        n, d = q.shape
        for name, g in zip(("dq", "dk", "dv"), got if isinstance(got, tuple) else ()):
            if n != d and np.shape(g) == (n, n):
                raise _answer(
                    UsageError(
                        f"attention_backward returned {name} of shape ({n}, {n}) for inputs of shape ({n}, {d}): "
                        f"{name} must have the shape of {name[1:]}, ({n}, {d})."
                    ),
                    SCORES_HINT,
                )
        return got

    return as_host(attention_backward, 4, "attention_backward")


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
        Exercise(
            "12",
            "attention_backward",
            Problem(
                "attention_backward",
                backward_spec,
                backward_inputs,
                # one token first (its dq and dk are 0: only a returned n x n array fails there), then n == d (where
                # the scores' gradient has dq's shape), and n != d both ways
                sizes=[(1, 3), (4, 4), (6, 3), (5, 8)],
                host=_backward_host(_a.attention_backward),  # no PTX check: a host NumPy function, no kernel
                out_names=["dq", "dk", "dv"],
                # float64 inputs; a learner's float32 copy (about 1e-7) passes too, while every named mistake is off
                # by a factor or more
                rtol=1e-5,
                atol=1e-6,
                race_check=False,  # a plain function: no threads whose schedule could matter
                mistakes=BACKWARD_MISTAKES,
            ),
            _a.attention_backward,
            adapt=_backward_host,
        ),
    ]


EXERCISES_LIST: list[Exercise] = _exercises()
