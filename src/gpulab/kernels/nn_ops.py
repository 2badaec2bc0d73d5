"""CUDA kernels for the CNN engine (:mod:`gpulab.nn`, backend ``"kernels"``).

One thread per output element everywhere, and no atomics: where many outputs add into one input
(col2im, max-pool backward) each thread *gathers* the contributions to its own input pixel, so the
result is deterministic. The GEMMs go through :func:`gpulab.kernels.matmul` (the lesson-04 kernels).

NumPy references (what each launcher computes):

* :func:`im2col`       ``cols[(n,i,j), (a,b,c)] = xpad[n, c, i*s+a, j*s+b]``
* :func:`col2im`       the adjoint of im2col (sum of every column entry that came from a pixel)
* :func:`maxpool`      ``out = max over each k x k window``, ``arg`` = position of the first max
* :func:`relu`         ``max(x, 0)``;  :func:`relu_backward` ``dout * (y > 0)``
* :func:`add_bias`     ``y += b`` row-wise
* :func:`softmax_xent` mean cross-entropy of softmax(logits) and its gradient ``(softmax - onehot) / N``
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from numba import cuda

from .. import runtime
from ._launch import blocks_for, check_array, check_launch
from .matmul import matmul

__all__ = [
    "PTX_SIGNATURES",
    "add_bias",
    "col2im",
    "gemm",
    "im2col",
    "maxpool",
    "maxpool_backward",
    "relu",
    "relu_backward",
    "softmax_xent",
]

TPB = 256  # threads per block for the 1-D launches
TILE = (16, 16)  # (x, y) threads per block for the 2-D launches


# ------------------------------------------------------------------------------------- kernels


@cuda.jit
def im2col_kernel(x, cols, kh, kw, stride, pad, ho, wo):
    q, r = cuda.grid(2)  # q: column (a, b, c) - fastest, so a warp writes a row; r: row (n, i, j)
    C, H, W = x.shape[1], x.shape[2], x.shape[3]
    if r < cols.shape[0] and q < cols.shape[1]:  # bounds guard in both dimensions
        n = r // (ho * wo)
        i = (r // wo) % ho
        j = r % wo
        a = q // (kw * C)
        b = (q // C) % kw
        c = q % C
        ih = i * stride + a - pad  # input row under this tap (may fall in the zero padding)
        iw = j * stride + b - pad
        v = 0.0
        if ih >= 0 and ih < H and iw >= 0 and iw < W:
            v = x[n, c, ih, iw]
        cols[r, q] = v


@cuda.jit
def col2im_kernel(dcols, dx, kh, kw, stride, pad, ho, wo):
    t = cuda.grid(1)  # one thread per input pixel (n, c, h, w): it gathers, so no two threads write one place
    N, C, H, W = dx.shape[0], dx.shape[1], dx.shape[2], dx.shape[3]
    if t < N * C * H * W:
        n = t // (C * H * W)
        c = (t // (H * W)) % C
        h = (t // W) % H
        w = t % W
        acc = 0.0
        for a in range(kh):  # every tap (a, b) and output (i, j) with i*stride + a - pad == h
            ii = h + pad - a
            if ii >= 0 and ii % stride == 0 and ii // stride < ho:
                i = ii // stride
                for b in range(kw):
                    jj = w + pad - b
                    if jj >= 0 and jj % stride == 0 and jj // stride < wo:
                        j = jj // stride
                        acc += dcols[(n * ho + i) * wo + j, (a * kw + b) * C + c]
        dx[n, c, h, w] = acc


@cuda.jit
def maxpool_forward_kernel(x, out, arg, k, stride):
    t = cuda.grid(1)  # one thread per output element (n, c, i, j)
    N, C, HO, WO = out.shape[0], out.shape[1], out.shape[2], out.shape[3]
    if t < N * C * HO * WO:
        n = t // (C * HO * WO)
        c = (t // (HO * WO)) % C
        i = (t // WO) % HO
        j = t % WO
        best = x[n, c, i * stride, j * stride]
        where = 0
        for a in range(k):
            for b in range(k):
                v = x[n, c, i * stride + a, j * stride + b]
                if v > best:  # strictly greater: on ties the first maximum wins
                    best = v
                    where = a * k + b
        out[n, c, i, j] = best
        arg[n, c, i, j] = where


@cuda.jit
def maxpool_backward_kernel(dout, arg, dx, k, stride):
    t = cuda.grid(1)  # one thread per input pixel: sums dout of every window whose max it was
    N, C, H, W = dx.shape[0], dx.shape[1], dx.shape[2], dx.shape[3]
    HO, WO = dout.shape[2], dout.shape[3]
    if t < N * C * H * W:
        n = t // (C * H * W)
        c = (t // (H * W)) % C
        h = (t // W) % H
        w = t % W
        acc = 0.0
        for a in range(k):
            ii = h - a
            if ii >= 0 and ii % stride == 0 and ii // stride < HO:
                for b in range(k):
                    jj = w - b
                    if jj >= 0 and jj % stride == 0 and jj // stride < WO:
                        if arg[n, c, ii // stride, jj // stride] == a * k + b:
                            acc += dout[n, c, ii // stride, jj // stride]
        dx[n, c, h, w] = acc


@cuda.jit
def relu_kernel(x, y):
    i = cuda.grid(1)
    if i < y.size:  # bounds guard
        y[i] = max(x[i], 0.0)


@cuda.jit
def relu_backward_kernel(dout, y, dx):
    i = cuda.grid(1)
    if i < dx.size:
        dx[i] = dout[i] if y[i] > 0.0 else 0.0


@cuda.jit
def add_bias_kernel(y, b):
    j, i = cuda.grid(2)  # j: feature (fastest), i: row
    if i < y.shape[0] and j < y.shape[1]:
        y[i, j] += b[j]


@cuda.jit
def softmax_xent_kernel(logits, labels, grad, losses):
    r = cuda.grid(1)  # one thread per row (sample): K is small (10 classes)
    N, K = logits.shape[0], logits.shape[1]
    if r < N:
        m = logits[r, 0]
        for k in range(1, K):
            m = max(m, logits[r, k])
        s = 0.0
        for k in range(K):
            s += math.exp(logits[r, k] - m)
        y = labels[r]
        losses[r] = math.log(s) - (logits[r, y] - m)
        for k in range(K):
            p = math.exp(logits[r, k] - m) / s
            if k == y:
                p -= 1.0
            grad[r, k] = p / N


# ------------------------------------------------------------------------------------ launchers


def _xp(a: Any) -> Any:
    return runtime.array_module(a)


def _launch_2d(kernel: Any, rows: int, cols: int, *args: Any) -> None:
    tx, ty = TILE
    blocks = (blocks_for(cols, tx), blocks_for(rows, ty))
    check_launch(blocks, TILE)
    kernel[blocks, TILE](*args)


def _launch_1d(kernel: Any, n: int, *args: Any) -> None:
    blocks = blocks_for(n, TPB)
    check_launch(blocks, TPB)
    kernel[blocks, TPB](*args)


def gemm(a: Any, b: Any) -> Any:
    """``a @ b`` (float32) with the lab's register-tiled matmul kernel."""
    return matmul(a, b)


