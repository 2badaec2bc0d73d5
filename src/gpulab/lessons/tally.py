"""Where a learner stands in a lesson, for this Python session: ``lessons.progress("05")``.

Every verdict a lesson's check gives (:func:`gpulab.lessons.check`, and :func:`gpulab.lessons.check_function` for
the napkin-math functions the ``hints_*.py`` modules list in ``FUNCTION_EXERCISES``) is recorded here, per
exercise and per checked function's name, so a lesson's demonstration of a broken kernel (lesson 01's
``add_unguarded``) does not count against the learner's own ``add_kernel``. Nothing is written to disk: a
restarted kernel starts a fresh tally, and Run All of an untouched learner version shows every exercise as
not tried (its stubs give "not implemented").

An exercise counts as **passed** once any function checked for it in this session passed; otherwise it shows
the latest verdict of the function with the stub's name (else of the last function checked), and "not tried"
while that verdict is "not implemented" or nothing was checked.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..source import py_func

__all__ = ["Progress", "forget", "progress", "record"]

# (lesson, exercise) -> {checked function's name: its latest status}; insertion order = order of checks
_RESULTS: dict[tuple[str, str], dict[str, str]] = {}


def _fn_name(fn: Any) -> str:
    return str(getattr(py_func(fn), "__name__", None) or getattr(fn, "__name__", None) or type(fn).__name__)


def record(lesson: str, name: str, fn: Any, status: str) -> None:
    """Note the verdict ``status`` of checking ``fn`` for exercise ``name`` of ``lesson`` (called by the checks)."""
    per_fn = _RESULTS.setdefault((str(lesson).zfill(2), str(name)), {})
    key = _fn_name(fn)
    per_fn.pop(key, None)  # re-insert: the last one checked is the last in the dict
    per_fn[key] = status


def forget() -> None:
    """Forget every recorded verdict (as a restarted kernel would)."""
    _RESULTS.clear()


def _status(key: tuple[str, str], stub_name: str) -> str:
    per_fn = _RESULTS.get(key)
    if not per_fn:
        return "not tried"
    if "passed" in per_fn.values():
        return "passed"
    status = per_fn.get(stub_name, list(per_fn.values())[-1])
    if status == "not implemented":
        return "not tried"
    return "failed" if status == "failed" else f"not passed ({status})"  # e.g. "not passed (over budget)"


@dataclass(frozen=True)
class Progress:
    """One lesson's exercises and their status in this session (``rows``: (exercise, status))."""

    lesson: str
    rows: tuple[tuple[str, str], ...]

    @property
    def done(self) -> int:
        return sum(1 for _, status in self.rows if status == "passed")

    @property
    def total(self) -> int:
        return len(self.rows)

    def __repr__(self) -> str:  # a notebook cell ending in ``lessons.progress("05")`` shows the table
        return str(self)

    def __str__(self) -> str:
        width = max([len("exercise"), *(len(n) for n, _ in self.rows)])
        lines = [f"Lesson {self.lesson}: your exercises in this session", f"  {'exercise':<{width}}  status"]
        lines += [f"  {n:<{width}}  {s}" for n, s in self.rows]
        lines.append(f"{self.done} of {self.total} done.")
        if self.done < self.total:
            lines.append(
                f'Run an exercise\'s check cell after writing it; stuck? lessons.hint("{self.lesson}", "NAME") '
                "gives a hint, and another one each time you call it again."
            )
        return "\n".join(lines)


def progress(lesson: str | int) -> Progress:
    """The table of ``lesson``'s exercises: passed, failed (the verdict's status) or not tried in this Python
    session, and "N of M done". A notebook shows it as the cell's result; in a script, ``print()`` it."""
    from ..errors import UsageError
    from .problems import lesson_exercises, stub_name

    les = str(lesson).zfill(2)
    names = [n for _, n in lesson_exercises(les)]
    if not names:
        known = sorted({les for les, _ in lesson_exercises()})
        raise UsageError(
            f"lesson {lesson!r} has no exercises; the lessons with exercises are {', '.join(known)} "
            '(pass the number, e.g. lessons.progress("05")).'
        )
    return Progress(les, tuple((n, _status((les, n), stub_name(les, n))) for n in names))
