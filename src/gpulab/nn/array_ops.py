"""The array backends of the op contract, written once: ``numpy`` and ``cupy``.

:class:`ArrayOps` implements every op of :class:`gpulab.nn.ops.Ops` once, against ``xp`` (NumPy or
CuPy, taken from the inputs). :class:`NumpyOps` and :class:`CupyOps` are that one implementation
under each backend's name and add no op of their own, so the two array worlds cannot drift.

Layout: activations live channels-last in memory, (N, H, W, C), and the layers see them through
(N, C, H, W) transposed views, so im2col copies runs of C contiguous floats and a convolution's GEMM
writes its output (N*Ho*Wo, F) directly in that layout.
"""

from __future__ import annotations

from typing import Any

from ..runtime import array_module
from .dropout import host_dropout
from .ops import Ops, check_labels, conv_out_hw, windows

__all__ = ["ArrayOps", "CupyOps", "NumpyOps"]


def _padded_nhwc(x: Any, pad: int) -> Any:
    """x (N, C, H, W) -> (N, H+2p, W+2p, C) C-contiguous, zero border (one copy; none if already so)."""
    xp = array_module(x)
    n, c, h, w = x.shape
    xh = x.transpose(0, 2, 3, 1)  # (N, H, W, C) view: contiguous when x came from a previous layer
    if not pad:
        return xp.ascontiguousarray(xh)
    out = xp.zeros((n, h + 2 * pad, w + 2 * pad, c), dtype=x.dtype)  # (N, Hp, Wp, C)
    out[:, pad : pad + h, pad : pad + w, :] = xh
    return out


