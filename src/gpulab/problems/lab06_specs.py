"""Lab 06's answers that are CuPy kernel specs (dicts of strings): the :class:`SpecProblem` that checks a function
returning one, and the host-side checks of a spec's declarations against what the check passes (names, order and
types of the parameters), whose errors say what CuPy would do with them."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import UsageError
from ..exercises import Problem

__all__ = ["SpecProblem", "check_order", "check_types", "cupy_errors", "spec_of"]


@dataclass
class SpecProblem(Problem):
    """A Problem whose answer is a function returning a CuPy kernel spec (a dict of strings): ``check(spec_fn)``
    runs ``adapt(spec_fn)`` as the host function. ``check(host=fn)`` (the emulated gpu-size tests) still works."""

    adapt: Callable[[Callable[[], dict]], Callable[..., None]] | None = None

    def check(self, kernel: Any = None, *, scale: str | None = None, **overrides: Any) -> Any:
        if kernel is not None:
            if self.adapt is None:
                raise UsageError(f"SpecProblem {self.name} has no adapt= function to run {kernel!r}")
            overrides.setdefault("host", self.adapt(kernel))
            overrides.setdefault("name", getattr(kernel, "__name__", self.name))
        return super().check(None, scale=scale, **overrides)


def spec_of(spec_fn: Callable[[], Any], keys: tuple[str, ...]) -> dict[str, str]:
    if not callable(spec_fn):
        raise UsageError(
            f"the check takes your function itself (e.g. `check(adam_elementwise_spec)`, no parentheses), which it "
            f"calls to get the dict; it was given a {type(spec_fn).__name__}."
        )
    spec = spec_fn()
    name = getattr(spec_fn, "__name__", "the spec function")
    if not isinstance(spec, dict):
        raise UsageError(
            f"{name}() returned {type(spec).__name__}, not a dict: return {{{', '.join(map(repr, keys))}}}."
        )
    bad = [k for k in keys if not isinstance(spec.get(k), str)]
    if bad:
        raise UsageError(f"{name}() must give strings for {', '.join(map(repr, bad))} (CuPy compiles them as C).")
    return spec


def check_types(declared: list[tuple[str, str]], values: tuple, what: str) -> None:
    """Each declared type is the dtype of the value passed there (or a one-letter placeholder such as T)."""
    for (ctype, name), value in zip(declared, values):
        if len(ctype) == 1:  # a type placeholder (T), bound by what is passed
            continue
        given = np.dtype(value.dtype if hasattr(value, "dtype") else type(value))
        try:
            ok = np.dtype(ctype) == given
        except TypeError:
            ok = False
        if not ok:
            array = hasattr(value, "shape") and getattr(value, "ndim", 0) > 0
            why = (
                'CuPy refuses an array of another type ("Type is mismatched")'
                if array
                else f"CuPy would convert the scalar, and every operation it touches would run in {ctype} "
                "(float64 runs at 1/32 to 1/64 of the float32 rate on most GPUs, lesson 06)"
            )
            raise UsageError(
                f"{what} declares `{ctype} {name}`, but {name} is passed as {given.name}: declare the type of the "
                f"{'array' if array else 'scalar'} that is passed (`{given.name} {name}`, or a placeholder `T {name}`). "
                f"{why}."
            )


@contextlib.contextmanager
def cupy_errors() -> Iterator[None]:
    """CuPy's compile errors (gpu mode) as the learner's: a UsageError, whose verdict shows NVRTC's message."""
    try:
        yield
    except Exception as exc:
        if type(exc).__name__ != "CompileException":
            raise
        raise UsageError(f"CuPy could not compile your spec (NVRTC says): {str(exc)[:1500]}") from None


def check_order(declared: list[tuple[str, str]], want: tuple[str, ...], what: str, call: str) -> None:
    """CuPy binds a kernel's arguments by position: parameters named as the check names them must come in its order."""
    names = tuple(n for _, n in declared)
    if sorted(names) == sorted(want) and names != want:
        raise UsageError(
            f"{what} declares {', '.join(names)}, but the check calls the kernel as {call}: CuPy binds arguments by "
            f"position, not by name, so declare them in that order ({', '.join(want)})."
        )
