"""The exercises of the lessons as data, and the helpers a lesson's cells call.

Each group of lessons has a module ``gpulab/lessons/ex_<lessons>.py`` (lessons 00-04: :mod:`.ex_00_04`) with
``EXERCISES_LIST = [Exercise(lesson, name, Problem(...), reference_kernel), ...]``, collected here at import.
:class:`Exercise` and :func:`as_host` are defined in :mod:`.exercise` and importable from here.

In a lesson, an exercise is two cells: the learner's kernel (answer between ``### BEGIN SOLUTION`` /
``### END SOLUTION``, so the learner version holds ``raise NotImplementedError``), then::

    result = lessons.check("01", "add", add_kernel)   # runs the Problem, shows the verdict
    ### BEGIN HIDDEN TESTS
    assert result.passed, result                      # the source must pass; removed for learners
    ### END HIDDEN TESTS
    result

Cells that need the kernel afterwards take ``lessons.or_reference(result, add_kernel)``: the
learner's kernel once it passes, else the library's reference (and they say so). The reference
answer is shown only on request: ``lessons.reveal("01", "add")``.

Every exercise whose answer is a GPU kernel, device function or GPU ufunc's scalar function is also compiled for a
GPU (NVVM and ptxas, sm_75: the Problem's ``ptx=``, ``"auto"`` for the types of its first case's arguments), so a
kernel the simulator runs but no GPU compiles or loads (``math.fsum``, an import, a 64 KiB shared array) gets half
the points; the exercises whose answer is host code (NumPy functions, streams, a CuPy ElementwiseKernel's strings)
have none.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from ..errors import UsageError
from ..exercises import CheckResult
from ..exercises.frames import source_line
from ..source import py_func
from .tally import record as _record
from .exercise import Exercise as Exercise, as_host as as_host

__all__ = [
    "EXERCISES",
    "FUNCTION_EXERCISES",
    "Exercise",
    "as_host",
    "check",
    "check_function",
    "compare",
    "exercise",
    "hints_of",
    "lesson_exercises",
    "or_reference",
    "reveal",
    "stub_name",
]


def _modules(prefix: str) -> list[Any]:
    """This package's modules whose names start with ``prefix``, in the order of their names."""
    import importlib
    import pkgutil
    from pathlib import Path

    names = sorted(m.name for m in pkgutil.iter_modules([str(Path(__file__).parent)]) if m.name.startswith(prefix))
    return [importlib.import_module(f"{__package__}.{name}") for name in names]


_Key = tuple[str, str]


def _collect() -> tuple[dict[_Key, Exercise], list[_Key], dict[_Key, tuple[str, ...]], dict[_Key, int]]:
    """Every ``gpulab/lessons/ex_*.py`` module's ``EXERCISES_LIST``, in the order of the module names (so the
    exercises of each group of lessons live in their own file), each with its hints from the ``hints_*.py``
    modules' ``HINTS``; those modules' ``FUNCTION_EXERCISES`` (checked by :func:`check_function`) and the
    hints of tasks without a check (``HINT_ONLY``); and each hinted exercise's rank in the order the ``HINTS``
    list them (notebook order: :func:`lesson_exercises`)."""
    found: list[Exercise] = []
    for mod in _modules("ex_"):
        found += list(mod.EXERCISES_LIST)
    hints: dict[tuple[str, str], tuple[str, ...]] = {}
    functions: list[tuple[str, str]] = []
    hint_only: list[tuple[str, str]] = []
    for mod in _modules("hints_"):
        hints.update({k: tuple(v) for k, v in mod.HINTS.items()})
        functions += list(getattr(mod, "FUNCTION_EXERCISES", []))
        hint_only += list(getattr(mod, "HINT_ONLY", []))
    out: dict[tuple[str, str], Exercise] = {}
    for e in found:
        if (e.lesson, e.name) in out:
            raise RuntimeError(f"exercise {e.lesson}/{e.name} is defined twice")
        out[(e.lesson, e.name)] = replace(e, hints=hints.get((e.lesson, e.name), e.hints))
    stray = [k for k in hints if k not in out and k not in functions and k not in hint_only]
    if stray:
        raise RuntimeError(f"hints for {stray} name no exercise, FUNCTION_EXERCISES or HINT_ONLY entry")
    extra = {k: hints[k] for k in (*functions, *hint_only) if k in hints}
    return out, functions, extra, {k: i for i, k in enumerate(hints)}


