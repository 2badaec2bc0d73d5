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

__all__ = ["BLOCK_TIMEOUT", "GRID_STRIDE_TIMEOUT", "HOSTS", "PROBLEMS"]


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


def _dropout_host(kern: Any, x: Any, words: Any, p: Any, y: Any) -> None:
    """Training's launch (:func:`gpulab.kernels.nn_ops.dropout`: one thread per state, blocks of 32) on a copy of
    the states, into the check's buffer; in the simulator on Numba's simulator (the checks' schedules and races)."""
    from .nn.dropout import TPB, check_dropout
    from .problems._dropout import as_states

    check_dropout(p, words)
    if x.size:
        kern[int(words.shape[0]) // 2 // TPB, TPB](_flat(x), as_states(words.copy()), np.float32(p), y.reshape(-1))


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


# Each host function launches the learner's kernel as the launcher training uses does
# (:mod:`gpulab.kernels.nn_ops`: the same grid-stride launch over the same count, the same arguments), but
# into the harness's output buffers: those come pre-filled, so an element the kernel never writes is named
# as such, where a launcher's own uninitialised output would show garbage that differs from run to run
# (and read as a race).
def _launch_1d(kern: Any, n: int, *args: Any) -> None:
    _k().launch_1d(kern, n, *args)


def _launch_2d(kern: Any, rows: int, cols: int, *args: Any) -> None:
    _k().launch_2d(kern, rows, cols, *args)


def _flat(a: Any) -> Any:
    return runtime.array_module(a).ascontiguousarray(a).reshape(-1)


def _gemm_host(
    kern: Any, a: Any, b: Any, c: Any, block: tuple[int, int] | None = None, cooperative: bool = False
) -> None:
    """``gemm``'s launches for small checks: grid-stride over c, or one thread per element of c in ``block``s
    (``cooperative``: in the simulator, run in turn as training does, :mod:`gpulab.kernels.cooperative`)."""
    if block is None:
        _launch_2d(kern, c.shape[0], c.shape[1], a, b, c)
        return
    from .kernels._launch import MAX_GRID_DIMS, ceil_div, check_launch
    from .kernels.grid_stride import device_args, fast_simulator_arrays

    bx, by = (int(v) for v in block)
    grid = (ceil_div(c.shape[1], bx), ceil_div(c.shape[0], by))  # x over the columns of c
    if grid[1] > MAX_GRID_DIMS[1]:
        c[...] = _k().gemm(a, b, kernel=kern, block=block)  # gemm slices the rows; no check is this big
        return
    check_launch(grid, (bx, by))
    if c.size == 0:
        return
    if runtime.is_simulator():
        fast_simulator_arrays()
        if cooperative:
            from .kernels.cooperative import launch

            launch(kern, grid, (bx, by), a, b, c)
            return
    kern[grid, (bx, by)](*device_args(a, b, c))


def _im2col_host(kern: Any, x: Any, k: int, s: int, p: int, cols: Any) -> None:
    ho, wo = conv_out_hw(x.shape[2], x.shape[3], k, k, s, p)
    _launch_2d(kern, cols.shape[0], cols.shape[1], x, cols, k, k, s, p, ho, wo)


def _col2im_host(kern: Any, d: Any, xs: tuple, k: int, s: int, p: int, dx: Any) -> None:
    ho, wo = conv_out_hw(xs[2], xs[3], k, k, s, p)
    _launch_1d(kern, dx.size, d, dx, k, k, s, p, ho, wo)


def _xent_host(kern: Any, z: Any, y: Any, grad: Any, losses: Any) -> None:
    _k().check_labels(y, z.shape[0], z.shape[1])
    xp = runtime.array_module(z)
    _launch_1d(kern, z.shape[0], z, xp.ascontiguousarray(y.astype(np.int64)), grad, losses)


def _adam_host(kern: Any, p, g, m, v, lr, b1, b2, eps, p2, m2, v2) -> None:
    p2[...], m2[...], v2[...] = p, m, v  # in place, on copies of the inputs
    _k().adam_update(p2, g, m2, v2, lr, b1, b2, eps, kernel=kern)


HOSTS: dict[str, Callable[..., None]] = {
    "matmul": _gemm_host,
    "im2col": _im2col_host,
    "col2im": _col2im_host,
    "relu": lambda kern, x, y: _launch_1d(kern, y.size, _flat(x), y.reshape(-1)),
    "relu_backward": lambda kern, d, y, dx: _launch_1d(kern, dx.size, _flat(d), _flat(y), dx.reshape(-1)),
    "maxpool": lambda kern, x, k, s, out, arg: _launch_1d(kern, out.size, x, out, arg, k, s),
    "maxpool_backward": lambda kern, d, arg, xs, k, s, dx: _launch_1d(kern, dx.size, d, arg, dx, k, s),
    "softmax_xent": _xent_host,
    "adam_update": _adam_host,
    "dropout_forward": _dropout_host,
    "dropout_backward": _dropout_host,
}


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