def im2col(x: Any, kh: int, kw: int, stride: int, pad: int) -> tuple[Any, int, int]:
    """x (N, C, H, W) float32 -> cols (N*Ho*Wo, kh*kw*C), Ho, Wo (same layout as the NumPy backend)."""
    check_array("x", x, ndim=4, dtype=np.float32)
    n, c, h, w = (int(s) for s in x.shape)
    ho, wo = (h + 2 * pad - kh) // stride + 1, (w + 2 * pad - kw) // stride + 1
    cols = _xp(x).empty((n * ho * wo, kh * kw * c), dtype=np.float32)  # (N*Ho*Wo, kh*kw*C)
    _launch_2d(im2col_kernel, cols.shape[0], cols.shape[1], x, cols, kh, kw, stride, pad, ho, wo)
    return cols, ho, wo


def col2im(dcols: Any, x_shape: tuple[int, ...], kh: int, kw: int, stride: int, pad: int) -> Any:
    """dcols (N*Ho*Wo, kh*kw*C) -> dx (N, C, H, W): each pixel sums the entries it was copied to."""
    check_array("dcols", dcols, ndim=2, dtype=np.float32)
    n, c, h, w = (int(s) for s in x_shape)
    ho, wo = (h + 2 * pad - kh) // stride + 1, (w + 2 * pad - kw) // stride + 1
    dx = _xp(dcols).empty((n, c, h, w), dtype=np.float32)  # (N, C, H, W)
    _launch_1d(col2im_kernel, dx.size, dcols, dx, kh, kw, stride, pad, ho, wo)
    return dx