EXERCISES: dict[tuple[str, str], Exercise]
FUNCTION_EXERCISES: list[tuple[str, str]]
"""The napkin-math exercises that a lesson checks with :func:`check_function` (lesson, function name)."""
EXERCISES, FUNCTION_EXERCISES, _OTHER_HINTS, _HINT_RANK = _collect()


def lesson_exercises(lesson: str | None = None) -> list[tuple[str, str]]:
    """The exercises (lesson, name) of ``lesson`` (default: of every lesson), the checked kernels and functions
    (:data:`EXERCISES`) and the napkin-math functions (:data:`FUNCTION_EXERCISES`), in the order the lesson meets
    them: the ``hints_*.py`` modules list every exercise's hints in notebook order (tests/test_lessons_hints.py
    holds them to the notebooks), so :func:`~gpulab.lessons.progress` tables read top to bottom."""
    keys = [k for k in (*EXERCISES, *FUNCTION_EXERCISES) if lesson is None or k[0] == str(lesson).zfill(2)]
    return sorted(keys, key=lambda k: (k[0], _HINT_RANK.get(k, len(_HINT_RANK))))


def stub_name(lesson: str, name: str) -> str:
    """The name of the function the learner version's stub defines for an exercise (the checked name)."""
    ex = EXERCISES.get((lesson, name))
    return ex.problem.name if ex is not None else name


def hints_of(lesson: str, name: str) -> tuple[str, ...]:
    """The hint tiers of an exercise (or of a task without a check); raises, naming the known ones, if none."""
    key = (str(lesson).zfill(2), str(name))
    tiers = EXERCISES[key].hints if key in EXERCISES else _OTHER_HINTS.get(key, ())
    if not tiers:
        have = [f"{les}/{n}" for les, n in (*EXERCISES, *_OTHER_HINTS) if les == key[0]]
        where = f"lesson {key[0]}'s are: {', '.join(have)}" if have else "that lesson has none"
        raise UsageError(f'no hints for {key[0]}/{key[1]}; {where} (e.g. lessons.hint("05", "dot_atomic")).')
    return tiers


def exercise(lesson: str, name: str) -> Exercise:
    """The exercise ``name`` of lesson ``lesson`` (e.g. ``"01", "add"``)."""
    key = (str(lesson).zfill(2), str(name))
    if key not in EXERCISES:
        known = ", ".join(f"{les}/{n}" for les, n in EXERCISES)
        raise UsageError(f"no exercise {key[0]}/{key[1]}; the exercises are: {known}.")
    return EXERCISES[key]


def check(lesson: str, name: str, kernel: Any) -> CheckResult:
    """Check the learner's ``kernel`` for exercise ``name`` of ``lesson``; returns the verdict
    (renders as a table in Jupyter; never raises for the learner's mistake)."""
    ex = exercise(lesson, name)
    result = ex.check(kernel)
    result.details["exercise"] = (ex.lesson, ex.name)  # or_reference trusts this verdict for this exercise only
    _record(ex.lesson, ex.name, kernel, result.status)  # for lessons.progress(lesson)
    return result


def reveal(lesson: str, name: str, *, display: bool = True) -> str:
    """Show (and return) the reference answer of an exercise. Try first: the check tells you what is wrong."""
    from ..source import show_source

    return show_source(exercise(lesson, name).reference, display=display)


