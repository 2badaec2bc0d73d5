"""The CUDA kernels of the CNN engine (backend ``"kernels"``); launchers in :mod:`gpulab.kernels.nn_ops`.

Every kernel is a **grid-stride loop**, correct for any launch (see :mod:`gpulab.kernels.grid_stride`).
No atomics: where many outputs add into one input (col2im, max-pool backward) each thread *gathers*
the contributions to its own input pixel, so results are deterministic.

Arithmetic is float32, as the arrays: in Numba a float literal is a float64, and float64 wins (``acc = 0.0`` then
``acc += a[i, k] * b[k, j]`` adds in float64, at 1/32 or 1/64 of the float32 rate on a T4 or L4), so constants are
written ``float32(0.0)``. The float64 left in the compiled PTX is numba-cuda's own: ``xoroshiro128p_uniform_float32``
(dropout) converts its 64-bit draw through float64.
"""

from __future__ import annotations

import math

from numba import cuda, float32
from numba.cuda.random import xoroshiro128p_uniform_float32

__all__ = [
    "PTX_SIGNATURES",
    "adam_kernel",
    "add_bias_kernel",
    "col2im_kernel",
    "dropout_kernel",
    "gemm_kernel",
    "im2col_kernel",
    "maxpool_backward_kernel",
    "maxpool_kernel",
    "relu_backward_kernel",
    "relu_kernel",
    "sgd_kernel",
    "softmax_xent_kernel",
    "sum_rows_kernel",
    "sum_rows_partials_kernel",
]

# ------------------------------------------------------------------------------------- kernels


@cuda.jit
def gemm_kernel(a, b, c):
    j0, i0 = cuda.grid(2)  # j: column of c (fastest), i: row
    sj, si = cuda.gridsize(2)
    M, K, N = a.shape[0], a.shape[1], b.shape[1]
    for i in range(i0, M, si):
        for j in range(j0, N, sj):
            acc = float32(0.0)
            for k in range(K):
                acc += a[i, k] * b[k, j]
            c[i, j] = acc


