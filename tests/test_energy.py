"""gpulab.energy: counters where readable (RAPL faked in a temp folder), labelled estimates otherwise."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from gpulab import energy, results
from gpulab.bench import energy as bench_energy
from gpulab.errors import UsageError


def test_integrate_power_is_the_trapezoid_rule():
    t = np.linspace(0, 2, 201)
    assert energy.integrate_power(t, 50 + 10 * t) == pytest.approx(50 * 2 + 5 * 4)
    assert energy.integrate_power([0.0], [100.0]) == 0.0
    with pytest.raises(UsageError, match="same length"):
        energy.integrate_power([0, 1], [1.0])
    with pytest.raises(UsageError, match="decrease"):
        energy.integrate_power([1, 0], [1.0, 1.0])


def _zone(root, name, uj, max_uj=10**9):
    z = root / name
    z.mkdir(parents=True)
    (z / "energy_uj").write_text(f"{uj}\n")
    (z / "max_energy_range_uj").write_text(f"{max_uj}\n")
    return z


def test_rapl_status_says_why(tmp_path):
    ok, why = energy.rapl_status(tmp_path / "missing")
    assert not ok and "does not exist" in why
    (tmp_path / "empty").mkdir()
    assert "no intel-rapl zones" in energy.rapl_status(tmp_path / "empty")[1]
    locked = tmp_path / "locked" / "intel-rapl:0"
    (locked / "energy_uj").mkdir(parents=True)  # unreadable as a file
    ok, why = energy.rapl_status(tmp_path / "locked")
    assert not ok and "root only" in why
    _zone(tmp_path / "ok", "intel-rapl:0", 5)
    _zone(tmp_path / "ok", "intel-rapl:0:0", 5)  # a sub-zone: not counted twice
    assert energy.rapl_zones(tmp_path / "ok") == [tmp_path / "ok" / "intel-rapl:0"]
    assert energy.rapl_status(tmp_path / "ok")[0]


def test_rapl_counter_delta_and_wraparound(tmp_path):
    z = _zone(tmp_path, "intel-rapl:0", 999_000_000, max_uj=1_000_000_000)
    meter = energy._Rapl(tmp_path)
    meter.start()
    (z / "energy_uj").write_text("2000000\n")  # wrapped past max_energy_range_uj
    joules, seconds, _ = meter.stop()
    assert joules == pytest.approx(3.0) and seconds >= 0


def test_rapl_power_samples_difference_the_counter(tmp_path, monkeypatch):
    """1 J per call of the work, calls 20 ms apart: the samples read about 50 W, their integral the counter's."""
    import time

    z = _zone(tmp_path, "intel-rapl:0", 0)
    monkeypatch.setattr(energy, "POWERCAP", tmp_path)
    monkeypatch.setattr(energy, "rapl_status", lambda root=tmp_path: (True, "fake"))
    state = {"uj": 0}

    def work():
        time.sleep(0.02)
        state["uj"] += 1_000_000
        (z / "next").write_text(f"{state['uj']}\n")
        (z / "next").replace(z / "energy_uj")  # at once, as sysfs: the sampler never reads a half-written file

    _, r = energy.measure(work, min_seconds=1.0)
    assert r.measured and r.sampled.startswith("CPU package power") and len(r.samples) >= 5
    t, w = np.array(r.samples).T
    assert np.all(np.diff(t) > 0) and 0 <= t[0] and t[-1] <= r.seconds
    assert np.median(w) == pytest.approx(r.joules / r.seconds, rel=0.5)  # sleep jitter, 50 ms windows
    assert energy.integrate_power(t, w) == pytest.approx(r.joules, rel=0.35)  # the edges are not sampled


def test_measure_uses_rapl_when_readable(tmp_path, monkeypatch):
    _zone(tmp_path, "intel-rapl:0", 0)
    monkeypatch.setattr(energy, "POWERCAP", tmp_path)
    monkeypatch.setattr(energy, "rapl_status", lambda root=tmp_path: (True, "fake"))
    out, r = energy.measure(lambda: 7, min_seconds=0)
    assert out == 7 and r.measured and r.method.startswith("RAPL") and r.label.startswith("measured")


