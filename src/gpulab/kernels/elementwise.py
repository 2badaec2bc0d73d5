"""Elementwise kernels: one thread per element, the first kernels of the course (lesson 01).

NumPy references: ``out = a + b`` (:func:`add`), ``out = alpha * x + y`` (:func:`saxpy`) and
``out = alpha * a`` for a 2-D array (:func:`scale2d`, one thread per element on a 2-D grid).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numba import cuda

from ._launch import (
    LaunchError,
    allocate_like,
    blocks_for,
    check_array,
    check_blocks,
    check_launch,
    check_out,
    count,
    threads_2d,
)
from .grid_stride import device_args

TPB_HINT = "Try 128 or 256 threads per block (a multiple of the 32-thread warp)."

__all__ = [
    "PTX_SIGNATURES",
    "add",
    "add_grid_stride_kernel",
    "add_kernel",
    "saxpy",
    "saxpy_kernel",
    "scale2d",
    "scale2d_kernel",
]


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


def add(
    a: Any, b: Any, out: Any = None, *, threads_per_block: int = 256, blocks: int | None = None, kernel: Any = None
) -> Any:
    """``out = a + b`` on the GPU (or simulator), one thread per element.

    ``blocks`` defaults to enough blocks to cover every element; pass fewer with
    ``kernel=add_grid_stride_kernel`` to see a grid-stride loop at work (with the default one-thread-
    per-element kernel, too few blocks are refused: part of ``out`` would stay unwritten).
    ``out`` (optional) must have a's shape and the result's dtype.
    """
    import numpy as np

    check_array("a", a, ndim=1, contiguous=True)
    check_array("b", b, ndim=1, contiguous=True)
    if a.shape != b.shape:
        raise LaunchError(f"a and b must have the same shape, got {tuple(a.shape)} and {tuple(b.shape)}.")
    dtype = np.result_type(np.dtype(a.dtype), np.dtype(b.dtype))
    if out is None:
        out = allocate_like(a, a.shape, dtype)
    check_out(out, a.shape, dtype)
    kernel = kernel or add_kernel
    n = a.shape[0]
    threads_per_block = count("threads_per_block", threads_per_block, example=TPB_HINT)
    blocks = check_blocks(blocks, threads_per_block, n, grid_stride=kernel is not add_kernel)
    if n == 0:
        return out
    check_launch(blocks, threads_per_block)
    kernel[blocks, threads_per_block](*device_args(a, b, out))
    return out


@cuda.jit
def saxpy_kernel(alpha, x, y, out):
    i = cuda.grid(1)
    if i < out.size:  # bounds guard
        out[i] = alpha * x[i] + y[i]  # 2 FLOPs, 12 bytes moved (two loads, one store)


@cuda.jit
def scale2d_kernel(alpha, a, out):
    j, i = cuda.grid(2)  # x (fastest-varying) -> column j, y -> row i: a warp reads along a row
    if i < out.shape[0] and j < out.shape[1]:  # guard in both dimensions
        out[i, j] = alpha * a[i, j]


def _scalar(name: str, value: Any) -> Any:
    """A number argument of a kernel: refused as text (``np.float32("2")`` would read ``"2"`` as 2 without a word)
    or as anything else that is not one number."""
    if isinstance(value, (str, bytes)):
        raise LaunchError(f"{name} must be a number, but got the text {value!r}: write it without quotes, e.g. 2.0.")
    try:
        float(value)
    except (TypeError, ValueError):
        raise LaunchError(f"{name} must be one number, but got {type(value).__name__} {value!r:.40}.") from None
    return value


def _same_shape(a: Any, b: Any, names: str) -> None:
    if tuple(a.shape) != tuple(b.shape):
        raise LaunchError(f"{names} must have the same shape, got {tuple(a.shape)} and {tuple(b.shape)}.")


def saxpy(alpha: float, x: Any, y: Any, out: Any = None, *, threads_per_block: int = 256) -> Any:
    """``out = alpha * x + y`` for float32 vectors (the BLAS "saxpy"), one thread per element."""
    alpha = _scalar("alpha", alpha)
    check_array("x", x, ndim=1, dtype="float32", contiguous=True)
    check_array("y", y, ndim=1, dtype="float32", contiguous=True)
    _same_shape(x, y, "x and y")
    if out is None:
        out = allocate_like(x, x.shape, x.dtype)
    check_out(out, x.shape, x.dtype)
    n = x.shape[0]
    blocks = blocks_for(n, threads_per_block)
    if n == 0:
        return out
    check_launch(blocks, threads_per_block)
    saxpy_kernel[blocks, threads_per_block](*device_args(np.float32(alpha), x, y, out))
    return out


def scale2d(alpha: float, a: Any, out: Any = None, *, threads_per_block: tuple[int, int] = (16, 16)) -> Any:
    """``out = alpha * a`` for a float32 matrix on a 2-D grid of 2-D blocks.

    ``threads_per_block`` is ``(x, y)``: x threads along a row (columns), y along a column (rows).
    """
    alpha = _scalar("alpha", alpha)
    check_array("a", a, ndim=2, dtype="float32", contiguous=True)
    tx, ty = threads_2d(threads_per_block)
    if out is None:
        out = allocate_like(a, a.shape, a.dtype)
    check_out(out, a.shape, a.dtype)
    rows, cols = a.shape
    if rows == 0 or cols == 0:
        return out
    blocks = (blocks_for(cols, tx), blocks_for(rows, ty))
    check_launch(blocks, (tx, ty))
    scale2d_kernel[blocks, (tx, ty)](*device_args(np.float32(alpha), a, out))
    return out


# (kernel, signature) pairs compiled to PTX by the tests: proof that each kernel is real CUDA.
PTX_SIGNATURES = [
    (add_kernel, "void(float32[:], float32[:], float32[:])"),
    (add_grid_stride_kernel, "void(float32[:], float32[:], float32[:])"),
    (saxpy_kernel, "void(float32, float32[:], float32[:], float32[:])"),
    (scale2d_kernel, "void(float32, float32[:, :], float32[:, :])"),
]
