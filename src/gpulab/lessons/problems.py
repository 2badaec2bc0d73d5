"""The exercises of the lessons as data, and the helpers a lesson's cells call.

Lessons 00-04 are defined here; other lessons add a module ``gpulab/lessons/ex_<lessons>.py`` with
``EXERCISES_LIST = [Exercise(lesson, name, Problem(...), reference_kernel), ...]``, collected at import.

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
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import UsageError
from ..exercises import CheckResult, Problem
from ..kernels._launch import ceil_div
from ..kernels.elementwise import (
    add_grid_stride_kernel,
    add_kernel,
    saxpy_kernel,
    scale2d_kernel,
)
from ..kernels.matmul import TILE as MATMUL_TILE
from ..kernels.matmul import matmul_naive_kernel, matmul_tiled_kernel
from ..kernels.memory import transpose_naive_kernel
from ..source import py_func
from ..problems import grid_2d, launch_1d
from . import answers as _ans

__all__ = [
    "EXERCISES",
    "Exercise",
    "as_host",
    "check",
    "check_function",
    "compare",
    "exercise",
    "or_reference",
    "reveal",
]


def _vec(n: int, rng: np.random.Generator) -> np.ndarray:
    return rng.uniform(-1, 1, n).astype(np.float32)


def _mat(shape: Sequence[int], rng: np.random.Generator) -> np.ndarray:
    return rng.uniform(-1, 1, tuple(shape)).astype(np.float32)


@dataclass(frozen=True)
class Exercise:
    """One lesson exercise: the Problem that checks it and the reference kernel ``reveal`` shows."""

    lesson: str
    name: str
    problem: Problem
    reference: Any
    adapt: Callable[[Any], Callable[..., Any]] | None = None
    """For an exercise whose answer is a plain function, not a kernel: turns the learner's function into the
    ``host=`` function the Problem runs (e.g. with :func:`as_host`)."""
    checker: Callable[[Any], CheckResult] | None = None
    """For an exercise that a library module checks itself (``systolic.check_step``): runs the check,
    with that module's named mistakes, in place of ``problem``."""

    def check(self, answer: Any) -> CheckResult:
        """Run the Problem on ``answer`` (a kernel, or a function through ``adapt``)."""
        if self.checker is not None:
            return self.checker(answer)
        if self.adapt is None:
            return self.problem.check(answer)
        return self.problem.check(host=self.adapt(answer), name=self.problem.name)


def as_host(fn: Callable[..., Any], n_inputs: int, name: str | None = None) -> Callable[..., None]:
    """A ``host=`` function for :func:`gpulab.exercises.check_kernel` (or a Problem) that calls the plain
    function ``fn`` on the first ``n_inputs`` arguments (arrays as NumPy arrays, in both modes) and writes
    what it returns (one value or a tuple, one per output) into the outputs."""
    from .. import runtime

    def host(*call: Any) -> None:
        ins = [np.asarray(runtime.to_host(x)) if hasattr(x, "shape") else x for x in call[:n_inputs]]
        outs = call[n_inputs:]
        got = fn(*ins)
        got = got if isinstance(got, tuple) else (got,)
        if len(got) != len(outs):
            raise UsageError(f"{host.__name__} returned {len(got)} value(s); it must return {len(outs)}.")
        for out, value in zip(outs, got):
            out[...] = runtime.array_module(out).asarray(np.asarray(value, dtype=out.dtype).reshape(out.shape))

    host.__name__ = name or getattr(fn, "__name__", None) or "function"
    return host


