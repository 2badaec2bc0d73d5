"""Reductions: many values in, one value out (lesson 05), and a row-wise softmax built on them.

NumPy references: ``x.sum()`` and ``softmax(x, axis=1)``. Three ways to sum on a GPU:

- :func:`sum_atomic_kernel`: every thread adds its element to one total with ``cuda.atomic.add``.
  Correct, but the atomics on one address are served one after another.
- :func:`sum_tree_kernel`: each block loads ``TPB`` elements into shared memory and halves them
  ``log2(TPB)`` times (a tree); thread 0 writes one partial sum per block. :func:`sum_tree` runs it
  again on the partials until one value is left.
- :func:`sum_warp_kernel`: the same block sum with warp shuffles. Each warp of 32 threads adds its values in
  5 register exchanges (``cuda.shfl_down_sync``), with no shared memory and no barrier; lane 0 of each warp
  writes its warp's sum to a shared array of ``TPB // 32`` values, one ``cuda.syncthreads()``, and warp 0 adds
  those the same way. :func:`sum_warp` repeats it on the partials, as :func:`sum_tree` does.
- :func:`sum_reduce`: Numba's ready-made ``cuda.reduce``.

Lesson 05 reads :func:`count_above_kernel` (an integer atomic count: ``(x > threshold).sum()``) and
:func:`max_tree_kernel` (the tree with ``max``: ``x.max()``) rather than the atomic and tree sums, which lab 05
asks learners to write.

They add the numbers in different orders, so their float32 results may differ in the last bits.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from numba import cuda, float32, int32

from .. import runtime
from ._launch import LaunchError, allocate_like, blocks_for, check_array, check_launch, check_out, is_numba_device_array
from .grid_stride import device_args

__all__ = [
    "PTX_SIGNATURES",
    "SOFTMAX_TPB",
    "TPB",
    "count_above",
    "count_above_kernel",
    "max_tree",
    "max_tree_kernel",
    "softmax_rows",
    "softmax_rows_kernel",
    "sum_atomic",
    "sum_atomic_kernel",
    "sum_reduce",
    "sum_tree",
    "sum_tree_kernel",
    "sum_warp",
    "sum_warp_kernel",
]

TPB = 256  # threads per block of the tree reduction (a power of two)
SOFTMAX_TPB = 128  # threads per block (= per row) of the softmax (a power of two)
WARP = 32  # threads per warp on NVIDIA GPUs (cuda.warpsize inside a kernel)
WARPS = TPB // WARP  # warps per block of the shuffle reduction: TPB is a multiple of 32, so no warp is partial
FULL_MASK = 0xFFFFFFFF  # every lane of the warp takes part in the shuffle (each must reach it)


@cuda.jit
def sum_atomic_kernel(x, total):
    i = cuda.grid(1)
    if i < x.size:  # bounds guard
        cuda.atomic.add(total, 0, x[i])  # read-add-write of total[0] as one indivisible step


@cuda.jit
def sum_tree_kernel(x, partials):
    cache = cuda.shared.array(TPB, float32)
    tx = cuda.threadIdx.x
    i = cuda.grid(1)
    cache[tx] = x[i] if i < x.size else float32(0.0)  # threads past the end contribute 0
    cuda.syncthreads()  # wait until all TPB values of this block are in shared memory
    s = TPB // 2
    while s > 0:
        if tx < s:
            cache[tx] += cache[tx + s]  # the lower half adds the upper half
        cuda.syncthreads()  # wait until this level of the tree is complete before the next one
        s //= 2
    if tx == 0:
        partials[cuda.blockIdx.x] = cache[0]  # one partial sum per block


@cuda.jit
def count_above_kernel(x, threshold, count):
    i = cuda.grid(1)
    if i < x.size and x[i] > threshold:  # bounds guard, then only the elements that count
        cuda.atomic.add(count, 0, int32(1))  # integer atomics: exact in any order


@cuda.jit
def max_tree_kernel(x, partials):
    cache = cuda.shared.array(TPB, float32)
    tx = cuda.threadIdx.x
    i = cuda.grid(1)
    cache[tx] = x[i] if i < x.size else float32(-math.inf)  # threads past the end load a value that cannot win
    cuda.syncthreads()  # wait until all TPB values of this block are in shared memory
    s = TPB // 2
    while s > 0:
        if tx < s:
            cache[tx] = max(cache[tx], cache[tx + s])  # the lower half keeps the larger of each pair
        cuda.syncthreads()  # wait until this level of the tree is complete before the next one
        s //= 2
    if tx == 0:
        partials[cuda.blockIdx.x] = cache[0]  # one partial maximum per block


@cuda.jit
def sum_warp_kernel(x, partials):
    warp_sums = cuda.shared.array(WARPS, float32)  # one value per warp, not one per thread
    tx = cuda.threadIdx.x
    lane = tx % WARP
    warp = tx // WARP
    i = cuda.grid(1)
    v = x[i] if i < x.size else float32(0.0)  # no early return: every lane must reach the shuffles; 0 adds nothing
    offset = WARP // 2
    while offset > 0:  # 16, 8, 4, 2, 1: lane k adds the v of lane k + offset, read from that lane's register
        v += cuda.shfl_down_sync(FULL_MASK, v, offset)
        offset //= 2
    if lane == 0:
        warp_sums[warp] = v  # lane 0 now holds the sum of its warp's 32 values
    cuda.syncthreads()  # wait until every warp's sum is in shared memory
    if warp == 0:  # the whole of warp 0 (all 32 lanes) adds the WARPS sums in the same way
        v = warp_sums[lane] if lane < WARPS else float32(0.0)
        offset = WARP // 2
        while offset > 0:
            v += cuda.shfl_down_sync(FULL_MASK, v, offset)
            offset //= 2
        if lane == 0:
            partials[cuda.blockIdx.x] = v  # one partial sum per block


@cuda.jit
def softmax_rows_kernel(x, out):
    row = cuda.blockIdx.x  # one block per row
    tx = cuda.threadIdx.x
    if row >= x.shape[0]:  # the whole block leaves together, so no thread misses a syncthreads
        return
    cols = x.shape[1]
    buf = cuda.shared.array(SOFTMAX_TPB, float32)

    # 1. Row maximum: each thread scans columns tx, tx + TPB, ...; then a tree in shared memory.
    m = x[row, 0]
    for j in range(tx, cols, SOFTMAX_TPB):
        m = max(m, x[row, j])
    buf[tx] = m
    cuda.syncthreads()  # wait for every thread's partial maximum
    s = SOFTMAX_TPB // 2
    while s > 0:
        if tx < s:
            buf[tx] = max(buf[tx], buf[tx + s])
        cuda.syncthreads()  # wait until this level of the max-tree is complete
        s //= 2
    row_max = buf[0]
    cuda.syncthreads()  # wait until every thread has read row_max before buf is reused

    # 2. Sum of exp(x - max): subtracting the max keeps exp() <= 1, so it cannot overflow.
    acc = float32(0.0)
    for j in range(tx, cols, SOFTMAX_TPB):
        acc += math.exp(x[row, j] - row_max)
    buf[tx] = acc
    cuda.syncthreads()  # wait for every thread's partial sum
    s = SOFTMAX_TPB // 2
    while s > 0:
        if tx < s:
            buf[tx] += buf[tx + s]
        cuda.syncthreads()  # wait until this level of the sum-tree is complete
        s //= 2
    row_sum = buf[0]

    # 3. Normalise.
    for j in range(tx, cols, SOFTMAX_TPB):
        out[row, j] = math.exp(x[row, j] - row_max) / row_sum


def _check_vector(x: Any) -> bool:
    """Validate x; False when it is empty (its sum is 0.0 and nothing is launched)."""
    check_array("x", x, ndim=1, dtype="float32")
    return x.shape[0] > 0


def _accumulator(x: Any, dtype: Any) -> Any:
    """One zero of ``dtype`` for atomics to add into, where ``x`` lives: a Numba device array stays on the device
    (no host allocation copied both ways), else ``x``'s array module (NumPy or CuPy)."""
    if is_numba_device_array(x):
        return cuda.to_device(np.zeros(1, dtype=dtype))
    return runtime.array_module(x).zeros(1, dtype=dtype)