def maxpool(x: Any, k: int, stride: int) -> tuple[Any, Any]:
    """x (N, C, H, W) -> (out (N, C, Ho, Wo), arg (N, C, Ho, Wo) int32 = a*k + b of the first max)."""
    check_array("x", x, ndim=4, dtype=np.float32)
    n, c, h, w = (int(s) for s in x.shape)
    ho, wo = (h - k) // stride + 1, (w - k) // stride + 1
    xp = _xp(x)
    out = xp.empty((n, c, ho, wo), dtype=np.float32)
    arg = xp.empty((n, c, ho, wo), dtype=np.int32)
    _launch_1d(maxpool_forward_kernel, out.size, x, out, arg, k, stride)
    return out, arg


def maxpool_backward(dout: Any, arg: Any, x_shape: tuple[int, ...], k: int = 2, stride: int = 2) -> Any:
    """dout (N, C, Ho, Wo) -> dx (N, C, H, W): each gradient goes to the max of its window."""
    check_array("dout", dout, ndim=4, dtype=np.float32)
    dx = _xp(dout).empty(tuple(int(s) for s in x_shape), dtype=np.float32)
    _launch_1d(maxpool_backward_kernel, dx.size, dout, arg, dx, k, stride)
    return dx


def relu(x: Any) -> Any:
    """``max(x, 0)`` elementwise (any shape, C-contiguous float32)."""
    check_array("x", x, dtype=np.float32)
    y = _xp(x).empty_like(x)
    if x.size:
        _launch_1d(relu_kernel, x.size, x.reshape(-1), y.reshape(-1))
    return y


def relu_backward(dout: Any, y: Any) -> Any:
    """``dout * (y > 0)`` elementwise."""
    check_array("dout", dout, dtype=np.float32)
    dx = _xp(dout).empty_like(dout)
    if dx.size:
        _launch_1d(relu_backward_kernel, dx.size, dout.reshape(-1), y.reshape(-1), dx.reshape(-1))
    return dx


def add_bias(y: Any, b: Any) -> Any:
    """``y[i, :] += b`` in place for y (M, F), b (F,); returns y."""
    check_array("y", y, ndim=2, dtype=np.float32)
    check_array("b", b, ndim=1, dtype=np.float32)
    if y.shape[1] != b.shape[0]:
        raise ValueError(f"bias of length {b.shape[0]} cannot be added to rows of length {y.shape[1]}.")
    _launch_2d(add_bias_kernel, y.shape[0], y.shape[1], y, b)
    return y


def softmax_xent(logits: Any, labels: Any) -> tuple[float, Any]:
    """Mean cross-entropy loss of softmax(logits) and its gradient w.r.t. logits (N, K)."""
    check_array("logits", logits, ndim=2, dtype=np.float32)
    xp = _xp(logits)
    n = int(logits.shape[0])
    grad = xp.empty_like(logits)
    losses = xp.empty(n, dtype=np.float32)
    _launch_1d(softmax_xent_kernel, n, logits, xp.ascontiguousarray(labels.astype(np.int64)), grad, losses)
    return float(losses.mean()), grad


F4, F2, F1 = "float32[:, :, :, ::1]", "float32[:, ::1]", "float32[::1]"
PTX_SIGNATURES = [
    (im2col_kernel, f"void({F4}, {F2}, int64, int64, int64, int64, int64, int64)"),
    (col2im_kernel, f"void({F2}, {F4}, int64, int64, int64, int64, int64, int64)"),
    (maxpool_forward_kernel, f"void({F4}, {F4}, int32[:, :, :, ::1], int64, int64)"),
    (maxpool_backward_kernel, f"void({F4}, int32[:, :, :, ::1], {F4}, int64, int64)"),
    (relu_kernel, f"void({F1}, {F1})"),
    (relu_backward_kernel, f"void({F1}, {F1}, {F1})"),
    (add_bias_kernel, f"void({F2}, {F1})"),
    (softmax_xent_kernel, f"void({F2}, int64[::1], {F2}, float32[::1])"),
]
