"""The known mistakes of the capstone's ops (lab 09): for each, the output a kernel with that mistake produces,
written as plain array code from the ops' specs (:mod:`gpulab.capstone_specs`). :mod:`gpulab.capstone_problems`
names them in each op's ``mistakes=``, so that a wrong result that matches one gets its hint.
"""

from __future__ import annotations

import numpy as np

from .capstone_specs import _adam_spec, _col2im_spec, _im2col_spec, _pool_spec, _xent_spec
from .nn.ops import conv_out_hw

__all__: list[str] = []  # private helpers of capstone_problems


def _im2col_channel_first(x: np.ndarray, k: int, stride: int, pad: int) -> np.ndarray:
    """The mistake: columns in PyTorch's order ``q = (c*kh + a)*kw + b``, not ``(a*kw + b)*C + c``."""
    n, c = x.shape[:2]
    cols = _im2col_spec(x, k, stride, pad)
    return cols.reshape(-1, k, k, c).transpose(0, 3, 1, 2).reshape(cols.shape)


def _im2col_no_pad_shift(x: np.ndarray, k: int, stride: int, pad: int) -> np.ndarray:
    """The mistake: ``ih = i*stride + a`` without ``- pad`` (the padding all lands below and right)."""
    xp = np.pad(x, ((0, 0), (0, 0), (0, 2 * pad), (0, 2 * pad)))
    return _im2col_spec(xp, k, stride, 0)


def _im2col_offsets_swapped(x: np.ndarray, k: int, stride: int, pad: int) -> np.ndarray:
    """The mistake: ``a = (q // C) % kw``, ``b = q // (kw*C)`` (the window's row and column offsets exchanged)."""
    cols = _im2col_spec(x, k, stride, pad)
    return cols.reshape(-1, k, k, x.shape[1]).transpose(0, 2, 1, 3).reshape(cols.shape)


def _col2im_channel_first(d: np.ndarray, x_shape: tuple, k: int, stride: int, pad: int) -> np.ndarray:
    """The mistake: ``dcols`` read at ``q = (c*kh + a)*kw + b`` (PyTorch's order), not ``(a*kw + b)*C + c``."""
    c = x_shape[1]
    return _col2im_spec(d.reshape(-1, c, k, k).transpose(0, 2, 3, 1).reshape(d.shape), x_shape, k, stride, pad)


