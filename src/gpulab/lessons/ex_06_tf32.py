"""Lesson 06's rounding exercise: ``round_to_tf32(x)``, a NumPy function that rounds float32 values to TF32 (8
exponent bits, 10 of float32's 23 mantissa bits) and returns them as float32: round to nearest, ties to even,
IEEE's default rounding (CUDA's own conversion, ``cvt.rna.tf32.f32``, rounds ties away from zero, and a tensor
core given raw float32 bits drops the low 13). Checked through :func:`~.exercise.as_host` against
:func:`gpulab.interop.round_to_tf32`, exactly, on inputs built bit by bit: exact ties with the kept bit even
and odd, mantissas of all ones (which round up into the next power of two), signed zeros, and values from 1e-30
to 1e30 (outside float16's range). The known mistakes get named hints: truncation, ties rounded away from zero
(CUDA's convention, not the one asked for), the wrong number of bits kept, a float16 round trip, and the raw
bits returned as numbers.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ..exercises import Problem
from ..interop import round_to_tf32 as _reference
from .exercise import Exercise, as_host

__all__ = ["EXERCISES_LIST", "TF32_MISTAKES", "tf32_inputs"]

DROPPED = 13  # float32 mantissa bits that TF32 drops (23 - 10)
_LOW = np.uint32((1 << DROPPED) - 1)
_HALF = np.uint32(1 << (DROPPED - 1))


def tf32_inputs(n: int, rng: np.random.Generator) -> np.ndarray:
    """``n`` float32 values: a quarter exact ties (half with the kept bit even, half odd), an eighth with every
    dropped and kept mantissa bit set, two signed zeros, the rest random magnitudes from 1e-30 to 1e30."""
    sign = rng.integers(0, 2, n).astype(np.uint32) << np.uint32(31)
    exponent = rng.integers(1, 255, n).astype(np.uint32) << np.uint32(23)  # normal numbers, no inf or nan
    kept = rng.integers(0, 1 << 10, n).astype(np.uint32) << np.uint32(DROPPED)
    bits = sign | exponent | kept | _HALF  # an exact tie: the dropped bits are 1000000000000
    q = max(n // 4, min(n, 2))
    bits[:q:2] &= ~np.uint32(1 << DROPPED)  # kept bit even: ties stay (round down)
    bits[1:q:2] |= np.uint32(1 << DROPPED)  # kept bit odd: ties go up
    e = q + n // 8
    bits[q:e] |= np.uint32(0x7FFFFF)  # all mantissa bits set: rounds up to the next power of two
    x = bits.view(np.float32).copy()
    rest = slice(e, n)
    mags = 10.0 ** rng.uniform(-30, 30, max(n - e, 0))
    x[rest] = (np.where(rng.random(max(n - e, 0)) < 0.5, -1, 1) * mags * rng.uniform(1, 2, max(n - e, 0))).astype(
        np.float32
    )
    if n >= e + 2:
        x[e], x[e + 1] = np.float32(0.0), np.float32(-0.0)
    return x


def _bits(x: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)


def _truncated(x: np.ndarray) -> np.ndarray:
    return (_bits(x) & ~_LOW).view(np.float32)


def _ties_away(x: np.ndarray) -> np.ndarray:
    return ((_bits(x) + _HALF) & ~_LOW).view(np.float32)


def _kept(m: int) -> Callable[[np.ndarray], np.ndarray]:
    """Round to nearest even keeping ``m`` mantissa bits (wrong for m != 10)."""

    def f(x: np.ndarray) -> np.ndarray:
        drop = 23 - m
        b = _bits(x)
        lsb = (b >> np.uint32(drop)) & np.uint32(1)
        return ((b + np.uint32((1 << (drop - 1)) - 1) + lsb) & ~np.uint32((1 << drop) - 1)).view(np.float32)

    return f


def _via_float16(x: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore", under="ignore"):
        return np.asarray(x, np.float32).astype(np.float16).astype(np.float32)


TF32_MISTAKES = {
    "the dropped bits were cut off (truncation, rounding toward zero): this exercise rounds to the nearest value. "
    "Add half of the last kept bit's weight to the bits before clearing the low 13, so that a value more than "
    "halfway up rounds up.": _truncated,
    "exact ties (dropped bits 1 followed by twelve 0s) were rounded away from zero. That is CUDA's own convention "
    "(its conversion instruction, cvt.rna.tf32.f32, rounds ties away), but this exercise asks for IEEE's default, "
    "round half to even, as interop.round_to_tf32 does: a tie keeps the value whose last kept bit (bit 13) is 0. "
    "Add just under half (0xFFF) plus that bit, then clear the low 13 bits.": _ties_away,
    "the wrong number of bits was kept: TF32 keeps 10 of float32's 23 mantissa bits, so the low 13 bits go "
    "(mask 0xFFFFE000), not 10 or 16.": lambda x: [_kept(13)(x), _kept(7)(x)],
    "that is a round trip through float16: it has 10 mantissa bits too, but only 5 exponent bits, so values "
    "beyond 65504 became inf and tiny ones 0. TF32 keeps float32's 8-bit exponent: round the float32 bits "
    "themselves (x.view(np.uint32)).": _via_float16,
    "the result holds the rounded bits as numbers (uint32 values like 1065353216), not the float32 values they "
    "encode: view them back, `rounded.view(np.float32)`, rather than converting with astype.": lambda x: (
        _reference(x).view(np.uint32).astype(np.float32)
    ),
}


def round_to_tf32(x: np.ndarray) -> np.ndarray:
    """The lesson's answer, as the learner writes it (finite inputs): the bit trick of
    :func:`gpulab.interop.round_to_tf32`, which the check compares every bit against."""
    bits = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    lsb = (bits >> np.uint32(13)) & np.uint32(1)  # the last kept bit: ties go to the even value
    return ((bits + np.uint32(0x0FFF) + lsb) & np.uint32(0xFFFFE000)).view(np.float32)


EXERCISES_LIST = [
    Exercise(
        "06",
        "round_to_tf32",
        Problem(
            "round_to_tf32",
            _reference,
            tf32_inputs,
            sizes=[16, 300],
            host=as_host(_reference, 1, "round_to_tf32"),
            # no PTX check: a host NumPy function, no kernel
            out_names=["out"],
            rtol=0,
            atol=0,  # rounding is exact: every bit must match
            mistakes=TF32_MISTAKES,
        ),
        round_to_tf32,
        adapt=lambda fn: as_host(fn, 1, "round_to_tf32"),
    )
]
