"""The meters behind :func:`gpulab.energy.measure`: the CPU's RAPL counters and the GPU's NVML counter, each
with a thread that samples the power during the work (lesson 11), and why one is missing where it is.

RAPL (Running Average Power Limit) counters of the CPU package are read from
``/sys/class/powercap/intel-rapl:N/energy_uj`` (Intel, and AMD Zen where the kernel's powercap driver supports
it); root-only since Linux 5.10 (CVE-2020-8694). NVML (``pip install nvidia-ml-py``) gives the board's
total-energy counter (Volta and newer) and its power.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from .errors import UsageError
from .timing import device_name

__all__ = ["POWERCAP", "cuda_pci_bus_id", "integrate_power", "nvml_status", "rapl_status", "rapl_zones"]

POWERCAP = Path("/sys/class/powercap")


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

    def no_samples(self, kept: int, seconds: float) -> str:
        """What a meter's ``sampled`` says when it kept fewer than two samples, and why."""
        return f"no power samples ({self.error or f'{kept} in {seconds:.3g} s'})"

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
        if len(samples) < 2:  # a window shorter than two sampling intervals, or a counter that stopped answering
            self.sampled = self.sampler.no_samples(len(samples), t1 - self.t0)
        return self._joules(self.e0, e1), t1 - self.t0, samples


# --- NVML -------------------------------------------------------------------------------------------------
def nvml_status() -> tuple[bool, str]:
    """``(usable, why)``: can this process read a GPU's power or energy through NVML."""
    try:
        import pynvml
    except ImportError:
        return False, "nvidia-ml-py is not installed (pip install nvidia-ml-py)"
    try:
        pynvml.nvmlInit()
    except Exception as exc:  # NVMLError_LibraryNotFound / DriverNotLoaded: no NVIDIA driver here
        return False, f"NVML could not start ({exc}): no NVIDIA driver on this machine"
    try:
        n = pynvml.nvmlDeviceGetCount()
    finally:
        pynvml.nvmlShutdown()
    return (n > 0), f"{n} NVIDIA GPU(s) visible to NVML"


def cuda_pci_bus_id() -> str | None:
    """The PCI bus id of the GPU CUDA works on (CuPy's current device), or None without CuPy or a GPU. NVML and
    nvidia-smi may number GPUs differently from CUDA; the bus id names the same board for all three."""
    try:
        import cupy

        return str(cupy.cuda.Device().pci_bus_id)
    except Exception:  # noqa: BLE001 - no CuPy, no GPU, no driver: the caller takes the first GPU
        return None


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
        try:
            try:  # CUDA and NVML may number GPUs differently: match by bus
                self.handle = pynvml.nvmlDeviceGetHandleByPciBusId(cuda_pci_bus_id())
            except Exception:  # no bus id (no CuPy), or one NVML does not know: its first GPU
                self.handle = pynvml.nvmlDeviceGetHandleByIndex(0)
            self.device = device_name()  # the GPU CUDA works on, which the handle above matches by bus
            try:
                pynvml.nvmlDeviceGetTotalEnergyConsumption(self.handle)
                self.method = "NVML total-energy counter"
            except pynvml.NVMLError:
                self.method = "NVML power samples, integrated"
            self._instant = getattr(pynvml, "NVML_FI_DEV_POWER_INSTANT", None)
            try:
                if not self._instant_watts() > 0:
                    raise ValueError("the instantaneous power field reads 0 W")
                self.sampled = "instantaneous GPU power (NVML)"
            except Exception:  # an older driver or nvidia-ml-py without the field: the power reading
                self._instant = None
                self.sampled = "GPU power (NVML; averaged over 1 s on Ampere, except the A100, and newer)"
            # the samples are the joules only without a counter: then often; beside a counter, 50 a second is plenty
            self.sampler = _Sampler(
                self._watts, interval if self.method.endswith("integrated") else max(interval, 0.02)
            )
        except BaseException:  # the caller falls back to an estimate: leave NVML as it was
            pynvml.nvmlShutdown()
            raise

    def _instant_watts(self) -> float:
        (value,) = self.nv.nvmlDeviceGetFieldValues(self.handle, [self._instant])
        if value.nvmlReturn != self.nv.NVML_SUCCESS:
            raise self.nv.NVMLError(value.nvmlReturn)
        return value.value.uiVal / 1e3  # milliwatts

    def _watts(self) -> float:
        if self._instant is not None:
            return self._instant_watts()
        return self.nv.nvmlDeviceGetPowerUsage(self.handle) / 1e3  # some boards (and vGPUs) report none

    def close(self) -> None:
        """Release NVML when :meth:`start` failed (:meth:`stop` does it otherwise)."""
        self.nv.nvmlShutdown()

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
            if len(self.samples) < 2:  # say why there is no power trace, next to whatever gave the joules
                self.sampled = self.sampler.no_samples(len(self.samples), t1 - self.t0)
            if self.method.endswith("counter"):
                return (self.nv.nvmlDeviceGetTotalEnergyConsumption(self.handle) - self.e0) / 1e3, t1 - self.t0
            if len(self.samples) < 2:
                self.error = self.error or f"only {len(self.samples)} power sample(s) in {t1 - self.t0:.3g} s"
                return None, t1 - self.t0
            t, p = zip(*self.samples)
            return integrate_power(t, p), t1 - self.t0
        finally:
            self.nv.nvmlShutdown()