def test_without_counters_the_reading_is_a_labelled_estimate(monkeypatch):
    monkeypatch.setattr(energy, "POWERCAP", Path("/nonexistent-powercap"))
    monkeypatch.setattr(energy, "rapl_status", lambda root=None: (False, "none"))
    out, r = energy.measure(lambda: np.ones(10).sum(), min_seconds=0.05, watts_if_estimated=20.0)
    assert out == 10 and not r.measured and r.calls >= 1 and r.seconds >= 0.05
    assert r.label.startswith("ESTIMATE, not a measurement") and "20 W" in r.method
    assert r.joules == pytest.approx(20.0 * r.seconds)
    watts, why = energy.cpu_estimate_watts(4)
    assert watts == pytest.approx(4 * 350 / 56) and "spec-sheet TDP" in why
    eff = energy.efficiency(r, images=100, flops=1e9)
    assert eff["joules_per_image"] == pytest.approx(r.joules / (100 * r.calls))
    assert eff["images_per_joule"] * eff["joules_per_image"] == pytest.approx(1)
    assert eff["gflops_per_watt"] == pytest.approx(r.calls / r.seconds / r.watts) and not eff["measured"]


def test_nvml_status_explains_itself():
    ok, why = energy.nvml_status()
    assert isinstance(ok, bool) and why


def test_bench_energy_rows_fit_the_results_section(tmp_path):
    from gpulab import data

    rng = np.random.default_rng(0)
    ds = data.Dataset(
        "random",
        rng.random((32, 1, 8, 8), dtype=np.float32),
        rng.integers(0, 10, 32),
        rng.random((8, 1, 8, 8), dtype=np.float32),
        rng.integers(0, 10, 8),
        tuple(map(str, range(10))),
        "test",
    )
    rows = bench_energy.energy_rows(32, 32, min_seconds=0.01, dataset=ds)
    assert rows[0]["gflops_per_watt"] > 0 and rows[1]["images"] == 32 and rows[1]["joules_per_image"] > 0
    for r in rows:
        assert r["measured"] or r["method"].startswith("estimate")
    results.record("energy", rows, "Test GPU", directory=tmp_path, date="2026-01-08", source="test")
    assert results.latest("energy", directory=tmp_path).sections["energy"][1]["images"] == 32


def test_joules_per_image():
    assert energy.joules_per_image([0.0, 2.0], [10.0, 30.0], 4) == pytest.approx(10.0)
    with pytest.raises(UsageError):
        energy.joules_per_image([0.0, 1.0], [1.0, 1.0], 0)


class _FakeNvml:
    """pynvml without a power reading: no energy counter and every power query fails (as on some vGPUs)."""

    class NVMLError(Exception):
        pass

    def nvmlInit(self):
        pass

    def nvmlShutdown(self):
        pass

    def nvmlDeviceGetHandleByIndex(self, i):
        return i

    def nvmlDeviceGetName(self, h):
        return b"Fake GPU"

    def nvmlDeviceGetTotalEnergyConsumption(self, h):
        raise self.NVMLError("Not Supported")

    def nvmlDeviceGetPowerUsage(self, h):
        raise self.NVMLError("Not Supported")


class _FakeNvmlWithCounter(_FakeNvml):
    """A board with a total-energy counter (1 J per call of the work) and an instantaneous-power field."""

    NVML_SUCCESS, NVML_FI_DEV_POWER_INSTANT = 0, 186

    def __init__(self, instant=True):
        self.mj, self.instant = 0, instant

    def nvmlDeviceGetTotalEnergyConsumption(self, h):
        return self.mj

    def nvmlDeviceGetPowerUsage(self, h):
        return 300_000  # mW

    def nvmlDeviceGetFieldValues(self, h, fields):
        import types

        assert fields == [self.NVML_FI_DEV_POWER_INSTANT]
        if not self.instant:
            raise self.NVMLError("Function Not Found")
        return [types.SimpleNamespace(nvmlReturn=0, value=types.SimpleNamespace(uiVal=420_000))]


