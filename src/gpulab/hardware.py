"""Lesson 11's hardware: look up a chip or a link in the spec-sheet tables, list them as rows, and the napkin
models the lesson builds on them: the roofline bound and arithmetic intensity of a matmul.

The tables themselves (CPUs, GPU generations, TPUs, interconnects; every figure a **spec sheet** value unless
its row says otherwise, each row with its sources and the date checked) live in :mod:`gpulab.hardware_specs`
and are re-exported here. The multi-GPU step-time model (ring all-reduce over a link, step time against the
number of GPUs, the crossover) lives in :mod:`gpulab.multigpu` and is re-exported here, as lesson 11 and
lab 11 call it.
"""

from __future__ import annotations

from typing import Any
from collections.abc import Sequence

import numpy as np

from .errors import UsageError
from .hardware_specs import (  # re-exported: hardware.<name>
    CHECKED as CHECKED,
    CPUS as CPUS,
    DEVICES as DEVICES,
    ESTIMATE as ESTIMATE,
    FIGURES as FIGURES,
    GPUS as GPUS,
    INTERCONNECTS as INTERCONNECTS,
    MEASURED as MEASURED,
    SPEC_SHEET as SPEC_SHEET,
    TPUS as TPUS,
    UNVERIFIED as UNVERIFIED,
    Device as Device,
    Link as Link,
    Source as Source,
)
from .multigpu import allreduce_seconds, crossover_gpus, step_seconds  # re-exported: hardware.<name>

__all__ = [
    "CHECKED",
    "CPUS",
    "DEVICES",
    "ESTIMATE",
    "FIGURES",
    "GPUS",
    "INTERCONNECTS",
    "MEASURED",
    "SPEC_SHEET",
    "TPUS",
    "UNVERIFIED",
    "Device",
    "Link",
    "Source",
    "allreduce_seconds",
    "attainable_gflops",
    "basis",
    "crossover_gpus",
    "device",
    "gpu_named",
    "link",
    "matmul_intensity",
    "ridge_point",
    "spec_rows",
    "step_seconds",
]


def _lookup(table: dict, key: str, what: str) -> object:
    if key in table:
        return table[key]
    low = key.lower()
    hits = [v for k, v in table.items() if low in k.lower() or low in v.name.lower()]
    if len(hits) == 1:
        return hits[0]
    raise UsageError(
        f"no {what} called {key!r}; known: {', '.join(table)}. Pick one of these, or build your own "
        f"{'Device' if what == 'device' else 'Link'}(...) with figures from its spec sheet."
    )


def device(name: str | Device) -> Device:
    """A device by key or unique part of its name (``'H100'``, ``'v5e'``); a Device is returned as is."""
    return name if isinstance(name, Device) else _lookup(DEVICES, name, "device")  # type: ignore[return-value]


def gpu_named(name: str) -> Device | None:
    """The row of :data:`GPUS` whose key is a whole word of ``name`` (a GPU's reported name, ``"Tesla T4"``,
    ``"NVIDIA A100-SXM4-80GB"``), else None. Whole words, so that an L40S is not taken for an L4; and a PCIe or NVL
    board is not taken for the table's SXM row of the same chip (an H100 PCIe has about 3/4 of the H100 SXM's
    FP32 peak and half its power)."""
    import re

    for key, d in GPUS.items():
        if re.search(rf"\b{re.escape(key)}\b", name, re.IGNORECASE):
            other_form = re.search(r"PCIE|NVL", name, re.IGNORECASE) and not re.search(
                r"PCIE|NVL", d.name, re.IGNORECASE
            )
            return None if other_form else d
    return None


def link(name: str | Link) -> Link:
    """An interconnect by key or unique part of its name (``'NVLink 4'``, ``'PCIe 4.0'``)."""
    return name if isinstance(name, Link) else _lookup(INTERCONNECTS, name, "link")  # type: ignore[return-value]


def spec_rows(devices: Sequence[str | Device] | None = None) -> list[dict[str, object]]:
    """One dict per device for a table: name, peaks (TFLOP/s), memory, bandwidth, type, power, source, and what
    each figure is (``"basis"``: "spec sheet" unless a figure is measured or an estimate) with the pages checked."""
    devs = [device(d) for d in devices] if devices is not None else list(DEVICES.values())
    return [
        {
            "device": d.name,
            "kind": d.kind,
            "year": d.year,
            "FP32": d.fp32,
            "TF32": d.tf32,
            "BF16": d.bf16,
            "FP8": d.fp8,
            "memory GB": d.memory_gb,
            "GB/s": d.memory_gbps,
            "memory": d.memory_type,
            "watts": d.watts,
            "source": d.source,
            "note": d.note,
            "basis": basis(d),
            "refs": [r.url for r in d.refs],
            "checked": d.checked,
        }
        for d in devs
    ]


def basis(d: Device) -> str:
    """Short label of a row's figures: "spec sheet (dense)" plus every figure that is not a spec-sheet value."""
    other = {f: k for f, k in d.figure_kinds().items() if k != SPEC_SHEET}
    names = {
        "fp32": "FP32",
        "tf32": "TF32",
        "bf16": "BF16",
        "fp8": "FP8",
        "memory_gb": "memory GB",
        "memory_gbps": "GB/s",
        "watts": "watts",
    }
    parts = [f"{names[f]}: {k.split(':')[0]}" for f, k in other.items()]
    return "; ".join([SPEC_SHEET + (" (dense)" if d.kind != "CPU" else "")] + parts)


def matmul_intensity(m: int, n: int, k: int, bytes_per_value: int = 4) -> float:
    """FLOP per byte of a (m x k) @ (k x n) matmul that reads A and B once and writes C once:
    2 m n k / (bytes x (m k + k n + m n))."""
    if min(m, n, k) < 1 or bytes_per_value < 1:
        raise UsageError(
            f"matmul_intensity needs positive sizes and bytes, got m={m}, n={n}, k={k}, "
            f"bytes_per_value={bytes_per_value}."
        )
    return 2.0 * m * n * k / (bytes_per_value * (m * k + k * n + m * n))


def attainable_gflops(intensity: Any, peak_tflops: float, bandwidth_gbps: float) -> Any:
    """The roofline: min(peak, bandwidth x intensity), in GFLOP/s (an upper bound, not a measurement).

    ``intensity`` may be a number or an array of them (FLOP/byte); the result has its shape.
    """
    i = np.asarray(intensity, dtype=np.float64)
    if np.any(i <= 0) or peak_tflops <= 0 or bandwidth_gbps <= 0:
        raise UsageError(
            f"attainable_gflops needs positive values, got intensity={intensity}, "
            f"peak_tflops={peak_tflops}, bandwidth_gbps={bandwidth_gbps}."
        )
    out = np.minimum(peak_tflops * 1e3, bandwidth_gbps * i)
    return float(out) if out.ndim == 0 else out


def ridge_point(dev: str | Device, precision: str = "fp32") -> float:
    """FLOP per byte where a device turns from memory-bound to compute-bound at ``precision``."""
    d = device(dev)
    peak = d.peak(precision)
    if peak is None:
        raise UsageError(
            f"{d.name} has no {precision} peak on its spec sheet; try one of "
            f"{[p for p in ('fp32', 'tf32', 'bf16', 'fp8') if d.peak(p)]}."
        )
    return peak * 1e3 / d.memory_gbps
