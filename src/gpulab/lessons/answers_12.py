"""Reference answers of the exercises of lesson 12 (the exercises themselves: :mod:`.ex_12` and
:mod:`.ex_12_backward`).

As in :mod:`.answers_05_10`: a learner sees an answer only through ``gpulab.lessons.reveal("12", name)``.
The fused attention exercise's answer is the library's own kernel,
:func:`gpulab.transformer.flash.flash_attention_kernel`. x, the fastest thread index, runs along the last,
contiguous axis (``j, i = cuda.grid(2)``: j the key, i the query). The backward pass,
:func:`attention_backward`, is NumPy on the host (the library's, in one ``xp`` code path:
:mod:`gpulab.transformer.backward`).
"""

from __future__ import annotations

import math

import numpy as np
from numba import cuda, float32

__all__ = [
    "PTX_SIGNATURES",
    "SOFTMAX_TPB",
    "attention_backward",
    "attention_scores_kernel",
    "online_softmax_kernel",
]

SOFTMAX_TPB = 32  # threads per block (= per row) of the online softmax (a power of two)


@cuda.jit
def attention_scores_kernel(q, k, scale, causal, s):
    j, i = cuda.grid(2)  # j = key (column of s), i = query (row of s)
    n = s.shape[0]
    m = s.shape[1]
    if i < n and j < m:
        if causal != 0 and j > i + (m - n):  # query i sees keys up to i + (m - n)
            s[i, j] = -math.inf  # exp(-inf) = 0: no weight in the softmax
        else:
            acc = float32(0.0)
            for c in range(q.shape[1]):
                acc += q[i, c] * k[j, c]  # row i of q times row j of k: (q @ k.T)[i, j]
            s[i, j] = acc * scale


@cuda.jit
def online_softmax_kernel(x, out):
    row = cuda.blockIdx.x  # one block per row
    tx = cuda.threadIdx.x
    cols = x.shape[1]
    s_max = cuda.shared.array(SOFTMAX_TPB, float32)
    s_sum = cuda.shared.array(SOFTMAX_TPB, float32)
    # 1. One pass over this thread's columns: a running maximum and the sum of exp(x - running max),
    #    rescaled by exp(old max - new max) whenever the maximum grows.
    run_max = float32(-math.inf)
    run_sum = float32(0.0)
    for j in range(tx, cols, SOFTMAX_TPB):
        xj = x[row, j]
        new_max = max(run_max, xj)
        if new_max != -math.inf:  # a masked (-inf) entry adds nothing
            run_sum = run_sum * math.exp(run_max - new_max) + math.exp(xj - new_max)
        run_max = new_max
    s_max[tx] = run_max
    s_sum[tx] = run_sum
    cuda.syncthreads()  # wait until every thread stored its (maximum, sum) pair
    # 2. Merge the pairs in a tree: each sum is rescaled to the larger maximum before adding.
    stride = SOFTMAX_TPB // 2
    while stride > 0:
        if tx < stride:
            m1 = s_max[tx]
            m2 = s_max[tx + stride]
            new_max = max(m1, m2)
            if new_max != -math.inf:
                s_sum[tx] = s_sum[tx] * math.exp(m1 - new_max) + s_sum[tx + stride] * math.exp(m2 - new_max)
            s_max[tx] = new_max
        cuda.syncthreads()  # wait until this level of the tree is merged
        stride //= 2
    row_max = s_max[0]
    row_sum = s_sum[0]
    # 3. Normalise: the second and last read of x.
    for j in range(tx, cols, SOFTMAX_TPB):
        out[row, j] = math.exp(x[row, j] - row_max) / row_sum


def attention_backward(
    dout: np.ndarray, q: np.ndarray, k: np.ndarray, v: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(dq, dk, dv)`` of attention without a mask, each (n, d), from ``dout = dL/dout`` (n, d)."""
    scale = 1.0 / math.sqrt(q.shape[1])
    s = (q @ k.T) * scale  # (n, n) scores
    p = np.exp(s - s.max(axis=1, keepdims=True))
    p /= p.sum(axis=1, keepdims=True)  # (n, n) weights: each row sums to 1
    dv = p.T @ dout  # (n, d): out = P @ v is a matmul
    dp = dout @ v.T  # (n, n)
    ds = p * (dp - (dp * p).sum(axis=1, keepdims=True))  # (n, n): the softmax's backward, row by row
    dq = (ds @ k) * scale  # (n, d)
    dk = (ds.T @ q) * scale  # (n, d): S = q @ k.T, so k's gradient takes dS transposed
    return dq, dk, dv


# (kernel, signature) pairs compiled to PTX by the tests.
PTX_SIGNATURES = [
    (attention_scores_kernel, "void(float32[:, :], float32[:, :], float32, int32, float32[:, :])"),
    (online_softmax_kernel, "void(float32[:, :], float32[:, :])"),
]