def or_reference(result: CheckResult, kernel: Any, lesson: str | None = None, name: str | None = None) -> Any:
    """``kernel`` if its check passed, else the exercise's reference kernel (printing which one is used and why),
    so the cells after an exercise run whether or not the learner has solved it yet. A kernel right only with x
    and y exchanged has not passed (the cells below launch it with x along the columns): the reference is used."""
    if lesson is None or name is None:
        if result.passed:
            return kernel
        matches = [e for e in EXERCISES.values() if e.problem.name == result.name]
        if len(matches) != 1:
            raise UsageError(
                f"or_reference: say which exercise {result.name!r} is, e.g. or_reference(result, kernel, '01', 'add')."
            )
        ex = matches[0]
    else:
        ex = exercise(lesson, name)
        checked = result.details.get("exercise")
        if checked and tuple(checked) != (ex.lesson, ex.name):
            # `result` now holds another exercise's verdict (its check cell ran later): that pass must not let
            # this kernel through unchecked, so check it again
            print(f"(result is the check of lesson {checked[0]}'s {checked[1]!r}: checking your {ex.name!r} again)")
            result = check(ex.lesson, ex.name, kernel)
        if result.passed:
            return kernel
    ref = ex.reference
    ref_name = getattr(py_func(ref), "__name__", "reference")
    kind = "reference kernel" if hasattr(ref, "py_func") else "reference function"
    used = f"the {kind} ({ref.__module__ if hasattr(ref, '__module__') else 'gpulab'}.{ref_name})"
    if result.details.get("orientation") == "exchanged":
        print(
            f"Your {result.name} is correct only when launched with x and y exchanged, and the cells below launch "
            f"it the course's way, x along the columns, where it is wrong: they use {used} instead. Write "
            "`j, i = cuda.grid(2)` (j the column, i the row) and run its check again."
        )
    else:
        print(f"Your {result.name} has not passed its check yet ({result.status}): the cells below use {used} instead.")
    return ref


FLOP_HINT = "count multiplies and adds separately: a dot product of length L is 2L FLOPs."


def check_function(
    fn: Callable[..., Any],
    cases: Sequence[tuple[tuple, Any]],
    *,
    name: str | None = None,
    rtol: float = 1e-9,
    hint: str | Callable[[tuple, Any], str | None] = FLOP_HINT,
) -> CheckResult:
    """Check a plain Python function (a napkin-math formula) on ``cases = [(args, expected), ...]``.
    ``raise NotImplementedError`` gives "not implemented yet"; nothing raises. ``hint`` is shown with a wrong
    answer (the default is about counting FLOPs); a callable ``hint(args, got)`` names the mistake that case's
    answer shows, or returns None for no hint. The verdict of a lesson's napkin-math exercise
    (:data:`FUNCTION_EXERCISES`, by the function's name) counts in :func:`gpulab.lessons.progress`."""
    result = _check_function(fn, cases, name=name, rtol=rtol, hint=hint)
    for lesson, ex_name in FUNCTION_EXERCISES:  # a lesson's napkin-math exercise: recorded for lessons.progress
        if ex_name == result.name:
            _record(lesson, ex_name, fn, result.status)
    return result


def _check_function(
    fn: Callable[..., Any],
    cases: Sequence[tuple[tuple, Any]],
    *,
    name: str | None,
    rtol: float,
    hint: str | Callable[[tuple, Any], str | None],
) -> CheckResult:
    fname: str = name or getattr(fn, "__name__", None) or "function"
    for args, expected in cases:
        try:
            got = fn(*args)
        except NotImplementedError:
            return CheckResult(
                fname,
                "not implemented",
                0.0,
                1.0,
                "not implemented yet: replace `raise NotImplementedError` with your code.",
            )
        except Exception as exc:  # noqa: BLE001 - the learner's code: report, never crash the notebook
            line = source_line(exc)  # the learner's line that raised, when it is theirs
            at = f" at line {line[0]}: `{line[1]}`" if line else ""
            return CheckResult(fname, "error", 0.0, 1.0, f"{fname}{args} raised {type(exc).__name__}{at}: {exc}")
        try:
            ok = math.isclose(float(got), float(expected), rel_tol=rtol, abs_tol=0.0)
        except (TypeError, ValueError):
            ok = False
        if not ok:
            return CheckResult(
                fname,
                "failed",
                0.0,
                1.0,
                f"{fname}{args} returned {got!r}, expected {expected!r}.",
                _hint_for(hint, args, got),
            )
    return CheckResult(fname, "passed", 1.0, 1.0, f"{len(cases)} case(s) correct.")


def _hint_for(hint: str | Callable[[tuple, Any], str | None], args: tuple, got: Any) -> str:
    if not callable(hint):
        return hint
    try:
        return hint(args, got) or ""
    except Exception:  # noqa: BLE001 - a hint that cannot read this answer gives none, never a traceback
        return ""


