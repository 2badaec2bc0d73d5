"""Lab 11's checks name the unit mistakes (kJ, Wh, kWh from seconds, dollars per second, utilization the
wrong way up), run as the lab runs them: its setup cell, the learner's function, the check cell."""

from pathlib import Path

import nbformat
import numpy as np
import pytest

LAB = Path(__file__).resolve().parents[1] / "labs" / "solutions" / "lab11_energy_cost_hardware.ipynb"


def _check(function_cell: int, fn_name: str, fn):
    nb = nbformat.read(LAB, as_version=4)
    ns: dict = {}
    exec(nb.cells[4].source, ns)  # noqa: S102 - the lab's own setup cell
    ns[fn_name] = fn
    check = nb.cells[function_cell + 1].source
    check = check.split("### BEGIN HIDDEN TESTS")[0].replace("report(*results", "# report(*results")
    exec(check, ns)  # noqa: S102 - the lab's own check cell
    return ns["result"]


def _trap(y, x):
    return float(np.sum(np.diff(x) * (y[1:] + y[:-1]) / 2))


@pytest.mark.parametrize(
    ("fn", "words"),
    [
        (lambda t, w, idle, n: _trap(w - idle, t) / n / 1000, "kilojoules"),
        (lambda t, w, idle, n: _trap(w - idle, t) / n / 3600, "watt-hours"),
        (lambda t, w, idle, n: (w - idle).mean() * (t[-1] - t[0]) / n, "unevenly spaced"),
    ],
)
def test_energy_unit_mistakes_are_named(fn, words):
    res = _check(11, "dynamic_joules_per_image", fn)
    assert not res.passed and words in res.hint, res


def _cost(kwh=lambda w, s: w * s / 3.6e6, dollars=lambda s, usd: s / 3600 * usd, rate=lambda p, u: p * 1e12 * u):
    def run_cost(flops, peak_tflops, utilization, usd_per_hour, watts):
        seconds = flops / rate(peak_tflops, utilization)
        return seconds / 3600, dollars(seconds, usd_per_hour), kwh(watts, seconds)

    return run_cost


@pytest.mark.parametrize(
    ("fn", "words"),
    [
        (_cost(kwh=lambda w, s: w * s / 1000), "a kWh is 3.6e6 J (watts x hours / 1000)"),
        (_cost(kwh=lambda w, s: w * s), "1000 W for 3600 s"),
        (_cost(dollars=lambda s, usd: s * usd), "not the seconds"),
        (_cost(rate=lambda p, u: p * 1e12 / u), "not peak / utilization"),
    ],
)
def test_cost_unit_mistakes_are_named(fn, words):
    res = _check(14, "run_cost", fn)
    assert not res.passed and words in res.hint, res


def test_the_right_units_pass():
    assert _check(14, "run_cost", _cost()).passed
