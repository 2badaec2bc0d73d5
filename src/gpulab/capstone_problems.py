"""The capstone's checks (lab 09), one :class:`Problem` per learner op: the NumPy spec, the
inputs at each size, the named mistakes and the time limits. The host function that runs a learner's
kernel through the launcher training uses (:mod:`gpulab.kernels.nn_ops`) is the op's entry in
:data:`gpulab.capstone_hosts.HOSTS` (importable from here too). :class:`gpulab.capstone.Capstone`
registers a kernel only once its problem here passes.
"""

from __future__ import annotations

from typing import Any
from collections.abc import Callable

import numpy as np

from .capstone_hosts import HOSTS as HOSTS
from .exercises import Problem, random_arrays
from .nn.ops import conv_out_hw

__all__ = ["BLOCK_TIMEOUT", "GRID_STRIDE_TIMEOUT", "HOSTS", "PROBLEMS"]


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


def _pool_last_max(x: np.ndarray, k: int, stride: int) -> np.ndarray:
    """The mistake: ``arg`` of the *last* maximum of each window (``>=`` where the spec says ``>``)."""
    n, c, h, w = x.shape
    ho, wo = conv_out_hw(h, w, k, k, stride, 0)
    win = np.stack(
        [x[:, :, a : a + stride * ho : stride, b : b + stride * wo : stride] for a in range(k) for b in range(k)], -1
    )
    return (k * k - 1 - win[..., ::-1].argmax(axis=-1)).astype(np.int32)


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


def _xent_grad_not_mean(logits: np.ndarray, labels: np.ndarray) -> np.ndarray:
    return (_xent_spec(logits, labels)[0] * len(labels)).astype(logits.dtype)


def _xent_losses_mean(logits: np.ndarray, labels: np.ndarray) -> np.ndarray:
    return (_xent_spec(logits, labels)[1] / len(labels)).astype(logits.dtype)


def _adam_inputs(size: Any, rng: np.random.Generator) -> tuple:
    p, g, m = random_arrays(rng, size, size, size)
    (v,) = random_arrays(rng, size, low=0.0, high=1.0)
    return p, g, m, v, 1e-2, 0.9, 0.999, 1e-8


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
    m2 = b1 * m + (1 - b1) * g
    v2 = b2 * v + (1 - b2) * g * g
    return (p - lr_t * m2 / (np.sqrt(v2) + eps_t)).astype(p.dtype), m2.astype(p.dtype), v2.astype(p.dtype)


def _dropout_problem(op: str, inp: str, scaling: str) -> Problem:
    from .problems._dropout import named_mistakes

    return _problem(
        op,
        _dropout_spec,
        _dropout_inputs,
        # (elements, p, streams): fewer, then more elements than threads, not multiples of the block or the grid
        [(1, 0.5, 32), (50, 0.25, 96), (250, 0.5, 96), (1001, 0.1, 96)],
        [(50, 0.25, 96), (1001, 0.1, 96), ((1 << 20) + 3, 0.5, 2048)],
        out_names=["y" if inp == "x" else "dx"],
        mistakes=named_mistakes(inp, scaling),
    )


# Deadlines of one launch in a check, in seconds. The checks' grid-stride launches are small (8 threads in the
# simulator): the course's kernels took at most 0.15 s per launch (gemm_kernel on 20x40x17; the other ops
# 0.002-0.05 s), measured 2026-12-02 in simulator mode on the shared 2-core machine at load 8-10 (several test
# runs beside it). 10 s is over 60 times that, so a learner's slower kernel still finishes, and a stuck one is
# named after 10 s instead of 60. A matmul registered with block=(TILE, TILE) runs 256 simulator threads per
# block: lab 09's tiled solution took 3.5 s on the 20x40x17 case (4 blocks) at load 10, so it keeps 60 s (17x).
GRID_STRIDE_TIMEOUT = 10.0
BLOCK_TIMEOUT = 60.0


def _problem(name: str, spec: Callable, inputs: Callable, sizes: list, gpu_sizes: list, **kw: Any) -> Problem:
    return Problem(name, spec, inputs, sizes, gpu_sizes=gpu_sizes, timeout=GRID_STRIDE_TIMEOUT, **kw)


