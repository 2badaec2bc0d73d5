"""The device a timing ran on and the spec-sheet peaks to compare it with: :func:`device_name`, :class:`DevicePeak`,
:data:`PEAKS` (every GPU row of :mod:`gpulab.hardware`), :func:`lookup_peak` and :func:`percent_of_peak`.

Part of :mod:`gpulab.timing`'s public API, which re-exports every name here: notebooks, labs and the docs use them as
``timing.PEAKS``, ``timing.lookup_peak``, ``timing.percent_of_peak``, ``timing.device_name``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from . import runtime

__all__ = ["PEAKS", "DevicePeak", "device_name", "lookup_peak", "percent_of_peak"]


def device_name() -> str:
    """The GPU's name in gpu mode (``"Tesla T4"``, ``"NVIDIA H100 80GB HBM3"``); in simulator mode
    ``"CUDA simulator (CPU)"``. The one place that reads it (numba returns bytes or str by version)."""
    if not runtime.is_gpu():
        return "CUDA simulator (CPU)"
    from numba import cuda

    name = cuda.get_current_device().name
    return name.decode() if isinstance(name, bytes) else str(name)


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
