"""Memory pictures: which addresses one warp touches (from a :func:`gpulab.trace.trace` log), and the
roofline model (a device's compute and bandwidth peaks, with kernels placed by arithmetic intensity)."""

from __future__ import annotations

from typing import Any
from collections.abc import Sequence

import numpy as np
import plotly.graph_objects as go

from ..timing import PEAKS, DevicePeak, lookup_peak
from .perf import _add_note

__all__ = ["BANKS", "bank_conflicts", "roofline", "warp_access"]


def warp_access(
    log: Any,
    array: str,
    *,
    block: Sequence[int] = (0, 0, 0),
    warp: int = 0,
    kind: str = "r",
    step: int = 0,
    segment_bytes: int = 32,
    title: str | None = None,
) -> go.Figure:
    """Byte addresses that the 32 lanes of one warp touch in their ``step``-th access to ``array``,
    with the 32-byte sectors the memory system must fetch shaded.

    ``log`` is an :class:`gpulab.trace.AccessLog`; ``kind`` is ``"r"`` (reads) or ``"w"`` (writes).
    """
    if array not in log.itemsize:
        raise ValueError(f"the log has no array named {array!r}; it traced {sorted(log.itemsize)}.")
    lanes = log.warp_addresses(array, block=block, warp=warp, kind=kind)
    picked = {lane: idx[step] for lane, idx in lanes.items() if len(idx) > step}
    if not picked:
        raise ValueError(
            f"warp {warp} of block {tuple(block)} made no access number {step} ({kind!r}) to {array!r}; "
            "try step=0, another warp, or kind='w' for writes."
        )
    size = log.itemsize[array]
    lane_ids = np.array(list(picked))
    addr = np.array(list(picked.values())) * size
    sectors = sorted(set((addr // segment_bytes).tolist()))
    fig = go.Figure()
    for s in sectors:
        fig.add_vrect(
            x0=s * segment_bytes,
            x1=(s + 1) * segment_bytes,
            fillcolor="#f58518",
            opacity=0.18,
            line_width=0.5,
            line_color="#f58518",
        )
    fig.add_trace(
        go.Scatter(
            x=addr,
            y=lane_ids,
            mode="markers",
            marker=dict(size=8, color="#4c78a8"),
            name="lane's address",
            hovertemplate="lane %{y}: byte %{x}<extra></extra>",
        )
    )
    useful = len(picked) * size
    fetched = len(sectors) * segment_bytes
    verb = "reads" if kind == "r" else "writes"
    fig.update_layout(
        title=title
        or (
            f"Warp {warp} {verb} {array}: {len(picked)} lanes x {size} B = {useful} B useful, "
            f"{len(sectors)} sectors of {segment_bytes} B = {fetched} B moved "
            f"({useful / fetched:.0%} efficiency)"
        ),
        xaxis_title=f"byte address within {array} (shaded: {segment_bytes}-byte sectors touched)",
        yaxis_title="lane (thread within the warp)",
        template="plotly_white",
        showlegend=False,
        height=420,
    )
    return fig


def _peak(device: str | DevicePeak) -> DevicePeak:
    if isinstance(device, DevicePeak):
        return device
    if device in PEAKS:
        return PEAKS[device]
    found = lookup_peak(device)
    if found is None:
        raise ValueError(
            f"no spec-sheet peaks for {device!r}; known devices: {', '.join(PEAKS)}. Pass one of those names "
            "or a gpulab.timing.DevicePeak with your GPU's data-sheet figures."
        )
    return found


def roofline(
    device: str | DevicePeak = "T4",
    points: Sequence[dict] = (),
    *,
    tensor_cores: bool = True,
    title: str | None = None,
    note: str = "",
) -> go.Figure:
    """The roofline of ``device`` (spec-sheet peaks from :data:`gpulab.timing.PEAKS`):
    attainable GFLOP/s = min(peak compute, bandwidth x arithmetic intensity).

    ``points`` are dicts ``{"label": str, "intensity": FLOP/byte, "gflops": float | None}``; without
    ``gflops`` the point is drawn on the roof as the best that kernel could reach (an upper bound,
    not a measurement).
    """
    peak = _peak(device)
    bw = peak.dram_gbps
    fp32 = peak.fp32_tflops * 1e3
    xs = np.logspace(-2, 3, 200)
    fig = go.Figure()
    fig.add_trace(
        go.Scatter(
            x=xs,
            y=np.minimum(fp32, bw * xs),
            mode="lines",
            name=f"FP32 roof ({fp32:,.0f} GFLOP/s)",
            line=dict(color="#333", width=3),
        )
    )
    if tensor_cores and peak.fp16_tensor_tflops:
        tc = peak.fp16_tensor_tflops * 1e3
        fig.add_trace(
            go.Scatter(
                x=xs,
                y=np.minimum(tc, bw * xs),
                mode="lines",
                name=f"FP16 tensor-core roof ({tc:,.0f} GFLOP/s)",
                line=dict(color="#999", width=2, dash="dash"),
            )
        )
    ridge = fp32 / bw
    # a trace, not add_vline: shapes on a log axis take log10 coordinates
    fig.add_trace(
        go.Scatter(
            x=[ridge, ridge],
            y=[bw * xs[0], fp32],
            mode="lines",
            line=dict(color="#888", dash="dot"),
            name=f"ridge point: {ridge:.0f} FLOP/B (memory-bound left, compute-bound right)",
        )
    )
    for k, p in enumerate(points):
        ai = float(p["intensity"])
        if ai <= 0:
            raise ValueError(f"point {p.get('label', k)!r} has intensity {ai}; a log axis needs a positive FLOP/byte.")
        measured = p.get("gflops") is not None
        y = float(p["gflops"]) if measured else min(fp32, bw * ai)
        fig.add_trace(
            go.Scatter(
                x=[ai],
                y=[y],
                mode="markers+text",
                text=[p["label"]],
                textposition="top left" if ai > 100 else "top center",
                name=p["label"] + ("" if measured else " (bound, not measured)"),
                marker=dict(size=12, symbol="circle" if measured else "circle-open", line=dict(width=2)),
                hovertemplate=f"{p['label']}: %{{x:.3g}} FLOP/B, %{{y:,.1f}} GFLOP/s<extra></extra>",
            )
        )
    fig.update_xaxes(
        type="log", range=[-2, 3], dtick=1, title="arithmetic intensity (FLOP per byte of DRAM traffic, log scale)"
    )
    fig.update_yaxes(type="log", dtick=1, title="GFLOP/s (log scale)")
    fig.update_layout(
        title=title or f"Roofline of the {peak.name}: {bw:,.0f} GB/s, {fp32:,.0f} GFLOP/s FP32 (spec sheet)",
        template="plotly_white",
        height=480,
    )
    _add_note(fig, note)
    return fig


# --------------------------------------------------------------------------------------------------
# Shared-memory bank conflicts, counted in the simulator

BANKS = 32  # shared memory is 32 banks, each 4 bytes wide, on every CUDA GPU since Fermi


def bank_conflicts(kernel: Any, griddim: Any, blockdim: Any, *args: Any, warp_size: int = 32) -> dict[str, dict]:
    """Run ``kernel[griddim, blockdim](*args)`` in the simulator (via :func:`gpulab.trace.trace`) with
    every ``cuda.shared.array`` access logged, and count bank conflicts per shared array.

    A warp's k-th access to a shared array is one *request*. Its 32 lanes' 4-byte words fall in
    banks ``word % 32``; lanes reading the same word are served by one broadcast, but distinct words
    in one bank are served one after another. The request's *way* is the largest number of distinct
    words any bank must deliver (1 = conflict-free, 32 = fully serialised). Returns
    ``{array label: {"requests", "wavefronts" (sum of ways), "worst" (largest way), "by_kind":
    {"r": (requests, wavefronts), "w": ...}}}``; the label is the variable the kernel assigned.
    """
    from collections import defaultdict

    from .. import simulator
    from ..trace import trace

    # gpulab.simulator logs every shared-array access (thread, element) in program order per thread.
    with simulator.instrument(watch_shared=True) as ins:
        log = trace(kernel, griddim, blockdim, *args)
    raw = [
        (label, a.kind, a.block, a.thread, a.index * ins.shared_itemsize[key] // 4)
        for key, (label, accesses, _) in ins.shared_logs.items()
        for a in accesses
    ]
    bx, by, _ = log.block
    groups: dict[tuple, set] = defaultdict(set)
    seen: dict[tuple, int] = defaultdict(int)
    for label, kind, b, t, word in raw:
        tid = t[0] + t[1] * bx + t[2] * bx * by
        lane_key = (label, kind, b, tid)
        k = seen[lane_key]
        seen[lane_key] += 1
        groups[(label, kind, b, tid // warp_size, k)].add(word)
    out: dict[str, dict] = {}
    for (label, kind, *_), words in groups.items():
        per_bank: dict[int, int] = defaultdict(int)
        for w in words:
            per_bank[w % BANKS] += 1
        way = max(per_bank.values())
        rec = out.setdefault(label, {"requests": 0, "wavefronts": 0, "worst": 0, "by_kind": {}})
        rec["requests"] += 1
        rec["wavefronts"] += way
        rec["worst"] = max(rec["worst"], way)
        r, w = rec["by_kind"].get(kind, (0, 0))
        rec["by_kind"][kind] = (r + 1, w + way)
    return out
