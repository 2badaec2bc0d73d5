"""Figures for lesson 11: rooflines of several devices, spec tables, data-parallel step time, a systolic array,
the power a meter sampled during some work.

Every figure built from :mod:`gpulab.hardware` says "spec sheet" in its title; step times are a model.
"""

from __future__ import annotations

from typing import Any
from collections.abc import Sequence
from urllib.parse import urlparse

import numpy as np
import plotly.graph_objects as go

from ..errors import UsageError
from ..hardware import Device, Link, device, link, spec_rows
from ..multigpu import step_seconds
from .perf import _PALETTE, _add_note

__all__ = ["cost_figure", "power_trace", "roofline_devices", "spec_table", "step_time_figure", "systolic_figure"]


def roofline_devices(
    devices: Sequence[str | Device], precision: str = "fp32", points: Sequence[dict] = (), *, note: str = ""
) -> go.Figure:
    """One roof per device at ``precision``: attainable GFLOP/s = min(peak, bandwidth x intensity), spec sheets.

    ``points``: ``{"label", "intensity", "gflops"?}``; without ``gflops`` a point is an intensity marker only.
    """
    xs = np.logspace(-2, 4, 240)
    fig = go.Figure()
    for k, name in enumerate(devices):
        d = device(name)
        peak = d.peak(precision)
        if peak is None:
            continue  # no unit for this precision on its spec sheet: no roof to draw
        top = peak * 1e3
        ridge = top / d.memory_gbps
        kinds = {d.figure_kind(precision).split(":")[0], d.figure_kind("memory_gbps").split(":")[0]} - {"spec sheet"}
        tag = f" [{', '.join(sorted(kinds))}]" if kinds else ""
        if precision == "bf16" and d.bf16_format != "BF16":  # a T4's bf16 column counts FP16 tensor cores
            tag += f" ({d.bf16_format}: no BF16)"
        fig.add_trace(
            go.Scatter(
                x=xs,
                y=np.minimum(top, d.memory_gbps * xs),
                mode="lines",
                line=dict(color=_PALETTE[k % len(_PALETTE)], width=3),
                name=f"{d.name}{tag}: {d.memory_gbps:,.0f} GB/s, {top:,.0f} GFLOP/s, ridge {ridge:,.0f} FLOP/B",
                hovertemplate=f"{d.name}: %{{x:.3g}} FLOP/B -> %{{y:,.0f}} GFLOP/s<extra></extra>",
            )
        )
    for p in points:
        if float(p["intensity"]) <= 0:
            raise ValueError(f"point {p.get('label')!r}: a log axis needs a positive intensity, got {p['intensity']}.")
        y = p.get("gflops")
        fig.add_trace(
            go.Scatter(
                x=[p["intensity"]] * (2 if y is None else 1),
                y=[1, 1e7] if y is None else [y],
                mode="lines" if y is None else "markers+text",
                text=None if y is None else [p["label"]],
                name=p["label"],
                line=dict(color="#888", dash="dot"),
                marker=dict(size=11),
            )
        )
    fig.update_xaxes(type="log", dtick=1, title="arithmetic intensity (FLOP per byte of memory traffic, log scale)")
    fig.update_yaxes(type="log", dtick=1, range=[0, 7], title="attainable GFLOP/s (log scale)")
    fig.update_layout(
        title=f"Rooflines at {precision.upper()} from spec sheets (dense peaks; upper bounds, not measurements)",
        template="plotly_white",
        height=520,
        legend=dict(font=dict(size=10)),
    )
    _add_note(fig, note)
    return fig


def spec_table(devices: Sequence[str | Device] | None = None) -> go.Figure:
    """The spec-sheet table (peaks in TFLOP/s, memory, power) as a plotly table: a "basis" column says which
    figures are not spec-sheet values (estimates, measurements, unverified), the last column names each row's
    document, the date it was checked, and links to the pages it was checked against."""
    rows = spec_rows(devices)
    cols = ["device", "FP32", "TF32", "BF16", "FP8", "memory GB", "GB/s", "memory", "watts", "basis", "source"]
    fmt = lambda v: "-" if v is None else (f"{v:,.4g}" if isinstance(v, float) else str(v))  # noqa: E731
    cells = [[fmt(r[c]) for r in rows] for c in cols]
    cells[-1] = [
        f"{r['source']}; checked {r['checked']} against: "
        + ", ".join(f"<a href='{u}'>{urlparse(str(u)).netloc}</a>" for u in r["refs"])  # type: ignore[attr-defined]
        for r in rows
    ]
    fig = go.Figure(
        go.Table(
            header=dict(values=[f"<b>{c}</b>" for c in cols], align="left"),
            cells=dict(values=cells, align="left", font=dict(size=10)),
            columnwidth=[2.2, 0.8, 0.8, 0.8, 0.8, 0.9, 0.8, 1.3, 0.7, 2.6, 6],
        )
    )
    fig.update_layout(
        title="Spec sheets (vendor peaks, dense: no 2:4 sparsity, TFLOP/s; '-' = no such unit or not "
        "published; 'basis' names every figure that is an estimate, a measurement or unverified)",
        height=110 + 58 * len(rows),
        margin=dict(l=10, r=10, t=50, b=10),
    )
    return fig


