"""Number formats for LLMs, emulated exactly in NumPy: BF16, FP16 and FP8 (OCP E4M3 and E5M2).

A value of a binary floating-point format with ``e`` exponent bits and ``m`` mantissa bits is
``(-1)^s x 1.M x 2^(E - bias)`` (normal) or ``(-1)^s x 0.M x 2^(1 - bias)`` (subnormal, E = 0).
:func:`round_to` rounds any float32/float64 array to the nearest value of a format, ties to the one with
an even last mantissa bit (IEEE's round-to-nearest-even), and returns those values as float32, so the
rest of a computation runs in float32 on values a BF16 or FP8 tensor could hold (what "fake
quantization" in training frameworks does). It works on the bits of float64 (exact for float32 and
float64 inputs, no double rounding):

* normal range: add ``2^(k-1) - 1 + (last kept bit)`` to the bits and clear the ``k = 52 - m`` dropped
  bits; a carry out of the mantissa moves into the exponent, as it should;
* subnormal range (below the smallest normal, where the spacing is fixed): ``(|x| + C) - C`` with
  ``C = 2^(emin - m + 52)``, whose float64 spacing is exactly the format's, so the FPU rounds for us;
* overflow: a result above the largest finite value becomes inf (formats with inf), NaN (E4M3, which
  has none) or, with ``saturate=True``, the largest finite value; NaN stays NaN.

The OCP 8-bit floating point specification (v1.0, 2023) defines E4M3 (bias 7, no inf, NaN =
S.1111.111, largest 448) and E5M2 (bias 15, IEEE-like with inf, largest 57344); NVIDIA's Hopper and
Ada tensor cores, AMD's MI300 and ``ml_dtypes`` (``float8_e4m3fn``, ``float8_e5m2``) implement them.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import UsageError

__all__ = [
    "FORMATS",
    "Format",
    "bf16_round_bits",
    "decode",
    "encode",
    "error_stats",
    "format",
    "format_table",
    "round_to",
    "scale_for",
    "scaled_round",
]


@dataclass(frozen=True)
class Format:
    """A binary floating-point format: sign bit, ``exponent_bits``, ``mantissa_bits`` (stored), ``bias``."""

    name: str
    exponent_bits: int
    mantissa_bits: int
    bias: int
    has_inf: bool = True  # IEEE-like: the all-ones exponent holds inf and NaN
    note: str = ""

    @property
    def bits(self) -> int:
        return 1 + self.exponent_bits + self.mantissa_bits

    @property
    def emin(self) -> int:
        """Exponent of the smallest normal value."""
        return 1 - self.bias

    @property
    def emax(self) -> int:
        """Exponent of the largest finite value."""
        top = 2**self.exponent_bits - 1  # the all-ones exponent
        return (top - 1 if self.has_inf else top) - self.bias

    @property
    def max(self) -> float:
        """Largest finite value. E4M3 keeps its all-ones exponent for numbers except S.1111.111 (NaN)."""
        m = self.mantissa_bits
        frac = 2 - 2.0**-m if self.has_inf else 2 - 2.0 ** (1 - m)
        return math.ldexp(frac, self.emax)

    @property
    def min_normal(self) -> float:
        return math.ldexp(1.0, self.emin)

    @property
    def min_subnormal(self) -> float:
        return math.ldexp(1.0, self.emin - self.mantissa_bits)

    @property
    def epsilon(self) -> float:
        """Spacing of values just above 1: 2^-m. Rounding to nearest errs by at most half of it, relatively."""
        return 2.0**-self.mantissa_bits


FORMATS: dict[str, Format] = {
    "fp32": Format("FP32", 8, 23, 127, note="IEEE 754 single precision: what the course computes in"),
    "bf16": Format("BF16", 8, 7, 127, note="FP32's exponent with 7 mantissa bits: the same range, 3 digits"),
    "fp16": Format("FP16", 5, 10, 15, note="IEEE 754 half precision: more precision, range to 65504"),
    "e4m3": Format(
        "FP8 E4M3",
        4,
        3,
        7,
        has_inf=False,
        note="OCP FP8 for weights and activations: no inf; NaN only at S.1111.111 (two bit patterns, 0x7F and "
        "0xFF); largest 448",
    ),
    "e5m2": Format("FP8 E5M2", 5, 2, 15, note="OCP FP8 for gradients: FP16's range with 2 mantissa bits"),
}


def format(fmt: str | Format) -> Format:  # noqa: A001 - the natural name; shadows the builtin only inside
    """A format by key (``"bf16"``, ``"e4m3"``, ``"e5m2"``, ``"fp16"``, ``"fp32"``); a Format is returned as is."""
    if isinstance(fmt, Format):
        return fmt
    key = str(fmt).lower().replace("fp8_", "").replace("fp8 ", "").replace("float8_", "")
    key = {"e4m3fn": "e4m3", "bfloat16": "bf16", "float16": "fp16", "float32": "fp32"}.get(key, key)
    if key not in FORMATS:
        raise UsageError(f"unknown number format {fmt!r}; known: {', '.join(FORMATS)} (or build a Format(...)).")
    return FORMATS[key]


def round_to(x: Any, fmt: str | Format, *, saturate: bool = False) -> np.ndarray:
    """``x`` rounded to the nearest value of ``fmt`` (ties to even), as float32 (NumPy, any shape).

    Overflow gives inf (formats with inf) or NaN (E4M3), as a plain conversion does (and ``ml_dtypes``);
    ``saturate=True`` clamps to the largest finite value instead (what FP8 training recipes use).
    """
    f = format(fmt)
    a = np.asarray(x, dtype=np.float64)  # exact for float32 and float64 inputs
    m = f.mantissa_bits
    if m >= 23 and f.exponent_bits == 8:
        return a.astype(np.float32)  # FP32 itself: one IEEE rounding
    mag = np.abs(a)
    with np.errstate(over="ignore", invalid="ignore"):
        # normal range: round the bits (the carry into the exponent is correct rounding)
        k = 52 - m
        u = mag.view(np.uint64)
        lsb = (u >> np.uint64(k)) & np.uint64(1)
        u = (u + np.uint64((1 << (k - 1)) - 1) + lsb) & ~np.uint64((1 << k) - 1)
        out = u.view(np.float64)
        # subnormal range: the FPU rounds |x| + C to C's spacing, which is the format's
        c = math.ldexp(1.0, f.emin - m + 52)
        out = np.where(mag < f.min_normal, (mag + c) - c, out)
        over = ~(out <= f.max)  # too large, inf or NaN
        if saturate:
            big = np.float64(f.max)
        else:
            big = np.float64(np.inf if f.has_inf else np.nan)
        out = np.where(over, big, out)
        out = np.where(np.isnan(a), np.nan, out)
        out = np.copysign(out, a)  # keeps -0.0
    return out.astype(np.float32)


def bf16_round_bits(x: Any) -> np.ndarray:
    """BF16 rounding the way frameworks write it on float32 bits: keep the top 16 bits after adding
    ``0x7FFF + (bit 16)``, i.e. round to nearest, ties to even. NaN kept as NaN. Returns float32."""
    x32 = np.ascontiguousarray(x, dtype=np.float32)
    u = x32.view(np.uint32)
    u = (u + np.uint32(0x7FFF) + ((u >> np.uint32(16)) & np.uint32(1))) & np.uint32(0xFFFF0000)
    return np.where(np.isnan(x32), np.float32(np.nan), u.view(np.float32))


@functools.lru_cache(maxsize=8)
def _code_values(f: Format) -> np.ndarray:
    if f.bits > 16:
        raise UsageError(f"decode/encode handle formats of up to 16 bits; {f.name} has {f.bits}.")
    codes = np.arange(2**f.bits, dtype=np.int64)
    m, e = f.mantissa_bits, f.exponent_bits
    sign = np.where(codes >> (e + m) & 1, -1.0, 1.0)
    ex, man = (codes >> m) & (2**e - 1), codes & (2**m - 1)
    val = np.where(ex == 0, np.ldexp(man.astype(np.float64), f.emin - m), np.ldexp(1.0 + man / 2.0**m, ex - f.bias))
    top = ex == 2**e - 1
    if f.has_inf:
        val = np.where(top, np.where(man == 0, np.inf, np.nan), val)
    else:  # E4M3: only S.1111.111 is NaN
        val = np.where(top & (man == 2**m - 1), np.nan, val)
    return sign * val


def decode(codes: Any, fmt: str | Format) -> np.ndarray:
    """The values (float64) of the bit patterns ``codes`` of a format of up to 16 bits (e.g. FP8 codes 0-255),
    straight from the definition: ``1.M x 2^(E - bias)``, or ``0.M x 2^(1 - bias)`` when E = 0."""
    c = np.asarray(codes)
    f = format(fmt)
    if c.size and (c.min() < 0 or c.max() >= 2**f.bits):
        raise UsageError(f"{f.name} codes are 0..{2**f.bits - 1}; got values from {c.min()} to {c.max()}.")
    return _code_values(f)[c.astype(np.int64)]


def encode(x: Any, fmt: str | Format, *, saturate: bool = False) -> np.ndarray:
    """The bit patterns (uint8 or uint16) of ``x`` rounded to ``fmt``; NaN gives 0x7F (FP8) / 0x7FFF (16 bits)."""
    f = format(fmt)
    y = round_to(x, f, saturate=saturate).astype(np.float64)
    values = _code_values(f)
    half = 2 ** (f.bits - 1)
    positive = values[:half]  # codes 0..half-1 are the non-negative values, in increasing order (then NaNs)
    finite = positive[~np.isnan(positive)]
    idx = np.searchsorted(finite, np.abs(np.nan_to_num(y, nan=0.0, posinf=np.inf)))
    codes = idx + np.where(np.signbit(y), half, 0)
    codes = np.where(np.isnan(y), half - 1, codes)  # S=0 and every other bit 1: NaN in all these formats
    return codes.astype(np.uint8 if f.bits <= 8 else np.uint16)


def format_table(keys: tuple[str, ...] = ("fp32", "fp16", "bf16", "e4m3", "e5m2")) -> list[dict[str, Any]]:
    """One row per format: bits, exponent/mantissa bits, largest value, smallest normal and subnormal,
    epsilon (2^-m) and the decimal digits it keeps. These follow from the definitions (IEEE 754, OCP FP8)."""
    rows = []
    for key in keys:
        f = format(key)
        rows.append(
            {
                "format": f.name,
                "bits": f.bits,
                "exponent bits": f.exponent_bits,
                "mantissa bits": f.mantissa_bits,
                "max": f.max,
                "min normal": f.min_normal,
                "min subnormal": f.min_subnormal,
                "epsilon": f.epsilon,
                "digits": round((f.mantissa_bits + 1) * math.log10(2), 1),
                "inf": f.has_inf,
                "note": f.note,
            }
        )
    return rows


def scale_for(x: Any, fmt: str | Format, *, margin: int = 0, power_of_two: bool = False) -> float:
    """Per-tensor scale that maps the tensor's largest magnitude (amax) onto ``fmt``'s largest value,
    divided by ``2^margin`` for headroom: ``x * scale`` uses the format's whole range. With
    ``power_of_two=True`` the scale is rounded down to a power of two, so scaling itself is exact."""
    f = format(fmt)
    a = np.asarray(x)
    amax = float(np.max(np.abs(a[np.isfinite(a)]))) if a.size and np.isfinite(a).any() else 0.0
    if amax == 0.0:
        return 1.0
    scale = f.max / amax / 2.0**margin
    return float(2.0 ** math.floor(math.log2(scale))) if power_of_two else scale


def scaled_round(
    x: Any, fmt: str | Format, scale: float | None = None, **scale_options: Any
) -> tuple[np.ndarray, float]:
    """``(round_to(x * scale, fmt, saturate=True) / scale, scale)``: the values an FP8 tensor with a
    per-tensor scale stands for, as float32. ``scale=None`` takes :func:`scale_for` (amax-based)."""
    a = np.asarray(x, dtype=np.float64)
    s = scale_for(a, fmt, **scale_options) if scale is None else float(scale)
    if not s > 0:
        raise UsageError(f"a scale must be a positive number, got {scale!r}.")
    return (round_to(a * s, fmt, saturate=True).astype(np.float64) / s).astype(np.float32), s


def error_stats(x: Any, fmt: str | Format, *, scaled: bool = False, saturate: bool = False) -> dict[str, Any]:
    """What rounding ``x`` to ``fmt`` does to it: ``relative_error`` (||x - y|| / ||x||), ``max_relative_error``
    (over the nonzero values that stayed nonzero: inf when one became inf/NaN, as ``relative_error`` is then; a
    clamped value counts with its finite error), ``underflow`` (fraction of nonzero values that became 0),
    ``overflow`` (fraction that became inf/NaN or were clamped), and the ``scale`` used (1 unscaled)."""
    f = format(fmt)
    a = np.asarray(x, dtype=np.float64).ravel()
    if scaled:
        y64, scale = scaled_round(a, f)
        y = y64.astype(np.float64)
        clamped = np.abs(a * scale) > f.max
    else:
        y, scale = round_to(a, f, saturate=saturate).astype(np.float64), 1.0
        clamped = np.abs(a) > f.max
    nz = a != 0
    bad = ~np.isfinite(y) | (clamped & np.isfinite(a))
    under = nz & (y == 0)
    ok = nz & ~under  # an overflow's error is inf (diff), a clamped value's finite
    diff = np.where(np.isfinite(y), a - y, np.inf)
    norm = float(np.linalg.norm(a))
    with np.errstate(over="ignore", invalid="ignore"):
        rel = float(np.linalg.norm(diff) / norm) if norm else 0.0
    return {
        "format": f.name,
        "scale": scale,
        "relative_error": rel,
        "max_relative_error": float(np.max(np.abs(diff[ok] / a[ok]))) if ok.any() else 0.0,
        "underflow": float(under.sum() / max(1, nz.sum())),
        "overflow": float(bad.sum() / max(1, a.size)),
    }
