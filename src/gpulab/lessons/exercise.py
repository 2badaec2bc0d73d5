"""What a lesson exercise is: an :class:`Exercise` (lesson, name, the Problem that checks it, the reference
``reveal`` shows) and :func:`as_host`, which lets a plain function be checked like a kernel.

The ``ex_*.py`` modules of this package define their exercises with these; :mod:`.problems` collects them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import UsageError
from ..exercises import CheckResult, Problem

__all__ = ["Exercise", "as_host", "returned_none"]


@dataclass(frozen=True)
class Exercise:
    """One lesson exercise: the Problem that checks it, the reference kernel ``reveal`` shows and its hints."""

    lesson: str
    name: str
    problem: Problem
    reference: Any
    adapt: Callable[[Any], Callable[..., Any]] | None = None
    """For an exercise whose answer is a plain function, not a kernel: turns the learner's function into the
    ``host=`` function the Problem runs (e.g. with :func:`as_host`)."""
    checker: Callable[..., CheckResult] | None = None
    """For an exercise that a library module checks itself (``systolic.check_step``): runs the check,
    with that module's named mistakes, in place of ``problem``. Called ``checker(answer)``, and
    ``checker(answer, trusted=True)`` for gpulab's own reference (see :meth:`check`)."""
    hints: tuple[str, ...] = ()
    """What :func:`gpulab.lessons.hint` gives, one tier per call: the idea (no code), then an outline of the code.
    Written in the ``hints_*.py`` modules of this package and attached by :mod:`.problems` when it collects."""

    def check(self, answer: Any, *, trusted: bool = False) -> CheckResult:
        """Run the Problem on ``answer`` (a kernel, or a function through ``adapt``). ``trusted=True``: ``answer``
        is gpulab's own (``ex.check(ex.reference, trusted=True)`` in gpulab's tests), so the check skips its
        own-code stage (see :func:`gpulab.exercises.check.run_problem`); :func:`gpulab.lessons.check`, the
        learners' call, never passes it."""
        if self.checker is not None:
            return self.checker(answer, trusted=True) if trusted else self.checker(answer)
        if self.adapt is None:
            return self.problem.check(answer, trusted=trusted)
        return self.problem.check(host=self.adapt(answer), name=self.problem.name, trusted=trusted)


def returned_none(name: str) -> str:
    """The verdict for a learner's function ``name`` that returned None (shared by the exercises that check one)."""
    return f"{name} returned None: it must return its result; is the `return` statement missing?"


NONE_HINT = (
    "a Python function that ends without a `return` statement gives None: end your function with `return` and the "
    "value it computed, at the same indentation as its other lines, not inside an `if` that may "
    "be skipped."
)


def _answer(err: UsageError, hint: str = "") -> UsageError:
    """``err``, marked as a verdict on what the learner's function returned (not a failure of gpulab's code): the
    check reports its text as the learner's (``gpulab_answer``), with ``hint`` (``gpulab_answer_hint``)."""
    err.gpulab_answer = True  # type: ignore[attr-defined]
    err.gpulab_answer_hint = hint  # type: ignore[attr-defined]
    return err


def as_host(fn: Callable[..., Any], n_inputs: int, name: str | None = None) -> Callable[..., None]:
    """A ``host=`` function for :func:`gpulab.exercises.check_kernel` (or a Problem) that calls the plain
    function ``fn`` on the first ``n_inputs`` arguments (arrays as NumPy arrays, in both modes) and writes
    what it returns (one value or a tuple, one per output) into the outputs."""
    from .. import runtime

    def host(*call: Any) -> None:
        ins = [np.asarray(runtime.to_host(x)) if hasattr(x, "shape") else x for x in call[:n_inputs]]
        outs = call[n_inputs:]
        got = fn(*ins)
        if got is None:
            raise _answer(UsageError(returned_none(host.__name__)), NONE_HINT)
        got = got if isinstance(got, tuple) else (got,)
        if len(got) != len(outs):
            raise _answer(UsageError(f"{host.__name__} returned {len(got)} value(s); it must return {len(outs)}."))
        for out, value in zip(outs, got):
            if isinstance(value, (str, bytes)):  # NumPy would read "0.000" as 0: the learner meant a number
                raise _answer(
                    UsageError(
                        f"{host.__name__} returned the text {value!r}; return the number itself, not a formatted "
                        "string (drop the f-string or str(...) around it)."
                    )
                )
            try:
                arr = np.asarray(value, dtype=out.dtype)
            except (TypeError, ValueError) as e:
                raise _answer(
                    UsageError(f"{host.__name__} returned {type(value).__name__}, not a number or array: {e}")
                ) from e
            if arr.size != out.size:
                raise _answer(
                    UsageError(
                        f"{host.__name__} returned {arr.size} value(s) (shape {arr.shape}) where {out.size} are "
                        f"expected (shape {out.shape})."
                    )
                )
            out[...] = runtime.array_module(out).asarray(arr.reshape(out.shape))

    host.__name__ = name or getattr(fn, "__name__", None) or "function"
    return host
