"""gpulab.transformer.formats: exact BF16 / FP16 / FP8 rounding against the formats' definitions.

Known bit patterns come from the OCP 8-bit floating point specification v1.0 (E4M3, E5M2) and IEEE 754
(FP16, and BF16 = the top half of FP32); ml_dtypes' float8_e4m3fn / float8_e5m2 hold the same values. The
rounding is checked exhaustively: every code's value is a fixed point, every midpoint between two
neighbouring values goes to the one with the even code, and anything off the midpoint to the nearer one.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from gpulab.errors import UsageError
from gpulab.transformer import formats as F

KNOWN = {  # (format, code) -> value
    ("e4m3", 0x01): 2.0**-9,
    ("e4m3", 0x07): 7 * 2.0**-9,
    ("e4m3", 0x08): 2.0**-6,
    ("e4m3", 0x38): 1.0,
    ("e4m3", 0x7E): 448.0,
    ("e4m3", 0xFE): -448.0,
    ("e4m3", 0x78): 256.0,
    ("e4m3", 0x80): -0.0,
    ("e5m2", 0x01): 2.0**-16,
    ("e5m2", 0x03): 3 * 2.0**-16,
    ("e5m2", 0x04): 2.0**-14,
    ("e5m2", 0x3C): 1.0,
    ("e5m2", 0x7B): 57344.0,
    ("e5m2", 0x7C): math.inf,
    ("e5m2", 0xFC): -math.inf,
    ("bf16", 0x3F80): 1.0,
    ("bf16", 0x7F7F): 3.3895313892515355e38,
    ("bf16", 0x0001): 2.0**-133,
    ("bf16", 0x0080): 2.0**-126,
    ("bf16", 0x4049): 3.140625,
    ("bf16", 0x7F80): math.inf,
    ("fp16", 0x7BFF): 65504.0,
    ("fp16", 0x0001): 2.0**-24,
    ("fp16", 0x3C00): 1.0,
}


@pytest.mark.parametrize("key", sorted(KNOWN))
def test_known_bit_patterns_decode_and_encode(key):
    fmt, code = key
    value = KNOWN[key]
    got = F.decode(code, fmt)
    assert got == value and math.copysign(1, got) == math.copysign(1, value)
    assert int(F.encode(value, fmt)) == code


def test_nan_codes_and_limits():
    assert np.isnan(F.decode(0x7F, "e4m3")) and np.isnan(F.decode(0xFF, "e4m3"))
    assert not np.isnan(F.decode(0x7E, "e4m3"))  # E4M3 uses the all-ones exponent for numbers
    nan_codes = np.flatnonzero(np.isnan(F.decode(np.arange(256), "e4m3")))  # what its note says: these two only
    assert nan_codes.tolist() == [0x7F, 0xFF] and "two bit patterns, 0x7F and 0xFF" in F.format("e4m3").note
    assert all(np.isnan(F.decode(c, "e5m2")) for c in (0x7D, 0x7E, 0x7F))
    e4, e5, bf = F.format("e4m3"), F.format("e5m2"), F.format("bf16")
    assert (e4.max, e4.min_normal, e4.min_subnormal) == (448.0, 2.0**-6, 2.0**-9)
    assert (e5.max, e5.min_normal, e5.min_subnormal) == (57344.0, 2.0**-14, 2.0**-16)
    assert bf.max == float(np.finfo(np.float32).max) * (1 - 2.0**-8) / (1 - 2.0**-24)
    assert bf.min_normal == float(np.finfo(np.float32).tiny)
    assert F.format("float8_e4m3fn") is e4 and F.format("FP16") is F.FORMATS["fp16"]
    with pytest.raises(UsageError, match="known"):
        F.format("fp4")


@pytest.mark.parametrize("fmt", ["e4m3", "e5m2", "bf16", "fp16"])
def test_every_value_and_every_midpoint_rounds_as_the_definition_says(fmt):
    f = F.format(fmt)
    half = 2 ** (f.bits - 1)
    vals = F.decode(np.arange(half), fmt)
    codes = np.arange(half)[np.isfinite(vals)]
    v = vals[np.isfinite(vals)]
    assert np.all(np.diff(v) > 0)  # non-negative codes are ordered by value
    assert np.array_equal(F.round_to(v, fmt), v.astype(np.float32))  # every value of the format is kept
    assert np.array_equal(F.round_to(-v, fmt), -v.astype(np.float32))
    assert np.array_equal(F.encode(v, fmt), codes)
    lo, hi = v[:-1], v[1:]
    mid = (lo + hi) / 2  # exact in float64
    even = np.where(codes[:-1] % 2 == 0, lo, hi)
    assert np.array_equal(F.round_to(mid, fmt), even.astype(np.float32))
    assert np.array_equal(F.round_to(np.nextafter(mid, 0), fmt), lo.astype(np.float32))
    assert np.array_equal(F.round_to(np.nextafter(mid, np.inf), fmt), hi.astype(np.float32))


def test_overflow_saturation_nan_and_ties_at_the_top():
    r = F.round_to
    assert r(464.0, "e4m3") == 448  # the tie between 448 (even) and the missing 480 goes down
    assert np.isnan(r(464.1, "e4m3")) and np.isnan(r(np.inf, "e4m3"))  # no inf in E4M3: NaN
    assert r(1e6, "e4m3", saturate=True) == 448 and r(-np.inf, "e4m3", saturate=True) == -448
    assert r(61439.0, "e5m2") == 57344 and r(61440.0, "e5m2") == np.inf  # tie rounds to the even 2^16: inf
    assert r(61440.0, "e5m2", saturate=True) == 57344 and r(-1e30, "e5m2") == -np.inf
    assert r(np.float32(3.4e38), "bf16") == np.inf and np.isnan(r(np.nan, "bf16")) and np.isnan(r(np.nan, "e5m2"))
    assert r(1 + 2.0**-8, "bf16") == 1.0 and r(1 + 3 * 2.0**-8, "bf16") == 1 + 2.0**-6
    assert r(2.0**-10, "e4m3") == 0 and r(3 * 2.0**-11, "e4m3") == 2.0**-9  # half the smallest: to 0 (even)
    assert np.signbit(r(-1e-9, "e4m3")) and r(-1e-9, "e4m3") == 0  # underflow keeps the sign


def test_bf16_bit_trick_and_fp16_agree_with_the_generic_rounding():
    rng = np.random.default_rng(1)
    x = (rng.standard_normal(200_000) * np.exp(rng.uniform(-85, 85, 200_000))).astype(np.float32)
    x[5:2000] *= np.float32(1e-6)  # float32 subnormals too
    x[:5] = [np.nan, np.inf, -np.inf, 0.0, np.float32(1e-45)]
    assert np.sum(np.abs(x) < np.finfo(np.float32).tiny) > 100
    assert np.array_equal(F.round_to(x, "bf16"), F.bf16_round_bits(x), equal_nan=True)
    small = x / np.float32(1e25)
    with np.errstate(over="ignore"):
        assert np.array_equal(F.round_to(small, "fp16"), small.astype(np.float16).astype(np.float32), equal_nan=True)


def test_scaling_maps_amax_onto_the_largest_value():
    rng = np.random.default_rng(2)
    g = (rng.standard_normal(10_000) * 1e-4).astype(np.float32)  # gradients: tiny values
    s = F.scale_for(g, "e4m3")
    assert math.isclose(np.max(np.abs(g)) * s, 448.0, rel_tol=1e-12)
    p2 = F.scale_for(g, "e4m3", power_of_two=True)
    assert math.log2(p2).is_integer() and s / 2 < p2 <= s
    assert F.scale_for(np.zeros(3), "e5m2") == 1.0
    y, used = F.scaled_round(g, "e4m3")
    assert used == s and y.dtype == np.float32
    raw = F.error_stats(g, "e4m3")
    scaled = F.error_stats(g, "e4m3", scaled=True)
    assert raw["underflow"] > 0.9 and scaled["underflow"] < 0.01  # unscaled FP8 loses almost every gradient
    assert scaled["relative_error"] < 0.05 and scaled["overflow"] == 0.0
    with pytest.raises(UsageError, match="positive"):
        F.scaled_round(g, "e4m3", scale=0.0)


def test_error_stats_counts_exactly():
    x = np.array([1.0, 1 + 2.0**-4, 1e-5, 1000.0, 0.0])
    st = F.error_stats(x, "e4m3")
    assert st["underflow"] == 0.25  # 1e-5 of the 4 nonzero values
    assert st["overflow"] == 0.2  # 1000 -> NaN, of 5 values
    assert st["relative_error"] == math.inf
    st = F.error_stats(x[:2], "e4m3")
    assert math.isclose(st["max_relative_error"], 2.0**-4 / (1 + 2.0**-4))  # the tie went down to 1.0
    rows = F.format_table()
    assert [r["format"] for r in rows] == ["FP32", "FP16", "BF16", "FP8 E4M3", "FP8 E5M2"]
    assert rows[2]["max"] > 3e38 and rows[3]["epsilon"] == 0.125 and rows[4]["inf"] is True
