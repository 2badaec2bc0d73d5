"""Timing that tells the truth: warm up, synchronize, repeat, report the median.

GPU work is asynchronous: a kernel launch returns before the kernel has run. ``benchmark`` therefore
synchronizes the device before it starts the clock and after each call, and in gpu mode measures with
CUDA events recorded on the device. In simulator mode it uses :func:`time.perf_counter`, and the
result is labelled as a simulator timing (it says nothing about GPU speed).
"""

from __future__ import annotations

import contextlib
import importlib
import statistics
import sys
import time
from dataclasses import dataclass, field
from typing import Any
from collections.abc import Callable, Iterator

from . import runtime

__all__ = [
    "BenchResult",
    "DevicePeak",
    "PEAKS",
    "benchmark",
    "device_name",
    "gbps",
    "gflops",
    "lookup_peak",
    "no_interface_sync",
    "percent_of_peak",
]


@dataclass(frozen=True)
class BenchResult:
    """Seconds per call over ``repeat`` timed calls."""

    times: tuple[float, ...]
    mode: str
    clock: str
    label: str = ""

    @property
    def median(self) -> float:
        return statistics.median(self.times)

    @property
    def min(self) -> float:
        return min(self.times)

    @property
    def max(self) -> float:
        return max(self.times)

    @property
    def spread(self) -> float:
        """(max - min) / median: how much the repeats disagree (0.05 means 5%)."""
        return (self.max - self.min) / self.median if self.median > 0 else 0.0

    def __str__(self) -> str:
        where = "GPU" if self.mode == "gpu" else "simulator (CPU, not a GPU timing)"
        name = f"{self.label}: " if self.label else ""
        return (
            f"{name}median {_fmt(self.median)}, min {_fmt(self.min)}, spread {self.spread:.0%} "
            f"over {len(self.times)} runs [{where}, {self.clock}]"
        )


def _fmt(seconds: float) -> str:
    if seconds >= 1:
        return f"{seconds:.3f} s"
    if seconds >= 1e-3:
        return f"{seconds * 1e3:.3f} ms"
    return f"{seconds * 1e6:.1f} us"


_SYNC_FLAG = "CUDA_ARRAY_INTERFACE_SYNC"


def _numba_configs() -> list[Any]:
    """numba's config modules that hold ``CUDA_ARRAY_INTERFACE_SYNC`` (numba-cuda's, and numba's own in
    older releases): only those already imported, so this never imports numba itself."""
    found: list[Any] = []
    for name in ("numba.cuda.core.config", "numba.core.config"):
        mod = sys.modules.get(name)
        if mod is None and name == "numba.cuda.core.config" and "numba.cuda" in sys.modules:
            try:
                mod = importlib.import_module(name)
            except ImportError:
                mod = None
        if mod is not None and hasattr(mod, _SYNC_FLAG) and all(mod is not f for f in found):
            found.append(mod)  # (numba-cuda 0.30's numba.cuda.core.config is numba.core.config: once)
    return found


@contextlib.contextmanager
def no_interface_sync() -> Iterator[None]:
    """Switch off numba's per-argument stream sync for the timed window, then restore it.

    With ``NUMBA_CUDA_ARRAY_INTERFACE_SYNC=1`` (the default) every launch of a Numba kernel on CuPy
    arrays synchronizes CuPy's stream once per CuPy argument: host round trips that would fall inside
    the CUDA-event window, so short kernels would look slower than they are, and a comparison with
    CuPy/cuBLAS (which do not sync) would be skewed. :func:`benchmark` synchronizes the whole device
    just before the window, so there is nothing pending to wait for, and these syncs only add host
    time. Everything gpulab launches on CuPy arrays runs on the default stream, in order, so correctness holds
    (lesson 02's streams carry numba device arrays, which these syncs never concern).
    """
    configs = _numba_configs()
    saved = [getattr(c, _SYNC_FLAG) for c in configs]
    for c in configs:
        setattr(c, _SYNC_FLAG, False)
    try:
        yield
    finally:
        for c, value in zip(configs, saved):
            setattr(c, _SYNC_FLAG, value)


def _events() -> tuple[Any, Any]:
    """A (start, end) pair of CUDA events (tests replace this)."""
    from numba import cuda

    return cuda.event(), cuda.event()


def _elapsed_s(start: Any, end: Any) -> float:
    from numba import cuda

    return float(cuda.event_elapsed_time(start, end)) / 1e3


