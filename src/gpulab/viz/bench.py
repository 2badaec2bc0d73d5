"""Figures and the HTML report of ``gpulab bench kernels`` (moved here from gpulab.bench.kernels).

``kernel_figures(report)`` returns plotly figures (bandwidth / FP32 throughput against size, and the
largest size as % of the spec-sheet peak or of the library baseline); ``report_html(report)`` a
self-contained page (plotly.js embedded: opens offline) with those charts and a table.
"""

from __future__ import annotations

import html
from typing import Any

__all__ = ["kernel_figures", "report_html"]


def kernel_figures(report: dict[str, Any]) -> list[Any]:
    """The benchmark report's charts as ``go.Figure`` objects."""
    import plotly.graph_objects as go

    figs = []
    label = report["label"]
    for metric in ("GB/s", "GFLOP/s"):
        rows = [r for r in report["rows"] if r["metric"] == metric]
        if not rows:
            continue
        fig = go.Figure()
        for name in dict.fromkeys(r["kernel"] for r in rows):
            mine = [r for r in rows if r["kernel"] == name]
            fig.add_trace(
                go.Scatter(x=[r["size"] for r in mine], y=[r["value"] for r in mine], mode="lines+markers", name=name)
            )
        base_by_size: dict[int, float] = {}
        for r in rows:
            base_by_size[r["size"]] = max(base_by_size.get(r["size"], 0.0), r["baseline_value"])
        xs = sorted(base_by_size)
        fig.add_trace(
            go.Scatter(
                x=xs,
                y=[base_by_size[x] for x in xs],
                mode="lines",
                name=rows[0]["baseline"],
                line={"dash": "dash", "color": "black"},
            )
        )
        peak = report.get("peak")
        if peak:
            pv = peak["dram_gbps"] if metric == "GB/s" else peak["fp32_gflops"]
            fig.add_hline(y=pv, line_dash="dot", annotation_text=f"spec-sheet peak {pv:g} {metric}")
        what = "bandwidth" if metric == "GB/s" else "FP32 throughput"
        fig.update_layout(
            title=f"Kernel {what} vs size ({label})",
            template="plotly_white",
            xaxis_title="problem size (elements of the main array)",
            yaxis_title=metric,
        )
        fig.update_xaxes(type="log")
        figs.append(fig)
    largest = {}
    for r in report["rows"]:
        largest[r["kernel"]] = r  # rows come in increasing size: keep the largest
    if largest:
        key = "percent_of_peak" if report.get("peak") else "percent_of_baseline"
        what = "spec-sheet peak" if key == "percent_of_peak" else "the library baseline"
        vals = [(k, r[key]) for k, r in largest.items() if r[key] is not None]
        fig = go.Figure(go.Bar(x=[k for k, _ in vals], y=[v for _, v in vals]))
        fig.update_layout(
            title=f"Largest size: % of {what} ({label})",
            template="plotly_white",
            xaxis_title="kernel",
            yaxis_title=f"% of {what}",
        )
        figs.append(fig)
    return figs


def report_html(report: dict[str, Any]) -> str:
    """A self-contained HTML page (plotly.js embedded: opens offline) with the charts and a table."""
    figs = kernel_figures(report)
    parts = [fig.to_html(full_html=False, include_plotlyjs=(k == 0)) for k, fig in enumerate(figs)]
    head = ["kernel", "size", "shape", "metric", "value", "% of peak", "baseline", "% of baseline"]
    body = []
    for r in report["rows"]:
        pk = f"{r['percent_of_peak']:.1f}" if r["percent_of_peak"] is not None else "n/a"
        pb = f"{r['percent_of_baseline']:.1f}" if r["percent_of_baseline"] is not None else "n/a"
        cells = [
            r["kernel"],
            r["size"],
            "x".join(map(str, r["shape"])),
            r["metric"],
            f"{r['value']:.4g}",
            pk,
            r["baseline"],
            pb,
        ]
        body.append("<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in cells) + "</tr>")
    skipped = "".join(f"<li>{html.escape(s['kernel'])}: {html.escape(s['reason'])}</li>" for s in report["skipped"])
    peak = report.get("peak")
    peak_line = (
        f"Spec-sheet peak ({html.escape(peak['name'])}, {html.escape(peak['source'])}): "
        f"{peak['dram_gbps']:g} GB/s, {peak['fp32_gflops']:g} GFLOP/s FP32."
        if peak
        else "No spec-sheet peak for this device."
    )
    launch = (report.get("launch") or {}).get("line")
    if launch:
        peak_line += f" Launch floor: {html.escape(launch)}."
    return (
        "<!DOCTYPE html><html><head><meta charset='utf-8'><title>gpulab kernel benchmarks</title>"
        "<style>body{font-family:sans-serif;margin:2em}td,th{padding:2px 8px;text-align:right}"
        "table{border-collapse:collapse}tr:nth-child(even){background:#f3f3f3}</style></head><body>"
        f"<h1>gpulab kernel benchmarks</h1><p><b>{html.escape(report['label'])}</b> (mode: {report['mode']}, "
        f"device: {html.escape(report['device'])}). {peak_line}</p>"
        + "".join(parts)
        + "<table><tr>"
        + "".join(f"<th>{h}</th>" for h in head)
        + "</tr>"
        + "".join(body)
        + "</table>"
        + (f"<h2>Skipped</h2><ul>{skipped}</ul>" if skipped else "")
        + "</body></html>\n"
    )