@cuda.jit
def im2col_kernel(x, cols, kh, kw, stride, pad, ho, wo):
    q0, r0 = cuda.grid(2)  # q: column (a, b, c) - fastest, so a warp writes along a row; r: row (n, i, j)
    sq, sr = cuda.gridsize(2)
    C, H, W = x.shape[1], x.shape[2], x.shape[3]
    for r in range(r0, cols.shape[0], sr):
        n = r // (ho * wo)
        i = (r // wo) % ho
        j = r % wo
        for q in range(q0, cols.shape[1], sq):
            a = q // (kw * C)
            b = (q // C) % kw
            c = q % C
            ih = i * stride + a - pad  # input row under this tap (may fall in the zero padding)
            iw = j * stride + b - pad
            v = float32(0.0)
            if ih >= 0 and ih < H and iw >= 0 and iw < W:
                v = x[n, c, ih, iw]
            cols[r, q] = v


@cuda.jit
def col2im_kernel(dcols, dx, kh, kw, stride, pad, ho, wo):
    t0 = cuda.grid(1)  # one input pixel (n, c, h, w) per step: it gathers, so no two threads write one place
    N, C, H, W = dx.shape[0], dx.shape[1], dx.shape[2], dx.shape[3]
    for t in range(t0, N * C * H * W, cuda.gridsize(1)):
        n = t // (C * H * W)
        c = (t // (H * W)) % C
        h = (t // W) % H
        w = t % W
        acc = float32(0.0)
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
def add_bias_kernel(y, b):
    j0, i0 = cuda.grid(2)  # j: feature (fastest), i: row
    sj, si = cuda.gridsize(2)
    for i in range(i0, y.shape[0], si):
        for j in range(j0, y.shape[1], sj):
            y[i, j] += b[j]


@cuda.jit
def sum_rows_kernel(d, out):
    j0 = cuda.grid(1)  # one column per step: neighbouring threads read neighbouring addresses of a row
    for j in range(j0, d.shape[1], cuda.gridsize(1)):
        acc = float32(0.0)  # float32 (0.0 alone is a float64 in Numba, and so would be every addition)
        for i in range(d.shape[0]):
            acc += d[i, j]
        out[j] = acc


@cuda.jit
def sum_rows_partials_kernel(d, partials):  # pass 1 of sum_rows on a GPU; pass 2 is sum_rows_kernel on partials
    j0, i0 = cuda.grid(2)  # j: column (fastest: a warp reads consecutive addresses of a row), i: chunk of rows
    sj, si = cuda.gridsize(2)
    M, F, P = d.shape[0], d.shape[1], partials.shape[0]
    rows = (M + P - 1) // P  # chunk i is rows i*rows ... (i+1)*rows - 1 (the last chunks may be short or empty)
    for i in range(i0, P, si):
        for j in range(j0, F, sj):
            # float32, like the course's other accumulators: a chunk adds ~100 rows and pass 2 adds <= 1,024
            # partials, so rounding grows with ~1,100 additions instead of M's 100,352 in one loop (the
            # full-size float64 comparison is in tests/test_nn_sum_rows.py).
            acc = float32(0.0)
            for r in range(i * rows, min((i + 1) * rows, M)):
                acc += d[r, j]
            partials[i, j] = acc


@cuda.jit
def relu_kernel(x, y):
    for i in range(cuda.grid(1), y.size, cuda.gridsize(1)):
        y[i] = max(x[i], float32(0.0))


@cuda.jit
def relu_backward_kernel(dout, y, dx):
    for i in range(cuda.grid(1), dx.size, cuda.gridsize(1)):
        dx[i] = dout[i] if y[i] > float32(0.0) else float32(0.0)


@cuda.jit
def maxpool_kernel(x, out, arg, k, stride):
    N, C, HO, WO = out.shape[0], out.shape[1], out.shape[2], out.shape[3]
    for t in range(cuda.grid(1), N * C * HO * WO, cuda.gridsize(1)):  # one output (n, c, i, j) per step
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
    N, C, H, W = dx.shape[0], dx.shape[1], dx.shape[2], dx.shape[3]
    HO, WO = dout.shape[2], dout.shape[3]
    for t in range(cuda.grid(1), N * C * H * W, cuda.gridsize(1)):  # one input pixel per step: gathers
        n = t // (C * H * W)
        c = (t // (H * W)) % C
        h = (t // W) % H
        w = t % W
        acc = float32(0.0)
        for a in range(k):  # every window (i, j) whose tap (a, b) is this pixel
            ii = h - a
            if ii >= 0 and ii % stride == 0 and ii // stride < HO:
                for b in range(k):
                    jj = w - b
                    if jj >= 0 and jj % stride == 0 and jj // stride < WO:
                        if arg[n, c, ii // stride, jj // stride] == a * k + b:
                            acc += dout[n, c, ii // stride, jj // stride]
        dx[n, c, h, w] = acc


@cuda.jit
def softmax_xent_kernel(logits, labels, grad, losses):
    N, K = logits.shape[0], logits.shape[1]
    for r in range(cuda.grid(1), N, cuda.gridsize(1)):  # one row (sample) per step: K is small (10 classes)
        m = logits[r, 0]
        for k in range(1, K):
            m = max(m, logits[r, k])
        s = float32(0.0)
        for k in range(K):
            s += math.exp(logits[r, k] - m)
        y = labels[r]
        losses[r] = math.log(s) - (logits[r, y] - m)
        for k in range(K):
            p = math.exp(logits[r, k] - m) / s
            if k == y:
                p -= float32(1.0)
            grad[r, k] = p / float32(N)  # float32(N): an int64 divisor would make the division float64


@cuda.jit
def adam_kernel(p, g, m, v, lr_t, b1, b2, eps_t):
    for i in range(cuda.grid(1), p.size, cuda.gridsize(1)):
        m[i] = b1 * m[i] + (float32(1.0) - b1) * g[i]  # b1, b2: float32 arguments (the launcher casts them)
        v[i] = b2 * v[i] + (float32(1.0) - b2) * g[i] * g[i]
        p[i] -= lr_t * m[i] / (math.sqrt(v[i]) + eps_t)


@cuda.jit
def sgd_kernel(p, g, v, lr, momentum, weight_decay):
    for i in range(cuda.grid(1), p.size, cuda.gridsize(1)):
        gi = g[i] + weight_decay * p[i]
        v[i] = momentum * v[i] + gi
        p[i] -= lr * v[i]


@cuda.jit
def dropout_kernel(x, states, p, y):  # lab 08's dropout: the forward (x -> y) and, given dy -> dx, the backward
    tid = cuda.grid(1)  # one generator state per thread: launched with exactly len(states) threads
    for i in range(tid, x.size, cuda.gridsize(1)):  # grid-stride: element i gets draw i // T of stream i % T
        u = xoroshiro128p_uniform_float32(states, tid)  # the next number of this thread's stream (advances it)
        if u >= p:
            y[i] = x[i] / (float32(1.0) - p)  # kept, scaled by 1 / (1 - p) (inverted dropout)
        else:
            y[i] = float32(0.0)


F4, F2, F1 = "float32[:, :, :, ::1]", "float32[:, ::1]", "float32[::1]"
PTX_SIGNATURES = [
    (gemm_kernel, f"void({F2}, {F2}, {F2})"),
    (im2col_kernel, f"void({F4}, {F2}, int64, int64, int64, int64, int64, int64)"),
    (col2im_kernel, f"void({F2}, {F4}, int64, int64, int64, int64, int64, int64)"),
    (add_bias_kernel, f"void({F2}, {F1})"),
    (sum_rows_kernel, f"void({F2}, {F1})"),
    (sum_rows_partials_kernel, f"void({F2}, {F2})"),
    (maxpool_kernel, f"void({F4}, {F4}, int32[:, :, :, ::1], int64, int64)"),
    (maxpool_backward_kernel, f"void({F4}, int32[:, :, :, ::1], {F4}, int64, int64)"),
    (relu_kernel, f"void({F1}, {F1})"),
    (relu_backward_kernel, f"void({F1}, {F1}, {F1})"),
    (softmax_xent_kernel, f"void({F2}, int64[::1], {F2}, float32[::1])"),
    (adam_kernel, f"void({F1}, {F1}, {F1}, {F1}, float32, float32, float32, float32)"),
    (sgd_kernel, f"void({F1}, {F1}, {F1}, float32, float32, float32)"),
    (dropout_kernel, f"void({F1}, Record.make_c_struct([('s0', uint64), ('s1', uint64)])[:], float32, {F1})"),
]