PROBLEMS: dict[str, Problem] = {
    "matmul": _problem(
        "matmul",
        lambda a, b: a @ b,
        _matmul_inputs,
        # the last: K spans three 16-wide tiles (the last ragged), so a tile overwritten while others still
        # read it (a missing second cuda.syncthreads()) shows as a race; every side is over 16 so that the
        # harness's square probe (the smallest side) spans two tiles as well and does not pass such a kernel
        [(1, 1, 1), (5, 7, 3), (20, 40, 17)],
        [(1, 1, 1), (129, 257, 65), (512, 288, 64)],
        reduction=lambda a, b: a.shape[1],
        out_names=["C"],
    ),
    "im2col": _problem(
        "im2col",
        _im2col_spec,
        _conv_inputs,
        [(1, 1, 3, 3, 3, 1, 0), (2, 2, 5, 6, 3, 1, 1), (1, 3, 7, 5, 2, 2, 1)],
        [(2, 2, 5, 6, 3, 1, 1), (64, 32, 14, 14, 3, 1, 1)],
        out_names=["cols"],
    ),
    "col2im": _problem(
        "col2im",
        _col2im_spec,
        _col2im_inputs,
        [(1, 1, 3, 3, 3, 1, 0), (2, 2, 5, 6, 3, 1, 1), (1, 3, 7, 5, 3, 2, 1)],
        [(2, 2, 5, 6, 3, 1, 1), (64, 32, 14, 14, 3, 1, 1)],
        reduction=9,
        out_names=["dx"],
    ),
    "relu": _problem(
        "relu",
        lambda x: np.maximum(x, 0),
        lambda n, rng: random_arrays(rng, n),
        [1, 37, 300],
        [1, 37, 1 << 20],
        out_names=["y"],
    ),
    "relu_backward": _problem(
        "relu_backward",
        lambda d, y: d * (y > 0),
        lambda n, rng: (random_arrays(rng, n)[0], np.maximum(random_arrays(rng, n)[0], 0)),
        [1, 37, 300],
        [1, 37, 1 << 20],
        out_names=["dx"],
        mistakes={"dx[i] = dout[i] only where y[i] > 0: where y[i] == 0 (a clipped input) dx[i] is 0.": lambda d, y: d},
    ),
    "maxpool": _problem(
        "maxpool",
        _pool_spec,
        _pool_inputs,
        [(1, 1, 2, 2, 2, 2), (2, 3, 7, 9, 2, 2), (1, 2, 5, 5, 3, 1, True)],
        [(2, 3, 7, 9, 2, 2), (2, 2, 5, 5, 3, 1, True), (128, 32, 28, 28, 2, 2)],
        out_names=["out", "arg"],
        mistakes={
            "arg must be the position of the *first* maximum when a window holds its maximum twice (after a ReLU "
            "whole windows are 0): update best and arg only on v > best, not v >= best.": _pool_last_max
        },
    ),
    "maxpool_backward": _problem(
        "maxpool_backward",
        _pool_backward_spec,
        _pool_backward_inputs,
        [(1, 1, 2, 2, 2, 2), (2, 3, 7, 9, 2, 2), (1, 2, 5, 5, 3, 1)],
        [(2, 3, 7, 9, 2, 2), (128, 32, 28, 28, 2, 2)],
        reduction=9,
        out_names=["dx"],
    ),
    "softmax_xent": _problem(
        "softmax_xent",
        _xent_spec,
        _xent_inputs,
        # the last: logits near 1000, where exp overflows unless the row's maximum is subtracted first
        [(1, 10), (7, 10), (33, 3), (5, 10, 1000.0)],
        [(7, 10), (4096, 10), (5, 10, 1000.0)],
        out_names=["grad", "losses"],
        rtol=1e-4,
        atol=1e-6,
        mistakes={
            "divide grad by N, the batch size (logits.shape[0]): the loss is the mean over the batch, so each "
            "row's gradient is (softmax - onehot) / N.": _xent_grad_not_mean,
            "losses[r] is row r's own loss, not divided by N (the engine takes the mean of losses).": _xent_losses_mean,
        },
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
        mistakes={
            "p is unchanged: the update is in place, so write the new value into p itself (p[i] -= ...), not "
            "into a local copy that is lost when the kernel ends.": lambda p, g, m, v, *_: p,
            "m is unchanged: store the new moment back (m[i] = b1 * m[i] + (1 - b1) * g[i]); the next step reads "
            "it, so a local copy is not enough.": lambda p, g, m, v, *_: m,
            "v is unchanged: store the new moment back (v[i] = b2 * v[i] + (1 - b2) * g[i] * g[i]); the next step "
            "reads it, so a local copy is not enough.": lambda p, g, m, v, *_: v,
        },
    ),
    "dropout_forward": _dropout_problem(
        "dropout_forward",
        "x",
        "y is x where kept, not x / (1 - p): inverted dropout scales the kept values by 1 / (1 - p), so that the "
        "expected value of y[i] is x[i] and nothing changes at test time (where dropout is off).",
    ),
    "dropout_backward": _dropout_problem(
        "dropout_backward",
        "dy",
        "dx is dy where kept, not dy / (1 - p): the forward scaled the kept values, y = x / (1 - p), so its "
        "derivative there is 1 / (1 - p): dx = dy / (1 - p) where kept, 0 where dropped.",
    ),
}