def sum_atomic(x: Any, *, threads_per_block: int = 256) -> float:
    """Sum a 1-D float32 array with one ``cuda.atomic.add`` per element."""
    nonempty = _check_vector(x)  # x first: a list has no shape to count blocks by
    blocks = blocks_for(x.shape[0], threads_per_block)  # checks threads_per_block even for an empty x
    if not nonempty:
        return 0.0
    total = _accumulator(x, np.float32)
    check_launch(blocks, threads_per_block)
    sum_atomic_kernel[blocks, threads_per_block](*device_args(x, total))
    return float(total[0])


def count_above(x: Any, threshold: float, *, threads_per_block: int = 256) -> int:
    """How many elements of a 1-D float32 array exceed ``threshold`` (``(x > threshold).sum()``), counted with
    one integer ``cuda.atomic.add`` per such element."""
    nonempty = _check_vector(x)
    blocks = blocks_for(x.shape[0], threads_per_block)
    if not nonempty:
        return 0
    count = _accumulator(x, np.int32)
    check_launch(blocks, threads_per_block)
    count_above_kernel[blocks, threads_per_block](*device_args(x, np.float32(threshold), count))
    return int(count[0])


def _reduce_in_passes(kernel: Any, x: Any) -> float:
    """Launch a block-reduction ``kernel`` (``TPB`` threads, one partial per block) on ``x``, then on its
    partials, until a single value is left."""
    if not _check_vector(x):
        return 0.0
    current = x
    while True:
        blocks = blocks_for(current.shape[0], TPB)
        check_launch(blocks, TPB)
        partials = allocate_like(current, blocks, np.float32)
        kernel[blocks, TPB](*device_args(current, partials))
        if blocks == 1:
            return float(partials[0])
        current = partials


