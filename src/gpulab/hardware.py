"""Spec-sheet tables for lesson 11: CPUs, GPU generations, TPUs and the links between them.

Every figure here is a **spec sheet** value (a vendor's published peak, dense: no 2:4 sparsity), never a
measurement; each table names its source and the date the figures were taken from it, and every figure
or table built from them must say "spec sheet". CPU peaks are not published by the vendors as FLOP/s:
they are computed from spec-sheet cores x base clock x FLOP per cycle per core, and say so.

Also the napkin models the lesson builds on them: the roofline bound, arithmetic intensity of a matmul,
and the time of lesson 10's ring all-reduce over a given link (time per training step against the
number of GPUs, and the point where communication outweighs compute).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from .errors import UsageError

__all__ = [
    "CPUS", "DEVICES", "GPUS", "INTERCONNECTS", "SPEC_SHEET", "TPUS", "Device", "Link",
    "allreduce_seconds", "attainable_gflops", "crossover_gpus", "device", "link", "matmul_intensity",
    "ridge_point", "spec_rows", "step_seconds",
]

SPEC_SHEET = "spec sheet"  # the label every table and figure built from these figures carries


@dataclass(frozen=True)
class Device:
    """Spec-sheet peaks of one chip (TFLOP/s dense; None where the chip has no such unit or none is published)."""

    name: str
    kind: str  # "CPU", "GPU" or "TPU"
    vendor: str
    year: int
    fp32: float | None  # TFLOP/s, FP32 on CUDA cores / vector units (no tensor cores)
    tf32: float | None  # TFLOP/s, TF32 tensor cores (dense)
    bf16: float | None  # TFLOP/s, BF16 (or FP16 where BF16 is missing: see note) tensor/matrix units, dense
    fp8: float | None  # TFLOP/s, FP8 tensor cores, dense
    memory_gb: float
    memory_gbps: float
    memory_type: str
    watts: float | None  # board power / TDP / TGP
    source: str  # the document the figures come from, and when they were taken from it
    note: str = ""

    def peak(self, precision: str = "fp32") -> float | None:
        """Peak TFLOP/s at ``precision`` (``fp32``, ``tf32``, ``bf16``, ``fp8``), or None."""
        if precision not in ("fp32", "tf32", "bf16", "fp8"):
            raise UsageError(f"precision must be fp32, tf32, bf16 or fp8, got {precision!r}.")
        return getattr(self, precision)


@dataclass(frozen=True)
class Link:
    """A link between chips: GB/s per direction, per GPU (or per port), from its specification."""

    name: str
    gbps: float  # GB/s (10^9 bytes/s) one way
    latency_us: float  # typical small-message latency, order of magnitude (not a spec-sheet figure)
    scope: str  # "in a machine" or "between machines"
    source: str


_NV = "as of 2024, from NVIDIA's data sheet"
GPUS: dict[str, Device] = {
    "V100": Device("V100 SXM2 32GB", "GPU", "NVIDIA", 2017, 15.7, None, 125, None, 32, 900, "HBM2", 300,
                   f"{_NV} 'NVIDIA V100 Tensor Core GPU' (nvidia.com/en-us/data-center/v100)",
                   "bf16 column: FP16 tensor cores (Volta has no BF16, TF32 or FP8)"),
    "T4": Device("T4", "GPU", "NVIDIA", 2018, 8.1, None, 65, None, 16, 320, "GDDR6", 70,
                 f"{_NV} 'NVIDIA T4 Tensor Core GPU' (nvidia.com/en-us/data-center/tesla-t4)",
                 "bf16 column: FP16 tensor cores (Turing has no BF16, TF32 or FP8)"),
    "A100": Device("A100 SXM 80GB", "GPU", "NVIDIA", 2020, 19.5, 156, 312, None, 80, 2039, "HBM2e", 400,
                   f"{_NV} 'NVIDIA A100 Tensor Core GPU' (nvidia.com/en-us/data-center/a100)"),
    "L4": Device("L4", "GPU", "NVIDIA", 2023, 30.3, 60, 121, 242, 24, 300, "GDDR6", 72,
                 f"{_NV} 'NVIDIA L4 Tensor Core GPU' (nvidia.com/en-us/data-center/l4)",
                 "the data sheet lists sparse rates (120 / 242 / 485); dense is half"),
    "RTX 4090": Device("GeForce RTX 4090", "GPU", "NVIDIA", 2022, 82.6, 82.6, 165, 330, 24, 1008, "GDDR6X", 450,
                       "as of 2024, from NVIDIA's 'Ada Lovelace GPU architecture' whitepaper, appendix table",
                       "consumer card; tensor rates with FP32 accumulate, dense"),
    "H100": Device("H100 SXM", "GPU", "NVIDIA", 2022, 67, 494, 989, 1979, 80, 3350, "HBM3", 700,
                   f"{_NV} 'NVIDIA H100 Tensor Core GPU' (nvidia.com/en-us/data-center/h100)",
                   "the data sheet lists sparse rates (989 / 1979 / 3958); dense is half"),
    "H200": Device("H200 SXM", "GPU", "NVIDIA", 2024, 67, 494, 989, 1979, 141, 4800, "HBM3e", 700,
                   f"{_NV} 'NVIDIA H200 Tensor Core GPU' (nvidia.com/en-us/data-center/h200)",
                   "same compute as H100 SXM; more and faster memory"),
    "MI300X": Device("Instinct MI300X", "GPU", "AMD", 2023, 81.7, 653.7, 1307.4, 2614.9, 192, 5300, "HBM3", 750,
                     "as of 2024, from AMD's data sheet 'AMD Instinct MI300X Accelerator' (amd.com/en/products/"
                     "accelerators/instinct/mi300/mi300x.html)", "runs ROCm, not CUDA"),
}

_TPU = "as of 2024, from Google Cloud's 'TPU versions' pages (cloud.google.com/tpu/docs/system-architecture-tpu-vm)"
TPUS: dict[str, Device] = {
    "TPU v4": Device("TPU v4 (per chip)", "TPU", "Google", 2021, None, None, 275, None, 32, 1200, "HBM2", None, _TPU,
                     "power per chip not on the page"),
    "TPU v5e": Device("TPU v5e (per chip)", "TPU", "Google", 2023, None, None, 197, None, 16, 819, "HBM2", None, _TPU,
                      "INT8 394 TOP/s; power per chip not on the page"),
    "TPU v5p": Device("TPU v5p (per chip)", "TPU", "Google", 2023, None, None, 459, None, 95, 2765, "HBM2e", None,
                      _TPU, "power per chip not on the page"),
    "TPU v6e": Device("TPU v6e Trillium (per chip)", "TPU", "Google", 2024, None, None, 918, None, 32, 1640, "HBM",
                      None, _TPU, "INT8 1836 TOP/s; power per chip not on the page"),
}

_CPU_NOTE = ("peak computed from the spec sheet's cores x base clock x FLOP/cycle/core (FP32 FMA units); "
             "vendors do not publish it; memory bandwidth = channels x DDR5 rate x 8 bytes")
CPUS: dict[str, Device] = {
    "EPYC 9654": Device("AMD EPYC 9654 (96 cores)", "CPU", "AMD", 2022, 96 * 2.4 * 32 / 1e3, None, None, None,
                        6144, 12 * 4.8 * 8, "DDR5-4800, 12 channels", 360,
                        "as of 2024, from AMD's product page 'AMD EPYC 9654' (amd.com/en/products/processors/server/"
                        "epyc/4th-generation-9004-and-8004-series/amd-epyc-9654.html)",
                        _CPU_NOTE + "; Zen 4: 32 FP32 FLOP/cycle; memory size: the most it supports (6 TB)"),
    "Xeon 8480+": Device("Intel Xeon Platinum 8480+ (56 cores)", "CPU", "Intel", 2023, 56 * 2.0 * 64 / 1e3, None,
                         56 * 2.0 * 1024 / 1e3, None, 4096, 8 * 4.8 * 8, "DDR5-4800, 8 channels", 350,
                         "as of 2024, from Intel's ARK page 'Intel Xeon Platinum 8480+ Processor' (ark.intel.com)",
                         _CPU_NOTE + "; 2 AVX-512 FMA units = 64 FP32 FLOP/cycle; bf16: AMX 1024 FLOP/cycle; "
                         "memory size: the most it supports (4 TB)"),
}

DEVICES: dict[str, Device] = {**CPUS, **GPUS, **TPUS}

_PCIE = "as of 2024, from PCI-SIG's PCI Express Base Specifications (pcisig.com), x16, after 128b/130b encoding"
_NVL = "as of 2024, from NVIDIA's NVLink page (nvidia.com/en-us/data-center/nvlink): total per GPU / 2"
_IB = "as of 2024, from NVIDIA's InfiniBand adapter data sheets (ConnectX-6/7/8) and the IBTA roadmap: one port"
INTERCONNECTS: dict[str, Link] = {
    "PCIe 3.0 x16": Link("PCIe 3.0 x16", 15.75, 5, "in a machine", _PCIE),
    "PCIe 4.0 x16": Link("PCIe 4.0 x16", 31.5, 5, "in a machine", _PCIE),
    "PCIe 5.0 x16": Link("PCIe 5.0 x16", 63.0, 5, "in a machine", _PCIE),
    "NVLink 2 (V100)": Link("NVLink 2 (V100)", 150, 2, "in a machine", _NVL + " (300 GB/s total)"),
    "NVLink 3 (A100)": Link("NVLink 3 (A100)", 300, 2, "in a machine", _NVL + " (600 GB/s total)"),
    "NVLink 4 (H100)": Link("NVLink 4 (H100)", 450, 2, "in a machine", _NVL + " (900 GB/s total)"),
    "NVLink 5 (B200)": Link("NVLink 5 (B200)", 900, 2, "in a machine", _NVL + " (1.8 TB/s total)"),
    "InfiniBand HDR (200 Gb/s)": Link("InfiniBand HDR (200 Gb/s)", 25, 5, "between machines", _IB),
    "InfiniBand NDR (400 Gb/s)": Link("InfiniBand NDR (400 Gb/s)", 50, 5, "between machines", _IB),
    "InfiniBand XDR (800 Gb/s)": Link("InfiniBand XDR (800 Gb/s)", 100, 5, "between machines", _IB),
    "Ethernet 100 GbE": Link("Ethernet 100 GbE", 12.5, 20, "between machines",
                             "as of 2024, from IEEE 802.3 (100 Gb/s line rate / 8)"),
}


def _lookup(table: dict, key: str, what: str) -> object:
    if key in table:
        return table[key]
    low = key.lower()
    hits = [v for k, v in table.items() if low in k.lower() or low in v.name.lower()]
    if len(hits) == 1:
        return hits[0]
    raise UsageError(f"no {what} called {key!r}; known: {', '.join(table)}. Pick one of these, or build your own "
                     f"{'Device' if what == 'device' else 'Link'}(...) with figures from its spec sheet.")


def device(name: str | Device) -> Device:
    """A device by key or unique part of its name (``'H100'``, ``'v5e'``); a Device is returned as is."""
    return name if isinstance(name, Device) else _lookup(DEVICES, name, "device")  # type: ignore[return-value]


def link(name: str | Link) -> Link:
    """An interconnect by key or unique part of its name (``'NVLink 4'``, ``'PCIe 4.0'``)."""
    return name if isinstance(name, Link) else _lookup(INTERCONNECTS, name, "link")  # type: ignore[return-value]


def spec_rows(devices: Sequence[str | Device] | None = None) -> list[dict[str, object]]:
    """One dict per device for a table: name, peaks (TFLOP/s), memory, bandwidth, type, power, source."""
    devs = [device(d) for d in devices] if devices is not None else list(DEVICES.values())
    return [{"device": d.name, "kind": d.kind, "year": d.year, "FP32": d.fp32, "TF32": d.tf32, "BF16": d.bf16,
             "FP8": d.fp8, "memory GB": d.memory_gb, "GB/s": d.memory_gbps, "memory": d.memory_type,
             "watts": d.watts, "source": d.source, "note": d.note} for d in devs]


def matmul_intensity(m: int, n: int, k: int, bytes_per_value: int = 4) -> float:
    """FLOP per byte of a (m x k) @ (k x n) matmul that reads A and B once and writes C once:
    2 m n k / (bytes x (m k + k n + m n))."""
    if min(m, n, k) < 1 or bytes_per_value < 1:
        raise UsageError(f"matmul_intensity needs positive sizes and bytes, got m={m}, n={n}, k={k}, "
                         f"bytes_per_value={bytes_per_value}.")
    return 2.0 * m * n * k / (bytes_per_value * (m * k + k * n + m * n))


def attainable_gflops(intensity: Any, peak_tflops: float, bandwidth_gbps: float) -> Any:
    """The roofline: min(peak, bandwidth x intensity), in GFLOP/s (an upper bound, not a measurement).

    ``intensity`` may be a number or an array of them (FLOP/byte); the result has its shape.
    """
    i = np.asarray(intensity, dtype=np.float64)
    if np.any(i <= 0) or peak_tflops <= 0 or bandwidth_gbps <= 0:
        raise UsageError(f"attainable_gflops needs positive values, got intensity={intensity}, "
                         f"peak_tflops={peak_tflops}, bandwidth_gbps={bandwidth_gbps}.")
    out = np.minimum(peak_tflops * 1e3, bandwidth_gbps * i)
    return float(out) if out.ndim == 0 else out


def ridge_point(dev: str | Device, precision: str = "fp32") -> float:
    """FLOP per byte where a device turns from memory-bound to compute-bound at ``precision``."""
    d = device(dev)
    peak = d.peak(precision)
    if peak is None:
        raise UsageError(f"{d.name} has no {precision} peak on its spec sheet; try one of "
                         f"{[p for p in ('fp32', 'tf32', 'bf16', 'fp8') if d.peak(p)]}.")
    return peak * 1e3 / d.memory_gbps


def allreduce_seconds(nbytes: float, n_gpus: int, link_gbps: float, latency_us: float = 0.0) -> float:
    """Time of lesson 10's ring all-reduce of ``nbytes`` over ``n_gpus`` joined by a ``link_gbps`` link.

    Each GPU sends 2 (N-1)/N x nbytes (what :func:`gpulab.scaling.ring_allreduce` counts) in 2 (N-1)
    steps, each paying the link's latency: 2 (N-1)/N x nbytes / bandwidth + 2 (N-1) x latency. 0 for one GPU.
    """
    if n_gpus < 1 or nbytes < 0 or link_gbps <= 0 or latency_us < 0:
        raise UsageError(f"allreduce_seconds needs n_gpus >= 1, nbytes >= 0, link_gbps > 0, latency >= 0; got "
                         f"n_gpus={n_gpus}, nbytes={nbytes}, link_gbps={link_gbps}, latency_us={latency_us}.")
    if n_gpus == 1:
        return 0.0
    return 2 * (n_gpus - 1) / n_gpus * nbytes / (link_gbps * 1e9) + 2 * (n_gpus - 1) * latency_us * 1e-6


def step_seconds(compute_1gpu_s: float, grad_bytes: float, n_gpus: int, link_gbps: float, *,
                 latency_us: float = 0.0, fixed_global_batch: bool = True, overlap: bool = False) -> dict[str, float]:
    """One data-parallel training step on ``n_gpus``: ``{"compute", "communication", "step"}`` seconds.

    ``compute_1gpu_s`` is one GPU's time for the batch. With a fixed global batch (strong scaling) each GPU
    computes 1/N of it; with a fixed per-GPU batch (weak scaling) compute stays the same. The gradients
    (``grad_bytes``) are all-reduced after the backward pass; ``overlap=True`` hides communication behind
    compute (step = max) instead of adding it (step = sum). A model, not a measurement.
    """
    compute = compute_1gpu_s / n_gpus if fixed_global_batch else compute_1gpu_s
    comm = allreduce_seconds(grad_bytes, n_gpus, link_gbps, latency_us)
    return {"compute": compute, "communication": comm, "step": max(compute, comm) if overlap else compute + comm}


def crossover_gpus(compute_1gpu_s: float, grad_bytes: float, link_gbps: float, *, latency_us: float = 0.0,
                   max_gpus: int = 4096) -> int | None:
    """The smallest N (fixed global batch) at which communication takes longer than compute, or None
    up to ``max_gpus``."""
    for n in range(2, max_gpus + 1):
        t = step_seconds(compute_1gpu_s, grad_bytes, n, link_gbps, latency_us=latency_us)
        if t["communication"] > t["compute"]:
            return n
    return None


def _check_tables() -> None:
    """Import-time sanity: every entry names a source with a date and has positive bandwidth."""
    for d in DEVICES.values():
        assert d.source.startswith("as of ") and d.memory_gbps > 0 and not math.isnan(d.memory_gb), d.name
    for lk in INTERCONNECTS.values():
        assert lk.source.startswith("as of ") and lk.gbps > 0, lk.name


_check_tables()
