"""The capstone's checks (lab 09), one :class:`Problem` per learner op: the NumPy spec, the
inputs at each size, and the host function that runs a learner's kernel through the launcher
training uses (:mod:`gpulab.kernels.nn_ops`). :class:`gpulab.capstone.Capstone` registers a kernel
only once its problem here passes.
"""

from __future__ import annotations

from typing import Any
from collections.abc import Callable

import numpy as np

from . import runtime
from .exercises import Problem, random_arrays
from .nn.ops import conv_out_hw

__all__ = ["HOSTS", "PROBLEMS"]


def _k():
    """:mod:`gpulab.kernels.nn_ops`, imported when a check runs (importing this module compiles nothing)."""
    from .kernels import nn_ops

    return nn_ops


# ----------------------------------------------------------------------------- problems (one per op)


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
    n, c, h, w, k, stride = size
    (x,) = random_arrays(rng, (n, c, h, w))
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
    n, classes = size
    (logits,) = random_arrays(rng, (n, classes), low=-4.0, high=4.0)
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
    return p, g, m, v, 1e-2, 0.9, 0.999, 1e-8


def _adam_spec(p, g, m, v, lr_t, b1, b2, eps_t) -> tuple:
    m2 = b1 * m + (1 - b1) * g
    v2 = b2 * v + (1 - b2) * g * g
    return (p - lr_t * m2 / (np.sqrt(v2) + eps_t)).astype(p.dtype), m2.astype(p.dtype), v2.astype(p.dtype)


def _problem(name: str, spec: Callable, inputs: Callable, sizes: list, gpu_sizes: list, **kw: Any) -> Problem:
    return Problem(name, spec, inputs, sizes, gpu_sizes=gpu_sizes, timeout=60.0, **kw)


# Each host function runs the learner's kernel through the launcher training uses.
HOSTS: dict[str, Callable[..., None]] = {
    "matmul": lambda kern, a, b, c, block=None: c.__setitem__(..., _k().gemm(a, b, kernel=kern, block=block)),
    "im2col": lambda kern, x, k, s, p, cols: cols.__setitem__(..., _k().im2col(x, k, k, s, p, kernel=kern)[0]),
    "col2im": lambda kern, d, xs, k, s, p, dx: dx.__setitem__(..., _k().col2im(d, xs, k, k, s, p, kernel=kern)),
    "relu": lambda kern, x, y: y.__setitem__(..., _k().relu(x, kernel=kern)),
    "relu_backward": lambda kern, d, y, dx: dx.__setitem__(..., _k().relu_backward(d, y, kernel=kern)),
    "maxpool": lambda kern, x, k, s, out, arg: _both(_k().maxpool(x, k, s, kernel=kern), out, arg),
    "maxpool_backward": lambda kern, d, arg, xs, k, s, dx: dx.__setitem__(
        ..., _k().maxpool_backward(d, arg, xs, k, s, kernel=kern)
    ),
    "softmax_xent": lambda kern, z, y, grad, losses: _xent_host(kern, z, y, grad, losses),
    "adam_update": lambda kern, p, g, m, v, lr, b1, b2, eps, p2, m2, v2: _adam_host(
        kern, p, g, m, v, lr, b1, b2, eps, p2, m2, v2
    ),
}


def _both(res: tuple, out: Any, arg: Any) -> None:
    out[...], arg[...] = res


def _xent_host(kern: Any, z: Any, y: Any, grad: Any, losses: Any) -> None:
    nn_ops = _k()
    xp = runtime.array_module(z)
    nn_ops.check_labels(y, z.shape[0], z.shape[1])
    g = xp.empty_like(z)
    loss = xp.empty(z.shape[0], dtype=np.float32)
    nn_ops.launch_1d(kern, z.shape[0], xp.ascontiguousarray(z), xp.ascontiguousarray(y), g, loss)
    grad[...], losses[...] = g, loss


def _adam_host(kern: Any, p, g, m, v, lr, b1, b2, eps, p2, m2, v2) -> None:
    p2[...], m2[...], v2[...] = p, m, v
    _k().adam_update(p2, g, m2, v2, lr, b1, b2, eps, kernel=kern)


PROBLEMS: dict[str, Problem] = {
    "matmul": _problem(
        "matmul",
        lambda a, b: a @ b,
        _matmul_inputs,
        [(1, 1, 1), (5, 7, 3), (17, 9, 13)],
        [(1, 1, 1), (129, 257, 65), (512, 288, 64)],
        reduction=lambda a, b: a.shape[1],
    ),
    "im2col": _problem(
        "im2col",
        _im2col_spec,
        _conv_inputs,
        [(1, 1, 3, 3, 3, 1, 0), (2, 2, 5, 6, 3, 1, 1), (1, 3, 7, 5, 2, 2, 1)],
        [(2, 2, 5, 6, 3, 1, 1), (64, 32, 14, 14, 3, 1, 1)],
    ),
    "col2im": _problem(
        "col2im",
        _col2im_spec,
        _col2im_inputs,
        [(1, 1, 3, 3, 3, 1, 0), (2, 2, 5, 6, 3, 1, 1), (1, 3, 7, 5, 3, 2, 1)],
        [(2, 2, 5, 6, 3, 1, 1), (64, 32, 14, 14, 3, 1, 1)],
        reduction=9,
    ),
    "relu": _problem(
        "relu", lambda x: np.maximum(x, 0), lambda n, rng: random_arrays(rng, n), [1, 37, 300], [1, 37, 1 << 20]
    ),
    "relu_backward": _problem(
        "relu_backward",
        lambda d, y: d * (y > 0),
        lambda n, rng: (random_arrays(rng, n)[0], np.maximum(random_arrays(rng, n)[0], 0)),
        [1, 37, 300],
        [1, 37, 1 << 20],
    ),
    "maxpool": _problem(
        "maxpool",
        _pool_spec,
        _pool_inputs,
        [(1, 1, 2, 2, 2, 2), (2, 3, 7, 9, 2, 2), (1, 2, 5, 5, 3, 1)],
        [(2, 3, 7, 9, 2, 2), (128, 32, 28, 28, 2, 2)],
        out_names=["out", "arg"],
    ),
    "maxpool_backward": _problem(
        "maxpool_backward",
        _pool_backward_spec,
        _pool_backward_inputs,
        [(1, 1, 2, 2, 2, 2), (2, 3, 7, 9, 2, 2), (1, 2, 5, 5, 3, 1)],
        [(2, 3, 7, 9, 2, 2), (128, 32, 28, 28, 2, 2)],
        reduction=9,
    ),
    "softmax_xent": _problem(
        "softmax_xent",
        _xent_spec,
        _xent_inputs,
        [(1, 10), (7, 10), (33, 3)],
        [(7, 10), (4096, 10)],
        out_names=["grad", "losses"],
        rtol=1e-4,
        atol=1e-6,
    ),
    "adam_update": _problem(
        "adam_update",
        _adam_spec,
        _adam_inputs,
        [1, 37, 300],
        [37, 1 << 20],
        out_names=["p", "m", "v"],
        rtol=1e-5,
        atol=1e-6,
    ),
}
