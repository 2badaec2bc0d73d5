"""The heavy operations of the CNN, behind one small interface with three backends.

* ``numpy``  - NumPy on the CPU (BLAS GEMMs, strided views, no Python loop over the batch).
* ``cupy``   - the same code on CuPy arrays: ``xp`` is taken from the inputs.
* ``kernels`` - the lab's own Numba CUDA kernels (:mod:`gpulab.kernels.nn_ops` and
  ``gpulab.kernels.matmul``); in simulator mode use tiny batches, for correctness only.

The layers call ``self.ops.<name>(...)``; what differs between backends is only who does the work.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..runtime import array_module

__all__ = ["ArrayOps", "KernelOps", "Ops", "BACKENDS", "get"]

BACKENDS = ("numpy", "cupy", "kernels")


def windows(x: Any, kh: int, kw: int, stride: int, ho: int, wo: int) -> Any:
    """A read-only strided view (N, C, Ho, Wo, kh, kw) of every kh x kw window of ``x`` (N, C, H, W).

    No data is copied: the view reuses x's memory with two extra axes (``as_strided``, which NumPy
    and CuPy both provide).
    """
    xp = array_module(x)
    sn, sc, sh, sw = x.strides
    return xp.lib.stride_tricks.as_strided(
        x, shape=(x.shape[0], x.shape[1], ho, wo, kh, kw), strides=(sn, sc, sh * stride, sw * stride, sh, sw)
    )


class ArrayOps:
    """NumPy/CuPy implementation: every function works on whichever ``xp`` its inputs come from."""

    name = "numpy"

    def matmul(self, a: Any, b: Any) -> Any:
        """``a @ b`` for 2-D float arrays (BLAS sgemm on NumPy, cuBLAS on CuPy)."""
        return a @ b

    def im2col(self, x: Any, kh: int, kw: int, stride: int, pad: int) -> tuple[Any, int, int]:
        """Unfold every receptive field of ``x`` (N, C, H, W) into one row.

        Returns ``cols`` of shape (N*Ho*Wo, kh*kw*C), row ``(n, i, j)`` holding the input patch under
        output pixel (i, j) of image n in (a, b, c) order, and ``Ho, Wo``. The loop it stands for::

            for n, i, j, a, b, c: cols[(n, i, j), (a, b, c)] = xpad[n, c, i*s + a, j*s + b]

        The work happens channels-last (N, H, W, C): each copied run is C contiguous floats, and the
        layers' outputs already live in that memory order (their NCHW shape is a transposed view).
        With few channels (a first layer: C = 1 grey, 3 RGB) those runs are too short, so the copy
        goes one kernel tap (a, b) at a time instead, in runs of Wo pixels (about 2.5x faster for C = 1).
        """
        xp = array_module(x)
        n, c, h, w = x.shape
        xh = x.transpose(0, 2, 3, 1)  # (N, H, W, C) view: contiguous when x came from a previous layer
        if pad:
            xh = xp.pad(xh, ((0, 0), (pad, pad), (pad, pad), (0, 0)))  # (N, H+2p, W+2p, C) copy
        else:
            xh = xp.ascontiguousarray(xh)  # (N, H, W, C)
        ho = (h + 2 * pad - kh) // stride + 1
        wo = (w + 2 * pad - kw) // stride + 1
        if c <= 4:
            cols = xp.empty((n, ho, wo, kh, kw, c), dtype=x.dtype)  # (N, Ho, Wo, kh, kw, C)
            for a in range(kh):
                for b in range(kw):
                    cols[:, :, :, a, b, :] = xh[:, a : a + stride * ho : stride, b : b + stride * wo : stride, :]
            return cols.reshape(n * ho * wo, kh * kw * c), ho, wo  # (N*Ho*Wo, kh*kw*C) view
        sn, sh, sw, sc = xh.strides
        win = xp.lib.stride_tricks.as_strided(
            xh, shape=(n, ho, wo, kh, kw, c), strides=(sn, sh * stride, sw * stride, sh, sw, sc)
        )  # (N, Ho, Wo, kh, kw, C) view of every window, no copy
        cols = win.reshape(n * ho * wo, kh * kw * c)  # (N*Ho*Wo, kh*kw*C) the one copy
        return cols, ho, wo

    def col2im(self, dcols: Any, x_shape: tuple[int, ...], kh: int, kw: int, stride: int, pad: int) -> Any:
        """The adjoint of :meth:`im2col`: add every row of ``dcols`` back onto the pixels it came from.

        A loop over the kh*kw kernel offsets (9 for 3x3), each one strided add over the whole batch.
        """
        xp = array_module(dcols)
        n, c, h, w = x_shape
        ho = (h + 2 * pad - kh) // stride + 1
        wo = (w + 2 * pad - kw) // stride + 1
        d = dcols.reshape(n, ho, wo, kh, kw, c)  # (N, Ho, Wo, kh, kw, C) view
        dx = xp.zeros((n, h + 2 * pad, w + 2 * pad, c), dtype=dcols.dtype)  # (N, Hp, Wp, C) channels-last
        for a in range(kh):
            for b in range(kw):
                dx[:, a : a + stride * ho : stride, b : b + stride * wo : stride, :] += d[:, :, :, a, b, :]
        dx = dx[:, pad : pad + h, pad : pad + w, :]  # (N, H, W, C) view without the padding
        return dx.transpose(0, 3, 1, 2)  # (N, C, H, W) view

    def conv_input_grad(self, d: Any, w: Any, x_shape: tuple[int, ...], stride: int, pad: int) -> Any:
        """dL/dx of a convolution from d = dL/dy (N*Ho*Wo, F) and the weights w (F, C, k, k).

        In general: ``dcols = d @ wmat`` then :meth:`col2im`. For stride 1 the same sum is done one
        kernel tap (a, b) at a time: ``dx[:, a:a+Ho, b:b+Wo, :] += (d @ w[:, :, a, b]).reshape(...)``,
        which adds whole contiguous rows instead of 9 interleaved slices (about 2x faster on a CPU).
        """
        xp = array_module(d)
        f, c, k, _ = w.shape
        n, _, h, wd = x_shape
        if stride != 1:
            dcols = self.matmul(d, w.transpose(0, 2, 3, 1).reshape(f, -1))  # (N*Ho*Wo, k*k*C)
            return self.col2im(dcols, x_shape, k, k, stride, pad)  # (N, C, H, W)
        ho, wo = h + 2 * pad - k + 1, wd + 2 * pad - k + 1
        dx = xp.zeros((n, h + 2 * pad, wd + 2 * pad, c), dtype=d.dtype)  # (N, Hp, Wp, C) channels-last
        for a in range(k):
            for b in range(k):
                g = self.matmul(d, w[:, :, a, b])  # (N*Ho*Wo, C): what tap (a, b) sends back
                dx[:, a : a + ho, b : b + wo, :] += g.reshape(n, ho, wo, c)
        return dx[:, pad : pad + h, pad : pad + wd, :].transpose(0, 3, 1, 2)  # (N, C, H, W) view

    def sum_rows(self, d: Any) -> Any:
        """``d.sum(axis=0)`` of d (M, F) -> (F,), the gradient of a bias, as one matrix-vector product.

        ``ones(M) @ d`` gives the same sums; for a tall, narrow d (M = N*Ho*Wo rows of F = 32 floats)
        BLAS's GEMV is about 10x faster on a CPU than NumPy's axis-0 reduction, which works row by row.
        """
        xp = array_module(d)
        return xp.ones(d.shape[0], dtype=d.dtype) @ d  # (F,)

    def add_bias(self, y: Any, b: Any) -> Any:
        """``y + b`` row-wise: y (M, F), b (F,)."""
        y += b
        return y

    def relu(self, x: Any) -> Any:
        xp = array_module(x)
        return xp.maximum(x, 0)

    def relu_backward(self, dout: Any, y: Any) -> Any:
        """Gradient of ReLU given its output ``y``: pass ``dout`` where y > 0."""
        return dout * (y > 0)

    def maxpool(self, x: Any, k: int, stride: int) -> tuple[Any, Any]:
        """Max over k x k windows. Returns ``(out, cache)``; 2x2 stride 2 uses strided slices."""
        xp = array_module(x)
        n, c, h, w = x.shape
        ho, wo = (h - k) // stride + 1, (w - k) // stride + 1
        xh = x.transpose(0, 2, 3, 1)  # (N, H, W, C) view
        if k == 2 and stride == 2 and h % 2 == 0 and w % 2 == 0 and xh.flags.c_contiguous:
            x6 = xh.reshape(n, ho, 2, wo, 2, c)  # (N, Ho, 2, Wo, 2, C) view: each 2x2 window on axes 2 and 4
            a, b, c_, d = x6[:, :, 0, :, 0], x6[:, :, 0, :, 1], x6[:, :, 1, :, 0], x6[:, :, 1, :, 1]  # (N, Ho, Wo, C)
            top, bottom = xp.maximum(a, b), xp.maximum(c_, d)  # (N, Ho, Wo, C) max of each window row
            out = xp.maximum(top, bottom)  # (N, Ho, Wo, C)
            # Which input won (ties go to the first, as in PyTorch), kept as a one-hot mask per window:
            right_top, right_bottom, lower = b > a, d > c_, bottom > top  # (N, Ho, Wo, C) each
            upper = ~lower
            won = xp.empty((n, ho, 2, wo, 2, c), dtype=bool)  # (N, Ho, 2, Wo, 2, C), laid out like x
            xp.logical_and(upper, ~right_top, out=won[:, :, 0, :, 0])
            xp.logical_and(upper, right_top, out=won[:, :, 0, :, 1])
            xp.logical_and(lower, ~right_bottom, out=won[:, :, 1, :, 0])
            xp.logical_and(lower, right_bottom, out=won[:, :, 1, :, 1])
            return out.transpose(0, 3, 1, 2), ("nhwc", won)  # (N, C, Ho, Wo) view
        if k == 2 and stride == 2:
            x = x[:, :, : 2 * ho, : 2 * wo]  # (N, C, 2Ho, 2Wo) view: odd edges are dropped
            out = xp.maximum(
                xp.maximum(x[:, :, 0::2, 0::2], x[:, :, 0::2, 1::2]),
                xp.maximum(x[:, :, 1::2, 0::2], x[:, :, 1::2, 1::2]),
            )  # (N, C, Ho, Wo)
            return out, (x, out)
        win = windows(x, k, k, stride, ho, wo)  # (N, C, Ho, Wo, k, k) view
        flat = win.reshape(n, c, ho, wo, k * k)  # (N, C, Ho, Wo, k*k) copy
        arg = flat.argmax(axis=-1)  # (N, C, Ho, Wo)
        out = xp.take_along_axis(flat, arg[..., None], axis=-1)[..., 0]  # (N, C, Ho, Wo)
        return out, (arg,)

    def maxpool_backward(self, dout: Any, cache: tuple, x_shape: tuple[int, ...], k: int, stride: int) -> Any:
        """Send each output gradient to the input that was the max of its window (first one on ties)."""
        xp = array_module(dout)
        n, c, h, w = x_shape
        ho, wo = dout.shape[2], dout.shape[3]
        if isinstance(cache[0], str):  # the reshape fast path: every input pixel lies in exactly one window
            _, won = cache  # (N, Ho, 2, Wo, 2, C) one-hot
            dh = dout.transpose(0, 2, 3, 1)  # (N, Ho, Wo, C) view
            dx6 = dh[:, :, None, :, None, :] * won  # (N, Ho, 2, Wo, 2, C): each gradient goes to its window's max
            return dx6.reshape(n, h, w, c).transpose(0, 3, 1, 2)  # (N, C, H, W) view
        dx = xp.zeros((n, h, w, c), dtype=dout.dtype).transpose(0, 3, 1, 2)  # (N, C, H, W) view, channels-last memory
        if k == 2 and stride == 2 and len(cache) == 2:
            x, out = cache
            taken = xp.zeros(out.shape, dtype=bool)  # (N, C, Ho, Wo): a window's max already routed
            for a in range(2):
                for b in range(2):
                    hit = (x[:, :, a::2, b::2] == out) & ~taken  # (N, C, Ho, Wo)
                    dx[:, :, a : 2 * ho : 2, b : 2 * wo : 2] = dout * hit
                    taken |= hit
            return dx
        (arg,) = cache
        for a in range(k):
            for b in range(k):
                hit = arg == a * k + b  # (N, C, Ho, Wo)
                dx[:, :, a : a + stride * ho : stride, b : b + stride * wo : stride] += dout * hit
        return dx

    def softmax_xent(self, logits: Any, labels: Any) -> tuple[float, Any]:
        """Mean cross-entropy of softmax(logits) and the gradient w.r.t. the logits.

        logits (N, K), labels (N,) integers. ``grad = (softmax - onehot) / N``.
        """
        xp = array_module(logits)
        n = logits.shape[0]
        z = logits - logits.max(axis=1, keepdims=True)  # (N, K), stable: max is 0
        e = xp.exp(z)  # (N, K)
        s = e.sum(axis=1, keepdims=True)  # (N, 1)
        rows = xp.arange(n)
        loss = float((xp.log(s[:, 0]) - z[rows, labels]).mean())
        grad = e / s  # (N, K) softmax
        grad[rows, labels] -= 1
        grad /= n
        return loss, grad


class KernelOps(ArrayOps):
    """The same operations through the lab's Numba CUDA kernels (GEMM, im2col, pooling, ReLU, softmax)."""

    name = "kernels"

    def __init__(self) -> None:
        from ..kernels import nn_ops  # imports numba.cuda: only when this backend is chosen

        self.k = nn_ops

    def matmul(self, a: Any, b: Any) -> Any:
        return self.k.gemm(_c(a), _c(b))

    def im2col(self, x: Any, kh: int, kw: int, stride: int, pad: int) -> tuple[Any, int, int]:
        return self.k.im2col(_c(x), kh, kw, stride, pad)

    def col2im(self, dcols: Any, x_shape: tuple[int, ...], kh: int, kw: int, stride: int, pad: int) -> Any:
        return self.k.col2im(_c(dcols), x_shape, kh, kw, stride, pad)

    def conv_input_grad(self, d: Any, w: Any, x_shape: tuple[int, ...], stride: int, pad: int) -> Any:
        f, _, k, _ = w.shape
        dcols = self.matmul(d, w.transpose(0, 2, 3, 1).reshape(f, -1))  # (N*Ho*Wo, k*k*C) GEMM kernel
        return self.col2im(dcols, x_shape, k, k, stride, pad)  # (N, C, H, W) gather kernel

    def add_bias(self, y: Any, b: Any) -> Any:
        return self.k.add_bias(_c(y), _c(b))

    def relu(self, x: Any) -> Any:
        return self.k.relu(_c(x))

    def relu_backward(self, dout: Any, y: Any) -> Any:
        return self.k.relu_backward(_c(dout), _c(y))

    def maxpool(self, x: Any, k: int, stride: int) -> tuple[Any, Any]:
        out, arg = self.k.maxpool(_c(x), k, stride)
        return out, (arg,)

    def maxpool_backward(self, dout: Any, cache: tuple, x_shape: tuple[int, ...], k: int, stride: int) -> Any:
        return self.k.maxpool_backward(_c(dout), cache[0], x_shape)

    def softmax_xent(self, logits: Any, labels: Any) -> tuple[float, Any]:
        return self.k.softmax_xent(_c(logits), _c(labels))


