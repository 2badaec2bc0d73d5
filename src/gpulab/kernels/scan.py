"""Prefix sums (scans), lesson 05: ``out[i] = x[0] + x[1] + ... + x[i]``.

NumPy reference: ``np.cumsum(x)``. A scan looks sequential (each output needs the previous one),
yet it parallelises in ``log2(n)`` steps; it is how a GPU computes where each thread should write
in stream compaction, radix sort, histograms to offsets, and top-p sampling.

- :func:`scan_block_kernel`: Hillis-Steele inclusive scan of each block's ``TPB`` elements in shared
  memory. At step ``d`` (offset ``2**d``) every thread ``tx >= offset`` adds the value ``offset``
  places to its left. Reading and writing one buffer in the same step would be a race (a thread may
  read a value its neighbour already updated), so the kernel ping-pongs between two buffers and
  needs one ``syncthreads`` per step. Work: ``n log2(n)`` additions (Blelloch's scan does ``2n``,
  with twice the steps). Thread ``TPB - 1`` also writes the block's total to ``block_sums``.
- :func:`add_offsets_kernel`: adds, to every element of block ``b > 0``, the inclusive scan of the
  block totals at ``b - 1`` (everything in the blocks before it).
- :func:`inclusive_scan`: block scan, then (recursively) a scan of the block totals, then the offsets.

Float32 caveat: ``out[i]`` is a sum of ``i + 1`` terms added in a tree order, so it is not bit-equal
to ``np.cumsum`` (a running total); both are within float32's rounding bound of the exact sums.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numba import cuda, float32

from ._launch import allocate_like, blocks_for, check_array, check_launch
from .grid_stride import device_args

__all__ = ["PTX_SIGNATURES", "TPB", "add_offsets_kernel", "inclusive_scan", "scan_block_kernel", "scan_reference"]

TPB = 128  # threads (and elements) per block of the scan


@cuda.jit
def scan_block_kernel(x, out, block_sums):
    buf = cuda.shared.array((2, TPB), float32)  # two buffers: read one, write the other
    tx = cuda.threadIdx.x
    i = cuda.grid(1)
    buf[0, tx] = x[i] if i < x.size else float32(0.0)  # threads past the end contribute 0
    cuda.syncthreads()  # wait until the block's TPB values are in buf[0]
    src = 0
    offset = 1
    while offset < TPB:
        dst = 1 - src
        if tx >= offset:
            buf[dst, tx] = buf[src, tx] + buf[src, tx - offset]  # add the value `offset` places left
        else:
            buf[dst, tx] = buf[src, tx]  # nothing that far left: copy
        cuda.syncthreads()  # wait until every thread wrote this step before anyone reads it
        src = dst
        offset *= 2
    if i < out.size:
        out[i] = buf[src, tx]
    if tx == TPB - 1:
        block_sums[cuda.blockIdx.x] = buf[src, tx]  # the block's total (padding adds 0)


@cuda.jit
def add_offsets_kernel(out, scanned_sums):
    i = cuda.grid(1)
    b = cuda.blockIdx.x
    if b > 0 and i < out.size:
        out[i] += scanned_sums[b - 1]  # the total of blocks 0 .. b-1


def scan_reference(x: np.ndarray) -> np.ndarray:
    """The inclusive prefix sum in float64, rounded once to float32 (what the kernels approximate)."""
    return np.cumsum(np.asarray(x, np.float64)).astype(np.float32)


def inclusive_scan(x: Any, out: Any = None) -> Any:
    """Inclusive prefix sum of a 1-D float32 array: ``out[i] = x[0] + ... + x[i]``.

    One :func:`scan_block_kernel` launch over blocks of ``TPB``, then the block totals are scanned
    the same way (recursively, ``log_TPB(n)`` levels) and added with :func:`add_offsets_kernel`.
    """
    check_array("x", x, ndim=1, dtype="float32")
    n = x.shape[0]
    if out is None:
        out = allocate_like(x, n, np.float32)  # a Numba device array stays on the device
    check_array("out", out, ndim=1, dtype="float32")
    if out.shape[0] != n:
        raise ValueError(f"out must have x's length {n}, but has {out.shape[0]}: pass out=None to allocate it.")
    if n == 0:
        return out
    blocks = blocks_for(n, TPB)
    check_launch(blocks, TPB)
    sums = allocate_like(x, blocks, np.float32)
    scan_block_kernel[blocks, TPB](*device_args(x, out, sums))
    if blocks > 1:
        scanned = inclusive_scan(sums)
        add_offsets_kernel[blocks, TPB](*device_args(out, scanned))
    return out


# (kernel, signature) pairs compiled to PTX by the tests: proof that each kernel is real CUDA.
PTX_SIGNATURES = [
    (scan_block_kernel, "void(float32[:], float32[:], float32[:])"),
    (add_offsets_kernel, "void(float32[:], float32[:])"),
]
