"""Lesson 08 (backpropagation): reference answers. Each backward kernel *gathers*: one thread per
element it writes, so no two threads write one place and no atomics are needed."""

from __future__ import annotations

from numba import cuda, float32

__all__ = ["bias_grad_kernel", "linear_weight_grad_kernel", "maxpool2x2_backward_kernel", "relu_backward_kernel"]


@cuda.jit
def bias_grad_kernel(dout, db):
    o = cuda.grid(1)  # one thread per output feature: neighbouring threads read neighbouring columns
    if o < db.size:
        acc = float32(0.0)
        for n in range(dout.shape[0]):
            acc += dout[n, o]
        db[o] = acc


@cuda.jit
def linear_weight_grad_kernel(dout, x, dw):
    j, i = cuda.grid(2)  # dw[i, j]: i = output feature (row), j = input feature (column, x)
    if i < dw.shape[0] and j < dw.shape[1]:
        acc = float32(0.0)
        for n in range(x.shape[0]):
            acc += dout[n, i] * x[n, j]  # (dout^T x)[i, j]: a sum over the batch
        dw[i, j] = acc


@cuda.jit
def relu_backward_kernel(dout, y, dx):
    i = cuda.grid(1)
    if i < dx.size:
        dx[i] = dout[i] if y[i] > 0 else float32(0.0)  # the gradient passes where the input was positive


@cuda.jit
def maxpool2x2_backward_kernel(dout, arg, dx):
    j, i = cuda.grid(2)  # one thread per input pixel
    if i < dx.shape[0] and j < dx.shape[1]:
        oi = i // 2
        oj = j // 2
        g = float32(0.0)
        if oi < dout.shape[0] and oj < dout.shape[1] and arg[oi, oj] == (i % 2) * 2 + j % 2:
            g = dout[oi, oj]  # this pixel won its window
        dx[i, j] = g
