"""Lesson 05's histogram exercise: a privatized histogram (per-block bins in shared memory, merged into global
memory once per bin), collected with the other exercises. Reference answer: :mod:`.answers_05_10`.

``histogram_privatized_kernel(values, hist)`` counts int32 ``values`` in ``[0, BINS)`` into ``hist`` (BINS int32
counts, zeroed before the launch), launched with a fixed grid of :data:`HIST_BLOCKS` blocks of ``TPB`` = 128
threads, so the kernel strides over the values (``cuda.gridsize(1)``) and, with BINS = 256 bins for 128 threads,
over the bins when it zeroes and merges them. The inputs are half uniform, half in one bin, with the edge
values 0 and BINS - 1; the spec promises values in range, so the kernel need not check them.

The known mistakes get named hints from the result (bins never zeroed, which shows the simulator's filler; loops
over the bins that stop at TPB; a guard that drops an edge value; no grid stride); a missing
``cuda.syncthreads()`` is seen by the harness's race check (an atomic racing a plain store or read of the same
shared bin), and a merge with ``+=`` as two blocks writing one count without an atomic. The budget allows one
global atomic per bin per block, and two per thread: a kernel that adds every value to global memory, or merges
with one thread, is correct but gets half the points.
"""

from __future__ import annotations

import numpy as np

from ..exercises import Budget, Problem
from ..problems._histogram import plus_filler, skewed_values
from . import answers_05_10 as _a
from .exercise import Exercise

__all__ = ["BINS", "EXERCISES_LIST", "HIST_BLOCKS", "HIST_MISTAKES", "histogram_inputs", "histogram_spec"]

TPB = _a.TPB  # 128 threads per block
BINS = _a.BINS  # 256 bins: more than a block's threads
HIST_BLOCKS = 4  # the fixed grid: 512 threads, fewer than the largest input's values


def histogram_spec(values: np.ndarray) -> np.ndarray:
    """``np.bincount(values, minlength=BINS)`` as int32."""
    return np.bincount(values, minlength=BINS).astype(np.int32)


def histogram_inputs(n: int, rng: np.random.Generator) -> np.ndarray:
    """``n`` int32 values in ``[0, BINS)``: half uniform, half in one bin, with 0 and BINS - 1 among them."""
    return skewed_values(n, BINS, rng)


def _upper_bins(values: np.ndarray) -> np.ndarray:
    return np.arange(BINS) >= TPB


def _upper_bins_empty(values: np.ndarray) -> np.ndarray:
    out = histogram_spec(values)
    out[TPB:] = 0
    return out


def _edges_dropped(values: np.ndarray) -> list[np.ndarray]:
    made = []
    for edges in ([0], [BINS - 1], [0, BINS - 1]):
        out = histogram_spec(values)
        out[edges] = 0
        made.append(out)
    return made


HIST_MISTAKES = {
    "every bin is off by a multiple of 0xBAADF00D, the value the simulator puts in a new shared array: the "
    "shared bins were never zeroed, and each block added its copy in the merge. Shared memory is not zeroed on a "
    "GPU (it holds whatever was there): set every bin to 0 first, each thread the bins tx, tx + TPB, tx + 2 * TPB, "
    "... (a loop with the block's stride), then cuda.syncthreads() before any thread adds to one.": lambda v: (
        plus_filler(histogram_spec(v), HIST_BLOCKS)
    ),
    f"bins {TPB} to {BINS - 1} are off by a multiple of 0xBAADF00D (the simulator's value for shared memory nobody "
    f"set): only bins[tx] was zeroed, and a block has {TPB} threads for {BINS} bins. Let each thread zero every "
    f"{TPB}th bin, from its own tx up to BINS in steps of TPB (and merge the same way).": lambda v: plus_filler(
        histogram_spec(v), HIST_BLOCKS, _upper_bins(v)
    ),
    f"bins {TPB} to {BINS - 1} stayed 0: the zeroing or the merge covers only bins[tx], and a block has {TPB} "
    f"threads for {BINS} bins. Loop over the bins with the block's stride: "
    "`for b in range(tx, BINS, TPB):`, once to zero them and once to merge them.": _upper_bins_empty,
    f"the edge bins lost their counts (hist[0] or hist[{BINS - 1}] is 0): a guard on the value dropped 0 or "
    f"BINS - 1. Values lie in [0, BINS), both ends included, and the check promises no value outside it: count "
    "every value as it is, with no guard on it.": _edges_dropped,
    f"only the first {HIST_BLOCKS * TPB} values were counted, one per thread of the grid: the launch is a fixed "
    f"grid of {HIST_BLOCKS} blocks, so each thread must loop with a grid stride, "
    "`for i in range(cuda.grid(1), values.size, cuda.gridsize(1)):`.": lambda v: histogram_spec(v[: HIST_BLOCKS * TPB]),
}

EXERCISES_LIST = [
    Exercise(
        "05",
        "histogram_privatized",
        Problem(
            "histogram_privatized_kernel",
            histogram_spec,
            histogram_inputs,
            sizes=[1, 300, 1500],  # 1500: more values than the grid's 512 threads
            launch=lambda values, hist: (HIST_BLOCKS, TPB),
            ptx="auto",  # a GPU must compile it too (NVVM, ptxas; sm_75), for the first case's argument types
            out_init=0,
            out_names=["hist"],
            mistakes=HIST_MISTAKES,
            budget=Budget(atomics={"hist": HIST_BLOCKS * BINS}, atomics_per_thread=BINS // TPB),
        ),
        _a.histogram_privatized_kernel,
    )
]