def _c(a: Any) -> Any:
    """A C-contiguous copy only when needed (kernels index arrays assuming row-major layout)."""
    xp = array_module(a)
    return xp.ascontiguousarray(a)


Ops = ArrayOps


def get(backend: str) -> ArrayOps:
    """The ops object of a backend name: ``numpy``, ``cupy`` or ``kernels``."""
    if backend in ("numpy", "cupy"):
        ops = ArrayOps()
        ops.name = backend
        return ops
    if backend == "kernels":
        return KernelOps()
    raise ValueError(f"unknown backend {backend!r}; choose one of: {', '.join(BACKENDS)}.")


def check_float_array(name: str, x: Any, ndim: int, what: str) -> None:
    """A learner-friendly check of a layer input: an array, ``ndim``-D, floating point, finite."""
    if not hasattr(x, "shape") or not hasattr(x, "dtype"):
        raise TypeError(f"{name} expects an array {what}, but got {type(x).__name__}. Use numpy.asarray(x).")
    if x.ndim != ndim:
        raise ValueError(f"{name} expects a {ndim}-D array {what}, but got shape {tuple(x.shape)}.")
    if not np.issubdtype(np.dtype(x.dtype), np.floating):
        raise TypeError(
            f"{name} expects floating-point input, but got dtype {np.dtype(x.dtype).name}. "
            "Convert with x.astype(numpy.float32) (and scale images to [0, 1])."
        )
