"""Energy, measured where a counter is readable and labelled as an estimate where not (lesson 11).

Three ways to know how many joules some work took, best first:

1. **NVML** (NVIDIA's management library, ``pip install nvidia-ml-py``): the GPU board's total-energy
   counter (millijoules since the driver loaded; Volta and newer), or, where a board has none, its power
   reading sampled every few milliseconds and integrated over time (:func:`integrate_power`).
2. **RAPL** (Running Average Power Limit) counters of the CPU package, read from
   ``/sys/class/powercap/intel-rapl:N/energy_uj`` (Intel, and AMD Zen where the kernel's powercap driver
   supports it). Root-only since Linux 5.10 (CVE-2020-8694, the PLATYPUS power side channel).
3. An **estimate**: power x time, with the power from a spec sheet (TDP). It is labelled "estimate"
   everywhere it appears: :class:`EnergyReading` carries ``measured=False`` and its label says so.

:func:`measure` picks the first that works here and says which in its result.
"""

from __future__ import annotations

import os
import re
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from collections.abc import Callable, Sequence

import numpy as np

from . import runtime
from .errors import UsageError
from .timing import device_name

__all__ = [
    "POWERCAP",
    "EnergyReading",
    "cpu_estimate_watts",
    "efficiency",
    "estimate",
    "integrate_power",
    "joules_per_image",
    "measure",
    "nvml_status",
    "rapl_status",
    "rapl_zones",
]

POWERCAP = Path("/sys/class/powercap")


@dataclass(frozen=True)
class EnergyReading:
    """Joules over ``seconds`` of work, how they were obtained, and whether that was a measurement."""

    joules: float
    seconds: float
    method: str  # "NVML total-energy counter", "NVML power samples", "RAPL counter", "estimate: ..."
    device: str
    measured: bool
    calls: int = 1  # how many times the work ran inside the window
    # Power sampled during the window, as (seconds since its start, watts), when the meter could sample it
    # (NVML's power reading, or RAPL's counter differenced); empty for an estimate, whose power is one number.
    samples: tuple[tuple[float, float], ...] = ()
    sampled: str = ""  # what the samples are, e.g. "instantaneous board power (NVML)"

    @property
    def watts(self) -> float:
        """Average power over the window."""
        return self.joules / self.seconds if self.seconds > 0 else float("nan")

    @property
    def label(self) -> str:
        """What to print next to any number derived from this reading."""
        if self.measured:
            return f"measured: {self.method} on {self.device}"
        return f"ESTIMATE, not a measurement: {self.method.removeprefix('estimate: ')} on {self.device}"

    def __str__(self) -> str:
        return f"{self.joules:.4g} J in {self.seconds:.3g} s = {self.watts:.4g} W average ({self.label})"


def integrate_power(times_s: Sequence[float], watts: Sequence[float]) -> float:
    """Joules from power samples: the trapezoid rule, sum of (t[i+1] - t[i]) x (p[i] + p[i+1]) / 2."""
    t = np.asarray(times_s, dtype=np.float64)
    p = np.asarray(watts, dtype=np.float64)
    if t.shape != p.shape or t.ndim != 1:
        raise UsageError(f"integrate_power needs two 1-D sequences of the same length, got {t.shape} and {p.shape}.")
    if t.size < 2:
        return 0.0
    if np.any(np.diff(t) < 0):
        raise UsageError("integrate_power: the sample times must not decrease.")
    return float(np.sum(np.diff(t) * (p[1:] + p[:-1]) / 2.0))


def joules_per_image(times_s: Sequence[float], watts: Sequence[float], images: int) -> float:
    """Energy of power samples (:func:`integrate_power`) divided by the ``images`` processed meanwhile."""
    if images < 1:
        raise UsageError(f"images must be at least 1, got {images}.")
    return integrate_power(times_s, watts) / images


def estimate(seconds: float, watts: float, why: str, device: str = "this machine's CPU") -> EnergyReading:
    """An energy **estimate**: ``watts`` x ``seconds``; ``why`` says where the watts come from."""
    if seconds < 0 or not watts > 0:
        raise UsageError(f"estimate needs seconds >= 0 and watts > 0, got {seconds} and {watts}.")
    return EnergyReading(watts * seconds, seconds, f"estimate: {watts:.3g} W x time ({why})", device, False)


