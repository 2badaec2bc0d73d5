"""The results sections that ``gpulab bench kernels --record`` writes (see :data:`gpulab.results.SECTIONS`):
rows for lessons 02 (memory) and 05 (reduce), the matmul ladder, every kernel and the launch floor, from a
:func:`measure` report.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .. import timing
from .launch import launch_rows

__all__ = ["memory_rows", "reduce_rows", "section_rows", "transfer_rows"]


def _largest(report: dict[str, Any], names: list[str]) -> list[dict[str, Any]]:
    """The row of each named kernel at its largest size, in the order of ``names`` (missing ones left out)."""
    largest: dict[str, dict[str, Any]] = {}
    for r in report["rows"]:
        if r["kernel"] in names and r["size"] >= largest.get(r["kernel"], {"size": -1})["size"]:
            largest[r["kernel"]] = r
    return [largest[k] for k in names if k in largest]


# What lessons 02 and 05 call the kernels of bench kernels.
_MEMORY_LABELS = {
    "copy": "copy kernel",
    "copy_stride4": "copy kernel, stride 4",
    "transpose_naive": "transpose, naive",
    "transpose_tiled": "transpose, shared-memory tiled",
}
_REDUCE_LABELS = {"sum_atomic": "atomic", "sum_tree": "tree", "sum_warp": "warp shuffles", "sum_reduce": "cuda.reduce"}


def transfer_rows(nbytes: int = 64 << 20, *, repeat: int = 5) -> list[dict[str, Any]]:
    """Host-to-device and device-to-host copies of ``nbytes`` (the ``memory`` section's first rows), timed as lesson
    02 times them: each into an array allocated before the timing (a device array; a host array whose pages were
    written once), so neither a device allocation nor the first touch of new host pages is counted as the link.

    Timed with :func:`gpulab.timing.benchmark` (CUDA events in gpu mode; in the simulator both are NumPy copies).
    """
    from numba import cuda

    x_h = np.ones(max(1, nbytes // 4), dtype=np.float32)
    x_d = cuda.to_device(x_h)
    back_h = np.empty_like(x_h)
    back_h.fill(0)  # its pages mapped now, not inside the timed copies
    h2d = timing.benchmark(x_d.copy_to_device, x_h, warmup=1, repeat=repeat, label="host -> device")
    d2h = timing.benchmark(x_d.copy_to_host, back_h, warmup=1, repeat=repeat, label="device -> host")
    if not np.array_equal(back_h, x_h):
        raise AssertionError("memory: the copy there and back changed the data")
    return [
        {"label": "host -> device", "gbps": x_h.nbytes / h2d.median / 1e9, "bytes": int(x_h.nbytes)},
        {"label": "device -> host", "gbps": x_h.nbytes / d2h.median / 1e9, "bytes": int(x_h.nbytes)},
    ]


def memory_rows(report: dict[str, Any], transfers: list[dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    """Section ``memory`` (lesson 02): host link transfers, then the copy/transpose kernels and the library copy.

    Rows ``{"label", "gbps", ...}`` at the largest size of ``report`` (from :func:`run`).
    """
    out = [dict(t) for t in transfers or []]
    kern = _largest(report, list(_MEMORY_LABELS))
    out += [
        {
            "label": f"{_MEMORY_LABELS[r['kernel']]} (n={r['size']:,})",
            "gbps": r["value"],
            "kernel": r["kernel"],
            "size": r["size"],
        }
        for r in kern
    ]
    copy = [r for r in kern if r["kernel"] == "copy"]
    if copy:
        out.append(
            {
                "label": f"{copy[0]['baseline']} (n={copy[0]['size']:,})",
                "gbps": copy[0]["baseline_value"],
                "kernel": "baseline",
                "size": copy[0]["size"],
            }
        )
    return out


def reduce_rows(report: dict[str, Any]) -> list[dict[str, Any]]:
    """Section ``reduce`` (lesson 05): the ways to sum float32 values, ``{"label", "gbps", ...}``,
    at the largest size."""
    return [
        {
            "label": f"{_REDUCE_LABELS[r['kernel']]} (n={r['size']:,})",
            "gbps": r["value"],
            "kernel": r["kernel"],
            "size": r["size"],
        }
        for r in _largest(report, list(_REDUCE_LABELS))
    ]


def section_rows(
    report: dict[str, Any], transfers: list[dict[str, Any]] | None = None
) -> dict[str, list[dict[str, Any]]]:
    """Every results section bench kernels records (see :data:`gpulab.results.SECTIONS`); empty ones left out."""
    sections = {
        "kernels": report["rows"],
        "matmul": [r for r in report["rows"] if r["section"] == "matmul"],
        "memory": memory_rows(report, transfers),
        "reduce": reduce_rows(report),
        "launch": launch_rows(report),
    }
    return {name: rows for name, rows in sections.items() if rows}
