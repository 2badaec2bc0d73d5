"""Grading the labs: what a test cell calls, and the grader a teacher runs.

A lab's test cell ends with ``report(result)``::

    result = check_kernel(add_kernel, ..., points=2)
    report(result)

``report`` shows the verdict (which input, expected vs got, hint) and returns the points earned as
the cell's value, which is what nbgrader's autograder takes as partial credit; ``python -m gpulab
labs grade`` scores the cell the same way. The grader itself (:func:`grade`, :func:`grade_folder`)
lives in :mod:`gpulab.grading.grader` and :mod:`gpulab.grading.gradebook` and is imported lazily,
so a lab's import cell stays cheap.
"""

from __future__ import annotations

import warnings
from typing import Any

__all__ = ["report", "quiet_warnings", "grade", "grade_folder", "GradeRow", "assemble"]

# The results that report() saw, newest last (the grader reads them for the verdict text).
_reported: list = []


def quiet_warnings() -> None:
    """Silence numba's performance warnings (low occupancy on small grids in gpu mode).

    nbgrader scores a grade cell that writes anything to stderr as 0, and these warnings say nothing
    about correctness. Call it once, in a lab's import cell; the grader calls it too.
    """
    import importlib

    # numba-cuda up to 0.22 warns with numba.core.errors' class; later versions (0.30: the pinned one) with a class
    # of their own, numba.cuda.core.errors.NumbaPerformanceWarning, which is not a subclass of it: silence both.
    for module in ("numba.core.errors", "numba.cuda.core.errors"):
        try:
            category = importlib.import_module(module).NumbaPerformanceWarning
        except (ImportError, AttributeError):
            continue
        warnings.filterwarnings("ignore", category=category)


def _trusted(result: Any) -> bool:
    details = getattr(result, "details", None)
    return isinstance(details, dict) and bool(details.get("trusted"))


def report(*results: Any, points: float | None = None) -> float:
    """Show the verdict of one or more checks and return the points earned.

    ``results`` are :class:`gpulab.exercises.CheckResult` objects (the visible check first, then
    hidden ones); the points earned are ``points * sum(score) / sum(max_score)``, clipped to
    ``[0, points]``, where ``points`` defaults to the first (visible) check's ``max_score``, so the
    cell is worth the same with or without its hidden tests. Returning the number makes it the
    cell's value, which nbgrader's autograder reads as partial credit; nothing is raised, so a cell
    that calls ``report`` last never scores 0 for an exception of the checker's own. A verdict of a check
    run with ``trusted=True`` (gpulab's tests of their own references, which skip the own-code stage; see
    :func:`gpulab.exercises.check.run_problem`) earns nothing here.
    """
    if not results:
        from gpulab.errors import UsageError

        raise UsageError("report() needs at least one check result, got none; pass what check_kernel returned")
    earned = sum(0.0 if _trusted(r) else float(getattr(r, "score", 0.0)) for r in results)
    maximum = sum(float(getattr(r, "max_score", 0.0)) for r in results)
    total = float(getattr(results[0], "max_score", 0.0)) if points is None else float(points)
    score = 0.0 if maximum <= 0 else total * earned / maximum
    score = round(min(max(score, 0.0), total), 3)
    _reported.extend(results)
    try:
        from IPython.display import display

        for r in results:
            display(r)
    except ImportError:  # pragma: no cover - IPython comes with ipykernel
        for r in results:
            print(r)
    return score


def __getattr__(name: str) -> Any:
    if name in ("grade", "GradeRow", "format_table"):
        from . import grader

        return getattr(grader, name)
    if name == "grade_folder":
        from .gradebook import grade_folder

        return grade_folder
    if name == "assemble":
        from .assemble import assemble

        return assemble
    raise AttributeError(f"module 'gpulab.grading' has no attribute {name!r}")