def _col2im_gather(
    d: np.ndarray, x_shape: tuple, k: int, stride: int, pad: int, *, shift: int, stride_test: bool
) -> np.ndarray:
    """col2im's gather with window row ``ii = h + shift - a`` (right: ``shift = pad``), with or without the
    ``ii % stride == 0`` test (and likewise for the columns)."""
    n, c, h, w = x_shape
    ho, wo = conv_out_hw(h, w, k, k, stride, pad)
    d6 = d.reshape(n, ho, wo, k, k, c).astype(np.float64)
    dx = np.zeros((n, c, h, w))
    for y in range(h):
        for x in range(w):
            for a in range(k):
                for b in range(k):
                    ii, jj = y + shift - a, x + shift - b
                    if stride_test and (ii % stride or jj % stride):
                        continue
                    if ii >= 0 and jj >= 0 and ii // stride < ho and jj // stride < wo:
                        dx[:, :, y, x] += d6[:, ii // stride, jj // stride, a, b, :]
    return dx.astype(d.dtype)


def _col2im_no_stride_test(d: np.ndarray, x_shape: tuple, k: int, stride: int, pad: int) -> np.ndarray:
    """The mistake: no ``ii % stride == 0`` test, so ``ii // stride`` rounds taps that hit no window onto one."""
    return _col2im_gather(d, x_shape, k, stride, pad, shift=pad, stride_test=False)


def _col2im_pad_flipped(d: np.ndarray, x_shape: tuple, k: int, stride: int, pad: int) -> np.ndarray:
    """The mistake: ``ii = h - pad - a`` (the pad's shift with the wrong sign)."""
    return _col2im_gather(d, x_shape, k, stride, pad, shift=-pad, stride_test=True)


def _pool_last_max(x: np.ndarray, k: int, stride: int) -> np.ndarray:
    """The mistake: ``arg`` of the *last* maximum of each window (``>=`` where the spec says ``>``)."""
    n, c, h, w = x.shape
    ho, wo = conv_out_hw(h, w, k, k, stride, 0)
    win = np.stack(
        [x[:, :, a : a + stride * ho : stride, b : b + stride * wo : stride] for a in range(k) for b in range(k)], -1
    )
    return (k * k - 1 - win[..., ::-1].argmax(axis=-1)).astype(np.int32)


def _pool_from_zero(x: np.ndarray, k: int, stride: int) -> np.ndarray:
    """The mistake: ``best = 0.0`` before the window's loop, so a window of negative values gives 0."""
    return np.maximum(_pool_spec(x, k, stride)[0], 0).astype(x.dtype)


def _pool_arg_flat(x: np.ndarray, k: int, stride: int) -> np.ndarray:
    """The mistake: ``arg`` as the input pixel's flat index ``h*W + w``, not the position ``a*k + b`` in the window."""
    _, arg = _pool_spec(x, k, stride)
    ho, wo = arg.shape[2:]
    a, b = arg // k, arg % k
    h = np.arange(ho)[:, None] * stride + a
    w = np.arange(wo)[None, :] * stride + b
    return (h * x.shape[3] + w).astype(np.int32)


def _pool_backward_routed(
    dout: np.ndarray, arg: np.ndarray, x_shape: tuple, k: int, stride: int, *, how: str
) -> np.ndarray:
    """The mistakes: ``how="all"`` routes dout to every pixel of the window (``arg`` ignored); ``"one_window"``
    looks only at the window ``i = h // stride`` (as if windows never overlapped); ``"last"`` assigns
    (``acc = dout[...]``) where it should add, so of several windows only the last one the loop meets counts."""
    n, c, h, w = x_shape
    ho, wo = dout.shape[2], dout.shape[3]
    dx = np.zeros(x_shape, dtype=np.float64)
    for y in range(h):
        for x in range(w):
            for a in range(k):
                for b in range(k):
                    ii, jj = y - a, x - b
                    if ii < 0 or jj < 0 or ii % stride or jj % stride or ii // stride >= ho or jj // stride >= wo:
                        continue
                    i, j = ii // stride, jj // stride
                    if how == "one_window" and (i, j) != (y // stride, x // stride):
                        continue
                    hit = np.ones((n, c), bool) if how == "all" else arg[:, :, i, j] == a * k + b
                    if how == "last":
                        dx[:, :, y, x] = np.where(hit, dout[:, :, i, j], dx[:, :, y, x])
                    else:
                        dx[:, :, y, x] += np.where(hit, dout[:, :, i, j], 0)
    return dx.astype(dout.dtype)


def _xent_grad_not_mean(logits: np.ndarray, labels: np.ndarray) -> np.ndarray:
    return (_xent_spec(logits, labels)[0] * len(labels)).astype(logits.dtype)


def _xent_losses_mean(logits: np.ndarray, labels: np.ndarray) -> np.ndarray:
    return (_xent_spec(logits, labels)[1] / len(labels)).astype(logits.dtype)


def _xent_loss_no_shift(logits: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """The mistake: ``log(s) - logits[r, y]``, the label's logit without ``- m`` (s was summed shifted by m)."""
    return (_xent_spec(logits, labels)[1] - logits.max(axis=1)).astype(logits.dtype)


def _xent_no_onehot(logits: np.ndarray, labels: np.ndarray) -> np.ndarray:
    z = np.exp(logits - logits.max(axis=1, keepdims=True))
    return (z / z.sum(axis=1, keepdims=True) / len(labels)).astype(logits.dtype)


def _adam_ascent(p, g, m, v, lr_t, b1, b2, eps_t) -> np.ndarray:
    """The mistake: ``p += ...`` (a step up the gradient)."""
    p2, m2, v2 = _adam_spec(p, g, m, v, lr_t, b1, b2, eps_t)
    return (2 * p - p2).astype(p.dtype)


def _adam_old_moments(p, g, m, v, lr_t, b1, b2, eps_t) -> np.ndarray:
    """The mistake: p updated before the moments, with the previous step's m and v."""
    return (p - lr_t * m / (np.sqrt(v) + eps_t)).astype(p.dtype)


def _adam_v_from_g(p, g, m, v, lr_t, b1, b2, eps_t) -> list:
    """The mistake: ``v = b2 v + (1 - b2) g`` (the gradient, not its square); p then from that v."""
    m2 = b1 * m + (1 - b1) * g
    v2 = b2 * v + (1 - b2) * g
    with np.errstate(invalid="ignore"):
        return [(p - lr_t * m2 / (np.sqrt(v2) + eps_t)).astype(p.dtype), v2.astype(p.dtype)]


def _adam_m_hat_only(p, g, m, v, lr_t, b1, b2, eps_t) -> np.ndarray:
    """The mistake: ``p -= lr_t * m_hat / (sqrt(v) + eps_t)`` with ``m_hat = m / (1 - b1)``, no ``v_hat``."""
    _, m2, v2 = _adam_spec(p, g, m, v, lr_t, b1, b2, eps_t)
    return (p - lr_t * (m2 / (1 - b1)) / (np.sqrt(v2) + eps_t)).astype(p.dtype)


def _adam_both_hats(p, g, m, v, lr_t, b1, b2, eps_t) -> np.ndarray:
    """The mistake: ``m_hat = m / (1 - b1)`` and ``v_hat = v / (1 - b2)`` in the kernel, on top of lr_t and eps_t."""
    _, m2, v2 = _adam_spec(p, g, m, v, lr_t, b1, b2, eps_t)
    return (p - lr_t * (m2 / (1 - b1)) / (np.sqrt(v2 / (1 - b2)) + eps_t)).astype(p.dtype)