def step_time_figure(
    compute_1gpu_s: float,
    grad_bytes: float,
    lk: str | Link,
    *,
    max_gpus: int = 512,
    latency_us: float | None = None,
    fixed_global_batch: bool = True,
    overlap: bool = False,
) -> go.Figure:
    """Compute, communication (ring all-reduce over ``lk``) and step time against the number of GPUs (a model)."""
    ln = link(lk)
    lat = ln.latency_us if latency_us is None else latency_us
    ns = sorted({int(round(v)) for v in np.geomspace(1, max_gpus, 40)})
    rows = [
        step_seconds(
            compute_1gpu_s,
            grad_bytes,
            n,
            ln.gbps,
            latency_us=lat,
            fixed_global_batch=fixed_global_batch,
            overlap=overlap,
        )
        for n in ns
    ]
    fig = go.Figure()
    for key, color in (("compute", _PALETTE[0]), ("communication", _PALETTE[1]), ("step", "#333")):
        fig.add_trace(
            go.Scatter(
                x=ns,
                y=[r[key] * 1e3 for r in rows],
                name=key,
                mode="lines+markers",
                line=dict(color=color, width=3 if key == "step" else 2),
            )
        )
    cross = next((n for n, r in zip(ns, rows) if n > 1 and r["communication"] > r["compute"]), None)
    if cross is not None:
        fig.add_trace(
            go.Scatter(
                x=[cross, cross],
                y=[min(r["compute"] for r in rows) * 1e3 / 2, max(r["step"] for r in rows) * 1e3 * 2],
                mode="lines",
                line=dict(color="#e45756", dash="dot"),
                name=f"communication > compute from about {cross} GPUs",
            )
        )
    fig.update_xaxes(type="log", title="number of GPUs (log scale)")
    fig.update_yaxes(type="log", title="milliseconds per training step (log scale)")
    fig.update_layout(
        title=f"Data parallelism over {ln.name} ({ln.gbps:g} GB/s per direction, "
        f"{ln.gbps_kind.split(' (')[0].split(':')[0]}; latency {lat:g} us, an estimate): a model, "
        "not a measurement",
        template="plotly_white",
        height=440,
    )
    return fig


def systolic_figure(r: int, c: int, k: int) -> go.Figure:
    """The wavefront of an R x C output-stationary systolic array over K terms: one heatmap per clock, a slider."""
    from ..systolic import wavefront

    cycles = r + c + k - 2
    fig = go.Figure()
    for t in range(cycles):
        s = wavefront(r, c, k, t)
        text = [[f"a[{i},{v}]·b[{v},{j}]" if v >= 0 else "idle" for j, v in enumerate(row)] for i, row in enumerate(s)]
        fig.add_trace(
            go.Heatmap(
                z=np.where(s >= 0, s, np.nan),
                text=text,
                texttemplate="%{text}",
                zmin=0,
                zmax=max(k - 1, 1),
                colorscale="Viridis",
                showscale=False,
                visible=t == 0,
                xgap=2,
                ygap=2,
                hovertemplate="PE (%{y}, %{x}): %{text}<extra></extra>",
            )
        )
    steps = [
        dict(
            method="update",
            label=str(t),
            args=[
                {"visible": [u == t for u in range(cycles)]},
                {"title": f"clock {t}: {(wavefront(r, c, k, t) >= 0).sum()} of {r * c} PEs multiply"},
            ],
        )
        for t in range(cycles)
    ]
    fig.update_layout(
        sliders=[dict(steps=steps, currentvalue=dict(prefix="clock "), pad=dict(t=40))],
        title=f"clock 0: {(wavefront(r, c, k, 0) >= 0).sum()} of {r * c} PEs multiply",
        height=140 + 70 * r,
        template="plotly_white",
    )
    fig.update_yaxes(autorange="reversed", title="PE row i", dtick=1)
    fig.update_xaxes(title="PE column j", dtick=1)
    return fig


def cost_figure(rows: Sequence[dict[str, Any]], title: str, note: str) -> go.Figure:
    """Three bar groups per row ``{"label", "hours", "dollars", "kwh"}``: time, dollars, energy (log scales)."""
    from plotly.subplots import make_subplots

    fig = make_subplots(rows=1, cols=3, subplot_titles=("hours", "US dollars", "kWh (estimate)"))
    labels = [r["label"] for r in rows]
    for col, key in enumerate(("hours", "dollars", "kwh"), start=1):
        vals = [r[key] for r in rows]
        fig.add_trace(
            go.Bar(
                x=labels,
                y=[v if v else None for v in vals],
                marker_color=_PALETTE[col - 1],
                text=["n/a" if v is None else f"{v:,.3g}" for v in vals],
                textposition="outside",
                showlegend=False,
            ),
            row=1,
            col=col,
        )
        fig.update_yaxes(type="log", row=1, col=col)
    fig.update_layout(title=title, template="plotly_white", height=440)
    _add_note(fig, note)
    return fig


def power_trace(reading: Any, title: str = "Power during the work") -> go.Figure:
    """The power samples of an :class:`gpulab.energy.EnergyReading` over time, with its average power
    (the counter's joules / seconds) as a dashed line. Raises when the reading has fewer than two samples."""
    if len(reading.samples) < 2:
        raise UsageError(
            f"this reading has {len(reading.samples)} power sample(s) ({reading.label}); a trace needs two or more"
        )
    t, w = np.asarray(reading.samples, dtype=float).T
    fig = go.Figure(go.Scatter(x=t, y=w, mode="lines+markers", marker_size=3, name=reading.sampled or "power"))
    fig.add_hline(
        y=reading.watts,
        line_dash="dash",
        line_color=_PALETTE[1],
        annotation_text=f"average {reading.watts:,.1f} W ({reading.method})",
        annotation_position="top left",
    )
    fig.update_layout(
        title=f"{title}: {reading.device}, measured",
        xaxis_title="seconds since the start",
        yaxis_title="watts",
        template="plotly_white",
        height=360,
    )
    return fig