@pytest.mark.parametrize("instant", [True, False])
def test_nvml_counter_with_power_samples(monkeypatch, instant):
    import sys
    import types

    fake = _FakeNvmlWithCounter(instant)
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    monkeypatch.setitem(sys.modules, "cupy", None)
    monkeypatch.setattr(energy, "runtime", types.SimpleNamespace(is_gpu=lambda: True, synchronize=lambda: None))
    monkeypatch.setattr(energy, "nvml_status", lambda: (True, "fake"))
    monkeypatch.setattr(energy, "device_name", lambda: "Fake GPU")

    def work():
        fake.mj += 1000
        __import__("time").sleep(0.01)

    _, r = energy.measure(work, min_seconds=0.1)
    assert r.measured and r.method == "NVML total-energy counter" and r.joules == pytest.approx(r.calls)
    assert len(r.samples) >= 2 and {w for _, w in r.samples} == {420.0 if instant else 300.0}
    assert r.sampled.startswith("instantaneous" if instant else "GPU power (NVML; averaged over 1 s")


def test_nvml_without_power_samples_falls_back_to_a_labelled_estimate(monkeypatch):
    import sys
    import types

    fake = _FakeNvml()
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    monkeypatch.setitem(sys.modules, "cupy", None)  # no CuPy: the meter takes NVML's device 0
    monkeypatch.setattr(energy, "runtime", types.SimpleNamespace(is_gpu=lambda: True, synchronize=lambda: None))
    monkeypatch.setattr(energy, "nvml_status", lambda: (True, "fake"))
    out, r = energy.measure(lambda: 3, min_seconds=0.02, watts_if_estimated=50.0)
    assert out == 3 and not r.measured and r.label.startswith("ESTIMATE")
    assert "NVML gave no usable power samples (Not Supported)" in r.method


def test_without_rapl_the_estimate_says_why_the_counter_is_missing(tmp_path, monkeypatch):
    monkeypatch.setattr(energy, "POWERCAP", tmp_path / "missing")
    monkeypatch.setattr(energy, "rapl_status", lambda root=None: (False, "powercap does not exist here"))
    _, r = energy.measure(lambda: None, min_seconds=0, watts_if_estimated=10.0)
    assert not r.measured and "no readable RAPL counter (powercap does not exist here)" in r.method


def test_gpu_estimate_matches_whole_model_names(monkeypatch):
    monkeypatch.setattr(energy, "_nvidia_smi_power_limit", lambda: None)  # no driver tool here
    monkeypatch.setattr(energy, "device_name", lambda: "NVIDIA L4")
    assert energy._gpu_watts()[0] == 72
    monkeypatch.setattr(energy, "device_name", lambda: "NVIDIA A10G")  # not an A100 nor an A10: no row
    monkeypatch.setattr(energy, "_nvidia_smi_power_limit", lambda: None)
    with pytest.raises(UsageError, match=r"no row in gpulab.hardware \(GPUS, BOARDS\)"):
        energy._gpu_watts()
    monkeypatch.setattr(energy, "_nvidia_smi_power_limit", lambda: 350.0)  # the driver's tool knows the board
    watts, why, dev = energy._gpu_watts()
    assert watts == 350.0 and "power limit" in why and "nvidia-smi" in why and dev == "NVIDIA A10G"
    monkeypatch.setattr(energy, "device_name", lambda: "NVIDIA L4")  # the board's own limit before the table's
    assert energy._gpu_watts()[0] == 350.0


