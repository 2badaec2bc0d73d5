"""Lesson 07 (convolution): reference answers. 2-D kernels use ``j, i = cuda.grid(2)``: x (the fastest
thread index) runs along the last, contiguous axis, so neighbouring threads touch neighbouring addresses."""

from __future__ import annotations

from numba import cuda, float32

__all__ = ["conv2d_all_filters_kernel", "conv2d_single_kernel", "im2col_single_kernel", "maxpool2x2_kernel"]

K = 3  # window size (K x K) in lesson 07's exercises


@cuda.jit
def conv2d_single_kernel(x, w, out):
    j, i = cuda.grid(2)  # j: output column (x, fastest), i: output row
    if i < out.shape[0] and j < out.shape[1]:
        acc = float32(0.0)
        for a in range(w.shape[0]):
            for b in range(w.shape[1]):
                acc += x[i + a, j + b] * w[a, b]  # the window's top-left is (i, j): no padding
        out[i, j] = acc


@cuda.jit
def im2col_single_kernel(x, cols):
    q, r = cuda.grid(2)  # q: column of cols = tap a*K + b (fastest), r: row = output position i*Wo + j
    wo = x.shape[1] - K + 1
    if r < cols.shape[0] and q < cols.shape[1]:
        i = r // wo
        j = r % wo
        a = q // K
        b = q % K
        cols[r, q] = x[i + a, j + b]


@cuda.jit
def maxpool2x2_kernel(x, out):
    j, i = cuda.grid(2)
    if i < out.shape[0] and j < out.shape[1]:
        m = max(x[2 * i, 2 * j], x[2 * i, 2 * j + 1])
        m = max(m, x[2 * i + 1, 2 * j])
        out[i, j] = max(m, x[2 * i + 1, 2 * j + 1])


@cuda.jit
def conv2d_all_filters_kernel(x, w, out):
    j, i = cuda.grid(2)  # one thread per output pixel, for all F filters
    if i < out.shape[1] and j < out.shape[2]:
        win = cuda.local.array((K, K), float32)  # the window, in registers
        for a in range(K):
            for b in range(K):
                win[a, b] = x[i + a, j + b]  # each value of the window loaded once
        for f in range(w.shape[0]):
            acc = float32(0.0)
            for a in range(K):
                for b in range(K):
                    acc += win[a, b] * w[f, a, b]
            out[f, i, j] = acc
