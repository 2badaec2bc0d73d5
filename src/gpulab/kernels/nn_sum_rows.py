"""The bias gradient's launcher :func:`sum_rows` (``d.sum(axis=0)`` of d (M, F), deterministic: no atomics) and its
two passes on a GPU: :func:`sum_rows_chunks` says how many chunks of rows (the ``SUM_ROWS_*`` constants),
:func:`sum_rows_partials` sums each chunk's columns, then one thread per column sums the partials. The simulator keeps
the single grid-stride pass.

Training calls it as :func:`gpulab.kernels.nn_ops.sum_rows`, re-exported there with the CNN engine's other launchers
(the kernels are :mod:`gpulab.kernels.nn_kernels`'s).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .. import runtime
from ..errors import UsageError
from ._launch import MAX_GRID_DIMS, ceil_div, check_array, check_launch
from .grid_stride import device_args, fast_simulator_arrays, launch_1d
from .nn_kernels import sum_rows_kernel, sum_rows_partials_kernel

__all__ = [
    "SUM_ROWS_BLOCK",
    "SUM_ROWS_MAX_CHUNKS",
    "SUM_ROWS_MIN_ROWS",
    "SUM_ROWS_THREADS",
    "sum_rows",
    "sum_rows_chunks",
    "sum_rows_partials",
]


# sum_rows on a GPU, pass 1: a warp spans 32 columns of one row (the conv layers have 32 or 64 features), and
# the chunks give about SUM_ROWS_THREADS threads, at most SUM_ROWS_MAX_CHUNKS (pass 2 adds them one after
# another in each column's thread), each of at least SUM_ROWS_MIN_ROWS rows (fewer would leave pass 1 a copy).
SUM_ROWS_BLOCK = (32, 8)
SUM_ROWS_THREADS = 32768
SUM_ROWS_MAX_CHUNKS = 1024
SUM_ROWS_MIN_ROWS = 16


def sum_rows_chunks(m: int, f: int) -> int:
    """How many chunks of rows pass 1 of :func:`sum_rows` cuts d (m, f) into on a GPU: 1,024 for conv1's bias
    at batch 128 (m = 100,352, f = 32: 98 rows each), 512 for conv2's (25,088 x 64), 8 for a (128, 10) layer."""
    by_threads = ceil_div(SUM_ROWS_THREADS, max(int(f), 1))
    return max(1, min(SUM_ROWS_MAX_CHUNKS, by_threads, ceil_div(int(m), SUM_ROWS_MIN_ROWS)))


def sum_rows_partials(d: Any, chunks: int) -> Any:
    """Pass 1 of :func:`sum_rows` on a GPU: ``partials[i, j]`` = the sum of column j over chunk i of d's rows
    (``chunks`` contiguous chunks of ``ceil(M / chunks)`` rows), (chunks, F) float32. One thread per (chunk,
    column), x over the columns, in blocks of :data:`SUM_ROWS_BLOCK`, in the simulator too (there each thread
    costs about 15 us, so keep ``chunks * F`` small)."""
    check_array("d", d, ndim=2, dtype=np.float32)
    if int(chunks) < 1:
        raise UsageError(f"sum_rows_partials: chunks must be at least 1, got {chunks}.")
    xp = runtime.array_module(d)
    d = xp.ascontiguousarray(d)
    partials = xp.empty((int(chunks), d.shape[1]), dtype=np.float32)  # (P, F)
    if partials.size == 0:
        return partials
    bx, by = SUM_ROWS_BLOCK
    grid = (min(ceil_div(d.shape[1], bx), MAX_GRID_DIMS[0]), min(ceil_div(int(chunks), by), MAX_GRID_DIMS[1]))
    check_launch(grid, SUM_ROWS_BLOCK)
    if runtime.is_simulator():
        fast_simulator_arrays()
    sum_rows_partials_kernel[grid, SUM_ROWS_BLOCK](*device_args(d, partials))
    return partials


def sum_rows(d: Any, *, kernel: Any = None, two_pass: bool | None = None) -> Any:
    """``d.sum(axis=0)`` of d (M, F) -> (F,): the gradient of a bias. Deterministic (no atomics).

    ``two_pass`` (default: on a GPU, with the course's kernel): :func:`sum_rows_partials` first, then one thread
    per column sums the (at most 1,024) partials. One thread per column over all of conv1's 100,352 rows (batch
    128) kept one or two warps busy for an estimated 5-8 ms per step on an H200; the two passes start tens of
    thousands of threads. The simulator keeps the single pass: few threads there are cheaper (see
    :mod:`gpulab.kernels.grid_stride`). ``kernel(d, out)`` replaces the single pass (or pass 2) kernel."""
    check_array("d", d, ndim=2, dtype=np.float32)
    d = runtime.array_module(d).ascontiguousarray(d)
    if two_pass is None:
        two_pass = kernel is None and runtime.is_gpu()
    if two_pass:
        d = sum_rows_partials(d, sum_rows_chunks(d.shape[0], d.shape[1]))  # (P, F): pass 2 sums these rows
    out = runtime.array_module(d).empty(d.shape[1], dtype=np.float32)
    launch_1d(kernel or sum_rows_kernel, out.size, d, out)
    return out
