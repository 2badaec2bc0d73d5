"""This machine's CPU peak FP32 FLOP/s, estimated: cores x clock x FLOP per cycle per core.

CPU vendors publish no FLOP/s figure, so lesson 00 computes one the way lesson 11's CPU rows are computed
(:mod:`gpulab.hardware_specs`), from what the operating system reports: the cores this process may use,
a clock, and the FP32 FLOP one core can start per cycle given its vector instructions (two fused multiply-add
units assumed, the common case since 2013; some parts have one, some more).

The clock is the highest one the system reports: the cpufreq maximum clock (``cpuinfo_max_freq``, which
includes boost on most systems) when Linux exposes it, else the cpufreq base clock, else the ``cpu MHz`` of
``/proc/cpuinfo`` (a nominal clock in most virtual machines, the current one elsewhere). The cores run above
the last two whenever they boost (turbo), so an estimate made from them says that a measured run, BLAS's for
one, can exceed it (:attr:`CpuPeak.at_max_clock` is False). Every figure it returns is an **estimate** and says
how it was made: compare it with a GPU's spec-sheet peak (peak against peak), and with NumPy's measured rate
(the share of the estimate BLAS reaches).
"""

from __future__ import annotations

import os
import platform
from dataclasses import dataclass
from pathlib import Path

__all__ = ["CpuPeak", "flop_per_cycle", "this_cpu"]

_PROC = Path("/proc/cpuinfo")
_FREQ = Path("/sys/devices/system/cpu/cpu0/cpufreq")


@dataclass(frozen=True)
class CpuPeak:
    """An estimated FP32 peak; ``gflops`` is None when no estimate could be made (``why`` says why)."""

    model: str
    cores: int  # physical cores this process may use (hardware threads of one core share its FMA units)
    ghz: float | None
    clock_source: str
    flop_per_cycle: int | None  # FP32 FLOP per cycle per core
    vector_note: str
    gflops: float | None
    why: str = ""
    at_max_clock: bool = False  # the clock is the highest the cores run at (cpufreq maximum), not one they boost above

    @property
    def label(self) -> str:
        """One line that says what the figure is and how it was computed (always "estimate")."""
        if self.gflops is None:
            return f"this CPU's peak: no estimate ({self.why})"
        line = (
            f"estimate: {self.cores} core(s) x {self.ghz:.2f} GHz ({self.clock_source}) x {self.flop_per_cycle} "
            f"FP32 FLOP/cycle ({self.vector_note}) = {self.gflops:,.0f} GFLOP/s; no vendor publishes this peak"
        )
        if not self.at_max_clock:
            line += "; the cores can run above this clock (turbo boost), so a measured run can exceed this estimate"
        return line

    @property
    def kind(self) -> str:
        """A few words for a table row: what kind of figure this is, and whether a measured run can exceed it."""
        if self.at_max_clock:
            return "estimate at the maximum clock the system reports"
        return "estimate: measured runs can exceed it (turbo clock)"


def flop_per_cycle(
    arch: str, flags: set[str], vendor: str = "", family: int | None = None, model: int | None = None
) -> tuple[int | None, str]:
    """FP32 FLOP per cycle per core from the instruction set: (count, why). None when the architecture is unknown.

    Two FMA units are assumed (an FMA is 2 FLOP per lane). AMD's Zen 1 (family 23, model < 0x30) splits 256-bit
    work into two 128-bit halves, and Zen 3/4 (family 25) run AVX-512 as two 256-bit halves, so neither gains
    from the wider instructions.
    """
    arch = arch.lower()
    if arch in ("x86_64", "amd64", "i686", "x86"):
        amd = "amd" in vendor.lower()
        if "avx512f" in flags and not (amd and family is not None and family < 26):
            return 64, "AVX-512: 16 lanes x 2 FMA units x 2"
        if "avx2" in flags and "fma" in flags:
            if amd and family == 23 and model is not None and model < 0x30:
                return 16, "AVX2 on Zen 1: 4 lanes x 2 FMA units x 2 (256-bit work in two halves)"
            note = "AVX2 + FMA: 8 lanes x 2 FMA units x 2"
            if "avx512f" in flags:
                note += " (this AMD core runs AVX-512 as two 256-bit halves)"
            return 32, note
        if "avx" in flags:
            return 16, "AVX without FMA: 8-lane multiply + 8-lane add per cycle"
        return 8, "SSE: 4-lane multiply + 4-lane add per cycle"
    if arch in ("aarch64", "arm64"):
        return 16, "NEON: 4 lanes x 2 FMA units x 2 (wider cores, e.g. Apple's, have up to 4 units)"
    return None, f"no rule for the {arch or 'unknown'} architecture"


