"""The known mistakes of lessons 00-04's exercises (:mod:`.ex_00_04`) that get a named hint: what a kernel with
each mistake computes (a ``Problem.mistakes`` entry compares the kernel's output with it), and the checker that
names a duplicate write in exercises where each output element has one owner.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ..exercises import CheckResult, Problem
from ..exercises.races import DUPLICATE_STORE_HINT, WRITE_RACE_HINT
from ..kernels._launch import ceil_div
from . import answers as _ans

__all__ = [
    "blur_halo",
    "blur_wraps",
    "strip_three_outputs",
    "transpose_one_row_per_thread",
    "with_duplicate_write_hint",
]


def with_duplicate_write_hint(
    problem: Problem, hint: str, over_budget: dict[str, str] | None = None
) -> Callable[[Any], CheckResult]:
    """A checker that runs ``problem`` and, where two threads wrote the same output element (all values
    right), gives ``hint`` instead of the harness's general advice about atomics: in these exercises each
    element has one owner, so the index is what is wrong, and cuda.atomic (lesson 05) is not the fix.
    ``over_budget``: ``{budget check name: hint}`` for a correct kernel over that limit of the problem's budget,
    in place of the harness's hint (which speaks of shared memory where the exercise's point is another)."""

    def checker(kernel: Any, *, trusted: bool = False) -> CheckResult:
        res = problem.check(kernel, trusted=trusted)
        if res.hint in (WRITE_RACE_HINT, DUPLICATE_STORE_HINT):
            res.hint = hint
        elif res.status == "over budget":
            res.hint = next((h for name, h in (over_budget or {}).items() if f"but {name}:" in res.message), res.hint)
        return res

    return checker


def _blur(x: np.ndarray, left: np.ndarray, right: np.ndarray) -> np.ndarray:
    """``(left + x + right) / 3`` in float32, as the blur's spec computes it."""
    return (left + x + right).astype(np.float32) / np.float32(3)


def blur_halo(x: np.ndarray, *, keep_left: bool, keep_right: bool) -> np.ndarray:
    """The 3-point blur with the halo of every block of ``BLUR_TPB`` threads left at 0 (on the sides not kept):
    what a kernel computes that never loads ``x[i - 1]`` / ``x[i + 1]`` from the next block."""
    left = np.concatenate([[0], x[:-1]]).astype(np.float32)
    right = np.concatenate([x[1:], [0]]).astype(np.float32)
    starts = np.arange(x.size) % _ans.BLUR_TPB == 0
    ends = (np.arange(x.size) % _ans.BLUR_TPB == _ans.BLUR_TPB - 1) | (np.arange(x.size) == x.size - 1)
    if not keep_left:
        left[starts] = 0
    if not keep_right:
        right[ends] = 0
    return _blur(x, left, right)


def blur_wraps(x: np.ndarray) -> np.ndarray:
    """The blur with ``x[i - 1]`` unguarded at i = 0: Python (and the simulator) read ``x[-1]``, the last element."""
    right = np.concatenate([x[1:], [0]]).astype(np.float32)
    return _blur(x, np.roll(x, 1), right)


def strip_three_outputs(A: np.ndarray, B: np.ndarray) -> np.ndarray:
    """What a strip kernel computes with 3 outputs per thread instead of STRIP_TN = 4, under the check's launch
    (16 threads per block along x): the columns from 3W on are never written (NaN, the harness's fill)."""
    C = (A @ B).astype(np.float32)
    W = 16 * ceil_div(ceil_div(C.shape[1], _ans.STRIP_TN), 16)
    C[:, 3 * W :] = np.nan
    return C


def transpose_one_row_per_thread(a: np.ndarray) -> list[np.ndarray]:
    """What a tiled transpose gives under the exercise's launch (32 x 8 threads, one block per 32 x 32 tile) when
    each thread moves one element instead of 4 rows: with ``cuda.grid(2)`` only the first 8 rows per block are
    covered, with the tile's corner at ``32 * blockIdx.y`` only rows 0-7 of each tile. Unwritten: NaN."""
    rows = a.shape[0]
    grid_rows = np.arange(rows) < 8 * ceil_div(rows, 32)  # i = cuda.grid(2)[1] < 8 x the blocks along y
    tile_rows = np.arange(rows) % 32 < 8  # row0 + ty
    made = []
    for covered in (grid_rows, tile_rows):
        out = np.ascontiguousarray(a.T).astype(np.float32)
        out[:, ~covered] = np.nan
        made.append(out)
    return made
