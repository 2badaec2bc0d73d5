"""Naming a unit slip: a result that is the expected one times a unit's factor (1000 for kilo, 3600 seconds in
an hour, 3.6e6 joules in a kWh, 2**30 / 1e9 for GiB vs GB, ...), in every element.

Napkin-math answers carry units (kWh, GFLOP/s, dollars per hour); a conversion left out, doubled or applied the
wrong way scales the whole answer by one of a few factors, which this check recognises whatever the exercise.
Factors a kernel's own mistakes produce (2, 8, 32, a block size) are left out: a kernel summing each value twice
must not be told about units.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .compare import same

__all__ = ["UNIT_FACTORS", "unit_factor_hint"]

# factor -> (how to write it, what it converts); the slip multiplies or divides the answer by it
UNIT_FACTORS: dict[float, tuple[str, str]] = {
    1e3: (
        "1000",
        "kilo = 1000: kWh = Wh / 1000, kW = W / 1000, kJ = J / 1000, GFLOP/s = TFLOP/s x 1000, ms = s x 1000",
    ),
    1e6: (
        "1e6",
        "two factors of 1000, or one applied the wrong way round (x 1000 where / 1000 belongs: kW = W / 1000); "
        "mega = 1e6, micro = 1e-6 (a latency in us x 1e-6 is seconds)",
    ),
    1e9: ("1e9", "giga = 1e9: GB/s x 1e9 = bytes per second, GFLOP/s x 1e9 = FLOP/s"),
    1e12: ("1e12", "tera = 1e12: TFLOP/s x 1e12 = FLOP/s"),
    3600.0: (
        "3600",
        "an hour is 3600 s: hours = seconds / 3600, Wh = J / 3600, dollars per second = dollars per hour / 3600",
    ),
    60.0: ("60", "an hour is 3600 s and a minute 60 s: hours = seconds / 3600, not seconds / 60"),
    3.6e6: ("3.6e6", "a kWh is 3.6e6 J (1000 W for 3600 s): kWh = J / 3.6e6 = W x hours / 1000"),
    3.6: ("3.6", "a kWh is 3.6 MJ (3.6e6 J): kWh = J / 3.6e6, not J / 1e6"),
    2.0**30 / 1e9: (
        "1.074 (2**30 / 1e9)",
        "a GiB is 2**30 = 1.074e9 bytes, a GB 1e9 bytes, and spec sheets' GB/s are 1e9 bytes per second",
    ),
    2.0**20 / 1e6: ("1.049 (2**20 / 1e6)", "a MiB is 2**20 = 1.049e6 bytes, a MB 1e6 bytes"),
}


def unit_factor_hint(got: np.ndarray, exp: np.ndarray, rtol: float, atol: Any, name: str) -> str:
    """A hint when ``got`` is ``exp`` times (or divided by) one of :data:`UNIT_FACTORS` in every element, else ""."""
    if not np.issubdtype(exp.dtype, np.floating) or got.shape != exp.shape:
        return ""
    with np.errstate(invalid="ignore", over="ignore"):
        if not (np.isfinite(got).all() and np.isfinite(exp).all() and np.any(exp != 0)):
            return ""
        for factor, (label, rule) in UNIT_FACTORS.items():
            if factor - 1 < 4 * rtol:  # within the tolerance's reach of 1: not a factor the check can tell apart
                continue
            for times, how in ((factor, "too large"), (1 / factor, "too small")):
                scaled = (exp.astype(np.float64) * times).astype(exp.dtype)
                if same(got, scaled, rtol, np.asarray(atol) * times):
                    every = ", in every element" if got.size > 1 else ""
                    return (
                        f"{name} is {label} times {how}{every}: a unit slip by a factor of {label}? {rule}. Check "
                        "each conversion and its direction."
                    )
    return ""
