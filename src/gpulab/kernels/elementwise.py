"""Elementwise kernels: one thread per element, the first kernels of the course (lesson 01).

NumPy reference: ``out = a + b``.
"""

from __future__ import annotations

from typing import Any

from numba import cuda

from ._launch import blocks_for, check_array, check_launch
from .. import runtime

__all__ = ["add", "add_kernel", "add_grid_stride_kernel", "PTX_SIGNATURES"]


@cuda.jit
def add_kernel(a, b, out):
    i = cuda.grid(1)  # this thread's global index: blockIdx.x * blockDim.x + threadIdx.x
    if i < out.size:  # bounds guard: the last block may have more threads than elements
        out[i] = a[i] + b[i]


@cuda.jit
def add_grid_stride_kernel(a, b, out):
    start = cuda.grid(1)
    stride = cuda.gridsize(1)  # total threads in the grid
    for i in range(start, out.size, stride):  # each thread walks the array in steps of the grid
        out[i] = a[i] + b[i]


def add(a: Any, b: Any, out: Any = None, *, threads_per_block: int = 256, blocks: int | None = None,
        kernel: Any = None) -> Any:
    """``out = a + b`` on the GPU (or simulator), one thread per element.

    ``blocks`` defaults to enough blocks to cover every element; pass fewer with
    ``kernel=add_grid_stride_kernel`` to see a grid-stride loop at work.
    """
    check_array("a", a, ndim=1)
    check_array("b", b, ndim=1)
    if a.shape != b.shape:
        raise ValueError(f"a and b must have the same shape, got {a.shape} and {b.shape}.")
    if out is None:
        out = runtime.array_module(a).empty_like(a)
    n = a.shape[0]
    if n == 0:
        return out
    kernel = kernel or add_kernel
    blocks = blocks or blocks_for(n, threads_per_block)
    check_launch(blocks, threads_per_block)
    kernel[blocks, threads_per_block](a, b, out)
    return out


# (kernel, signature) pairs compiled to PTX by the tests: proof that each kernel is real CUDA.
PTX_SIGNATURES = [
    (add_kernel, "void(float32[:], float32[:], float32[:])"),
    (add_grid_stride_kernel, "void(float32[:], float32[:], float32[:])"),
]