def prediction_number(prediction: Any, unit: str = "") -> float:
    """A learner's prediction as a number: ints and floats as they are, and text the way people write numbers
    (``"4,000,000"``, ``"1e6"``, ``"1/2"``, ``"10x"``, ``"50%"``: 0.5, or 50 when ``unit`` is ``"%"``).
    Raises :class:`UsageError` saying what to type for anything else: words, ``True``, NaN or infinity, a list."""
    example = "e.g. guess = 4, guess = 2.5e6 or guess = 1 / 8"
    if isinstance(prediction, (bool, np.bool_)):
        raise UsageError(f"a prediction must be a number, got {prediction!r} (a yes/no value); {example}")
    if isinstance(prediction, str):
        text = prediction.strip().replace("_", "").replace(" ", "")
        if "," in text:  # thousands separators only (4,000,000); 0,5 is a decimal comma, which Python does not read
            if not re.fullmatch(r"[+-]?\d{1,3}(,\d{3})+(\.\d*)?([eE][+-]?\d+)?[%xX×]?", text):
                raise UsageError(
                    f"a prediction must be a number, got the text {prediction!r}: write decimals with a point "
                    f"(0.5, not 0,5) and thousands without commas or with them in threes (4000000 or 4,000,000)."
                )
            text = text.replace(",", "")
        scale = 1.0
        if text.endswith("%"):
            text, scale = text[:-1], (1.0 if unit.strip() == "%" else 0.01)
        elif text[-1:] in ("x", "X", "×"):
            text = text[:-1]
        num, _, den = text.partition("/")
        try:
            value = float(num) / float(den) * scale if den else float(num) * scale
        except (ValueError, ZeroDivisionError):
            raise UsageError(f"a prediction must be a number, got the text {prediction!r}; {example}") from None
    elif isinstance(prediction, tuple) and len(prediction) > 1 and all(isinstance(v, int) for v in prediction):
        raise UsageError(
            f"Python reads a number written with commas as several numbers: your guess is {prediction!r}. "
            "Write one number without commas: guess = 1000 or guess = 1_000 (and 12.5, not 12,5)."
        )
    else:
        try:
            value = float(prediction)
        except (TypeError, ValueError):
            kind = type(prediction).__name__
            raise UsageError(f"a prediction must be one number, got a {kind}: {prediction!r}; {example}") from None
    if not math.isfinite(value):
        raise UsageError(f"a prediction must be a finite number, got {prediction!r}; {example}")
    return value


def compare(
    prediction: Any, measured: Any, *, unit: str = "", why: str = "", what: str = "measured", tolerance: float = 0.25
) -> str:
    """Print (and return) how a learner's ``prediction`` compares with a ``measured`` figure, then ``why``.

    ``prediction=None`` (nothing entered yet) prints the value and the explanation anyway. Within
    ``tolerance`` (relative) counts as right. ``what`` says where the figure comes from ("measured",
    "spec sheet", "simulated", "a model"). A non-numeric ``measured`` (``"pairwise"``, ``"no"``) is an answer
    compared word for word, ignoring case.
    """
    unit_s = f" {unit}" if unit else ""
    if not isinstance(measured, (int, float, np.integer, np.floating)):
        answer = str(measured)
        if prediction is None:
            head = f"The answer: {answer}. (Enter a prediction above and rerun to compare.)"
        else:
            right = str(prediction).strip().lower() == answer.strip().lower()
            head = f"You predicted {prediction!r}; the answer is {answer!r}: {'right' if right else 'not quite'}."
        text = head + (f"\n{why}" if why else "")
        print(text)
        return text
    m = float(measured)
    if prediction is None:
        head = f"{what[:1].upper()}{what[1:]}: {m:,.4g}{unit_s}. (Enter a prediction above and rerun to compare.)"
    else:
        p = prediction_number(prediction, unit)
        if m == 0:
            close = p == 0
        else:
            close = abs(p - m) <= tolerance * abs(m)
        ratio = f", {p / m:,.3g}x the {what} value" if m and p and (p > 0) == (m > 0) else ""
        verdict = "right" if close else ("too high" if p > m else "too low")
        head = f"You predicted {p:,.4g}{unit_s}; {what} {m:,.4g}{unit_s}: {verdict}{'' if close else ratio}."
    text = head + (f"\n{why}" if why else "")
    print(text)
    return text
