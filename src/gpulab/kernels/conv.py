"""Direct 2-D convolution (lesson 07): one thread per output element, loops over channels and taps.

NumPy reference (:func:`conv2d_reference`)::

    out[n, f, i, j] = b[f] + sum_{c, a, d} xpad[n, c, i*s + a, j*s + d] * W[f, c, a, d]

The im2col + GEMM formulation of the same operation lives in :mod:`gpulab.kernels.nn_ops` and
:class:`gpulab.nn.Conv2d`; the lesson compares the two.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numba import cuda

from ._launch import allocate_like, blocks_for, check_array, check_launch, conv_out_size
from .grid_stride import device_args

__all__ = ["PTX_SIGNATURES", "conv2d_direct", "conv2d_direct_kernel", "conv2d_flops", "conv2d_reference"]


@cuda.jit
def conv2d_direct_kernel(x, w, b, out, stride, pad):
    t = cuda.grid(1)  # one thread per output element (n, f, i, j)
    N, F, HO, WO = out.shape[0], out.shape[1], out.shape[2], out.shape[3]
    C, H, W = x.shape[1], x.shape[2], x.shape[3]
    K = w.shape[2]
    if t < N * F * HO * WO:  # bounds guard: the last block may have spare threads
        n = t // (F * HO * WO)
        f = (t // (HO * WO)) % F
        i = (t // WO) % HO
        j = t % WO
        acc = b[f]
        for c in range(C):
            for a in range(K):
                h = i * stride + a - pad
                if 0 <= h < H:  # taps that fall on the zero padding contribute nothing
                    for d in range(K):
                        col = j * stride + d - pad
                        if 0 <= col < W:
                            acc += x[n, c, h, col] * w[f, c, a, d]  # 2 global loads per multiply-add
        out[n, f, i, j] = acc


def conv2d_reference(x: np.ndarray, w: np.ndarray, b: np.ndarray, stride: int = 1, pad: int = 0) -> np.ndarray:
    """The convolution in NumPy (float64 accumulation), for checking the kernels."""
    x, w, b = np.asarray(x, np.float64), np.asarray(w, np.float64), np.asarray(b, np.float64)
    n, c, h, wd = x.shape
    f, c2, k, _ = w.shape
    if c != c2:
        raise ValueError(f"x has {c} channels but w expects {c2}.")
    xp = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    ho, wo = conv_out_size(h, k, stride, pad), conv_out_size(wd, k, stride, pad)
    out = np.zeros((n, f, ho, wo)) + b[None, :, None, None]
    for a in range(k):
        for d in range(k):
            patch = xp[:, :, a : a + stride * ho : stride, d : d + stride * wo : stride]  # (N, C, Ho, Wo)
            out += np.einsum("nchw,fc->nfhw", patch, w[:, :, a, d])
    return out.astype(np.float32)


def conv2d_flops(x_shape: tuple[int, ...], w_shape: tuple[int, ...], stride: int = 1, pad: int = 0) -> int:
    """2 * (outputs) * (C * k * k): one multiply and one add per tap."""
    n, c, h, wd = x_shape
    f, _, k, _ = w_shape
    ho, wo = conv_out_size(h, k, stride, pad), conv_out_size(wd, k, stride, pad)
    return 2 * n * f * ho * wo * c * k * k


def conv2d_direct(x: Any, w: Any, b: Any, *, stride: int = 1, pad: int = 0, threads_per_block: int = 128) -> Any:
    """Convolve x (N, C, H, W) with w (F, C, k, k) plus bias b (F,), all float32, one thread per output."""
    check_array("x", x, ndim=4, dtype=np.float32)
    check_array("w", w, ndim=4, dtype=np.float32)
    check_array("b", b, ndim=1, dtype=np.float32)
    n, c, h, wd = (int(s) for s in x.shape)
    f, c2, k, k2 = (int(s) for s in w.shape)
    if c != c2 or k != k2:
        raise ValueError(f"w must be (F, C, k, k) with C = {c} (x's channels), got shape {tuple(w.shape)}.")
    if int(b.shape[0]) != f:
        raise ValueError(f"b must have one value per filter ({f}), got shape {tuple(b.shape)}.")
    if stride < 1 or pad < 0 or h + 2 * pad < k or wd + 2 * pad < k:
        raise ValueError(f"need stride >= 1, pad >= 0 and a {k}x{k} kernel that fits {h}x{wd} images with pad {pad}.")
    ho, wo = conv_out_size(h, k, stride, pad), conv_out_size(wd, k, stride, pad)
    out = allocate_like(x, (n, f, ho, wo), np.float32)  # a Numba device array stays on the device
    blocks = blocks_for(out.size, threads_per_block)
    check_launch(blocks, threads_per_block)
    conv2d_direct_kernel[blocks, threads_per_block](*device_args(x, w, b, out, stride, pad))
    return out


_F4 = "float32[:, :, :, :]"
PTX_SIGNATURES = [
    (conv2d_direct_kernel, f"void({_F4}, {_F4}, float32[:], {_F4}, int64, int64)"),
]