# --- RAPL -------------------------------------------------------------------------------------------------
def rapl_zones(root: Path = POWERCAP) -> list[Path]:
    """Top-level RAPL package zones (``intel-rapl:N``) whose ``energy_uj`` this process can read."""
    zones = []
    for z in sorted(Path(root).glob("intel-rapl:*")):
        if z.name.count(":") != 1:
            continue  # sub-zones (core, uncore, dram) are parts of a package: do not count them twice
        try:
            int((z / "energy_uj").read_text())
        except (OSError, ValueError):
            continue
        zones.append(z)
    return zones


def rapl_status(root: Path = POWERCAP) -> tuple[bool, str]:
    """``(readable, why)``: can this process read a CPU energy counter, and if not, why not."""
    root = Path(root)
    if not root.exists():
        return False, (
            f"{root} does not exist here: containers usually do not mount it, and virtual machines "
            "(most cloud VMs, Colab) do not expose the host's RAPL counters at all"
        )
    packages = [z for z in root.glob("intel-rapl:*") if z.name.count(":") == 1]
    if not packages:
        return False, (
            f"{root} has no intel-rapl zones: no RAPL driver for this CPU (AMD Zen needs a kernel whose "
            "powercap driver knows the CPU; older CPUs have none)"
        )
    if not rapl_zones(root):
        return False, (
            f"{packages[0]}/energy_uj is not readable: since Linux 5.10 it is readable by root only "
            "(a power side channel, CVE-2020-8694); an administrator can grant read access"
        )
    return True, f"{len(rapl_zones(root))} RAPL package zone(s) readable"


class _Sampler:
    """Calls ``point()`` (watts) every ``interval`` seconds on a thread; ``samples`` holds (seconds, watts).

    A failing ``point`` ends the sampling (``error`` says why); the meter's own reading does not depend on it.
    """

    def __init__(self, point: Callable[[], float], interval: float) -> None:
        self.point, self.interval = point, interval
        self.samples: list[tuple[float, float]] = []
        self.error = ""
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                watts = self.point()
            except Exception as exc:  # NVMLError, OSError: the board or the file stopped answering
                self.error = str(exc) or type(exc).__name__
                return
            self.samples.append((time.perf_counter() - self.t0, watts))
            self._stop.wait(self.interval)

    def start(self, t0: float) -> None:
        self.t0 = t0
        self._thread.start()

    def stop(self) -> tuple[tuple[float, float], ...]:
        self._stop.set()
        self._thread.join()
        return tuple(self.samples)


class _Rapl:
    sampled = "CPU package power (RAPL counters differenced)"

    def __init__(self, root: Path, interval: float = 0.05) -> None:
        self.zones = rapl_zones(root)
        self.sampler = _Sampler(self._power, interval)
        self._last: tuple[float, list[int]] | None = None

    def _read(self) -> list[int]:
        return [int((z / "energy_uj").read_text()) for z in self.zones]

    def _joules(self, e0: list[int], e1: list[int]) -> float:
        joules = 0.0
        for z, a, b in zip(self.zones, e0, e1):
            if b < a:  # the counter wrapped
                b += int((z / "max_energy_range_uj").read_text())
            joules += (b - a) / 1e6
        return joules

    def _power(self) -> float:
        """Average watts since the previous call (the first call only starts the clock and returns nan)."""
        now, e = time.perf_counter(), self._read()
        last, self._last = self._last, (now, e)
        if last is None or now <= last[0]:
            return float("nan")
        return self._joules(last[1], e) / (now - last[0])

    def start(self) -> None:
        self.t0, self.e0 = time.perf_counter(), self._read()
        self.sampler.start(self.t0)

    def stop(self) -> tuple[float, float, tuple[tuple[float, float], ...]]:
        samples = tuple((t, w) for t, w in self.sampler.stop() if np.isfinite(w))
        e1, t1 = self._read(), time.perf_counter()
        return self._joules(self.e0, e1), t1 - self.t0, samples


# --- NVML -------------------------------------------------------------------------------------------------
def nvml_status() -> tuple[bool, str]:
    """``(usable, why)``: can this process read a GPU's power or energy through NVML."""
    try:
        import pynvml
    except ImportError:
        return False, "nvidia-ml-py is not installed (pip install nvidia-ml-py, or gpulab[gpu-cu12])"
    try:
        pynvml.nvmlInit()
    except Exception as exc:  # NVMLError_LibraryNotFound / DriverNotLoaded: no NVIDIA driver here
        return False, f"NVML could not start ({exc}): no NVIDIA driver on this machine"
    try:
        n = pynvml.nvmlDeviceGetCount()
    finally:
        pynvml.nvmlShutdown()
    return (n > 0), f"{n} NVIDIA GPU(s) visible to NVML"


