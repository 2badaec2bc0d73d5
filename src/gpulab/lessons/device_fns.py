"""Lesson 01's device-function exercise: ``at(a, i, j)``, a bounds-checked 2-D read (``a[i, j]`` inside ``a``, 0
outside; ``i`` the row, ``j`` the column, as ``j, i = cuda.grid(2)`` gives them), which lesson 07's zero padding
needs. The learner writes ``at``; the check runs it inside a given kernel, :func:`neighbours4_kernel` (the sum of
an element's 4 neighbours, 0 past the edges), and names the typical mistakes (:func:`diagnose`): writing into an
array instead of returning, ``<=`` for ``<``, no ``0 <=`` (Python wraps ``a[-1]``), ``i`` and ``j`` swapped.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import numpy as np
from numba import cuda, float32

from ..exercises import CheckResult, Problem
from ..exercises.device_probe import NONE, OOB, Read, probe, sample_matrix
from ..problems import grid_2d
from ..source import define, py_func

__all__ = [
    "HINTS",
    "PTX_SIGNATURES",
    "at",
    "check_at",
    "diagnose",
    "kernel_with",
    "neighbours4_kernel",
    "problem",
]

SIGNATURE = "void(float32[:, :], float32[:, :])"


@cuda.jit(device=True)
def at(a, i, j):
    # a[i, j] inside the array, 0 outside: i is the row (axis 0), j the column (axis 1)
    if 0 <= i < a.shape[0] and 0 <= j < a.shape[1]:
        return a[i, j]
    return float32(0.0)


@cuda.jit
def neighbours4_kernel(a, out):
    j, i = cuda.grid(2)  # x -> column j, y -> row i
    if i < out.shape[0] and j < out.shape[1]:
        out[i, j] = at(a, i - 1, j) + at(a, i + 1, j) + at(a, i, j - 1) + at(a, i, j + 1)


PTX_SIGNATURES = [(neighbours4_kernel, SIGNATURE)]

HINTS = {
    "no return": "at must return the value it reads, `return a[i, j]` (and `return float32(0.0)` outside a): a device "
    "function hands its result back to the kernel that called it. It does not write into an array; only kernels "
    "do that, because a kernel cannot return anything.",
    "writes": "at wrote into the array a: a device function reads and returns its result (`return a[i, j]`), "
    "it does not store it anywhere. The kernel stores what at returns: `out[i, j] = at(a, i - 1, j) + ...`.",
    "swapped": "at(a, i, j) must return a[i, j] with i the row (checked against a.shape[0]) and j the column "
    "(against a.shape[1]): the kernel calls it with `j, i = cuda.grid(2)`, so i and j are swapped in your "
    "index or in your bounds.",
    "bound": "at read one element past the end: rows are 0 .. a.shape[0] - 1, so i == a.shape[0] is already "
    "outside. Use `i < a.shape[0]` and `j < a.shape[1]`, not `<=`, and join the tests with `and`: the row and the "
    "column must both be inside (with `or`, a row past the end gets through when its column is fine). (On a GPU "
    "nothing checks: the read returns whatever lies past the array.)",
    "too strict": "at returned 0 for elements inside the array, on its first or last row or column: the bounds "
    "test refuses valid indices. Rows are 0 .. a.shape[0] - 1 and columns 0 .. a.shape[1] - 1, both ends "
    "included: row 0 and row a.shape[0] - 1 are inside (so not `< a.shape[0] - 1`, not `0 < i`).",
    "none outside": "at returned None outside the array: every path of a device function must return a value. "
    "End it with `return float32(0.0)` for the indices outside a.",
    "wraps": "at(a, -1, j) returned the LAST row of a: a negative index counts from the end, in Python and "
    "in numba on a GPU alike (numba wraps signed indices). Check the lower bound too: `0 <= i < a.shape[0]` "
    "(and the same for j).",
    "not zero": "outside the array at must return 0 (the zero padding lesson 07 uses), `return float32(0.0)`.",
}


def _spec(a: np.ndarray) -> np.ndarray:
    """The sum of each element's 4 neighbours, with 0 outside the array (float32)."""
    p = np.pad(a, 1)
    return (p[:-2, 1:-1] + p[2:, 1:-1] + p[1:-1, :-2] + p[1:-1, 2:]).astype(np.float32)


def _with_read(read: Callable[[np.ndarray, int, int], float]) -> Callable[[np.ndarray], np.ndarray]:
    """What neighbours4_kernel computes when ``at`` is ``read``."""

    def out(a: np.ndarray) -> np.ndarray:
        res = np.empty_like(a)
        for i, j in np.ndindex(*a.shape):
            res[i, j] = read(a, i - 1, j) + read(a, i + 1, j) + read(a, i, j - 1) + read(a, i, j + 1)
        return res

    return out


def _wraps(a: np.ndarray, i: int, j: int) -> float:  # no `0 <=`: Python's a[-1] is the last row
    return float(a[i, j]) if i < a.shape[0] and j < a.shape[1] else 0.0


