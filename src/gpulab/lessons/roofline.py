"""A recorded measurement beside the roofline's bound for it (lessons 11 and lab 11)."""

from __future__ import annotations

from pathlib import Path

from .. import results, timing

__all__ = ["naive_matmul_note"]


def naive_matmul_note(intensity: float = 0.25, directory: Path | None = None) -> str:
    """The newest recorded naive matmul (section ``matmul``, its largest size) beside the roof of the GPU that
    recorded it at ``intensity`` FLOP per byte *requested* by the loads (spec-sheet peaks), labelled with the
    recording, and why a measurement can pass that point: L1/L2 serve re-reads, so DRAM moves fewer bytes."""
    rec = results.latest("matmul", directory=directory)
    # bench kernels' rows (value in GFLOP/s, at several sizes); a ladder's rows have neither
    rows = [r for r in (rec.sections["matmul"] if rec else []) if r.get("kernel") == "matmul_naive"]
    rows = [r for r in rows if {"value", "size"} <= r.keys()]
    peak = timing.lookup_peak(rec.device) if rec else None
    if rec is None or not rows or peak is None:
        return "No recorded naive matmul from a GPU with spec-sheet figures: no measurement to set beside the bound."
    row = max(rows, key=lambda r: r["size"])
    roof = min(peak.fp32_tflops * 1e3, peak.dram_gbps * intensity)
    shape = " x ".join(str(s) for s in row["shape"])
    text = (
        f"{peak.name} at {intensity:g} FLOP/B: roof {roof:,.0f} GFLOP/s ({peak.basis}); the naive matmul "
        f"({shape}) measured {row['value']:,.0f} GFLOP/s, {row['value'] / roof:.2f}x the roof ({rec.label})."
    )
    if row["value"] > roof:
        text += (
            f" Above it: {intensity:g} FLOP/B counts the bytes the loads request, but the caches (L1, L2) serve "
            "re-reads, so DRAM moves fewer bytes and the kernel's real intensity is higher."
        )
    return text
