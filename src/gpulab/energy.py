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
import time
from dataclasses import dataclass
from typing import Any
from collections.abc import Callable, Sequence

import numpy as np

from . import runtime
from .errors import UsageError
from .energy_meters import (
    POWERCAP,
    _Nvml,
    _Rapl,
    cuda_pci_bus_id,
    integrate_power,
    nvml_status,
    rapl_status,
    rapl_zones,
)
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
    "power_series",
    "rapl_status",
    "rapl_zones",
]


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


def joules_per_image(times_s: Sequence[float], watts: Sequence[float], images: int) -> float:
    """Energy of power samples (:func:`integrate_power`) divided by the ``images`` processed meanwhile."""
    if images < 1:
        raise UsageError(f"images must be at least 1, got {images}.")
    return integrate_power(times_s, watts) / images


def power_series(reading: EnergyReading) -> tuple[np.ndarray, np.ndarray, str]:
    """``(seconds, watts, what)``: the power over a reading's window, to integrate (:func:`joules_per_image`),
    and a sentence saying what it is.

    The power samples the meter read during the work (NVML's power on a GPU, RAPL differenced on a CPU) where it
    kept two or more. Otherwise two points at the window's average power: for a counter without samples its
    joules / seconds (so integrating gives the counter's joules), for an estimate its one assumed power, and then
    the sentence says ESTIMATE.
    """
    if len(reading.samples) >= 2:
        t, w = np.asarray(reading.samples, dtype=np.float64).T
        return t, w, f"{len(t)} samples of {reading.sampled} read during the work ({reading.label})"
    t, w = np.array([0.0, reading.seconds]), np.full(2, reading.watts)
    if reading.measured:  # the counter's joules, no trace: say why there is none
        why = f"{reading.sampled or 'no power samples'}: two points at the counter's average, {reading.watts:,.4g} W"
        return t, w, f"{why} ({reading.label})"
    return (
        t,
        w,
        (  # its label, with where the watts come from, is printed with the reading
            f"ESTIMATE, no power samples: an estimate has one power for the whole window, so two points at "
            f"{reading.watts:,.4g} W"
        ),
    )


def estimate(seconds: float, watts: float, why: str, device: str = "this machine's CPU") -> EnergyReading:
    """An energy **estimate**: ``watts`` x ``seconds``; ``why`` says where the watts come from."""
    if seconds < 0 or not watts > 0:
        raise UsageError(f"estimate needs seconds >= 0 and watts > 0, got {seconds} and {watts}.")
    return EnergyReading(watts * seconds, seconds, f"estimate: {watts:.3g} W x time ({why})", device, False)


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
    fn: Callable[..., Any],
    *args: Any,
    min_seconds: float = 1.0,
    watts_if_estimated: float | None = None,
    warmup: int = 0,
    **kwargs: Any,
) -> tuple[Any, EnergyReading]:
    """Run ``fn(*args, **kwargs)`` repeatedly for at least ``min_seconds`` and read the energy it took.

    gpu mode: the GPU's NVML counter (or integrated power samples). Otherwise: the CPU's RAPL counters
    when readable, else an estimate with ``watts_if_estimated`` (default :func:`cpu_estimate_watts`),
    labelled as an estimate. Returns ``(last result, EnergyReading)``; divide by ``reading.calls``
    for one call. Counters update every few to 100 ms, so short windows are noisy: keep ``min_seconds``.
    ``warmup`` calls run first, outside the window: a first call may do one-time work (CuPy's first
    matmul creates cuBLAS's handle and loads its kernels; a Numba kernel compiles) that is not the work's
    energy. When NVML is installed but cannot read this GPU (e.g. no permission in a container), the
    result is a labelled estimate that says why.
    """
    if not min_seconds >= 0:
        raise UsageError(f"min_seconds must be >= 0, got {min_seconds}.")
    if isinstance(warmup, bool) or not isinstance(warmup, int) or warmup < 0:
        raise UsageError(f"warmup must be a whole number of calls >= 0, got {warmup!r}.")
    for _ in range(warmup):
        fn(*args, **kwargs)
    meter: Any = None
    nvml_failed = ""
    if runtime.is_gpu() and nvml_status()[0]:
        try:
            meter = _Nvml()
        except Exception as e:  # NVML loads but cannot open or read this GPU: estimate, and say why
            nvml_failed = f"NVML could not read this GPU ({type(e).__name__}: {e}): "
    elif not runtime.is_gpu() and rapl_status()[0]:
        meter = _Rapl(POWERCAP)
    runtime.synchronize()
    calls, out = 0, None
    if meter is not None:
        try:
            meter.start()
        except Exception as e:
            if not isinstance(meter, _Nvml):
                raise
            meter.close()
            meter, nvml_failed = None, f"NVML could not read this GPU's energy ({type(e).__name__}: {e}): "
    t0 = time.perf_counter()
    try:
        while calls == 0 or time.perf_counter() - t0 < min_seconds:
            out = fn(*args, **kwargs)
            runtime.synchronize()
            calls += 1
    except BaseException:  # the work failed or was interrupted: stop the meter's thread, then let it through
        if meter is not None:
            meter.stop()
        raise
    elapsed = time.perf_counter() - t0
    if isinstance(meter, _Nvml):
        try:
            nvml_joules, seconds = meter.stop()
        except Exception as e:  # the counter stopped answering at the end: estimate, and say why
            nvml_joules, meter.error = None, f"{type(e).__name__}: {e}"
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
    """The current GPU's power for an estimate when NVML is unavailable: its power limit from nvidia-smi, else
    the spec-sheet board power of its own board's row (:func:`gpulab.hardware.gpu_named`); both upper bounds."""
    from .hardware import gpu_named

    name = device_name()
    limit = _nvidia_smi_power_limit()  # this very board's limit, when the driver's tool answers
    if limit:
        return limit, f"this board's power limit, {limit:g} W, from nvidia-smi (an upper bound)", name
    d = gpu_named(name)  # its own board: not an L4's power for an L40S, nor an SXM board's for a PCIe one
    if d is not None and d.watts:
        return float(d.watts), f"{d.name} spec-sheet board power {d.watts:g} W (an upper bound)", name
    from .hardware import missing_row_note

    raise UsageError(
        f"cannot read {name}'s power (NVML unavailable), nvidia-smi gave no power limit, and the board has no "
        f"row in gpulab.hardware (GPUS, BOARDS) ({missing_row_note(name)}): install nvidia-ml-py (pip install "
        "nvidia-ml-py) to measure it, or pass watts_if_estimated= with the board power from its spec sheet for a "
        "labelled estimate."
    )


def _nvidia_smi_power_limit() -> float | None:
    """The current GPU's board power limit in watts from ``nvidia-smi`` (ships with the driver), or None."""
    import shutil
    import subprocess

    exe = shutil.which("nvidia-smi")
    if exe is None:
        return None
    bus = cuda_pci_bus_id()
    which = [f"--id={bus}"] if bus else []  # without one, the first GPU nvidia-smi lists
    try:
        out = subprocess.run(
            [exe, "--query-gpu=power.limit", "--format=csv,noheader,nounits", *which],
            capture_output=True,
            text=True,
            timeout=20,
            check=True,
        ).stdout
        watts = float(out.strip().splitlines()[0])
    except (OSError, subprocess.SubprocessError, ValueError, IndexError):
        return None  # "[N/A]", "[Not Supported]", or no answer
    return watts if watts > 0 else None


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