class _Nvml:
    """The current CUDA device's energy counter, and its power sampled every ``interval`` seconds.

    Joules come from the counter where the board has one, else from the samples integrated. The samples are
    the instantaneous power where NVML has that field (``NVML_FI_DEV_POWER_INSTANT``), else
    ``nvmlDeviceGetPowerUsage``, which Ampere (except the A100) and newer boards average over the last second.
    """

    def __init__(self, interval: float = 0.005) -> None:
        import pynvml

        self.nv, self.interval = pynvml, interval
        self.samples: tuple[tuple[float, float], ...] = ()
        self.error = ""  # why power sampling stopped, if it did
        pynvml.nvmlInit()
        self.handle = None
        try:
            import cupy

            bus = cupy.cuda.Device().pci_bus_id  # CUDA and NVML may number GPUs differently: match by bus
            self.handle = pynvml.nvmlDeviceGetHandleByPciBusId(bus)
        except Exception:
            self.handle = pynvml.nvmlDeviceGetHandleByIndex(0)
        self.device = device_name()  # the GPU CUDA works on, which the handle above matches by bus
        try:
            pynvml.nvmlDeviceGetTotalEnergyConsumption(self.handle)
            self.method = "NVML total-energy counter"
        except pynvml.NVMLError:
            self.method = "NVML power samples, integrated"
        self._instant = getattr(pynvml, "NVML_FI_DEV_POWER_INSTANT", None)
        try:
            self._instant_watts()
            self.sampled = "instantaneous board power (NVML)"
        except Exception:  # an older driver or nvidia-ml-py without the field: the power reading
            self._instant = None
            self.sampled = "board power (NVML; averaged over 1 s on Ampere, except the A100, and newer)"
        self.sampler = _Sampler(self._watts, interval)

    def _instant_watts(self) -> float:
        (value,) = self.nv.nvmlDeviceGetFieldValues(self.handle, [self._instant])
        if value.nvmlReturn != self.nv.NVML_SUCCESS:
            raise self.nv.NVMLError(value.nvmlReturn)
        return value.value.uiVal / 1e3  # milliwatts

    def _watts(self) -> float:
        if self._instant is not None:
            return self._instant_watts()
        return self.nv.nvmlDeviceGetPowerUsage(self.handle) / 1e3  # some boards (and vGPUs) report none

    def start(self) -> None:
        self.t0 = time.perf_counter()
        if self.method.endswith("counter"):
            self.e0 = self.nv.nvmlDeviceGetTotalEnergyConsumption(self.handle)  # millijoules
        self.sampler.start(self.t0)

    def stop(self) -> tuple[float | None, float]:
        """``(joules, seconds)``; joules is None when the board has no counter and gave fewer than two power
        samples (see ``error``). The samples are in ``samples``."""
        t1 = time.perf_counter()
        try:
            self.samples, self.error = self.sampler.stop(), self.sampler.error
            if self.method.endswith("counter"):
                return (self.nv.nvmlDeviceGetTotalEnergyConsumption(self.handle) - self.e0) / 1e3, t1 - self.t0
            if len(self.samples) < 2:
                self.error = self.error or f"only {len(self.samples)} power sample(s) in {t1 - self.t0:.3g} s"
                return None, t1 - self.t0
            t, p = zip(*self.samples)
            return integrate_power(t, p), t1 - self.t0
        finally:
            self.nv.nvmlShutdown()


# --- estimates --------------------------------------------------------------------------------------------
def cpu_estimate_watts(cores_used: int | None = None) -> tuple[float, str]:
    """``(watts, why)`` for an energy estimate of CPU work: spec-sheet TDP per core x cores used.

    The TDP is the Xeon Platinum 8480+'s (350 W for 56 cores, :data:`gpulab.hardware.CPUS`), a typical cloud
    server CPU; a VM does not tell which part it runs on. An estimate: real power depends on load and clocks.
    """
    from .hardware import CPUS

    ref = CPUS["Xeon 8480+"]
    cores = cores_used or len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (cores_used or 1)
    per_core = float(ref.watts or 350.0) / 56  # the 8480+ sheet gives 350 W
    return per_core * cores, (
        f"spec-sheet TDP per core of the {ref.name}, a typical cloud CPU standing in for this one: "
        f"{ref.watts:g} W / 56 = {per_core:.2f} W x {cores} core(s) used"
    )


