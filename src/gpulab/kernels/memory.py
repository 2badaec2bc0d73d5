"""Memory-bound kernels: copies and transposes (lesson 02).

They do no arithmetic, so their speed is set by how they touch global memory. NumPy references:
``copy(src, stride=s) == src[::s]`` and ``transpose(a) == a.T``.

- :func:`copy_kernel`: thread ``i`` reads ``src[i]``; a warp reads 32 neighbours (coalesced).
- :func:`strided_copy_kernel`: thread ``i`` reads ``src[i * stride]``; neighbouring threads are
  ``stride`` elements apart, so one warp touches up to 32 different 32-byte sectors.
- :func:`transpose_naive_kernel`: reads rows (coalesced) but writes columns (strided).
- :func:`transpose_tiled_kernel`: stages a ``TILE x TILE`` tile in shared memory so that both the
  global read and the global write go along rows; the tile has one padding column so that reading
  it by columns does not make the threads of a warp collide in the same shared-memory bank.
"""

from __future__ import annotations

from typing import Any

from numba import cuda, float32

from ._launch import LaunchError, allocate_like, blocks_for, ceil_div, check_array, check_launch, check_out, count
from .grid_stride import device_args

__all__ = [
    "PTX_SIGNATURES",
    "TILE",
    "copy",
    "copy_kernel",
    "strided_copy_kernel",
    "transpose",
    "transpose_naive_kernel",
    "transpose_tiled_kernel",
]

TILE = 16  # transpose tile: TILE x TILE threads per block, one element each
TILE_PAD = TILE + 1  # row length of the shared tile (a constant: shared.array needs one)


@cuda.jit
def copy_kernel(src, out):
    i = cuda.grid(1)
    if i < out.size:  # bounds guard
        out[i] = src[i]  # lane k reads element k of the warp's 32: one contiguous 128-byte run


@cuda.jit
def strided_copy_kernel(src, out, stride):
    i = cuda.grid(1)
    if i < out.size:  # bounds guard (out has ceil(src.size / stride) elements)
        out[i] = src[i * stride]  # neighbouring lanes read `stride` elements apart


@cuda.jit
def transpose_naive_kernel(a, out):
    j, i = cuda.grid(2)  # x -> column j of a, y -> row i of a
    if i < a.shape[0] and j < a.shape[1]:
        out[j, i] = a[i, j]  # read along a row (coalesced), write down a column (strided)


@cuda.jit
def transpose_tiled_kernel(a, out):
    # TILE + 1 columns: element [r, c] sits in bank (r * (TILE + 1) + c) % 32, so the lanes of a
    # warp reading down a column land in different banks. Without the +1 (16 floats per row),
    # rows r and r + 2 start in the same bank and the column read becomes an 8-way bank conflict.
    tile = cuda.shared.array((TILE, TILE_PAD), float32)
    tx = cuda.threadIdx.x
    ty = cuda.threadIdx.y
    col0 = cuda.blockIdx.x * TILE  # first column of a this block handles
    row0 = cuda.blockIdx.y * TILE  # first row of a this block handles
    i = row0 + ty
    j = col0 + tx
    if i < a.shape[0] and j < a.shape[1]:
        tile[ty, tx] = a[i, j]  # coalesced read: lanes walk along a row of a
    cuda.syncthreads()  # wait until the whole tile is in shared memory before reading it transposed
    oi = col0 + ty  # row of out = column of a
    oj = row0 + tx  # column of out = row of a
    if oi < a.shape[1] and oj < a.shape[0]:
        out[oi, oj] = tile[tx, ty]  # coalesced write: lanes walk along a row of out


def copy(src: Any, out: Any = None, *, stride: int = 1, threads_per_block: int = 256) -> Any:
    """Copy every ``stride``-th element of a 1-D float32 array: ``out = src[::stride]``.

    ``stride=1`` launches :func:`copy_kernel`, larger strides :func:`strided_copy_kernel`.
    ``out`` (optional) must have ``ceil(src.size / stride)`` float32 elements.
    """
    check_array("src", src, ndim=1, dtype="float32", contiguous=True)
    stride = count("stride", stride, example="1 copies every element, 2 every other one.")
    n_out = ceil_div(src.shape[0], stride)
    if out is None:
        out = allocate_like(src, (n_out,), src.dtype)
    check_out(
        out,
        (n_out,),
        src.dtype,
        fix=f"out needs ceil({src.shape[0]} / {stride}) = {n_out} elements for "
        "stride {stride}; leave out=None to let copy allocate it.".replace("{stride}", str(stride)),
    )
    blocks = blocks_for(n_out, threads_per_block)
    if n_out == 0:
        return out
    check_launch(blocks, threads_per_block)
    if stride == 1:
        copy_kernel[blocks, threads_per_block](*device_args(src, out))
    else:
        strided_copy_kernel[blocks, threads_per_block](*device_args(src, out, stride))
    return out


def transpose(a: Any, out: Any = None, *, kernel: Any = None) -> Any:
    """``out = a.T`` for a float32 matrix, with ``TILE x TILE`` blocks.

    ``kernel`` is :func:`transpose_tiled_kernel` (default) or :func:`transpose_naive_kernel`, by itself or by name
    (``"tiled"``, ``"naive"``), or a ``@cuda.jit`` kernel of yours with the same parameters ``(a, out)``.
    """
    check_array("a", a, ndim=2, dtype="float32")
    rows, cols = a.shape
    if out is None:
        out = allocate_like(a, (cols, rows), a.dtype)
    check_out(out, (cols, rows), a.dtype, fix=f"out is a.T: shape {(cols, rows)}, a's shape {(rows, cols)} reversed.")
    if rows == 0 or cols == 0:
        return out
    kernel = _transpose_kernel(kernel)
    blocks = (blocks_for(cols, TILE), blocks_for(rows, TILE))
    check_launch(blocks, (TILE, TILE))
    kernel[blocks, (TILE, TILE)](*device_args(a, out))
    return out


def _transpose_kernel(kernel: Any) -> Any:
    """``transpose``'s ``kernel=``: None (the tiled one), a name, or a ``@cuda.jit`` kernel (one with ``py_func``,
    not a plain Python function, which cannot be launched)."""
    names = {"tiled": transpose_tiled_kernel, "naive": transpose_naive_kernel}
    if kernel is None:
        return transpose_tiled_kernel
    if isinstance(kernel, str):
        if kernel not in names:
            raise LaunchError(f"unknown transpose kernel {kernel!r}; expected one of {', '.join(names)}, or a kernel.")
        return names[kernel]
    if not hasattr(kernel, "py_func"):
        raise LaunchError(
            f"transpose(kernel=...) launches a @cuda.jit kernel with the parameters (a, out) on {TILE} x {TILE} "
            f"blocks; it was given {type(kernel).__name__} {getattr(kernel, '__name__', kernel)!r}, which is not "
            "one. Pass kernels.transpose_tiled_kernel, kernels.transpose_naive_kernel (or 'tiled', 'naive'), or "
            "decorate yours with @cuda.jit."
        )
    return kernel


# (kernel, signature) pairs compiled to PTX by the tests: proof that each kernel is real CUDA.
PTX_SIGNATURES = [
    (copy_kernel, "void(float32[:], float32[:])"),
    (strided_copy_kernel, "void(float32[:], float32[:], int64)"),
    (transpose_naive_kernel, "void(float32[:, :], float32[:, :])"),
    (transpose_tiled_kernel, "void(float32[:, :], float32[:, :])"),
]