def sum_tree(x: Any) -> float:
    """Sum a 1-D float32 array with shared-memory tree reductions: one partial per block, then
    the same kernel again on the partials until a single value is left."""
    return _reduce_in_passes(sum_tree_kernel, x)


def max_tree(x: Any) -> float:
    """The maximum of a non-empty 1-D float32 array with shared-memory tree reductions (:func:`max_tree_kernel`),
    again on the partials until a single value is left."""
    check_array("x", x, ndim=1, dtype="float32")
    if x.shape[0] == 0:
        raise LaunchError("x is empty: an empty array has no maximum; pass at least one element.")
    return _reduce_in_passes(max_tree_kernel, x)


def sum_warp(x: Any) -> float:
    """Sum a 1-D float32 array with warp shuffles (:func:`sum_warp_kernel`): one partial per block of ``TPB``,
    then the same kernel again on the partials until a single value is left."""
    return _reduce_in_passes(sum_warp_kernel, x)


_sum_reducer = None


def sum_reduce(x: Any) -> float:
    """Sum a 1-D float32 array with Numba's built-in ``cuda.reduce`` (in the simulator it is a
    plain Python reduction, not a kernel)."""
    global _sum_reducer
    if not _check_vector(x):
        return 0.0
    if _sum_reducer is None:
        _sum_reducer = cuda.reduce(lambda a, b: a + b)
    return float(_sum_reducer(x))


def softmax_rows(x: Any, out: Any = None) -> Any:
    """Numerically stable softmax of each row of a float32 matrix: one block of ``SOFTMAX_TPB``
    threads per row; ``out[i] = exp(x[i] - max(x[i])) / sum(exp(x[i] - max(x[i])))``."""
    check_array("x", x, ndim=2, dtype="float32")
    rows, cols = x.shape
    if cols == 0:
        raise LaunchError(f"x has shape {(rows, cols)}: a softmax needs at least one column per row.")
    if out is None:
        out = allocate_like(x, (rows, cols), x.dtype)
    check_out(out, (rows, cols), x.dtype)
    if rows == 0:
        return out
    check_launch(rows, SOFTMAX_TPB)
    softmax_rows_kernel[rows, SOFTMAX_TPB](*device_args(x, out))
    return out


# (kernel, signature) pairs compiled to PTX by the tests: proof that each kernel is real CUDA.
PTX_SIGNATURES = [
    (sum_atomic_kernel, "void(float32[:], float32[:])"),
    (sum_tree_kernel, "void(float32[:], float32[:])"),
    (count_above_kernel, "void(float32[:], float32, int32[:])"),
    (max_tree_kernel, "void(float32[:], float32[:])"),
    (sum_warp_kernel, "void(float32[:], float32[:])"),
    (softmax_rows_kernel, "void(float32[:, :], float32[:, :])"),
]