def measure(
    fn: Callable[..., Any], *args: Any, min_seconds: float = 1.0, watts_if_estimated: float | None = None, **kwargs: Any
) -> tuple[Any, EnergyReading]:
    """Run ``fn(*args, **kwargs)`` repeatedly for at least ``min_seconds`` and read the energy it took.

    gpu mode: the GPU's NVML counter (or integrated power samples). Otherwise: the CPU's RAPL counters
    when readable, else an estimate with ``watts_if_estimated`` (default :func:`cpu_estimate_watts`),
    labelled as an estimate. Returns ``(last result, EnergyReading)``; divide by ``reading.calls``
    for one call. Counters update every few to 100 ms, so short windows are noisy: keep ``min_seconds``.
    """
    if not min_seconds >= 0:
        raise UsageError(f"min_seconds must be >= 0, got {min_seconds}.")
    meter: Any = None
    if runtime.is_gpu() and nvml_status()[0]:
        meter = _Nvml()
    elif not runtime.is_gpu() and rapl_status()[0]:
        meter = _Rapl(POWERCAP)
    runtime.synchronize()
    calls, out = 0, None
    if meter is not None:
        meter.start()
    t0 = time.perf_counter()
    while calls == 0 or time.perf_counter() - t0 < min_seconds:
        out = fn(*args, **kwargs)
        runtime.synchronize()
        calls += 1
    elapsed = time.perf_counter() - t0
    nvml_failed = ""
    if isinstance(meter, _Nvml):
        nvml_joules, seconds = meter.stop()
        if nvml_joules is not None:
            return out, EnergyReading(
                nvml_joules, seconds, meter.method, meter.device, True, calls, meter.samples, meter.sampled
            )
        nvml_failed = f"NVML gave no usable power samples ({meter.error}): "
    if isinstance(meter, _Rapl):
        joules, seconds, samples = meter.stop()
        return out, EnergyReading(
            joules,
            seconds,
            "RAPL package counters (whole CPU, every process)",
            "this machine's CPU",
            True,
            calls,
            samples,
            meter.sampled,
        )
    if watts_if_estimated is not None:
        watts, why, dev = watts_if_estimated, "watts you gave", "this machine"
    elif runtime.is_gpu():
        watts, why, dev = _gpu_watts()
    else:
        watts, why, dev = (*cpu_estimate_watts(), "this machine's CPU")
    reading = estimate(
        elapsed,
        watts,
        (
            nvml_failed
            or ("NVML unavailable: " if runtime.is_gpu() else f"no readable RAPL counter ({rapl_status()[1]}): ")
        )
        + why,
        dev,
    )
    return out, EnergyReading(reading.joules, elapsed, reading.method, reading.device, False, calls)


def _gpu_watts() -> tuple[float, str, str]:
    """Spec-sheet board power of the current GPU, for an estimate when NVML is unavailable."""
    from .hardware import GPUS

    name = device_name()
    for key, d in GPUS.items():
        # whole words: "L4" must not match an "L40S", which draws five times the power
        if re.search(rf"\b{re.escape(key)}\b", name, re.IGNORECASE) and d.watts:
            return float(d.watts), f"{d.name} spec-sheet board power {d.watts:g} W (an upper bound)", name
    raise UsageError(
        f"cannot read {name}'s power (NVML unavailable) and it is not in gpulab.hardware.GPUS: "
        "install nvidia-ml-py, or pass watts_if_estimated= from its spec sheet."
    )


def efficiency(reading: EnergyReading, *, images: int | None = None, flops: float | None = None) -> dict[str, Any]:
    """Average watts, and per work done: joules per image, images per joule, GFLOP/s per watt.

    ``images`` / ``flops`` are the work of **one** call; the reading's ``calls`` multiply them.
    """
    out: dict[str, Any] = {
        "watts": reading.watts,
        "seconds": reading.seconds,
        "joules": reading.joules,
        "measured": reading.measured,
        "label": reading.label,
    }
    if images:
        n = images * reading.calls
        out["joules_per_image"] = reading.joules / n
        out["images_per_joule"] = n / reading.joules
    if flops:
        out["gflops"] = flops * reading.calls / reading.seconds / 1e9
        out["gflops_per_watt"] = out["gflops"] / reading.watts  # = GFLOP per joule
    return out
