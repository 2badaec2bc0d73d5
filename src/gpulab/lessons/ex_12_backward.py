"""Lesson 12's exercise 4, the attention backward pass as a NumPy function: ``attention_backward(dout, q, k, v) ->
(dq, dk, dv)`` (no mask, scale ``1/sqrt(d)``), compared with :mod:`gpulab.transformer.backward` in float64. Its
named mistakes are the slips of the chain rule (the scale dropped, the softmax's row sum dropped or summed over the
wrong axis, the softmax taken over the wrong axis, a transpose missed: ``dS @ q`` for ``dS.T @ q``, ``P @ dout``
for ``P.T @ dout``; the gradients returned in another order, the scores' gradient returned) and the forward pass's
scale dropped. The reference answer is :func:`.answers_12.attention_backward`; the lesson's kernel exercises are in
:mod:`.ex_12`.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..errors import UsageError
from ..exercises import Problem
from ..transformer import backward
from ..transformer.attention import default_scale
from . import answers_12 as _a
from .exercise import Exercise, _answer, as_host

__all__ = ["BACKWARD_MISTAKES", "EXERCISES_LIST", "SCORES_HINT", "backward_inputs", "backward_spec"]


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


EXERCISES_LIST: list[Exercise] = [
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
    )
]
