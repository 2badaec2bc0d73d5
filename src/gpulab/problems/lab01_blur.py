"""Lab 01 · exercise 4: a device function, ``at_clamped(a, i, j)``, and the 3 x 3 box blur that calls it.

``at_clamped`` reads ``a`` at ``(i, j)`` clamped into the array (``i`` into ``0 .. a.shape[0] - 1``, ``j`` into
``0 .. a.shape[1] - 1``): the edge element is repeated past the border, the "replicate" padding of image filters
(lesson 01's ``at`` pads with zeros instead). ``blur3_kernel(a, out)`` sets ``out[i, j]`` to the mean of the 3 x 3
window around ``(i, j)``, read through ``at_clamped``, one thread per pixel with ``j, i = cuda.grid(2)``. The check
runs the kernel on images that are not square and not a multiple of the 16 x 8 block, compiles it (with the device
function it calls) to PTX, and names the typical mistakes: from the output (zero padding, a sum for the mean, the
kernel passing the column first) and, for the device function, by calling its Python code around a small matrix
(:func:`diagnose`, with :mod:`gpulab.exercises.device_probe` as lesson 01's ``at`` is checked): zero padding, the
lower side not clamped (Python wraps ``a[-1]``), the upper side not clamped (a read past the end), clamped to
``a.shape[0]`` rather than ``a.shape[0] - 1``, ``i`` and ``j`` swapped, no return.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..exercises import random_arrays
from ..exercises.device_probe import NONE, OOB, DeviceFnProblem, Read, probe, sample_matrix
from ._common import launch_2d

__all__ = ["BLUR3", "BLUR_BLOCK", "BLUR_HINTS", "blur3_spec", "diagnose_at_clamped"]

BLUR_BLOCK = (16, 8)  # x: columns, y: rows

BLUR_HINTS = {
    "zero": "at_clamped returned 0 outside the image: that is zero padding (lesson 01's `at`), which darkens the "
    "blurred border. Replicate padding reads the nearest edge element instead: clamp each index into the array "
    "(the row into 0 .. a.shape[0] - 1, the column into 0 .. a.shape[1] - 1), then read a at the clamped "
    "indices.",
    "wraps": "at_clamped(a, -1, j) read a[-1, j], the LAST row, and at_clamped(a, i, -1) read a[i, -1], the last "
    "column: the indices are not clamped on their lower side, and a negative index counts from the end, in Python "
    "and in numba on a GPU alike (numba wraps it). Clamp both sides: max with 0 for the lower side, min with "
    "a.shape[0] - 1 for the upper (and a.shape[1] - 1 for j).",
    "wraps row": "at_clamped(a, -1, j) read a[-1, j], the LAST row: i is not clamped on its lower side, and a "
    "negative index counts from the end, in Python and in numba on a GPU alike (numba wraps it). Clamp both sides "
    "of i: max with 0 for the lower side, min with a.shape[0] - 1 for the upper.",
    "wraps column": "at_clamped(a, i, -1) read a[i, -1], the LAST column: j is not clamped on its lower side, and "
    "a negative index counts from the end, in Python and in numba on a GPU alike (numba wraps it). Clamp both "
    "sides of j: max with 0 for the lower side, min with a.shape[1] - 1 for the upper.",
    "past end": "at_clamped(a, a.shape[0] + 1, j) read past the end of a: the index is not clamped on its upper "
    "side. Clamp both sides: min with the last valid index, a.shape[0] - 1, as well as max with 0 (and the same "
    "for j with a.shape[1] - 1). (On a GPU nothing checks: the read returns whatever lies after the array.)",
    "off by one": "at_clamped read row a.shape[0] (or column a.shape[1]), one past the last: rows are "
    "0 .. a.shape[0] - 1, so clamp to `a.shape[0] - 1`, not `a.shape[0]` (and columns to `a.shape[1] - 1`).",
    "swapped": "at_clamped(a, i, j) must return a[i, j] with i the row, clamped into 0 .. a.shape[0] - 1, and j "
    "the column, clamped into 0 .. a.shape[1] - 1: the kernel calls it with `j, i = cuda.grid(2)`, so i and j are "
    "swapped in your index or in your bounds.",
    "no return": "at_clamped must return the element it reads, `return a[i, j]`: a device function hands its "
    "result back to the kernel that called it and stores nothing; the kernel stores the mean in out[i, j].",
    "writes": "at_clamped wrote into the array a: a device function reads and returns (`return a[i, j]`); the "
    "kernel adds up what it returns and stores the mean: `out[i, j] = acc / 9.0`.",
    "none outside": "at_clamped returned None for indices outside the image: every path of a device function must "
    "return a value. Clamp the indices first, then `return a[i, j]` for every i and j.",
    "sum": "out is 9 times the expected: that is the sum of the 3 x 3 window. A box blur is its mean: divide the "
    "sum by 9.",
    "call swapped": "out is what at_clamped(a, j + dj, i + di) gives: the kernel passed the column first. Call it "
    "as at_clamped(a, i + di, j + dj), i the row (cuda.grid(2)'s y), j the column (its x).",
}


def _window_mean(a: np.ndarray, rows: np.ndarray, cols: np.ndarray) -> np.ndarray:
    """The mean of the 3 x 3 windows of ``a[rows][:, cols]``, where ``rows`` and ``cols`` are the indices the padded
    image reads (one more at each end than ``a`` has), in float64, rounded to float32."""
    return _mean3x3(a.astype(np.float64)[np.ix_(rows, cols)], *a.shape)


def _mean3x3(p: np.ndarray, n: int, m: int) -> np.ndarray:
    """The 3 x 3 means of the padded ``(n + 2) x (m + 2)`` image ``p``, as float32."""
    windows = [p[1 + di : 1 + di + n, 1 + dj : 1 + dj + m] for di in (-1, 0, 1) for dj in (-1, 0, 1)]
    return (np.sum(windows, axis=0) / 9.0).astype(np.float32)


def _clamped(n: int) -> np.ndarray:
    return np.clip(np.arange(-1, n + 1), 0, n - 1)


def blur3_spec(a: np.ndarray) -> np.ndarray:
    """The 3 x 3 box blur with the edges replicated: the mean of ``a[clamp(i + di), clamp(j + dj)]``."""
    return _window_mean(a, _clamped(a.shape[0]), _clamped(a.shape[1]))


def _zero_padded(a: np.ndarray) -> np.ndarray:
    return _mean3x3(np.pad(a.astype(np.float64), 1), *a.shape)


def _lower_wraps(a: np.ndarray) -> np.ndarray:  # min(i, n - 1) only: index -1 is Python's last row
    rows, cols = _clamped(a.shape[0]), _clamped(a.shape[1])
    rows[0], cols[0] = a.shape[0] - 1, a.shape[1] - 1
    return _window_mean(a, rows, cols)


def _summed(a: np.ndarray) -> np.ndarray:
    return (blur3_spec(a).astype(np.float64) * 9).astype(np.float32)


def _call_swapped(a: np.ndarray) -> np.ndarray:  # at_clamped(a, j + dj, i + di): row index from j, clamped
    n, m = a.shape
    i, j = np.arange(n)[:, None], np.arange(m)[None, :]
    windows = [
        a.astype(np.float64)[np.clip(j + dj, 0, n - 1), np.clip(i + di, 0, m - 1)]
        for di in (-1, 0, 1)
        for dj in (-1, 0, 1)
    ]
    return (np.sum(windows, axis=0) / 9.0).astype(np.float32)


def _clamp(k: int, n: int) -> int:
    return min(max(k, 0), n - 1)


def _swapped_read(r: Read, i: int, j: int, rows: int, cols: int) -> bool:
    """The index ``at_clamped(a, i, j)`` read is one that swaps i and j in the index, the bounds or both."""
    return r.index in {
        (j, i),
        (_clamp(j, cols), _clamp(i, rows)),
        (_clamp(i, cols), _clamp(j, rows)),
        (_clamp(j, rows), _clamp(i, cols)),
    }


def diagnose_at_clamped(fn: Any) -> str | None:
    """The named hint for a wrong ``at_clamped``, from its Python code called inside and around a 3 x 5 matrix
    (the element each call returned and the index it read); None when none of the typical mistakes fits."""
    a = sample_matrix(3, 5)
    rows, cols = a.shape
    inside = [(i, j) for i in range(rows) for j in range(cols)]
    low = [(-1, 2), (-2, 2), (1, -1), (1, -2), (-1, -1)]
    high = [(rows, 2), (rows + 1, 2), (1, cols), (1, cols + 1), (rows, cols)]
    p = probe(fn, a, inside + low + high)
    if p.wrote:
        return BLUR_HINTS["writes"]
    if all(r.value == NONE for r in p.at(inside).values()):
        return BLUR_HINTS["no return"]
    wrong = {(i, j): r for (i, j), r in p.at(inside).items() if not r.equals(a[i, j])}
    if wrong:
        swapped = any(_swapped_read(r, i, j, rows, cols) for (i, j), r in wrong.items())
        return BLUR_HINTS["swapped"] if swapped else None
    outside = p.at(low + high)
    if any(r.value == NONE for r in outside.values()):
        return BLUR_HINTS["none outside"]
    if any(r.equals(0) for r in outside.values()):
        return BLUR_HINTS["zero"]
    far = {(rows + 1, 2): (rows, None), (1, cols + 1): (None, cols)}  # two past the end: what a clamp to shape reads
    for point, (row, col) in far.items():
        r = p.reads[point]
        if r.value == OOB and r.index is not None and len(r.index) == 2:
            if (row is not None and r.index[0] == row) or (col is not None and r.index[1] == col):
                return BLUR_HINTS["off by one"]
    if any(r.value == OOB for r in p.at(high).values()):
        return BLUR_HINTS["past end"]
    wraps = set()  # a[-1] read: Python's last row (or column)
    for (i, j), r in p.at(low).items():
        negative = r.index is not None and any(isinstance(k, int) and k < 0 for k in r.index)
        if negative or (r.equals(a[i, j]) and a[i, j] != a[_clamp(i, rows), _clamp(j, cols)]):
            wraps |= {"row"} if j >= 0 else {"column"} if i >= 0 else set()
    if wraps:
        return BLUR_HINTS["wraps" if len(wraps) == 2 else f"wraps {wraps.pop()}"]
    return None


BLUR3 = DeviceFnProblem(
    "lab01.blur3",
    spec=blur3_spec,
    inputs=lambda shape, rng: random_arrays(rng, shape),
    # not square, not a multiple of the 16 x 8 block, one pixel, one row, one column
    sizes=[(1, 1), (5, 7), (9, 20), (20, 33)],
    gpu_sizes=[(1, 1), (1, 40), (40, 1), (9, 20), (1081, 1919)],
    launch=launch_2d(BLUR_BLOCK),  # grid (ceil(cols / 16), ceil(rows / 8)): x along the columns
    mistakes={
        BLUR_HINTS["zero"]: _zero_padded,
        BLUR_HINTS["wraps"]: _lower_wraps,
        BLUR_HINTS["sum"]: _summed,
        BLUR_HINTS["call swapped"]: _call_swapped,
    },
    ptx="void(float32[:, :], float32[:, :])",  # the kernel and the device function it calls, compiled together
    points=3,
    device_fn="at_clamped",
    diagnose=diagnose_at_clamped,
)
