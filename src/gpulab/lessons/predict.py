"""A learner's prediction against a figure: :func:`compare` (what a lesson's predict cells call) and
:func:`prediction_number` (the prediction as typed, read as a number).

The figure ("measured") comes from the lesson's own code: a count, a timing, a model's value, or a word for a
non-numeric answer. What that code hands over varies by mode: a CuPy reduction in gpu mode gives a 0-d device
array where NumPy gives a scalar; both are one number and are compared as one.
"""

from __future__ import annotations

import math
import re
from typing import Any

import numpy as np

from ..errors import UsageError

__all__ = ["compare", "measured_number", "prediction_number"]


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


def _is_percent(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and 1 < x <= 100


def _slip(p: float, m: float, unit: str, prediction: Any) -> str:
    """What a wrong prediction's size suggests: a percentage typed for a fraction, seconds typed for hours."""
    u = unit.strip()
    percent = 0 < m < 1 and _is_percent(p) and u != "%" and not (isinstance(prediction, str) and "%" in prediction)
    if percent and 0.5 * m <= p / 100 <= 2 * m:  # read as a percentage, the guess is near: 50 for 0.37
        return f" (the figure is a fraction: for {p:g}% write {p / 100:g} or '{p:g}%')"
    if u in ("h", "hours") and m > 0 and abs(p / 3600 - m) <= 0.25 * m:
        return " (in seconds? the figure is in hours: divide by 3600)"
    return ""


def measured_number(measured: Any) -> Any:
    """``measured`` as :func:`compare` reads it: one number as a Python number (a 0-d or one-element NumPy or CuPy
    array, or a one-element list, by its value), a word as it is. Raises :class:`UsageError` for what cannot be a
    figure: None, NaN or infinity (the cell that computes it did not produce a number), several numbers."""
    if isinstance(measured, (list, tuple)) and len(measured) == 1 and not isinstance(measured[0], str):
        measured = measured[0]
    if hasattr(measured, "shape") and hasattr(measured, "dtype") and not isinstance(measured, np.generic):
        from .. import runtime

        values = np.asarray(runtime.to_host(measured))
        if values.size != 1:
            raise UsageError(
                f"compare needs one measured number; it was given an array of shape {tuple(values.shape)}: pass one "
                "value of it, e.g. x.max(), x.sum() or float(x[0])."
            )
        measured = values.reshape(()).item()
    elif isinstance(measured, (list, tuple)) and measured and all(isinstance(v, (int, float)) for v in measured):
        raise UsageError(
            f"compare needs one measured number; it was given a {type(measured).__name__} of {len(measured)} numbers: "
            "pass one of them (e.g. max(values))."
        )
    if measured is None:
        raise UsageError(
            "compare needs a measured number; it was given None: the cell that computes it did not produce a number "
            "(a function without `return`, or a cell not run yet). Run that cell and pass its value."
        )
    if isinstance(measured, (float, np.floating)) and not math.isfinite(measured):
        raise UsageError(
            f"compare needs a measured number; it was given {measured}: the computation behind it did not give a "
            "finite number (an overflow, 0 / 0). Look at the cell that computes it."
        )
    return measured


_NOT_PLURALS = {"ms", "us", "ns", "ps", "s"}


def _unit(value: float, unit: str) -> str:
    """`` unit`` after a figure, in the singular when the figure reads 1 (``"1 block"``, ``"1 byte per element"``,
    ``"1 copy"``); other units (``"ms"``, ``"GB/s"``, ``"x"``) as they are."""
    if not unit or f"{value:,.4g}" not in ("1", "-1") or unit.startswith("x "):  # "x the forward": a multiple
        return f" {unit}" if unit else ""
    cut = re.search(r" (?:per|of) ", unit)  # "bytes per element": the noun ends before " per "
    noun, tail = (unit[: cut.start()], unit[cut.start() :]) if cut else (unit, "")
    head, _, last = noun.rpartition(" ")
    if last in _NOT_PLURALS or not re.fullmatch(r"[A-Za-z][A-Za-z-]+s", last):
        return f" {unit}"
    if last.endswith("ies"):
        last = last[:-3] + "y"
    elif last.endswith(("ches", "shes", "xes", "sses")):
        last = last[:-2]
    else:
        last = last[:-1]
    return f" {head + ' ' if head else ''}{last}{tail}"


def compare(
    prediction: Any,
    measured: Any,
    *,
    unit: str = "",
    why: str = "",
    what: str = "measured",
    tolerance: float = 0.25,
    factor: float | None = None,
) -> str:
    """Print (and return) how a learner's ``prediction`` compares with a ``measured`` figure, then ``why``.

    ``prediction=None`` (nothing entered yet) prints the value and the explanation anyway. Within
    ``tolerance`` (relative, from 0 to 1) counts as right. ``measured`` is one number (a 0-d array, CuPy's too,
    counts as one: :func:`measured_number`). ``what`` says where the figure comes from ("measured",
    "spec sheet", "simulated", "a model"). A non-numeric ``measured`` (``"pairwise"``, ``"no"``) is an answer
    compared word for word, ignoring case. ``factor`` (above 1) replaces ``tolerance`` for a figure known only to its
    order of magnitude: within that factor either way counts as right (factor=2: from half to twice the figure; a
    relative tolerance of 1 would also accept 0 and every tiny value).
    """
    if isinstance(tolerance, bool) or not isinstance(tolerance, (int, float)) or not 0 <= tolerance <= 1:
        raise UsageError(
            f"compare's tolerance is relative, a number from 0 to 1: tolerance=0.25 counts a prediction within 25% "
            f"of the figure as right; got tolerance={tolerance!r}"
            + (f" (for {tolerance:g}% write tolerance={tolerance / 100:g})." if _is_percent(tolerance) else ".")
        )
    measured = measured_number(measured)
    if factor is not None:  # within a factor either way: the relative tolerance on the side the prediction lies
        tolerance = _factor_tolerance(prediction, measured, unit, factor)
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
        head = (
            f"{what[:1].upper()}{what[1:]}: {m:,.4g}{_unit(m, unit)}. (Enter a prediction above and rerun to compare.)"
        )
    else:
        p = prediction_number(prediction, unit)
        if m == 0:
            close = p == 0
        else:
            close = abs(p - m) <= tolerance * abs(m)
        # a long `what` (where the figure comes from) is said once, before the figure, not again in the ratio
        of = f"the {what} value" if len(what) <= 30 else "that figure"
        ratio = f", {p / m:,.3g}x {of}" if m and p and (p > 0) == (m > 0) else ""
        verdict = "right" if close else ("too high" if p > m else "too low")
        off = "" if close else ratio + _slip(p, m, unit, prediction)
        head = f"You predicted {p:,.4g}{_unit(p, unit)}; {what} {m:,.4g}{_unit(m, unit)}: {verdict}{off}."
    text = head + (f"\n{why}" if why else "")
    print(text)
    return text


def _factor_tolerance(prediction: Any, measured: Any, unit: str, factor: float) -> float:
    """The relative tolerance that makes :func:`compare` accept exactly ``measured / factor`` to ``measured * factor``
    for this prediction: ``factor - 1`` above the figure, ``1 - 1 / factor`` below it."""
    if isinstance(factor, bool) or not isinstance(factor, (int, float)) or not factor > 1:
        raise UsageError(
            f"compare's factor is a number above 1 (factor=2: within 2x either way); got factor={factor!r}"
        )
    if prediction is None or not isinstance(measured, (int, float, np.integer, np.floating)):
        return 0.25  # nothing to compare, or a word answer: unused
    p, m = prediction_number(prediction, unit), float(measured)
    return factor - 1 if abs(p) >= abs(m) else 1 - 1 / factor