class ArrayOps(Ops):
    """Every op as array code over ``xp``: NumPy on the CPU (BLAS), CuPy on the GPU (cuBLAS)."""

    name = "array"

    def matmul(self, a: Any, b: Any) -> Any:
        """``a @ b`` (BLAS sgemm on NumPy, cuBLAS on CuPy); transposed views need no copy."""
        return a @ b

    def im2col(self, x: Any, kh: int, kw: int, stride: int, pad: int) -> tuple[Any, int, int]:
        """Channels-last unfolding. In (N, Hp, Wp, C) memory a window's row of kw taps is kw*C
        contiguous floats, so each copied run is kw*C long. With few channels (a first layer) the
        copy goes one tap (a, b) at a time instead, in runs of Wo."""
        xp = array_module(x)
        n, c, h, w = x.shape
        ho, wo = conv_out_hw(h, w, kh, kw, stride, pad)
        xh = _padded_nhwc(x, pad)  # (N, Hp, Wp, C)
        if c <= 4:
            cols = xp.empty((n, ho, wo, kh, kw, c), dtype=x.dtype)  # (N, Ho, Wo, kh, kw, C)
            for a in range(kh):
                for b in range(kw):
                    cols[:, :, :, a, b, :] = xh[:, a : a + stride * ho : stride, b : b + stride * wo : stride, :]
            return cols.reshape(n * ho * wo, kh * kw * c), ho, wo  # (N*Ho*Wo, kh*kw*C) view
        sn, sh, sw, sc = xh.strides
        win = xp.lib.stride_tricks.as_strided(
            xh, shape=(n, ho, wo, kh, kw * c), strides=(sn, sh * stride, sw * stride, sh, sc)
        )  # (N, Ho, Wo, kh, kw*C) view of every window, no copy
        return win.reshape(n * ho * wo, kh * kw * c), ho, wo  # (N*Ho*Wo, kh*kw*C) the one copy

    def col2im(self, dcols: Any, x_shape: tuple[int, ...], kh: int, kw: int, stride: int, pad: int) -> Any:
        """A loop over the kh*kw taps, each one strided add over the whole batch (channels-last)."""
        xp = array_module(dcols)
        n, c, h, w = x_shape
        ho, wo = conv_out_hw(h, w, kh, kw, stride, pad)
        d = dcols.reshape(n, ho, wo, kh, kw, c)  # (N, Ho, Wo, kh, kw, C) view
        dx = xp.zeros((n, h + 2 * pad, w + 2 * pad, c), dtype=dcols.dtype)  # (N, Hp, Wp, C)
        for a in range(kh):
            for b in range(kw):
                dx[:, a : a + stride * ho : stride, b : b + stride * wo : stride, :] += d[:, :, :, a, b, :]
        return dx[:, pad : pad + h, pad : pad + w, :].transpose(0, 3, 1, 2)  # (N, C, H, W) view

    def conv_input_grad(self, d: Any, w: Any, x_shape: tuple[int, ...], stride: int, pad: int) -> Any:
        """For stride 1, one kernel tap (a, b) at a time: ``dx[:, a:a+Ho, b:b+Wo, :] += d @ w[:, :, a, b]``,
        adding whole contiguous rows instead of k*k interleaved slices (about 2x faster on a CPU)."""
        xp = array_module(d)
        f, c, k, _ = w.shape
        n, _, h, wd = x_shape
        if stride != 1:
            dcols = d @ w.transpose(0, 2, 3, 1).reshape(f, -1)  # (N*Ho*Wo, k*k*C)
            return self.col2im(dcols, x_shape, k, k, stride, pad)  # (N, C, H, W)
        ho, wo = conv_out_hw(h, wd, k, k, 1, pad)
        dx = xp.zeros((n, h + 2 * pad, wd + 2 * pad, c), dtype=d.dtype)  # (N, Hp, Wp, C) channels-last
        for a in range(k):
            for b in range(k):
                g = d @ w[:, :, a, b]  # (N*Ho*Wo, C): what tap (a, b) sends back
                dx[:, a : a + ho, b : b + wo, :] += g.reshape(n, ho, wo, c)
        return dx[:, pad : pad + h, pad : pad + wd, :].transpose(0, 3, 1, 2)  # (N, C, H, W) view

    def conv_weight_grad(self, d: Any, cols: Any) -> Any:
        """``d.T @ cols``: (F, N*Ho*Wo) @ (N*Ho*Wo, k*k*C)."""
        return d.T @ cols

    def add_bias(self, y: Any, b: Any) -> Any:
        y += b
        return y

    def sum_rows(self, d: Any) -> Any:
        """``ones(M) @ d``: for a tall, narrow d BLAS's GEMV is about 10x faster than ``d.sum(axis=0)``."""
        xp = array_module(d)
        return xp.ones(d.shape[0], dtype=d.dtype) @ d  # (F,)

    def relu(self, x: Any) -> Any:
        return array_module(x).maximum(x, 0)

    def relu_backward(self, dout: Any, y: Any) -> Any:
        return dout * (y > 0)

    def maxpool(self, x: Any, k: int, stride: int) -> tuple[Any, Any]:
        """2x2 stride 2 on even channels-last maps: a reshape and a one-hot mask; otherwise argmax."""
        xp = array_module(x)
        n, c, h, w = x.shape
        ho, wo = conv_out_hw(h, w, k, k, stride, 0)
        xh = x.transpose(0, 2, 3, 1)  # (N, H, W, C) view
        if k == 2 and stride == 2 and h % 2 == 0 and w % 2 == 0 and xh.flags.c_contiguous:
            x6 = xh.reshape(n, ho, 2, wo, 2, c)  # (N, Ho, 2, Wo, 2, C) view: each 2x2 window on axes 2 and 4
            a, b, c_, d = x6[:, :, 0, :, 0], x6[:, :, 0, :, 1], x6[:, :, 1, :, 0], x6[:, :, 1, :, 1]  # (N, Ho, Wo, C)
            top, bottom = xp.maximum(a, b), xp.maximum(c_, d)
            right_top, right_bottom, lower = b > a, d > c_, bottom > top  # ties go to the first, as in PyTorch
            out = xp.maximum(top, bottom, out=top)  # (N, Ho, Wo, C)
            won = xp.empty((n, ho, 2, wo, 2, c), dtype=bool)  # (N, Ho, 2, Wo, 2, C) one-hot, laid out like x
            xp.logical_or(right_top, lower, out=won[:, :, 0, :, 0])
            xp.logical_not(won[:, :, 0, :, 0], out=won[:, :, 0, :, 0])  # top left: neither right nor lower
            xp.greater(right_top, lower, out=won[:, :, 0, :, 1])  # on bools, p > q is p and not q
            xp.greater(lower, right_bottom, out=won[:, :, 1, :, 0])
            xp.logical_and(lower, right_bottom, out=won[:, :, 1, :, 1])
            return out.transpose(0, 3, 1, 2), ("nhwc", won)  # (N, C, Ho, Wo) view
        win = windows(x, k, k, stride, ho, wo)  # (N, C, Ho, Wo, k, k) view
        flat = win.reshape(n, c, ho, wo, k * k)  # (N, C, Ho, Wo, k*k) copy
        arg = flat.argmax(axis=-1).astype(xp.int32)  # (N, C, Ho, Wo): first maximum
        out = xp.take_along_axis(flat, arg[..., None].astype(xp.int64), axis=-1)[..., 0]  # (N, C, Ho, Wo)
        return out, (arg,)

    def maxpool_backward(self, dout: Any, cache: Any, x_shape: tuple[int, ...], k: int, stride: int) -> Any:
        xp = array_module(dout)
        n, c, h, w = x_shape
        ho, wo = conv_out_hw(h, w, k, k, stride, 0)
        if isinstance(cache[0], str):  # the reshape fast path: every input pixel lies in exactly one window
            won = cache[1]  # (N, Ho, 2, Wo, 2, C) one-hot
            dh = dout.transpose(0, 2, 3, 1)  # (N, Ho, Wo, C) view
            dx6 = dh[:, :, None, :, None, :] * won  # (N, Ho, 2, Wo, 2, C)
            return dx6.reshape(n, h, w, c).transpose(0, 3, 1, 2)  # (N, C, H, W) view
        (arg,) = cache  # (N, C, Ho, Wo) position a*k + b of each window's maximum
        dx = xp.zeros((n, h, w, c), dtype=dout.dtype).transpose(0, 3, 1, 2)  # (N, C, H, W) view, channels-last
        for a in range(k):
            for b in range(k):
                hit = arg == a * k + b  # (N, C, Ho, Wo)
                dx[:, :, a : a + stride * ho : stride, b : b + stride * wo : stride] += dout * hit
        return dx

    def softmax_xent(self, logits: Any, labels: Any) -> tuple[Any, Any]:
        """The loss stays a 0-d value of ``xp`` (on a GPU: not read, so the step goes on without waiting)."""
        xp = array_module(logits)
        n, classes = logits.shape
        check_labels(labels, n, classes)
        z = logits - logits.max(axis=1, keepdims=True)  # (N, K), stable: max is 0
        e = xp.exp(z)
        s = e.sum(axis=1, keepdims=True)  # (N, 1)
        rows = xp.arange(n)
        loss = (xp.log(s[:, 0]) - z[rows, labels]).mean()  # 0-d
        grad = e / s  # (N, K) softmax
        grad[rows, labels] -= 1
        grad /= n
        return loss, grad

    def adam_update(self, p: Any, g: Any, m: Any, v: Any, lr_t: float, b1: float, b2: float, eps_t: float) -> None:
        """One scratch array reused in place (fewer passes over memory than the textbook formula)."""
        xp = array_module(p)
        m *= b1
        m += (1.0 - b1) * g
        u = xp.multiply(g, g)
        u *= 1.0 - b2
        v *= b2
        v += u
        xp.sqrt(v, out=u)
        u += eps_t
        xp.divide(m, u, out=u)
        u *= lr_t
        p -= u

    def sgd_update(self, p: Any, g: Any, v: Any, lr: float, momentum: float, weight_decay: float) -> None:
        v *= momentum
        v += g
        if weight_decay:
            v += weight_decay * p
        p -= lr * v

    def dropout_forward(self, x: Any, p: float, states: Any) -> Any:
        """NumPy: the host replay of the kernel's draws (:func:`gpulab.nn.dropout.host_dropout`); CuPy: the
        kernel itself on the CuPy arrays, so the states never leave the GPU and the mask is the kernels'."""
        if array_module(x).__name__ == "numpy":
            return host_dropout(x, p, states)
        from ..kernels import nn_ops  # numba.cuda: only for CuPy arrays (gpu mode)

        return nn_ops.dropout(x, p, states)

    def dropout_backward(self, dout: Any, p: float, states: Any) -> Any:
        """The forward's function of ``dout``: the same draws from the forward's saved states, the same scale."""
        return self.dropout_forward(dout, p, states)


class NumpyOps(ArrayOps):
    """:class:`ArrayOps` on NumPy arrays on the CPU (BLAS GEMMs, strided views)."""

    name = "numpy"


class CupyOps(ArrayOps):
    """:class:`ArrayOps` on CuPy arrays on the GPU (cuBLAS GEMMs, CuPy elementwise kernels)."""

    name = "cupy"
