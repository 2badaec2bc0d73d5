"""Reference answers of the exercises of lessons 05-10 (the exercises themselves: :mod:`.ex_05_10`).

Nothing here is imported by a lesson's text: a learner sees an answer only by asking for it with
``gpulab.lessons.reveal(lesson, name)``; cells after an exercise go on with it through
``gpulab.lessons.or_reference``. A test checks that each answer is exactly the ``### BEGIN SOLUTION``
region of its lesson, and ``PTX_SIGNATURES`` are compiled by the tests. 2-D kernels use
``j, i = cuda.grid(2)``: x, the fastest thread index, runs along the last, contiguous axis.
"""

from __future__ import annotations

import math

from numba import cuda, float32, int32
from numba.cuda.random import xoroshiro128p_uniform_float32

__all__ = [
    "BINS",
    "K",
    "PTX_SIGNATURES",
    "TPB",
    "axpy_elementwise_spec",
    "bias_grad_kernel",
    "block_max_kernel",
    "confusion_kernel",
    "conv2d_all_filters_kernel",
    "conv2d_single_kernel",
    "dot_atomic_kernel",
    "dropout_forward_kernel",
    "histogram_privatized_kernel",
    "im2col_single_kernel",
    "leaky_relu_kernel",
    "linear_weight_grad_kernel",
    "maxpool2x2_backward_kernel",
    "maxpool2x2_kernel",
    "relu_backward_kernel",
    "scan_block_kernel",
    "softplus",
    "squared_diff_kernel",
    "sum_two_per_thread_kernel",
    "train_step",
    "unscale_kernel",
    "warp_sum_kernel",
]

TPB = 128  # threads per block in the 1-D exercises of lessons 05 and 06 (a constant: shared.array needs one)
BINS = 256  # bins of lesson 05's histogram (a constant: its shared copy needs one); more than TPB
K = 3  # window size (K x K) in lesson 07's exercises


# --- 05 · reductions, atomics, scans ------------------------------------------------------------------


@cuda.jit
def dot_atomic_kernel(a, b, total):
    i = cuda.grid(1)
    if i < a.size:
        cuda.atomic.add(total, 0, a[i] * b[i])  # one indivisible read-add-write of total[0]


@cuda.jit
def block_max_kernel(x, partial):
    buf = cuda.shared.array(TPB, float32)
    tx = cuda.threadIdx.x
    i = cuda.grid(1)
    buf[tx] = x[i] if i < x.size else float32(-math.inf)  # padding must not win a max
    cuda.syncthreads()  # wait until the block's TPB values are in buf
    s = TPB // 2
    while s > 0:
        if tx < s:
            buf[tx] = max(buf[tx], buf[tx + s])
        cuda.syncthreads()  # wait until this level of the tree is complete
        s //= 2
    if tx == 0:
        partial[cuda.blockIdx.x] = buf[0]


@cuda.jit
def sum_two_per_thread_kernel(x, partial):
    buf = cuda.shared.array(TPB, float32)
    tx = cuda.threadIdx.x
    i = cuda.blockIdx.x * (2 * TPB) + tx  # this block covers 2 * TPB elements
    v = float32(0.0)
    if i < x.size:
        v = x[i]
    if i + TPB < x.size:
        v += x[i + TPB]  # the first addition happens while loading
    buf[tx] = v
    cuda.syncthreads()  # wait until the block's TPB sums of two are in buf
    s = TPB // 2
    while s > 0:
        if tx < s:
            buf[tx] += buf[tx + s]
        cuda.syncthreads()  # wait until this level of the tree is complete
        s //= 2
    if tx == 0:
        partial[cuda.blockIdx.x] = buf[0]


