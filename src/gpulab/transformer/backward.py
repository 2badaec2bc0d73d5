"""The attention layer's backward pass, in one ``xp`` code path (NumPy or CuPy), lesson 12.

Forward, with shapes (n queries, m keys, width d, value width dv)::

    S = (q @ k.T) * scale      (n, m), -inf where masked
    P = softmax(S, axis=1)     (n, m)
    out = P @ v                (n, dv)

Backward, given ``dout = dL/dout`` (n, dv), by the chain rule one step at a time::

    dv = P.T @ dout                            (m, dv)   out = P v is a matmul
    dP = dout @ v.T                            (n, m)
    dS = P * (dP - sum(dP * P, axis=1))        (n, m)    the softmax's Jacobian, row by row
    dq = dS @ k * scale                        (n, d)
    dk = dS.T @ q * scale                      (m, d)

``sum(dP * P, axis=1)`` equals ``sum(dout * out, axis=1)`` (one n-vector, no n x m product): FlashAttention's
backward uses that form and recomputes P tile by tile from q, k and the row log-sum-exp, so it never
stores P either. Masked entries have P = 0, so their dS is 0 with no special case.

:class:`SelfAttention` (``x -> attention(x Wq, x Wk, x Wv)``) has the course's layer interface
(``params``, ``grads``, ``forward``, ``backward``), so :func:`gpulab.gradcheck.check_layer` checks it
by finite differences; :func:`torch_gradients` gives PyTorch's answer where PyTorch is installed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from .. import runtime
from .attention import causal_mask, check_qkv, default_scale

__all__ = ["AttentionCache", "SelfAttention", "attention_backward", "attention_forward", "torch_gradients"]


@dataclass
class AttentionCache:
    """What the backward pass needs from the forward pass."""

    q: Any
    k: Any
    v: Any
    p: Any  # (n, m) attention weights
    scale: float


def attention_forward(
    q: Any, k: Any, v: Any, *, causal: bool = False, scale: float | None = None
) -> tuple[Any, AttentionCache]:
    """``(out, cache)``: attention in the inputs' array module and dtype (max subtracted per row)."""
    n, m, d, _ = check_qkv(q, k, v, causal=causal)
    xp = runtime.array_module(q, k, v)
    sc = default_scale(d) if scale is None else float(scale)
    s = (q @ k.T) * sc  # (n, m)
    if causal:
        s = xp.where(causal_mask(n, m, xp=xp), s, -xp.inf)  # built where s is: no host copy
    s = s - s.max(axis=1, keepdims=True)  # row maxima: every exponent <= 0
    p = xp.exp(s)
    p /= p.sum(axis=1, keepdims=True)  # (n, m)
    return p @ v, AttentionCache(q, k, v, p, sc)  # out: (n, dv)


def attention_backward(dout: Any, cache: AttentionCache) -> tuple[Any, Any, Any]:
    """``(dq, dk, dv)`` from ``dout = dL/dout`` (n, dv) and the forward pass's cache."""
    q, k, v, p, sc = cache.q, cache.k, cache.v, cache.p, cache.scale
    dv = p.T @ dout  # (m, dv)
    dp = dout @ v.T  # (n, m)
    ds = p * (dp - (dp * p).sum(axis=1, keepdims=True))  # (n, m): softmax backward per row
    dq = (ds @ k) * sc  # (n, d)
    dk = (ds.T @ q) * sc  # (m, d)
    return dq, dk, dv


class SelfAttention:
    """One attention head on a sequence ``x`` (n, e): ``attention(x Wq, x Wk, x Wv)`` -> (n, dv).

    Parameters ``Wq``, ``Wk`` (e, d) and ``Wv`` (e, dv); ``grads`` holds their gradients after
    :meth:`backward`. The layer interface of :mod:`gpulab.nn`, so :func:`gpulab.gradcheck.check_layer`
    applies.
    """

    def __init__(self, e: int, d: int, dv: int | None = None, *, causal: bool = True, seed: int = 0) -> None:
        rng = np.random.default_rng(seed)
        dv = d if dv is None else dv
        self.params: dict[str, Any] = {
            name: (rng.standard_normal(shape) / np.sqrt(e)).astype(np.float32)
            for name, shape in (("Wq", (e, d)), ("Wk", (e, d)), ("Wv", (e, dv)))
        }
        self.grads: dict[str, Any] = {name: np.zeros_like(w) for name, w in self.params.items()}
        self.causal = causal
        self.needs_input_grad = True
        self._x: Any = None
        self._cache: AttentionCache | None = None

    def forward(self, x: Any) -> Any:
        w = self.params
        self._x = x
        out, self._cache = attention_forward(x @ w["Wq"], x @ w["Wk"], x @ w["Wv"], causal=self.causal)
        return out  # (n, dv)

    def backward(self, dout: Any) -> Any:
        if self._cache is None:
            raise RuntimeError("SelfAttention.backward: call forward first (it keeps what backward needs).")
        x, w = self._x, self.params
        dq, dk, dv = attention_backward(dout, self._cache)
        self.grads["Wq"] = x.T @ dq  # (e, d)
        self.grads["Wk"] = x.T @ dk
        self.grads["Wv"] = x.T @ dv
        return dq @ w["Wq"].T + dk @ w["Wk"].T + dv @ w["Wv"].T if self.needs_input_grad else None  # (n, e)


def torch_gradients(
    q: Any, k: Any, v: Any, dout: Any, *, causal: bool = False, scale: float | None = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """PyTorch's ``(dq, dk, dv)`` for the same attention in float64 (autograd through
    ``torch.softmax``), as NumPy arrays. Raises ImportError when PyTorch is not installed."""
    import torch

    q_t, k_t, v_t = (torch.tensor(np.asarray(runtime.to_host(a), np.float64), requires_grad=True) for a in (q, k, v))
    n, m, d, _ = check_qkv(q_t, k_t, v_t, causal=causal)
    s = (q_t @ k_t.T) * (default_scale(d) if scale is None else float(scale))
    if causal:
        s = s.masked_fill(~torch.tensor(causal_mask(n, m)), float("-inf"))
    out = torch.softmax(s, dim=1) @ v_t
    out.backward(torch.tensor(np.asarray(runtime.to_host(dout), np.float64)))
    grads = [t.grad for t in (q_t, k_t, v_t)]
    if any(g is None for g in grads):
        raise RuntimeError("torch_gradients: PyTorch computed no gradient for q, k or v.")
    dq, dk, dv = (g.numpy() for g in grads if g is not None)
    return dq, dk, dv
