"""Lesson 11's napkin-math exercises: the unit mistakes learners make (kJ, Wh, TFLOP/s, minutes, an inverted
ratio, swapped arguments) fail and are named, each with what to do instead."""

import numpy as np
import pytest

from gpulab import lessons


def _trap(y, x):
    return float(np.trapezoid(y, x) if hasattr(np, "trapezoid") else np.trapz(y, x))


@pytest.mark.parametrize(
    ("name", "fn", "words"),
    [
        ("joules_per_image", lambda t, w, n: _trap(w, t) / n / 1000, "kilojoules"),
        ("joules_per_image", lambda t, w, n: _trap(w, t) / n / 3600, "watt-hours"),
        ("joules_per_image", lambda t, w, n: n / _trap(w, t), "images per joule"),
        ("joules_per_image", lambda t, w, n: _trap(t, w) / n, "np.trapezoid(watts, times_s)"),
        ("joules_per_image", lambda t, w, n: w.mean() * (t[-1] - t[0]) / n, "evenly spaced"),
        ("joules_per_image", lambda t, w, n: w.mean() * t[-1] / n, "does not start at 0"),
        ("attainable", lambda i, p, b: np.minimum(p, b * i / 1e3), "that is TFLOP/s"),
        ("cost_per_epoch", lambda n, ips, usd: n / ips * usd * 3600, "not a multiplication"),
        ("cost_per_epoch", lambda n, ips, usd: n / ips * usd / 60, "not 60"),
        ("cost_per_epoch", lambda n, ips, usd: ips / n * usd / 3600, "images / images_per_second"),
        ("cost_per_epoch", lambda n, ips, usd: round(n / ips * usd / 3600, 2), "not rounded"),
    ],
)
def test_a_unit_mistake_fails_with_its_name(name, fn, words):
    res = lessons.check("11", name, fn)
    assert not res.passed and words in res.hint, res


def test_the_right_units_pass():
    assert lessons.check("11", "joules_per_image", lambda t, w, n: _trap(w, t) / n).passed
    assert lessons.check("11", "cost_per_epoch", lambda n, ips, usd: n / ips * usd / 3600).passed