@cuda.jit
def warp_sum_kernel(x, partial):
    warp_sums = cuda.shared.array(32, float32)  # one slot per warp (a block has at most 32 warps)
    tx = cuda.threadIdx.x
    lane = tx % 32
    warp = tx // 32
    i = cuda.grid(1)
    v = x[i] if i < x.size else float32(0.0)  # no return before the shuffles: every lane must reach them
    offset = 16
    while offset > 0:
        v += cuda.shfl_down_sync(0xFFFFFFFF, v, offset)  # add the v of lane + offset
        offset //= 2
    if lane == 0:
        warp_sums[warp] = v  # lane 0 holds its warp's sum
    cuda.syncthreads()  # wait until every warp's sum is in warp_sums
    if warp == 0:
        v = warp_sums[lane] if lane < TPB // 32 else float32(0.0)
        offset = 16
        while offset > 0:
            v += cuda.shfl_down_sync(0xFFFFFFFF, v, offset)
            offset //= 2
        if lane == 0:
            partial[cuda.blockIdx.x] = v


@cuda.jit
def scan_block_kernel(x, out, block_sums):
    buf = cuda.shared.array((2, TPB), float32)  # read one row, write the other, swap each step
    tx = cuda.threadIdx.x
    i = cuda.grid(1)
    buf[0, tx] = x[i] if i < x.size else float32(0.0)
    cuda.syncthreads()  # wait until the block's values are loaded
    src = 0
    offset = 1
    while offset < TPB:
        dst = 1 - src
        if tx >= offset:
            buf[dst, tx] = buf[src, tx] + buf[src, tx - offset]
        else:
            buf[dst, tx] = buf[src, tx]
        cuda.syncthreads()  # wait until every thread wrote this step before anyone reads it
        src = dst
        offset *= 2
    if i < out.size:
        out[i] = buf[src, tx]
    if tx == TPB - 1:
        block_sums[cuda.blockIdx.x] = buf[src, tx]


# --- 06 · CuPy and interop -----------------------------------------------------------------------


@cuda.jit
def histogram_privatized_kernel(values, hist):
    bins = cuda.shared.array(BINS, int32)  # this block's own histogram, on chip
    tx = cuda.threadIdx.x
    for b in range(tx, BINS, TPB):  # 256 bins, 128 threads: each thread zeroes two
        bins[b] = 0
    cuda.syncthreads()  # wait until every bin is zeroed before any thread adds to one
    for i in range(cuda.grid(1), values.size, cuda.gridsize(1)):  # grid stride over the values
        cuda.atomic.add(bins, values[i], 1)  # contended only by this block's threads
    cuda.syncthreads()  # wait until all of the block's values are counted before reading the bins
    for b in range(tx, BINS, TPB):
        if bins[b] != 0:
            cuda.atomic.add(hist, b, bins[b])  # one global atomic per non-zero bin per block


@cuda.jit
def squared_diff_kernel(x, y, out):
    i = cuda.grid(1)
    if i < out.size:
        d = x[i] - y[i]  # one read of x and y, one write of out: 12 bytes per element
        out[i] = d * d


@cuda.jit
def leaky_relu_kernel(x, out):
    i = cuda.grid(1)
    if i < out.size:
        v = x[i]
        out[i] = v if v > 0 else float32(0.01) * v  # float32(0.01): a bare 0.01 would make it float64


def axpy_elementwise_spec() -> dict[str, str]:
    return {
        "in_params": "float32 a, float32 x, float32 y",  # a scalar is declared like an array element
        "out_params": "float32 z",
        "operation": "z = a * x + y",
        "name": "axpy",
    }


# the scalar function of a GPU ufunc, @vectorize(["float32(float32)"], target="cuda"), made on first use
def softplus(x):
    # exp sees only values <= 0: it cannot overflow; float32(0.0), as a bare 0.0 would make max and + float64
    return max(x, float32(0.0)) + math.log1p(math.exp(-abs(x)))


# --- 07 · convolution ---------------------------------------------------------------------------


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


