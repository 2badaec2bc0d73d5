"""The NumPy specs of the capstone's ops (lab 09) and the inputs each check draws: what a learner's kernel must
compute, written as plain array code. They are gpulab's own answers (the own-code check refuses a learner op
that calls them); :mod:`gpulab.capstone_problems` builds one :class:`~gpulab.exercises.Problem` per op from them.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .exercises import random_arrays
from .nn.ops import conv_out_hw

__all__: list[str] = []  # private helpers of capstone_problems


def _matmul_inputs(size: tuple, rng: np.random.Generator) -> tuple:
    m, k, n = size
    return random_arrays(rng, (m, k), (k, n))


def _conv_inputs(size: tuple, rng: np.random.Generator) -> tuple:
    n, c, h, w, k, stride, pad = size
    (x,) = random_arrays(rng, (n, c, h, w))
    return x, k, stride, pad


def _im2col_spec(x: np.ndarray, k: int, stride: int, pad: int) -> np.ndarray:
    n, c, h, w = x.shape
    xp = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    ho, wo = conv_out_hw(h, w, k, k, stride, pad)
    cols = np.empty((n, ho, wo, k, k, c), dtype=x.dtype)
    for a in range(k):
        for b in range(k):
            cols[:, :, :, a, b, :] = xp[:, :, a : a + stride * ho : stride, b : b + stride * wo : stride].transpose(
                0, 2, 3, 1
            )
    return cols.reshape(n * ho * wo, k * k * c)


def _col2im_inputs(size: tuple, rng: np.random.Generator) -> tuple:
    x, k, stride, pad = _conv_inputs(size, rng)
    (d,) = random_arrays(rng, _im2col_spec(x, k, stride, pad).shape)
    return d, x.shape, k, stride, pad


def _col2im_spec(d: np.ndarray, x_shape: tuple, k: int, stride: int, pad: int) -> np.ndarray:
    n, c, h, w = x_shape
    ho, wo = conv_out_hw(h, w, k, k, stride, pad)
    d6 = d.reshape(n, ho, wo, k, k, c)
    dx = np.zeros((n, c, h + 2 * pad, w + 2 * pad), dtype=d.dtype)
    for a in range(k):
        for b in range(k):
            dx[:, :, a : a + stride * ho : stride, b : b + stride * wo : stride] += d6[:, :, :, a, b, :].transpose(
                0, 3, 1, 2
            )
    return dx[:, :, pad : pad + h, pad : pad + w]


def _pool_inputs(size: tuple, rng: np.random.Generator) -> tuple:
    """``(n, c, h, w, k, stride[, ties])``; with ``ties`` the values are ReLU outputs in steps of 0.5, so many
    windows hold their maximum twice (as after a ReLU in training, where whole windows are 0)."""
    n, c, h, w, k, stride = size[:6]
    (x,) = random_arrays(rng, (n, c, h, w))
    if len(size) > 6 and size[6]:
        x = np.maximum(np.round(x * 2) / 2, 0).astype(np.float32)
    return x, k, stride


def _pool_spec(x: np.ndarray, k: int, stride: int) -> tuple[np.ndarray, np.ndarray]:
    n, c, h, w = x.shape
    ho, wo = conv_out_hw(h, w, k, k, stride, 0)
    win = np.stack(
        [x[:, :, a : a + stride * ho : stride, b : b + stride * wo : stride] for a in range(k) for b in range(k)], -1
    )
    return win.max(axis=-1), win.argmax(axis=-1).astype(np.int32)


def _pool_backward_inputs(size: tuple, rng: np.random.Generator) -> tuple:
    x, k, stride = _pool_inputs(size, rng)
    _, arg = _pool_spec(x, k, stride)
    (dout,) = random_arrays(rng, arg.shape)
    return dout, arg, x.shape, k, stride


def _pool_backward_spec(dout: np.ndarray, arg: np.ndarray, x_shape: tuple, k: int, stride: int) -> np.ndarray:
    ho, wo = dout.shape[2], dout.shape[3]
    dx = np.zeros(x_shape, dtype=dout.dtype)
    for a in range(k):
        for b in range(k):
            dx[:, :, a : a + stride * ho : stride, b : b + stride * wo : stride] += dout * (arg == a * k + b)
    return dx


def _xent_inputs(size: tuple, rng: np.random.Generator) -> tuple:
    """``(n, classes[, offset])``: logits in [-4, 4), plus ``offset`` (large: exp overflows unless the row's
    maximum is subtracted first; the softmax itself does not change)."""
    n, classes = size[:2]
    (logits,) = random_arrays(rng, (n, classes), low=-4.0, high=4.0)
    if len(size) > 2:
        logits = (logits + np.float32(size[2])).astype(np.float32)
    return logits, rng.integers(0, classes, n).astype(np.int64)


def _xent_spec(logits: np.ndarray, labels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    z = logits - logits.max(axis=1, keepdims=True)
    p = np.exp(z) / np.exp(z).sum(axis=1, keepdims=True)
    losses = -np.log(p[np.arange(len(labels)), labels])
    grad = p.copy()
    grad[np.arange(len(labels)), labels] -= 1
    return (grad / len(labels)).astype(logits.dtype), losses.astype(logits.dtype)


def _adam_inputs(size: Any, rng: np.random.Generator) -> tuple:
    p, g, m = random_arrays(rng, size, size, size)
    (v,) = random_arrays(rng, size, low=0.0, high=1.0)
    f = np.float32  # the scalars as training's launcher passes them (kernels.nn_ops.adam_update casts to float32)
    return p, g, m, v, f(1e-2), f(0.9), f(0.999), f(1e-8)


def _dropout_inputs(size: tuple, rng: np.random.Generator) -> tuple:
    """``(elements, p, streams)`` -> x (never 0, so a dropped element shows), the states' words, p (float32)."""
    from .nn.dropout import new_states

    n, p, streams = size
    x = rng.uniform(0.5, 1.5, n).astype(np.float32) * rng.choice(np.array([-1, 1], np.float32), n)
    return x, new_states(streams, int(rng.integers(1 << 62))), np.float32(p)


def _dropout_spec(x: np.ndarray, words: np.ndarray, p: Any) -> np.ndarray:
    from .problems._dropout import apply

    return apply(x, words, p)  # the host replay of lesson 08's check: grid-stride order, one stream per thread


def _adam_spec(p, g, m, v, lr_t, b1, b2, eps_t) -> tuple:
    """The updated ``(p, m, v)``, computed in float64 from the float32 scalars the kernel receives (as lab 06's
    ``adam_spec``): with Python's ``1 - 0.999`` instead of ``1 - float32(0.999)`` (1.3e-5 relative apart) a correct
    kernel's p misses the tolerance at 2^20 elements, where a step almost cancels p."""
    lr_t, b1, b2, eps_t = (float(np.float32(s)) for s in (lr_t, b1, b2, eps_t))
    p64, g64, m64, v64 = (np.asarray(a, np.float64) for a in (p, g, m, v))
    m2 = b1 * m64 + (1 - b1) * g64
    v2 = b2 * v64 + (1 - b2) * g64 * g64
    return (p64 - lr_t * m2 / (np.sqrt(v2) + eps_t)).astype(p.dtype), m2.astype(p.dtype), v2.astype(p.dtype)