def _cpuinfo(text: str) -> dict[str, str]:
    """The first processor's ``key: value`` lines of /proc/cpuinfo."""
    info: dict[str, str] = {}
    for line in text.splitlines():
        if not line.strip():
            if info:
                break
            continue
        key, _, value = line.partition(":")
        info.setdefault(key.strip().lower(), value.strip())
    return info


def _read(path: Path) -> str | None:
    try:
        return path.read_text()
    except OSError:
        return None


# cpufreq files in the order they are tried: (file, what it is, whether it is the highest clock the cores run at)
_CPUFREQ = (
    ("cpuinfo_max_freq", "cpufreq maximum clock", True),  # includes boost on most systems (intel_pstate, amd-pstate)
    ("base_frequency", "cpufreq base clock", False),
)
_PROC_CLOCK = "clock in /proc/cpuinfo: nominal or current, not the boost clock"


def _clock(info: dict[str, str], freq_dir: Path) -> tuple[float | None, str, bool]:
    """(GHz, where it came from, whether it is the maximum clock): the highest clock the system reports."""
    for name, what, highest in _CPUFREQ:
        khz = _read(freq_dir / name)
        if khz and khz.strip().isdigit() and int(khz) > 0:
            return int(khz) / 1e6, what, highest
    mhz = info.get("cpu mhz")
    try:
        return (float(mhz) / 1e3, _PROC_CLOCK, False) if mhz else (None, "no clock reported", False)
    except ValueError:
        return None, f"unreadable clock {mhz!r} in /proc/cpuinfo", False


def _usable_cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def this_cpu(
    cpuinfo: str | None = None, freq_dir: Path = _FREQ, arch: str | None = None, logical: int | None = None
) -> CpuPeak:
    """Estimate this machine's FP32 peak (the arguments exist for tests; call it with none)."""
    arch = arch or platform.machine()
    logical = logical or _usable_cpus()
    text = _read(_PROC) if cpuinfo is None else cpuinfo
    if not text:
        return CpuPeak(
            platform.processor() or arch,
            logical,
            None,
            "no clock reported",
            None,
            "",
            None,
            "the operating system does not expose /proc/cpuinfo (Linux does)",
        )
    info = _cpuinfo(text)
    flags = set((info.get("flags") or info.get("features") or "").split())
    siblings, cores_per = info.get("siblings"), info.get("cpu cores")
    smt = int(siblings) // int(cores_per) if siblings and cores_per and cores_per.isdigit() and int(cores_per) else 1
    cores = max(1, logical // max(1, smt))

    def num(key: str) -> int | None:
        v = info.get(key, "")
        return int(v, 0) if v.isdigit() or v.startswith("0x") else None

    fpc, note = flop_per_cycle(arch, flags, info.get("vendor_id", ""), num("cpu family"), num("model"))
    ghz, source, highest = _clock(info, freq_dir)
    model = info.get("model name") or info.get("cpu model") or arch
    if fpc is None or ghz is None:
        return CpuPeak(model, cores, ghz, source, fpc, note, None, note if fpc is None else source, highest)
    return CpuPeak(model, cores, ghz, source, fpc, note, cores * ghz * fpc, at_max_clock=highest)