def _transposed(a: np.ndarray, i: int, j: int) -> float:  # i and j swapped in the index and the bounds
    return float(a[j, i]) if 0 <= j < a.shape[0] and 0 <= i < a.shape[1] else 0.0


def problem() -> Problem:
    """The check of ``at``: run inside neighbours4_kernel on matrices that are not square and not a multiple of
    the 16 x 16 block, with the two mistakes the outputs alone can name (the others raise in the simulator)."""
    return Problem(
        "at",
        _spec,
        lambda s, rng: (rng.uniform(-1, 1, tuple(s)).astype(np.float32),),
        sizes=[(1, 1), (3, 5), (20, 33)],
        launch=lambda a, out: grid_2d(*out.shape, (16, 16)),
        out_names=["out"],
        ptx=SIGNATURE,
        mistakes={HINTS["wraps"]: _with_read(_wraps), HINTS["swapped"]: _with_read(_transposed)},
    )


def kernel_with(at_fn: Any) -> Any:
    """neighbours4_kernel, defined again so that it calls ``at_fn`` (the learner's ``at``)."""
    src = inspect.getsource(py_func(neighbours4_kernel))
    return define(src, "neighbours4_kernel", {"cuda": cuda, "at": at_fn})


def _looks_swapped(a: np.ndarray, i: int, j: int, got: Read) -> bool:
    """What ``at(a, i, j)`` (inside ``a``) returns with i and j swapped in the index, the bounds, or both: an index
    error or 0 where ``j`` is not a valid row, ``a[j, i]`` where it is."""
    if got.value == OOB:
        return True
    if j >= a.shape[0]:
        return got.equals(0)
    return i < a.shape[1] and got.equals(a[j, i])


def _edges_refused(wrong: dict[tuple[int, int], Read], rows: int, cols: int) -> bool:
    """Whether the wrong reads inside the array are zeros filling whole edge rows or columns (a bound one too
    strict: `< a.shape[0] - 1`, `0 < i`); swapped bounds also give zeros, but in the columns past a.shape[0]."""
    if not all(r.equals(0) for r in wrong.values()):
        return False
    edges = [
        {(0, j) for j in range(cols)},
        {(rows - 1, j) for j in range(cols)},
        {(i, 0) for i in range(rows)},
        {(i, cols - 1) for i in range(rows)},
    ]
    covered = set().union(*(e for e in edges if e <= wrong.keys()))
    return covered == set(wrong)


def diagnose(at_fn: Any) -> str | None:
    """The named hint for a wrong ``at``, found by calling its Python code on a 3 x 5 matrix, inside and around
    it (plain Python, so in both modes: :mod:`gpulab.exercises.device_probe`); None when none of the typical
    mistakes fits."""
    a = sample_matrix(3, 5)
    rows, cols = a.shape
    inside = [(i, j) for i in range(rows) for j in range(cols)]
    edge = [(rows, 0), (0, cols), (rows, cols - 1), (rows - 1, cols)]
    below = [(-1, 0), (0, -1), (-1, 2), (1, -1)]
    p = probe(at_fn, a, inside + edge + below)
    if p.wrote:
        return HINTS["writes"]
    if all(r.value == NONE for r in p.at(inside).values()):
        return HINTS["no return"]
    wrong = {(i, j): r for (i, j), r in p.at(inside).items() if not r.equals(p.before[i, j])}
    if wrong and _edges_refused(wrong, rows, cols):
        return HINTS["too strict"]
    if wrong:
        return HINTS["swapped"] if any(_looks_swapped(p.before, i, j, r) for (i, j), r in wrong.items()) else None
    outside = p.at(edge + below)
    if any(r.value == OOB for r in p.at(edge).values()):
        return HINTS["bound"]
    if any(r.value == NONE for r in outside.values()):
        return HINTS["none outside"]
    if any(r.equals(p.before[i, j]) for (i, j), r in p.at(below).items()):
        return HINTS["wraps"]
    if any(not r.equals(0) for r in outside.values()):
        return HINTS["not zero"]
    return None


def check_at(at_fn: Any, *, trusted: bool = False) -> CheckResult:
    """Check the learner's device function ``at`` inside neighbours4_kernel, with a named hint for its mistake
    (``trusted``: gpulab's own ``at``, see :meth:`gpulab.lessons.Exercise.check`)."""
    p = problem()
    if not hasattr(at_fn, "py_func"):
        return p.check(at_fn)  # not a @cuda.jit function: the harness says what it expected
    from ..exercises.check import is_placeholder

    if is_placeholder(at_fn):
        return p.check(at_fn)  # "not implemented yet"
    res = p.check(kernel_with(at_fn), name="at", trusted=trusted)
    if not res.passed and res.status != "over budget":
        hint = diagnose(at_fn)
        if hint:
            res.hint = hint
    return res
