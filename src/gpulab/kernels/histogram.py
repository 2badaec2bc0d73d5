"""Histograms: count how many values fall in each bin (lesson 05), the canonical workload of atomics.

NumPy reference: ``np.bincount(values, minlength=bins)``. Values are int32 in ``[0, bins)``: the kernels do not
check (as ``np.bincount`` with ``minlength``, a value out of range is the caller's mistake); counts are int32.

- :func:`histogram_global_kernel`: every value is one ``cuda.atomic.add`` on its bin in global memory. When many
  values share a bin (skewed data), the lanes of a warp that hit one address are served one after another.
- :func:`histogram_shared_kernel`: *privatized*. Each block counts into its own copy of the bins in shared
  memory (on-chip atomics, contended only within the block), then adds each non-zero bin to global memory
  once: at most ``blocks x bins`` global atomics, however many values there are.

Both loop with a grid stride over the values, so a fixed grid (:data:`BLOCKS` blocks) covers any ``n``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numba import cuda, int32

from .. import runtime
from ._launch import LaunchError, check_array, check_launch
from .grid_stride import device_args

__all__ = [
    "BINS",
    "BLOCKS",
    "HISTOGRAM_KERNELS",
    "PTX_SIGNATURES",
    "TPB",
    "histogram",
    "histogram_global_kernel",
    "histogram_reference",
    "histogram_shared_kernel",
]

TPB = 256  # threads per block
BINS = 256  # the most bins the shared-memory kernel holds (a constant: cuda.shared.array needs one); 1 KB of int32
# a fixed grid (gpu mode) of 64 x 256 = 16,384 threads, each striding over the values: about 40% of the threads a T4
# holds at once (40 SMs x 1,024), not enough to fill a GPU, but only 64 per-block histograms for the atomics to merge;
# blocks= sets another grid (lesson 05 times 8 blocks per SM)
BLOCKS = 64


def histogram_reference(values: Any, bins: int = BINS) -> np.ndarray:
    """``np.bincount(values, minlength=bins)`` as int32 (values in ``[0, bins)``)."""
    return np.bincount(np.asarray(runtime.to_host(values)).astype(np.int64), minlength=bins).astype(np.int32)


@cuda.jit
def histogram_global_kernel(values, hist):
    start = cuda.grid(1)
    for i in range(start, values.size, cuda.gridsize(1)):  # grid stride: any number of values
        cuda.atomic.add(hist, values[i], 1)  # one global atomic per value


@cuda.jit
def histogram_shared_kernel(values, hist):
    bins = cuda.shared.array(BINS, int32)  # this block's private copy of the histogram
    tx = cuda.threadIdx.x
    for b in range(tx, hist.size, cuda.blockDim.x):  # more bins than threads: each thread zeroes several
        bins[b] = 0
    cuda.syncthreads()  # wait until every bin is zeroed before any thread adds to one
    start = cuda.grid(1)
    for i in range(start, values.size, cuda.gridsize(1)):
        cuda.atomic.add(bins, values[i], 1)  # an on-chip atomic, contended only within this block
    cuda.syncthreads()  # wait until the block's values are all counted before reading the bins
    for b in range(tx, hist.size, cuda.blockDim.x):
        if bins[b] != 0:
            cuda.atomic.add(hist, b, bins[b])  # one global atomic per non-zero bin per block


HISTOGRAM_KERNELS = {"global": histogram_global_kernel, "shared": histogram_shared_kernel}


def histogram(
    values: Any, bins: int = BINS, *, kernel: str = "shared", blocks: int | None = None, out: Any = None
) -> Any:
    """Count ``values`` (int32, in ``[0, bins)``) into ``bins`` int32 counts with kernel ``"global"`` or
    ``"shared"`` (at most :data:`BINS` bins); returns ``out`` (zeroed here first) or a new array in the inputs'
    world. ``blocks`` sets the grid (default :data:`BLOCKS` on a GPU, fewer in the simulator)."""
    check_array("values", values, ndim=1, dtype=np.int32)
    if kernel not in HISTOGRAM_KERNELS:
        raise LaunchError(f"histogram: kernel must be one of {sorted(HISTOGRAM_KERNELS)}, got {kernel!r}.")
    if not 1 <= bins <= BINS:
        raise LaunchError(
            f"histogram: bins must be between 1 and {BINS} (the shared kernel's copy holds {BINS}), got {bins}."
        )
    xp = runtime.array_module(values)
    if out is None:
        out = xp.zeros(bins, np.int32)
    else:
        check_array("out", out, ndim=1, dtype=np.int32)
        if out.shape != (bins,):
            raise LaunchError(
                f"histogram: out must have shape ({bins},), got {tuple(out.shape)}: pass bins={out.size}?"
            )
        out[...] = 0
    grid = blocks if blocks is not None else (BLOCKS if runtime.is_gpu() else 2)
    check_launch(grid, TPB)
    HISTOGRAM_KERNELS[kernel][grid, TPB](*device_args(values, out))
    return out


PTX_SIGNATURES = [
    (histogram_global_kernel, "void(int32[:], int32[:])"),
    (histogram_shared_kernel, "void(int32[:], int32[:])"),
]
