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


# --- unit slips by a whole factor (gpulab.exercises.units): named in every check, lab 11's and lesson 11's ---
# Before, each got only "kwh[0]: expected 1.75162, got 1751620 (1 of 1 elements wrong)" with no hint.


def _run_cost_with(hours_from_seconds=lambda s: s / 3600, rate=lambda p, u: p * 1e12 * u, usd=lambda h, p: h * p):
    def run_cost(flops, peak_tflops, utilization, usd_per_hour, watts):
        seconds = flops / rate(peak_tflops, utilization)
        hours = hours_from_seconds(seconds)
        return hours, usd(hours, usd_per_hour), watts * seconds / 3.6e6

    return run_cost


@pytest.mark.parametrize(
    ("fn", "words"),
    [
        (_cost(kwh=lambda w, s: w * 1000 * s / 3600), "kwh is 1e6 times too large"),  # W x 1000 for kW
        (_cost(kwh=lambda w, s: w * s / 3.6e9), "kwh is 1000 times too small"),
        (_run_cost_with(hours_from_seconds=lambda s: s / 60), "hours is 60 times too large"),
        (_run_cost_with(rate=lambda p, u: p * 1e9 * u), "hours is 1000 times too large"),  # TFLOP/s as 1e9
        (_run_cost_with(rate=lambda p, u: p * u), "hours is 1e12 times too large"),  # TFLOP/s as FLOP/s
        (_run_cost_with(usd=lambda h, p: h * p / 3600), "dollars is 3600 times too small"),  # $/h made $/s
    ],
)
def test_cost_off_by_a_units_factor_is_named(fn, words):
    res = _check(14, "run_cost", fn)
    assert not res.passed and words in res.hint and "unit slip" in res.hint, res


@pytest.mark.parametrize(
    ("fn", "words"),
    [
        (lambda t, w, idle, n: _trap(w - idle, t) / n / 3.6e6, "3.6e6 times too small"),  # kWh, not J
        (lambda t, w, idle, n: _trap(w - idle, t) / n * 1000, "1000 times too large"),
    ],
)
def test_energy_off_by_a_units_factor_is_named(fn, words):
    res = _check(11, "dynamic_joules_per_image", fn)
    assert not res.passed and words in res.hint and "unit slip" in res.hint, res


@pytest.mark.parametrize(
    ("name", "fn", "words"),
    [
        ("joules_per_image", lambda t, w, n: float(np.sum(np.diff(t) * (w[1:] + w[:-1]) / 2)) / n / 3.6e6, "3.6e6"),
        ("attainable", lambda i, p, b: np.minimum(p * 1e3, b * i * 2**30 / 1e9), "a GiB is 2**30"),
        ("attainable", lambda i, p, b: np.minimum(p * 1e6, b * i * 1e3), "1000 times too large"),  # MFLOP/s
        ("cost_per_epoch", lambda n, ips, usd: n / ips * usd / 3600 / 1000, "1000 times too small"),
        ("attainable", lambda i, p, b: np.minimum(p * 1e12, b * i), "FLOP/s, but the answer is in GFLOP/s"),
    ],
)
def test_lesson_11_off_by_a_units_factor_is_named(name, fn, words):
    from gpulab import lessons

    res = lessons.check("11", name, fn)
    assert not res.passed and words in res.hint, res


@pytest.mark.parametrize(
    ("cell", "fn_name", "fn"),
    [
        (14, "run_cost", _cost()),  # right
        (14, "run_cost", _cost(rate=lambda p, u: p * 1e12 / u)),  # a different mistake, named for itself
        (11, "dynamic_joules_per_image", lambda t, w, idle, n: _trap(w - idle, t) / n),  # right
        (11, "dynamic_joules_per_image", lambda t, w, idle, n: _trap(w, t) / n),  # idle not subtracted
    ],
)
def test_no_unit_hint_for_the_right_answer_or_another_mistake(cell, fn_name, fn):
    assert "unit slip" not in _check(cell, fn_name, fn).hint