def _problems() -> list[Exercise]:
    alpha = np.float32(2.5)
    ex = [
        # 01 · threads, blocks and grids
        Exercise(
            "01",
            "add",
            Problem(
                "add_kernel",
                lambda a, b: a + b,
                lambda n, rng: (_vec(n, rng), _vec(n, rng)),
                sizes=[1, 7, 100, 300],
                threads=[128, 32],
                out_names=["out"],
            ),
            add_kernel,
        ),
        Exercise(
            "01",
            "scale2d",
            Problem(
                "scale2d_kernel",
                lambda al, a: al * a,
                lambda s, rng: (alpha, _mat(s, rng)),
                sizes=[(1, 1), (5, 37), (20, 33)],
                launch=lambda al, a, out: grid_2d(*out.shape, (16, 16)),
                out_names=["out"],
            ),
            scale2d_kernel,
        ),
        Exercise(
            "01",
            "grid_stride",
            Problem(
                "add_grid_stride_kernel",
                lambda a, b: a + b,
                lambda n, rng: (_vec(n, rng), _vec(n, rng)),
                sizes=[1, 63, 64, 65, 200],
                launch=lambda a, b, out: (2, 32),
                out_names=["out"],
            ),
            add_grid_stride_kernel,
        ),
        # 02 · memory
        Exercise(
            "02",
            "saxpy",
            Problem(
                "saxpy_kernel",
                lambda al, x, y: al * x + y,
                lambda n, rng: (alpha, _vec(n, rng), _vec(n, rng)),
                sizes=[1, 31, 300],
                threads=[128, 32],
                out_names=["out"],
            ),
            saxpy_kernel,
        ),
        Exercise(
            "02",
            "transpose_naive",
            Problem(
                "transpose_naive_kernel",
                lambda a: np.ascontiguousarray(a.T),
                lambda s, rng: (_mat(s, rng),),
                sizes=[(1, 1), (5, 37), (20, 33)],
                launch=lambda a, out: grid_2d(*a.shape, (16, 16)),
                out_names=["out"],
            ),
            transpose_naive_kernel,
        ),
        Exercise(
            "02",
            "transpose_tiled",
            Problem(
                "transpose_tiled_kernel",
                lambda a: np.ascontiguousarray(a.T),
                lambda s, rng: (_mat(s, rng),),
                sizes=[(1, 1), (9, 40), (33, 20)],
                launch=lambda a, out: grid_2d(*a.shape, (32, 8)),
                out_names=["out"],
            ),
            _ans.transpose_tiled32_kernel,
        ),
        # 03 · matmul, one thread per output
        Exercise(
            "03",
            "matmul_naive",
            Problem(
                "matmul_naive_kernel",
                lambda A, B: A @ B,
                lambda s, rng: (_mat(s[:2], rng), _mat(s[1:], rng)),
                sizes=[(1, 1, 1), (17, 33, 9), (20, 16, 35)],
                launch=lambda A, B, C: grid_2d(*C.shape, (16, 16)),
                reduction=lambda A, B: A.shape[1],
                out_names=["C"],
            ),
            matmul_naive_kernel,
        ),
        Exercise(
            "03",
            "matvec",
            Problem(
                "matvec_kernel",
                lambda A, x: A @ x,
                lambda s, rng: (_mat(s, rng), _vec(s[1], rng)),
                sizes=[(1, 1), (37, 20), (70, 9)],
                threads=[32, 64],
                reduction=lambda A, x: A.shape[1],
                out_names=["y"],
            ),
            _ans.matvec_kernel,
        ),
        Exercise(
            "03",
            "linear_relu",
            Problem(
                "linear_relu_kernel",
                lambda X, W, b: np.maximum(X @ W + b, 0),
                lambda s, rng: (_mat(s[:2], rng), _mat(s[1:], rng), _vec(s[2], rng)),
                sizes=[(1, 1, 1), (9, 20, 33), (20, 12, 17)],
                launch=lambda X, W, b, Y: grid_2d(*Y.shape, (16, 16)),
                reduction=lambda X, W, b: X.shape[1] + 1,
                out_names=["Y"],
            ),
            _ans.linear_relu_kernel,
        ),
        # 04 · shared memory and tiling
        Exercise(
            "04",
            "blur3",
            Problem(
                "blur3_kernel",
                lambda x: (
                    (np.concatenate([[0], x[:-1]]) + x + np.concatenate([x[1:], [0]])).astype(np.float32)
                    / np.float32(3)
                ),
                lambda n, rng: (_vec(n, rng),),
                sizes=[1, 2, 31, 32, 33, 100],
                rtol=1e-5,
                atol=1e-6,
                launch=launch_1d(_ans.BLUR_TPB, arg=0),
                out_names=["out"],
            ),
            _ans.blur3_kernel,
        ),
        Exercise(
            "04",
            "matmul_tiled",
            Problem(
                "matmul_tiled_kernel",
                lambda A, B: A @ B,
                lambda s, rng: (_mat(s[:2], rng), _mat(s[1:], rng)),
                sizes=[(1, 1, 1), (17, 33, 9), (9, 20, 18)],
                launch=lambda A, B, C: grid_2d(*C.shape, (MATMUL_TILE, MATMUL_TILE)),
                reduction=lambda A, B: A.shape[1],
                out_names=["C"],
            ),
            matmul_tiled_kernel,
        ),
        Exercise(
            "04",
            "matmul_strip",
            Problem(
                "matmul_strip_kernel",
                lambda A, B: A @ B,
                lambda s, rng: (_mat(s[:2], rng), _mat(s[1:], rng)),
                sizes=[(1, 1, 1), (17, 33, 9), (20, 16, 70)],
                launch=lambda A, B, C: grid_2d(C.shape[0], ceil_div(C.shape[1], _ans.STRIP_TN), (16, 16)),
                reduction=lambda A, B: A.shape[1],
                out_names=["C"],
            ),
            _ans.matmul_strip_kernel,
        ),
    ]
    return ex