def benchmark(
    fn: Callable[..., Any],
    *args: Any,
    warmup: int = 1,
    repeat: int = 5,
    label: str = "",
    **kwargs: Any,
) -> BenchResult:
    """Time ``fn(*args, **kwargs)``: ``warmup`` untimed calls, then ``repeat`` timed ones.

    In gpu mode each call is bracketed by CUDA events and the device is synchronized, so the
    time covers the GPU work, not just the launch; numba's per-argument stream syncs for CuPy arrays
    are switched off inside the window (:func:`no_interface_sync`), so host round trips are not
    counted. The events go on the default stream (numba's legacy one), so a host function that queues work on
    streams of its own (``cuda.stream()``: blocking streams) is timed until that work is done, whether or not it
    synchronizes itself (lesson 02's ``pipelined_saxpy`` does: then the window is its host time, launches and
    waits included). Returns a :class:`BenchResult` in seconds.
    """
    if repeat < 1:
        raise ValueError(f"repeat must be at least 1 (got {repeat}); use repeat=5 for a stable median.")
    if warmup < 0:
        raise ValueError(f"warmup must be 0 or more (got {warmup}).")
    for _ in range(warmup):
        fn(*args, **kwargs)
    runtime.synchronize()
    times: list[float] = []
    if runtime.is_gpu():
        for _ in range(repeat):
            start, end = _events()
            with no_interface_sync():  # the device was synchronized just before: nothing to wait for
                start.record()
                fn(*args, **kwargs)
                end.record()
            end.synchronize()
            runtime.synchronize()
            times.append(_elapsed_s(start, end))
        clock = "CUDA events"
    else:
        for _ in range(repeat):
            t0 = time.perf_counter()
            fn(*args, **kwargs)
            times.append(time.perf_counter() - t0)
        clock = "perf_counter"
    return BenchResult(tuple(times), runtime.mode(), clock, label)


def device_name() -> str:
    """The GPU's name in gpu mode (``"Tesla T4"``, ``"NVIDIA H100 80GB HBM3"``); in simulator mode
    ``"CUDA simulator (CPU)"``. The one place that reads it (numba returns bytes or str by version)."""
    if not runtime.is_gpu():
        return "CUDA simulator (CPU)"
    from numba import cuda

    name = cuda.get_current_device().name
    return name.decode() if isinstance(name, bytes) else str(name)


def gbps(nbytes: float, seconds: float) -> float:
    """Achieved bandwidth in GB/s (10^9 bytes per second) for ``nbytes`` moved in ``seconds``."""
    if seconds <= 0:
        raise ValueError(f"seconds must be positive (got {seconds}).")
    return nbytes / seconds / 1e9


def gflops(flops: float, seconds: float) -> float:
    """Achieved throughput in GFLOP/s for ``flops`` floating-point operations in ``seconds``."""
    if seconds <= 0:
        raise ValueError(f"seconds must be positive (got {seconds}).")
    return flops / seconds / 1e9


@dataclass(frozen=True)
class DevicePeak:
    """Spec-sheet peaks of one GPU (dense, no sparsity, boost clocks)."""

    name: str
    dram_gbps: float
    fp32_tflops: float
    fp16_tensor_tflops: float
    tf32_tensor_tflops: float | None
    memory_gb: float
    source: str = field(default="NVIDIA data sheet")
    basis: str = "spec sheet (dense)"  # what the figures are: its hardware row's basis (estimates say so)


def _peak_of(d: Any, name: str = "") -> DevicePeak:
    """A GPU row of :mod:`gpulab.hardware` as a DevicePeak (its bf16 column: the FP16 tensor rate, equal to BF16
    on Ampere and later, FP16 itself on Volta and Turing)."""
    from .hardware import basis

    return DevicePeak(name or d.name, d.memory_gbps, d.fp32, d.bf16, d.tf32, d.memory_gb, d.source, basis(d))


def _peaks() -> dict[str, DevicePeak]:
    from .hardware import BOARDS, GPUS

    rows = {k: d for k, d in {**GPUS, **BOARDS}.items() if d.kind == "GPU" and d.fp32 and d.bf16}
    return {k: _peak_of(d, "Tesla T4" if k == "T4" else "") for k, d in rows.items()}


# Spec-sheet peaks (dense: no 2:4 sparsity) of every GPU row of gpulab.hardware (GPUS and BOARDS), by the same keys:
# one table of figures, with its pages and labels there. The T4 keeps the name lessons 00-10 print.
PEAKS: dict[str, DevicePeak] = _peaks()


def lookup_peak(device_name: str) -> DevicePeak | None:
    """The peaks of a device by its reported name (``'NVIDIA H100 80GB HBM3'``, ``'NVIDIA A100 80GB PCIe'``),
    matched by :func:`gpulab.hardware.board_key`, the one name matcher: its own board's row, or None for a board
    the tables do not have (callers should say so, not guess).
    """
    from .hardware import board_key

    key = board_key(device_name)
    return None if key is None else PEAKS.get(key)


def percent_of_peak(achieved: float, device_name: str, kind: str = "dram_gbps") -> float | None:
    """``achieved`` as a percentage of the device's peak ``kind`` (``dram_gbps``, ``fp32_tflops``,
    ``fp16_tensor_tflops``, ``tf32_tensor_tflops``). GFLOP/s are compared with TFLOP/s peaks
    after conversion: pass GB/s for bandwidth and GFLOP/s for compute.

    Returns None when the device (or that peak) is unknown.
    """
    peak = lookup_peak(device_name)
    if peak is None:
        return None
    value = getattr(peak, kind, None)
    if value is None:
        return None
    scale = 1.0 if kind == "dram_gbps" else 1e3  # TFLOP/s -> GFLOP/s
    return 100.0 * achieved / (value * scale)