def test_nvml_counter_failing_at_the_end_gives_a_labelled_estimate(monkeypatch):

    class Failing(_FakeNvmlWithCounter):
        def nvmlDeviceGetTotalEnergyConsumption(self, h):
            self.reads = getattr(self, "reads", 0) + 1
            if self.reads > 2:  # the probe and start() read it; stop() finds it gone
                raise self.NVMLError("GPU is lost")
            return 0

    _on_a_t4_with(monkeypatch, Failing())
    out, r = energy.measure(lambda: 5, min_seconds=0.01)
    assert out == 5 and not r.measured and "GPU is lost" in r.method and "70 W" in r.method


def test_nvidia_smi_power_limit_reads_the_board_or_says_none(tmp_path, monkeypatch):
    import shutil

    smi = tmp_path / "nvidia-smi"
    monkeypatch.setitem(__import__("sys").modules, "cupy", None)
    monkeypatch.setattr(shutil, "which", lambda name: str(smi) if name == "nvidia-smi" else None)
    for printed, expected in [("350.00", 350.0), ("[N/A]", None), ("", None)]:
        smi.write_text(f"#!/bin/sh\necho '{printed}'\n")
        smi.chmod(0o755)
        assert energy._nvidia_smi_power_limit() == expected
    monkeypatch.setattr(shutil, "which", lambda name: None)
    assert energy._nvidia_smi_power_limit() is None


class _FakeNvmlNoPermission(_FakeNvml):
    """NVML loads, but this container may not open the GPU (NVMLError_NoPermission in some containers)."""

    def __init__(self):
        self.shutdowns = 0

    def nvmlDeviceGetHandleByIndex(self, i):
        raise self.NVMLError("Insufficient Permissions")

    def nvmlShutdown(self):
        self.shutdowns += 1


def test_nvml_that_cannot_open_the_gpu_gives_a_labelled_estimate(monkeypatch):

    fake = _FakeNvmlNoPermission()
    _on_a_t4_with(monkeypatch, fake)
    out, r = energy.measure(lambda: 7, min_seconds=0.01)
    assert out == 7 and not r.measured and r.label.startswith("ESTIMATE")
    assert "NVML could not read this GPU (NVMLError: Insufficient Permissions)" in r.method
    assert "T4 spec-sheet board power 70 W" in r.method
    assert fake.shutdowns == 1  # NVML released again


def test_warmup_calls_run_outside_the_window(monkeypatch):
    monkeypatch.setattr(energy, "rapl_status", lambda root=None: (False, "none here"))
    calls = []
    _, r = energy.measure(lambda: calls.append(1), min_seconds=0, watts_if_estimated=10.0, warmup=2)
    assert len(calls) == 3 and r.calls == 1
    with pytest.raises(UsageError, match="warmup must be a whole number"):
        energy.measure(lambda: None, warmup=-1)


def test_failing_work_stops_the_meters_sampling_thread(tmp_path, monkeypatch):
    import threading

    _zone(tmp_path, "intel-rapl:0", 0)
    monkeypatch.setattr(energy, "POWERCAP", tmp_path)
    monkeypatch.setattr(energy, "rapl_status", lambda root=tmp_path: (True, "fake"))
    before = threading.active_count()

    def broken():
        raise ZeroDivisionError("the learner's kernel failed")

    with pytest.raises(ZeroDivisionError, match="kernel failed"):
        energy.measure(broken, min_seconds=0.5)
    assert threading.active_count() == before  # no sampler left polling the counters


def _on_a_t4_with(monkeypatch, fake_pynvml):
    """gpu mode on a Tesla T4 whose NVML is ``fake_pynvml``; no CuPy, no nvidia-smi (the table's 70 W then)."""
    import sys
    import types

    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml)
    monkeypatch.setitem(sys.modules, "cupy", None)
    monkeypatch.setattr(energy, "runtime", types.SimpleNamespace(is_gpu=lambda: True, synchronize=lambda: None))
    monkeypatch.setattr(energy, "nvml_status", lambda: (True, "fake"))
    monkeypatch.setattr(energy, "device_name", lambda: "Tesla T4")
    monkeypatch.setattr(energy, "_nvidia_smi_power_limit", lambda: None)


