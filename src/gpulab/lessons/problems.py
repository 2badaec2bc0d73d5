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
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any


from ..errors import UsageError
from ..exercises import CheckResult
from ..exercises.frames import source_line
from ..exercises.misuse import not_a_kernel, refused
from ..exercises.races import readvise
from ..source import py_func
from .tally import record as _record
from .exercise import Exercise as Exercise, as_host as as_host
from .predict import compare as compare, prediction_number as prediction_number

__all__ = [
    "EXERCISES",
    "FUNCTION_EXERCISES",
    "Exercise",
    "as_host",
    "check",
    "check_function",
    "compare",
    "exercise",
    "exercise_key",
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


def exercise_key(lesson: Any, name: Any) -> _Key:
    """``(lesson, name)`` as the tables key it, read the way people type it: spaces around either dropped, the
    lesson as two digits (``1`` is ``"01"``), the name in any case, or the name of the function the exercise asks for
    (``"add_kernel"`` is ``"add"``). A key that names nothing is returned as typed (the caller says what exists)."""
    key = (str(lesson).strip().zfill(2), str(name).strip())
    known = [k for k in (*EXERCISES, *FUNCTION_EXERCISES, *_OTHER_HINTS) if k[0] == key[0]]
    if key in known:
        return key
    for k in known:
        stub = EXERCISES[k].problem.name if k in EXERCISES else k[1]
        if key[1].lower() in (k[1].lower(), stub.lower()):
            return k
    return key


def _unknown(key: _Key, names: list[_Key], head: str, noun: str, example: str) -> UsageError:
    """``head`` ("no exercise") for ``key``: the closest name of its lesson, and the lesson's ``noun``."""
    import difflib

    mine = [n for les, n in names if les == key[0]]
    if not mine:
        lessons = ", ".join(sorted({les for les, _ in names}))
        return UsageError(
            f"{head} {key[0]}/{key[1]}: lesson {key[0]!r} has none; the lessons with {noun}: {lessons} "
            f"(e.g. {example})."
        )
    close = difflib.get_close_matches(key[1].lower(), mine, n=1, cutoff=0.5)
    guess = f' did you mean "{close[0]}"?' if close else ""
    return UsageError(f"{head} {key[0]}/{key[1]};{guess} lesson {key[0]}'s {noun}: {', '.join(mine)} (e.g. {example}).")


def hints_of(lesson: str, name: str) -> tuple[str, ...]:
    """The hint tiers of an exercise (or of a task without a check); raises, naming the known ones, if none."""
    key = exercise_key(lesson, name)
    tiers = EXERCISES[key].hints if key in EXERCISES else _OTHER_HINTS.get(key, ())
    if not tiers:
        raise _unknown(key, [*EXERCISES, *_OTHER_HINTS], "no hints for", "hints", 'lessons.hint("05", "dot_atomic")')
    return tiers


def exercise(lesson: str, name: str) -> Exercise:
    """The exercise ``name`` of lesson ``lesson`` (e.g. ``"01", "add"``; read by :func:`exercise_key`)."""
    key = exercise_key(lesson, name)
    if key not in EXERCISES:
        raise _unknown(key, list(EXERCISES), "no exercise", "exercises", 'lessons.check("01", "add", add_kernel)')
    return EXERCISES[key]


def check(lesson: str, name: str, kernel: Any) -> CheckResult:
    """Check the learner's ``kernel`` for exercise ``name`` of ``lesson``; returns the verdict
    (renders as a table in Jupyter; never raises for the learner's mistake)."""
    ex = exercise(lesson, name)
    call = f'lessons.check("{ex.lesson}", "{ex.name}", {stub_name(ex.lesson, ex.name)})'
    why = not_a_kernel(kernel, call, "kernel" if ex.adapt is None and ex.problem.host is None else "function")
    if why is not None:
        return refused(ex.problem.name, ex.problem.points, why)  # not recorded: nothing of the learner's was checked
    result = ex.check(kernel)
    readvise(result, _races_advice(ex))  # where the race check's logged run was stopped: what works from here
    result.details["exercise"] = (ex.lesson, ex.name)  # or_reference trusts this verdict for this exercise only,
    result.details["kernel"] = kernel  # and for this kernel only (not one its cell defined again since)
    _record(ex.lesson, ex.name, kernel, result.status)  # for lessons.progress(lesson)
    return result


def _races_advice(ex: Exercise) -> str:
    """What a lesson's learner can do when the race check's logged run was stopped at its limit: lessons.check gives
    it no more time, but the exercise's own Problem takes ``timeout=`` (up to the check's most for that run)."""
    from ..exercises import run

    no_more = "lessons.check gives that run no more time: the kernel passes, but it was not searched for races."
    if ex.checker is not None or ex.adapt is not None or ex.problem.timeout >= run.EXTRA_RUN_S:
        return no_more
    where = f'lessons.exercise("{ex.lesson}", "{ex.name}")'
    call = f"{where}.problem.check({stub_name(ex.lesson, ex.name)}, timeout={run.EXTRA_RUN_S:g})"
    return f"{no_more} `{call}` runs the same check and gives that run up to {run.EXTRA_RUN_S:g} s."


def reveal(lesson: str, name: str, *, display: bool = True) -> str:
    """Show (and return) the reference answer of an exercise. Try first: the check tells you what is wrong."""
    from ..source import show_source

    return show_source(exercise(lesson, name).reference, display=display)


def or_reference(result: CheckResult, kernel: Any, lesson: str | None = None, name: str | None = None) -> Any:
    """``kernel`` if its check passed, else the exercise's reference kernel (printing which one is used and why),
    so the cells after an exercise run whether or not the learner has solved it yet. A kernel right only with x
    and y exchanged has not passed (the cells below launch it with x along the columns): the reference is used.
    A verdict of another exercise, or of another version of the kernel (its cell ran again after the check), is not
    trusted: the kernel is checked again."""
    _result_arg(result, kernel)
    checked = result.details.get("exercise")
    if lesson is None or name is None:
        if checked:
            ex = exercise(*checked)
        elif result.passed:
            return kernel
        else:
            matches = [e for e in EXERCISES.values() if e.problem.name == result.name]
            if len(matches) != 1:
                raise UsageError(
                    f"or_reference: say which exercise {result.name!r} is, e.g. or_reference(result, kernel, '01', "
                    "'add')."
                )
            ex = matches[0]
    else:
        ex = exercise(lesson, name)
    if checked and tuple(checked) != (ex.lesson, ex.name):
        # `result` now holds another exercise's verdict (its check cell ran later): that pass must not let
        # this kernel through unchecked, so check it again
        print(f"(result is the check of lesson {checked[0]}'s {checked[1]!r}: checking your {ex.name!r} again)")
        result = check(ex.lesson, ex.name, kernel)
    elif "kernel" in result.details and py_func(result.details["kernel"]) is not py_func(kernel):
        # the kernel's cell ran again after its check (edited, or not): the verdict is of the version before
        print(
            f"(result is the check of another version of {ex.problem.name}: its cell ran again after the check, "
            "so checking this one again)"
        )
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


def _result_arg(result: Any, kernel: Any) -> None:
    """Refuse a ``result`` that is not a check's verdict, saying what :func:`or_reference` takes."""
    if isinstance(result, CheckResult):
        return
    call = 'or_reference(result, kernel, "01", "add")'
    if isinstance(kernel, CheckResult):
        raise UsageError(
            f"{call}: the check's verdict comes first, then the kernel; it was given the kernel first. Swap the "
            "first two arguments: lessons.or_reference(result, add_kernel, ...)."
        )
    if result is None:
        raise UsageError(
            f"{call}: result must be what lessons.check returned; it was given None. Run the check cell first "
            '(result = lessons.check("01", "add", add_kernel)), then this one.'
        )
    raise UsageError(
        f"{call}: result must be what lessons.check returned; it was given {type(result).__name__} {result!r:.60}."
        " Did you swap the first two arguments?"
    )


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
    if not callable(fn):
        shown = fname if fname != "function" else "your_function"
        why = not_a_kernel(fn, f"lessons.check_function({shown}, cases)", "function")
        return refused(
            fname, 1.0, str(why).replace("A function that ends", "A call of it gives its value; one that ends")
        )
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
