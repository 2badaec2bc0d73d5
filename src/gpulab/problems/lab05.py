"""Lab 05 · reductions: an atomic sum, a histogram, a block tree reduction, a row softmax (one block per row), a
row softmax with one warp per row (warp shuffles) and a confusion matrix counted in shared memory per block
(:mod:`.lab05_confusion`, re-exported here).

Sums are judged against a float64 reference within the float32 rounding bound of n terms (atomics add
in any order, so no order is assumed). The two softmax problems live in :mod:`.lab05_softmax` (re-exported
here): their inputs include rows shifted by up to +-1e4, so a softmax that does not subtract the row's maximum
overflows (``exp(89)`` is already inf in float32).
"""

from __future__ import annotations

import numpy as np

from ..exercises import Budget, Problem, Tree, random_arrays
from ._common import launch_1d, pad_to_blocks
from .lab05_confusion import CM_BLOCKS, CONFUSION, MAX_CELLS, MAX_CLASSES, confusion_inputs, confusion_spec
from .lab05_softmax import ROWS_PER_BLOCK, SOFTMAX, SOFTMAX_WARP, TPB, WARP_TPB, softmax_inputs, softmax_spec

__all__ = [
    "BLOCK_SUM",
    "CM_BLOCKS",
    "CONFUSION",
    "HISTOGRAM",
    "MAX_CELLS",
    "MAX_CLASSES",
    "ROWS_PER_BLOCK",
    "SOFTMAX",
    "SOFTMAX_WARP",
    "SUM_ATOMIC",
    "TPB",
    "WARP_TPB",
    "block_sum_spec",
    "confusion_inputs",
    "confusion_spec",
    "softmax_inputs",
    "softmax_spec",
]


def block_sum_spec(x: np.ndarray) -> np.ndarray:
    """One sum per block of TPB elements (zeros past the end)."""
    return pad_to_blocks(x, TPB).sum(axis=1)


SUM_ATOMIC = Problem(
    "lab05.sum_atomic",
    ptx="auto",  # a GPU must accept it: compiled for the types of the first case's arguments
    spec=lambda x: np.array([x.sum(dtype=np.float64)], dtype=x.dtype),
    inputs=lambda n, rng: random_arrays(rng, n, low=0.0, high=1.0),
    sizes=[0, 1, 100, 700],
    gpu_sizes=[0, 1, 100, 1 << 20],
    launch=launch_1d(TPB, arg=0),  # one thread per input element
    out_init=0,
    reduction=lambda x: max(1, x.size),  # any order of additions
    points=2,
)

HISTOGRAM = Problem(
    "lab05.histogram",
    ptx="auto",  # a GPU must accept it: compiled for the types of the first case's arguments
    spec=lambda labels: np.bincount(labels, minlength=10).astype(np.int32),
    inputs=lambda n, rng: rng.integers(0, 10, size=n).astype(np.int32),
    sizes=[0, 1, 50, 600],
    gpu_sizes=[0, 1, 50, 1 << 20],
    launch=launch_1d(TPB, arg=0),
    out_init=0,
    points=2,
)

BLOCK_SUM = Problem(
    "lab05.block_sum",
    spec=block_sum_spec,
    inputs=lambda n, rng: random_arrays(rng, n),
    sizes=[1, 64, 100, 300],
    gpu_sizes=[1, 64, 100, 1 << 20],
    launch=lambda x, partial: (partial.shape[0], TPB),  # one block per partial sum
    reduction=TPB,
    # one element read per thread, and the block's values combined by halving: a loop of thread 0 over them reads
    # TPB shared values (64), a tree 2 per step (2*log2(64)+1 = 13; the Tree limit allows 3*6+4 = 22)
    budget=Budget(reads_per_element={"x": 1}, reads_per_thread=1, shared_bytes=TPB * 4, shared_reads_per_thread=Tree()),
    ptx="void(float32[:], float32[:])",  # a GPU must accept it: shared.array(cuda.blockDim.x) runs only in the simulator
    points=3,
)
