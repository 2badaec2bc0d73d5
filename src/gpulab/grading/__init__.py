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

PARTIAL_RULE = (
    "Partial credit: a check earns all its points, half when the code is correct but over a budget, not compilable "
    "to PTX or right only with x and y exchanged, or none when it is wrong; the cell earns its points times the "
    "share its checks earned, and a half counts once for every check of the same function."
)
"""The rule behind a part score, shown under a cell that earned some of its points (here, and on the feedback page of
``labs grade`` under each "partial" row)."""


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


def _fraction(result: Any) -> float:
    """The share of its points a check earned, in ``[0, 1]`` (0 for a trusted verdict or one worth nothing)."""
    maximum = float(getattr(result, "max_score", 0.0))
    if maximum <= 0 or _trusted(result):
        return 0.0
    return min(max(float(getattr(result, "score", 0.0)) / maximum, 0.0), 1.0)


def _penalised(results: tuple) -> dict[str, float]:
    """For each checked function (a verdict's ``name``) that some check found correct but short of full points
    (over a budget, not compilable to PTX, right only with x and y exchanged: half), the lowest such share."""
    caps: dict[str, float] = {}
    for r in results:
        f = _fraction(r)
        if 0.0 < f < 1.0:
            key = str(getattr(r, "name", ""))
            caps[key] = min(f, caps.get(key, 1.0))
    return caps


def report(*results: Any, points: float | None = None) -> float:
    """Show the verdict of one or more checks and return the points earned.

    ``results`` are :class:`gpulab.exercises.CheckResult` objects (the visible check first, then hidden
    ones); ``points`` defaults to the first (visible) check's ``max_score``, so the cell is worth the same
    with or without its hidden tests. Each check earns the share of its points its verdict gives (all, half,
    or none for a wrong answer, an error, not implemented), except that a penalty counts once: when a check
    of a function is correct but short of full points (half: over a budget, not compilable to PTX, right only
    with x and y exchanged), every check of that function (same verdict ``name``) earns at most that share,
    also the checks that did not judge it (hidden tests with ``budget=None``, ``ptx=None``). The cell earns
    ``points * sum(share * max_score) / sum(max_score)``, clipped to ``[0, points]``: correctness averaged
    over the checks, times the quality factor, so a correct kernel over its budget earns half the cell, as
    its verdict says.

    Returning the number makes it the cell's value, which nbgrader's autograder reads as partial credit;
    nothing is raised, so a cell that calls ``report`` last never scores 0 for an exception of the checker's
    own. A verdict of a check run with ``trusted=True`` (gpulab's tests of their own references, which skip
    the own-code stage; see :func:`gpulab.exercises.check.run_problem`) earns nothing here.
    """
    if not results:
        from gpulab.errors import UsageError

        raise UsageError("report() needs at least one check result, got none; pass what check_kernel returned")
    caps = _penalised(results)
    weights = [max(float(getattr(r, "max_score", 0.0)), 0.0) for r in results]
    shares = [min(_fraction(r), caps.get(str(getattr(r, "name", "")), 1.0)) for r in results]
    maximum = sum(weights)
    total = float(getattr(results[0], "max_score", 0.0)) if points is None else float(points)
    earned = sum(w * f for w, f in zip(weights, shares))
    score = 0.0 if maximum <= 0 else total * earned / maximum
    score = round(min(max(score, 0.0), total), 3)
    capped = sorted({str(getattr(r, "name", "")) for r, f in zip(results, shares) if f < _fraction(r)})
    why = sorted({str(r.status) for r in results if str(getattr(r, "name", "")) in capped and 0 < _fraction(r) < 1})
    _reported.extend(results)
    try:
        from IPython.display import display

        for r in results:
            display(r)
    except ImportError:  # pragma: no cover - IPython comes with ipykernel
        for r in results:
            print(r)
    if 0 < score < total:  # a part score: the rule behind it (and why the hidden checks' points were capped)
        line = f"This cell: {score:g}/{total:g} points."
        if capped:
            line += (
                f" {', '.join(capped)}: part of the points in a verdict above ({', '.join(why)}); that counts for "
                "every check of it, also those that skip budgets and PTX."
            )
        print(f"{line}\n{PARTIAL_RULE}")
    return score


def __getattr__(name: str) -> Any:
    if name == "grade":
        from .grader import grade

        return grade
    if name in ("GradeRow", "format_table"):
        from . import rows

        return getattr(rows, name)
    if name == "grade_folder":
        from .gradebook import grade_folder

        return grade_folder
    if name == "assemble":
        from .assemble import assemble

        return assemble
    raise AttributeError(f"module 'gpulab.grading' has no attribute {name!r}")
