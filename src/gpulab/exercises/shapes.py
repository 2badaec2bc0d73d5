"""Explaining a shape error raised by the learner's array code: a matmul whose inner sizes differ, a result
stored into an output of another shape, a reshape to another number of elements. The verdict adds the shapes
the code was given (by argument name) and the shape each output must have (the spec's result for this input),
and a hint: the exercise's own, when one of its named mistakes (``Problem.mistakes``) raises the same error on
the same input, else one about the operation that failed.

A named mistake is a function of the inputs that makes the mistake (``lambda x, W, dout: dout @ W.T``): on an
input where the mistake gives an array of the right shape, the diagnosis of wrong values compares it with the
learner's output; where it raises, this module compares its error with the learner's (same type, same text), or,
for a result stored into an output of another shape, the mistake's result shape with the shape that was stored.
"""

from __future__ import annotations

import re
from typing import Any
from collections.abc import Callable, Sequence

import numpy as np

from .problem import Case, describe_arg
from .run import fresh_input

__all__ = ["is_shape_error", "shape_verdict"]

# NumPy's texts, and CuPy's where they differ (gpu mode runs the learner's array code on CuPy arrays)
_MATMUL_RE = re.compile(r"matmul: Input operand|mismatch in its core dimension|not aligned|Axis dimension mismatch")
_INTO_RE = re.compile(r"could not broadcast input array from shape \(([\d, ]*)\) into shape \(([\d, ]*)\)")
_RESHAPE_RE = re.compile(r"cannot reshape array|total size of new array must be unchanged")
_BROADCAST_RE = re.compile(r"could not be broadcast|cannot be broadcast|could not broadcast")
_INDICES_RE = re.compile(r"too many indices for array|boolean index did not match")

MATMUL_HINT = (
    "in `A @ B` the last axis of A must have the size of the first axis of B (that axis is summed over). Write "
    "each operand's shape from the list above under your line and see which one needs a `.T`: the result must "
    "have the output's shape."
)
RESHAPE_HINT = (
    "a reshape keeps the number of elements: the sizes of the new shape must multiply to the array's size. Check "
    "each size against the shapes above; to reorder axes, transpose first, then reshape."
)
BROADCAST_HINT = (
    "an elementwise operation needs operands of the same shape (or axes of size 1 where they differ): compare the "
    "shapes of the operands on your line with those above."
)
INDICES_HINT = (
    "an array was indexed with more indices than it has axes (or a mask of another shape): check the shapes above."
)


def is_shape_error(exc: BaseException) -> bool:
    """``exc`` is NumPy's (CuPy's) refusal of arrays of the wrong shapes: a matmul, a broadcast, a reshape."""
    text = str(exc)
    return isinstance(exc, (ValueError, IndexError)) and any(
        r.search(text) for r in (_MATMUL_RE, _RESHAPE_RE, _BROADCAST_RE, _INDICES_RE)
    )


def _shape(text: str) -> tuple[int, ...]:
    return tuple(int(v) for v in text.replace(" ", "").split(",") if v)


def _shape_text(shape: Sequence[int]) -> str:
    return f"({shape[0]},)" if len(shape) == 1 else f"({', '.join(str(v) for v in shape)})"


def shape_verdict(
    exc: BaseException,
    case: Case,
    in_names: Sequence[str],
    out_names: Sequence[str],
    mistakes: dict[str, Callable[..., Any]] | None,
    kernel: bool,
) -> tuple[str, str]:
    """(lines to add to the message, hint) for a shape error (:func:`is_shape_error`) raised by the learner's
    code on ``case``: the shapes given, by name, the shapes the outputs must have, and a hint."""
    text = str(exc)
    names = list(in_names) + [f"input {k}" for k in range(len(in_names), len(case.inputs))]
    given = ", ".join(f"{n} {describe_arg(x)}" for n, x in zip(names, case.inputs))
    outs = list(out_names) + [f"output {k}" for k in range(len(out_names), len(case.expected))]
    must = ", ".join(f"{n} {_shape_text(e.shape)}" for n, e in zip(outs, case.expected))
    lines = [f"your {'kernel' if kernel else 'code'} was given: {given}", f"the outputs must have the shapes: {must}"]
    into = _INTO_RE.search(text)
    stored = into_name = None
    if into:
        stored, target = _shape(into.group(1)), _shape(into.group(2))
        owners = [n for n, e in zip(outs, case.expected) if e.shape == target]
        into_name = owners[0] if len(owners) == 1 else None
        what = into_name or f"an output of shape {_shape_text(target)}"
        lines.append(
            f"a result of shape {_shape_text(stored)} was stored into {what}"
            + (f", which has the shape {_shape_text(target)}" if into_name else "")
        )
    hint = _declared(exc, case, mistakes or {}, stored, [e.shape for e in case.expected])
    if not hint:
        if into:
            who = into_name or "that output"
            hint = (
                f"compute {who} so that it has the shape {_shape_text(target)}: check the axis a sum or mean runs "
                "over, and which operand of a product is transposed."
            )
        elif _MATMUL_RE.search(text):
            hint = MATMUL_HINT
        elif _RESHAPE_RE.search(text):
            hint = RESHAPE_HINT
        elif _INDICES_RE.search(text):
            hint = INDICES_HINT
        else:
            hint = BROADCAST_HINT
    return "\n".join(lines), hint


def _declared(
    exc: BaseException,
    case: Case,
    mistakes: dict[str, Callable[..., Any]],
    stored: tuple[int, ...] | None,
    shapes: list[tuple[int, ...]],
) -> str:
    """The hint of the exercise's named mistake that fails as the learner's code did on this input: it raises the
    same error, or (``stored``: the shape of a result stored into an output of another shape) it gives a result of
    that shape, the shape of no output. "" when none does."""
    if not mistakes:
        return ""
    text = str(exc)
    # the arrays the learner's code was given: CuPy's in gpu mode, whose error texts are CuPy's
    args = tuple(fresh_input(x) if isinstance(x, np.ndarray) else x for x in case.inputs)
    for hint, wrong in mistakes.items():
        try:
            made = wrong(*args)
        except Exception as raised:  # noqa: BLE001 - a mistake that raises: is it the learner's error?
            if type(raised) is type(exc) and str(raised) == text:
                return hint
            continue
        if stored is None:
            continue
        for alt in made if isinstance(made, list) else [made]:
            shape = tuple(getattr(alt, "shape", np.shape(alt)))
            if shape == stored and shape not in shapes:
                return hint
    return ""
