"""Lesson 05 (reductions, atomics, scans): reference answers. Blocks of ``TPB`` threads."""

from __future__ import annotations

import math

from numba import cuda, float32

__all__ = ["block_max_kernel", "dot_atomic_kernel", "scan_block_kernel", "sum_two_per_thread_kernel"]

TPB = 128  # threads per block in lesson 05's exercises


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