# --- 08 · backpropagation: each backward kernel gathers (one thread per element it writes, no atomics) --


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
def dropout_forward_kernel(x, states, p, y, mask):
    tid = cuda.grid(1)  # this thread's generator is states[tid]: one state per thread of the grid
    for i in range(tid, x.size, cuda.gridsize(1)):  # a fixed grid: each thread takes every gridsize-th element
        u = xoroshiro128p_uniform_float32(states, tid)  # the next number of this thread's own stream
        if u >= p:  # kept with probability 1 - p
            y[i] = x[i] / (float32(1.0) - p)  # inverted dropout: the expected value of y[i] is x[i]
            mask[i] = 1
        else:
            y[i] = float32(0.0)
            mask[i] = 0


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


# --- 09 · training: one step of the training loop, and the test set's confusion matrix on the GPU ---------


def train_step(model, loss_fn, optimizer, xb, yb):
    """One training step on a batch (images ``xb``, labels ``yb``); returns (the batch's mean loss, the logits)."""
    logits = model.forward(xb)  # (B, classes)
    loss = loss_fn(logits, yb)  # the batch's mean loss; keeps d loss / d logits for its backward
    model.backward(loss_fn.backward())  # every layer's gradients, last layer first (each overwrites its own)
    optimizer.step()  # moves every weight along its gradient
    return loss, logits


@cuda.jit
def confusion_kernel(logits, labels, m):
    r = cuda.grid(1)  # one thread per image
    if r < logits.shape[0]:
        best = 0  # the prediction: the first largest logit, as np.argmax
        for k in range(1, logits.shape[1]):
            if logits[r, k] > logits[r, best]:
                best = k
        cuda.atomic.add(m, (labels[r], best), 1)  # row: the true label; many images may land in one cell


# --- 10 · scaling up: unscale the gradients of mixed-precision training ---------------------------


@cuda.jit
def unscale_kernel(grads, inv_scale, out, found_inf):
    i = cuda.grid(1)
    if i < out.size:
        g = grads[i] * inv_scale
        out[i] = g
        if math.isinf(g) or math.isnan(g):
            cuda.atomic.add(found_inf, 0, 1)  # many threads may find one: count them atomically


F1 = "float32[:]"
F2 = "float32[:, :]"
STATES = "Record.make_c_struct([('s0', uint64), ('s1', uint64)])[:]"  # numba.cuda.random's states
PTX_SIGNATURES = [
    (dot_atomic_kernel, f"void({F1}, {F1}, {F1})"),
    (block_max_kernel, f"void({F1}, {F1})"),
    (sum_two_per_thread_kernel, f"void({F1}, {F1})"),
    (warp_sum_kernel, f"void({F1}, {F1})"),
    (scan_block_kernel, f"void({F1}, {F1}, {F1})"),
    (histogram_privatized_kernel, "void(int32[:], int32[:])"),
    (squared_diff_kernel, f"void({F1}, {F1}, {F1})"),
    (leaky_relu_kernel, f"void({F1}, {F1})"),
    (conv2d_single_kernel, f"void({F2}, {F2}, {F2})"),
    (im2col_single_kernel, f"void({F2}, {F2})"),
    (maxpool2x2_kernel, f"void({F2}, {F2})"),
    (conv2d_all_filters_kernel, f"void({F2}, float32[:, :, :], float32[:, :, :])"),
    (bias_grad_kernel, f"void({F2}, {F1})"),
    (linear_weight_grad_kernel, f"void({F2}, {F2}, {F2})"),
    (relu_backward_kernel, f"void({F1}, {F1}, {F1})"),
    (dropout_forward_kernel, f"void({F1}, {STATES}, float32, {F1}, uint8[:])"),
    (maxpool2x2_backward_kernel, f"void({F2}, int32[:, :], {F2})"),
    (confusion_kernel, f"void({F2}, int64[:], int32[:, :])"),
    (unscale_kernel, f"void({F1}, float32, {F1}, int32[:])"),
]
