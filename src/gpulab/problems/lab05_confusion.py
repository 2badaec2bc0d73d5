"""Lab 05 · exercise 5: a confusion matrix counted on the GPU, a histogram over (label, prediction) pairs.

``confusion_kernel(labels, predictions, cm)`` counts n int32 pairs, each value in ``[0, classes)``, into the
``(classes, classes)`` int32 matrix ``cm`` (zeroed before the launch): ``cm[labels[i], predictions[i]] += 1``, row
the true label, column the prediction, as ``sklearn.metrics.confusion_matrix``. The launch is a fixed grid of
:data:`CM_BLOCKS` blocks of ``TPB`` = 64 threads, so the kernel strides over the pairs; each block counts into its own
``classes * classes`` cells in shared memory (``cuda.shared.array(MAX_CELLS, int32)``, at most
:data:`MAX_CLASSES` classes), then adds each non-zero cell to ``cm`` with one atomic. The check's sizes are
``(n, classes)`` with n not a multiple of the block, more pairs than threads, and up to 13 classes: 169 cells,
more than a block's 64 threads, so zeroing and merging loop over the cells.

Named hints from the result: rows and columns exchanged, cells never zeroed (the simulator's filler shows), loops
over the cells that stop at TPB, no grid stride. A missing ``cuda.syncthreads()`` and a merge with ``+=`` are races
the harness sees; global atomics only, or one thread merging the block's cells, are correct but over the budget
(one global atomic per cell per block, ``ceil(cells / TPB)`` per thread): half the points.
"""

from __future__ import annotations

import math

import numpy as np

from ..exercises import Budget, Problem
from ._histogram import edge_values, plus_filler

__all__ = [
    "CM_BLOCKS",
    "CONFUSION",
    "CONFUSION_HINTS",
    "MAX_CELLS",
    "MAX_CLASSES",
    "confusion_inputs",
    "confusion_spec",
]

TPB = 64  # threads per block (lab 05's)
CM_BLOCKS = 4  # the fixed grid: 256 threads
MAX_CLASSES = 32  # the most classes the shared copy holds
MAX_CELLS = MAX_CLASSES * MAX_CLASSES  # 1024 int32 cells: 4 KB of shared memory per block


def confusion_spec(labels: np.ndarray, predictions: np.ndarray, classes: int) -> np.ndarray:
    """``cm[t, p]``: how many i have ``labels[i] == t`` and ``predictions[i] == p`` (int32)."""
    flat = np.bincount(labels.astype(np.int64) * classes + predictions, minlength=classes * classes)
    return flat.reshape(classes, classes).astype(np.int32)


def confusion_inputs(size: tuple[int, int], rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, int]:
    """n (label, prediction) pairs over ``classes`` classes, right about 70% of the time (a crowded diagonal), with
    0 and ``classes - 1`` among the labels and among the predictions; and ``classes``, which the check uses to
    shape ``cm`` (the kernel reads it as ``cm.shape[0]``; :func:`_kernel_args`)."""
    n, classes = size
    labels = edge_values(rng.integers(0, classes, n).astype(np.int32), classes)
    wrong = rng.integers(0, classes, n).astype(np.int32)
    predictions = np.where(rng.random(n) < 0.7, labels, wrong).astype(np.int32)
    if n >= 2:
        predictions[0], predictions[-1] = classes - 1, 0
    return labels, predictions, classes


def _kernel_args(ins: tuple, outs: tuple) -> tuple:
    """The kernel's arguments: labels, predictions and cm (classes is cm.shape[0])."""
    return (ins[0], ins[1], *outs)


def _upper_cells(classes: int) -> np.ndarray:
    return (np.arange(classes * classes) >= TPB).reshape(classes, classes)


def _upper_cells_empty(labels: np.ndarray, predictions: np.ndarray, classes: int) -> np.ndarray:
    out = confusion_spec(labels, predictions, classes)
    out[_upper_cells(classes)] = 0
    return out


CONFUSION_HINTS = {
    "transposed": "cm holds the expected matrix transposed: the row is the true label and the column the "
    "prediction, `cm[labels[i], predictions[i]]` (in a flat shared copy: cell `labels[i] * classes + "
    "predictions[i]`, merged into cm[cell // classes, cell % classes]).",
    "unzeroed": "every cell is off by a multiple of 0xBAADF00D, the value the simulator puts in a new shared array: "
    "the shared cells were never zeroed, and each block added its copy in the merge. Shared memory is not zeroed on "
    "a GPU either (it holds whatever was there): zero the block's classes * classes cells first, each thread the "
    "cells tx, tx + TPB, tx + 2 * TPB, ... (a loop with the block's stride), then cuda.syncthreads() before any "
    "thread adds to one.",
    "tx only": f"the cells from flat index {TPB} on are off by a multiple of 0xBAADF00D (the simulator's value "
    f"for shared memory nobody set): only counts[tx] was zeroed, and a block has {TPB} threads for up to "
    f"{MAX_CLASSES} x {MAX_CLASSES} cells. Loop with the block's stride, from tx up to classes * classes in steps "
    "of TPB, to zero them and again to merge them.",
    "upper empty": f"the cells from flat index {TPB} on stayed 0: the zeroing or the merge covers only cell tx, "
    f"and a block has {TPB} threads for classes * classes cells (169 for 13 classes). Loop with the block's "
    "stride: `for c in range(tx, cells, TPB):`, once to zero the cells and once to merge them.",
    "no stride": f"only the first {CM_BLOCKS * TPB} pairs were counted, one per thread of the grid: the launch is a "
    f"fixed grid of {CM_BLOCKS} blocks of {TPB}, so each thread loops with a grid stride, "
    "`for i in range(cuda.grid(1), labels.size, cuda.gridsize(1)):`.",
}


def _cells(size: tuple[int, int]) -> int:
    return size[1] * size[1]


CONFUSION = Problem(
    "lab05.confusion",
    spec=confusion_spec,
    inputs=confusion_inputs,
    # (pairs, classes): one pair; n not a multiple of 64; more pairs than the grid's 256 threads, 13 classes
    sizes=[(1, 2), (100, 3), (700, 10), (1500, 13)],
    gpu_sizes=[(1, 2), (100, 3), (700, 10), (1500, 13), (1 << 20, 32)],
    launch=lambda labels, predictions, cm: (CM_BLOCKS, TPB),
    out_init=0,
    out_names=["cm"],
    args=_kernel_args,
    mistakes={
        CONFUSION_HINTS["transposed"]: lambda t, p, c: confusion_spec(t, p, c).T.copy(),
        CONFUSION_HINTS["unzeroed"]: lambda t, p, c: plus_filler(confusion_spec(t, p, c), CM_BLOCKS),
        CONFUSION_HINTS["tx only"]: lambda t, p, c: plus_filler(confusion_spec(t, p, c), CM_BLOCKS, _upper_cells(c)),
        CONFUSION_HINTS["upper empty"]: _upper_cells_empty,
        CONFUSION_HINTS["no stride"]: lambda t, p, c: confusion_spec(t[: CM_BLOCKS * TPB], p[: CM_BLOCKS * TPB], c),
    },
    budget=Budget(
        atomics={"cm": lambda size: CM_BLOCKS * _cells(size)},
        atomics_per_thread=lambda size: math.ceil(_cells(size) / TPB),
    ),
    ptx="void(int32[:], int32[:], int32[:, :])",  # a GPU must accept it: the shared array's size is a constant
    points=3,
)