def _step_times(bytes_per_gb=1e9, bits=1, latency=1.0):
    def step_times(n_gpus, compute_1gpu_s, grad_bytes, link_gbps, latency_s):
        n = np.asarray(n_gpus, dtype=np.float64)
        link = 2 * (n - 1) / n * grad_bytes * bits / (link_gbps * bytes_per_gb)
        return compute_1gpu_s / n + link + 2 * (n - 1) * latency_s * latency

    return step_times


@pytest.mark.parametrize(
    "fn", [_step_times(bytes_per_gb=2**30), _step_times(bits=8), _step_times(latency=1e-6)]
)  # GiB/s, gigabits, a latency taken for microseconds
def test_a_slip_in_the_all_reduce_term_is_not_called_an_off_by_one(fn):
    """The first case times 1 GPU (no all-reduce) and one N: only the second element can be wrong, which the
    check called "only the last element is wrong: an off-by-one at the edge". With two elements that is no
    evidence of an off-by-one; the verdict now shows expected and got without that hint."""
    res = _check(19, "step_times", fn)
    assert not res.passed and "off-by-one" not in res.hint, res
    assert _check(19, "step_times", _step_times()).passed


def test_a_kernels_own_factors_are_no_unit_slip():
    from gpulab.exercises.units import unit_factor_hint

    exp = np.array([1.0, 2.0, 0.0, -3.0], np.float32)
    assert unit_factor_hint(exp * 1000, exp, 1e-6, 0.0, "out").startswith("out is 1000 times too large")
    for factor in (2, 8, 32, 256):  # each value summed twice, a block size, ...
        assert unit_factor_hint(exp * factor, exp, 1e-6, 0.0, "out") == ""
    assert unit_factor_hint(exp * 2**30 / 1e9, exp, 0.05, 0.0, "out") == ""  # a tolerance that cannot tell 1.074
    assert unit_factor_hint(np.zeros(3), np.zeros(3), 1e-6, 0.0, "out") == ""  # no ratio to read


# --- the integral and the ring, more mistakes named (before: "expected ..., got ..." with no hint) ---


@pytest.mark.parametrize(
    ("fn", "words"),
    [
        (lambda t, w, idle, n: float(np.sum((w - idle)[:-1] * np.diff(t))) / n, "left Riemann sum"),
        (lambda t, w, idle, n: float(np.sum(w - idle)) / n, "summed without the time"),
        (lambda t, w, idle, n: _trap(w - idle, np.arange(len(t), dtype=float)) / n, "as if 1 s apart"),
    ],
)
def test_energy_integration_mistakes_are_named(fn, words):
    res = _check(11, "dynamic_joules_per_image", fn)
    assert not res.passed and words in res.hint, res


def _ring(volume=2.0, latency_steps=True):
    def step_times(n_gpus, compute_1gpu_s, grad_bytes, link_gbps, latency_s):
        n = np.asarray(n_gpus, dtype=np.float64)
        latency = 2 * (n - 1) * latency_s if latency_steps else (n > 1) * latency_s
        return compute_1gpu_s / n + volume * (n - 1) / n * grad_bytes / (link_gbps * 1e9) + latency

    return step_times


@pytest.mark.parametrize(
    ("fn", "words"),
    [(_ring(volume=1.0), "not (N-1)/N"), (_ring(latency_steps=False), "not the latency once")],
)
def test_ring_mistakes_are_named_and_the_right_one_passes(fn, words):
    res = _check(19, "step_times", fn)
    assert not res.passed and words in res.hint, res
    right = _check(19, "step_times", _ring())
    assert right.passed and right.score == right.max_score, right
    energy = _check(11, "dynamic_joules_per_image", lambda t, w, idle, n: _trap(w - idle, t) / n)
    assert energy.passed and energy.score == energy.max_score, energy