def _collect() -> dict[tuple[str, str], Exercise]:
    """Lessons 00-04 from this module, plus every ``gpulab/lessons/ex_*.py`` module's ``EXERCISES_LIST``
    (so the exercises of other lessons live in their own files)."""
    import importlib
    import pkgutil
    from pathlib import Path

    found = list(_problems())
    for mod in sorted(m.name for m in pkgutil.iter_modules([str(Path(__file__).parent)]) if m.name.startswith("ex_")):
        found += list(importlib.import_module(f"{__package__}.{mod}").EXERCISES_LIST)
    out: dict[tuple[str, str], Exercise] = {}
    for e in found:
        if (e.lesson, e.name) in out:
            raise RuntimeError(f"exercise {e.lesson}/{e.name} is defined twice")
        out[(e.lesson, e.name)] = e
    return out


EXERCISES: dict[tuple[str, str], Exercise] = _collect()


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
    return exercise(lesson, name).check(kernel)


def reveal(lesson: str, name: str, *, display: bool = True) -> str:
    """Show (and return) the reference answer of an exercise. Try first: the check tells you what is wrong."""
    from ..source import show_source

    return show_source(exercise(lesson, name).reference, display=display)


def or_reference(result: CheckResult, kernel: Any, lesson: str | None = None, name: str | None = None) -> Any:
    """``kernel`` if its check passed, else the exercise's reference kernel (printing which one is used),
    so the cells after an exercise run whether or not the learner has solved it yet."""
    if result.passed:
        return kernel
    if lesson is None or name is None:
        matches = [e for e in EXERCISES.values() if e.problem.name == result.name]
        if len(matches) != 1:
            raise UsageError(
                f"or_reference: say which exercise {result.name!r} is, e.g. or_reference(result, kernel, '01', 'add')."
            )
        ex = matches[0]
    else:
        ex = exercise(lesson, name)
    ref = ex.reference
    ref_name = getattr(py_func(ref), "__name__", "reference")
    kind = "reference kernel" if hasattr(ref, "py_func") else "reference function"
    print(
        f"Your {result.name} has not passed its check yet ({result.status}): the cells below use the "
        f"{kind} ({ref.__module__ if hasattr(ref, '__module__') else 'gpulab'}.{ref_name}) instead."
    )
    return ref


def check_function(
    fn: Callable[..., Any], cases: Sequence[tuple[tuple, Any]], *, name: str | None = None, rtol: float = 1e-9
) -> CheckResult:
    """Check a plain Python function (a napkin-math formula) on ``cases = [(args, expected), ...]``.
    ``raise NotImplementedError`` gives "not implemented yet"; nothing raises."""
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
            return CheckResult(fname, "error", 0.0, 1.0, f"{fname}{args} raised {type(exc).__name__}: {exc}")
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
                "count multiplies and adds separately: a dot product of length L is 2L FLOPs.",
            )
    return CheckResult(fname, "passed", 1.0, 1.0, f"{len(cases)} case(s) correct.")


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
        try:
            p = float(prediction)
        except (TypeError, ValueError):
            raise UsageError(f"a prediction must be a number, got {prediction!r}; e.g. guess = 4") from None
        if m == 0:
            close = p == 0
        else:
            close = abs(p - m) <= tolerance * abs(m)
        ratio = f", {p / m:,.3g}x the {what} value" if m and p else ""
        verdict = "right" if close else ("too high" if p > m else "too low")
        head = f"You predicted {p:,.4g}{unit_s}; {what} {m:,.4g}{unit_s}: {verdict}{'' if close else ratio}."
    text = head + (f"\n{why}" if why else "")
    print(text)
    return text
