"""Lesson 08's first exercise, ``central_difference(f, x, h)``: the cases :func:`gpulab.lessons.check_function`
runs it on, and the hint that names the two usual mistakes (a one-sided difference, a missing ``/ 2``) from the
value the learner's function returned. :func:`gpulab.gradcheck.numerical_gradient` applies the same formula to
every element of an array."""

from __future__ import annotations

import math
from collections.abc import Callable

__all__ = ["CASES", "Named", "central_difference_hint"]


class Named:
    """A function of one number that prints as its formula (``t**3``), so a verdict reads
    ``central_difference(t**3, 2.0, 0.1) returned ...`` rather than ``<function <lambda> at 0x...>``."""

    def __init__(self, text: str, fn: Callable[[float], float]) -> None:
        self.text, self.fn = text, fn

    def __call__(self, t: float) -> float:
        return self.fn(t)

    def __repr__(self) -> str:
        return self.text


def _central(f: Callable[[float], float], x: float, h: float) -> float:
    return (f(x + h) - f(x - h)) / (2 * h)


CUBE = Named("t**3", lambda t: t**3)
SIN = Named("sin", math.sin)
EXP = Named("exp", math.exp)

CASES = [((f, x, h), _central(f, x, h)) for f, x, h in ((CUBE, 2.0, 0.1), (SIN, 0.5, 1e-3), (EXP, -1.0, 0.25))]
"""(args, expected): each expected value is the central difference itself (not the exact derivative), so a
right answer matches to rounding; t**3 at 2 with h = 0.1 gives 12.01 where the derivative is 12."""


def central_difference_hint(args: tuple, got: object) -> str | None:
    """Name the mistake ``got`` shows for ``args = (f, x, h)``, or give the idea when it matches none."""
    f, x, h = args
    try:
        g = float(got)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return "return one number: the slope of f at x, from f(x - h) and f(x + h)."
    up, mid, down = f(x + h), f(x), f(x - h)

    def near(value: float) -> bool:
        return math.isclose(g, value, rel_tol=1e-9, abs_tol=1e-12)

    if near((up - mid) / h) or near((mid - down) / h):
        return (
            "that is a one-sided (forward or backward) difference, which is off by about h/2 * f''(x) (0.6 on t**3 "
            "at 2 with h = 0.1). Use the two points on either side of x: f(x + h) and f(x - h)."
        )
    if near((up - down) / h):
        return "twice the slope: x + h and x - h are 2h apart, so divide their difference by 2 * h, not by h."
    if near((up - down) / 2 * h):
        return "`/ 2 * h` divides by 2 and then multiplies by h (Python reads it left to right): write `/ (2 * h)`."
    if near((down - up) / (2 * h)):
        return "the sign is flipped: subtract f(x - h) from f(x + h), not the other way round."
    return "the slope of the line through (x - h, f(x - h)) and (x + h, f(x + h)): rise over run."