class _FakeNvmlCountingReads(_FakeNvmlWithCounter):
    """A board with a counter whose power reading gives a new value each read (100 W, 101 W, ...), logged with
    the thread that read it and what the test was doing then (``phase``)."""

    def __init__(self):
        super().__init__(instant=False)  # no instantaneous field: nvmlDeviceGetPowerUsage is the power reading
        self.phase, self.reads = "before", []

    def nvmlDeviceGetPowerUsage(self, h):
        import threading

        watts = 100.0 + len(self.reads)
        self.reads.append((watts, threading.current_thread() is threading.main_thread(), self.phase))
        return int(watts * 1000)  # mW


def test_power_series_is_the_samples_nvml_read_during_the_work(monkeypatch):
    # lesson 11's epoch cell feeds the learner's joules_per_image with power_series(reading): in gpu mode with
    # NVML readable, the power NVML read around the work, not a flat line at the average
    import time

    fake = _FakeNvmlCountingReads()
    _on_a_t4_with(monkeypatch, fake)

    calls = []

    def work():
        calls.append(1)
        fake.phase = f"call {len(calls)}"  # call 1 is the warm-up, before the meter starts
        fake.mj += 1000
        time.sleep(0.03)
        fake.phase = "between calls"

    _, r = energy.measure(work, min_seconds=0.15, warmup=1)
    assert r.measured and r.method == "NVML total-energy counter" and r.calls == len(calls) - 1
    t, w, what = energy.power_series(r)
    sampled = [watts for watts, on_main, _ in fake.reads if not on_main]  # the meter's thread, during the window
    assert list(w) == sampled and len(sampled) >= 3 and list(t) == [s for s, _ in r.samples]
    during = {watts for watts, _, phase in fake.reads if phase.startswith("call ") and phase != "call 1"}
    assert during & set(w) and not [p for _, _, p in fake.reads if p == "call 1"]  # read while the work ran
    assert what.startswith(f"{len(w)} samples of GPU power (NVML") and "measured: NVML total-energy counter" in what
    mine = energy.joules_per_image(t, w, 10)
    assert mine == pytest.approx(energy.integrate_power(t, w) / 10)
    assert mine != pytest.approx(r.joules / 10)  # not the flat line at the counter's average


def test_power_series_without_samples_is_two_points_at_the_average(monkeypatch):
    class CounterOnly(_FakeNvmlWithCounter):
        def nvmlDeviceGetPowerUsage(self, h):
            raise self.NVMLError("Not Supported")

    fake = CounterOnly(instant=False)
    _on_a_t4_with(monkeypatch, fake)

    def work():
        fake.mj += 2000

    _, r = energy.measure(work, min_seconds=0.02)
    t, w, what = energy.power_series(r)  # measured, but no trace: the counter's joules over the window
    assert r.measured and len(r.samples) < 2 and list(t) == [0.0, r.seconds] and list(w) == [r.watts] * 2
    assert "no power samples" in what and "counter's average" in what and what.endswith(f"({r.label})")
    assert energy.joules_per_image(t, w, 4) == pytest.approx(r.joules / 4)

    monkeypatch.setattr(
        energy, "runtime", __import__("types").SimpleNamespace(is_gpu=lambda: False, synchronize=lambda: None)
    )
    monkeypatch.setattr(energy, "rapl_status", lambda root=None: (False, "none here"))
    _, est = energy.measure(lambda: None, min_seconds=0.01, watts_if_estimated=20.0)
    t, w, what = energy.power_series(est)  # simulator mode, no counter: the estimate stays, labelled
    assert not est.measured and list(w) == [20.0, 20.0] and what.startswith("ESTIMATE")
    assert energy.joules_per_image(t, w, 4) == pytest.approx(est.joules / 4)
