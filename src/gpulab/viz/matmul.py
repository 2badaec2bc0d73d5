"""Figures for lessons 03-04: global loads of naive vs tiled matmul, and the ladder as % of cuBLAS."""

from __future__ import annotations

from typing import Any
from collections.abc import Mapping, Sequence

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

__all__ = [
    "ladder_rows_percent",
    "loads_per_output_bars",
    "matmul_ladder_chart",
    "normalize_ladder_rows",
    "read_count_heatmaps",
]


def loads_per_output_bars(loads: Mapping[str, float], *, shape: tuple[int, int, int] | None = None) -> go.Figure:
    """Bars of global-memory loads per output element, one bar per kernel (e.g. counted with gpulab.trace).

    ``loads`` maps a kernel name to loads per element of C; ``shape`` is (M, K, N) for the title.
    """
    names = list(loads)
    values = [float(loads[n]) for n in names]
    fig = go.Figure(
        go.Bar(
            x=names,
            y=values,
            text=[f"{v:g}" for v in values],
            textposition="outside",
            marker_color=["#d62728", "#2ca02c", "#1f77b4", "#9467bd"][: len(names)],
        )
    )
    size = f" ({shape[0]}x{shape[1]} @ {shape[1]}x{shape[2]})" if shape else ""
    fig.update_layout(
        title=f"Global-memory loads per output element{size}, counted in the simulator",
        xaxis_title="kernel",
        yaxis_title="global loads per element of C",
        height=360,
        yaxis_range=[0, max(values, default=1) * 1.2],
    )
    return fig


def read_count_heatmaps(counts: Mapping[str, np.ndarray], *, array: str = "A") -> go.Figure:
    """Side-by-side heatmaps of how many times each element of ``array`` was read, one per kernel.

    ``counts`` maps a kernel name to ``AccessLog.per_element(array)`` of its traced launch.
    """
    names = list(counts)
    fig = make_subplots(
        rows=1,
        cols=len(names),
        subplot_titles=[f"{n}: each element read {int(np.min(counts[n]))}-{int(np.max(counts[n]))}x" for n in names],
    )
    vmax = max(int(np.max(c)) for c in counts.values()) if names else 1
    for col, n in enumerate(names, start=1):
        c = np.asarray(counts[n])
        fig.add_trace(
            go.Heatmap(
                z=c,
                zmin=0,
                zmax=vmax,
                colorscale="Viridis",
                showscale=col == len(names),
                colorbar=dict(title="reads"),
                hovertemplate="row %{y}, col %{x}: read %{z} times<extra>" + n + "</extra>",
            ),
            row=1,
            col=col,
        )
        fig.update_xaxes(title_text="column", row=1, col=col)
        fig.update_yaxes(title_text="row", autorange="reversed", row=1, col=col)
    fig.update_layout(title=f"How often each element of {array} is loaded from global memory", height=380)
    return fig


def normalize_ladder_rows(rows: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Ladder rows in the format of :func:`gpulab.kernels.matmul.benchmark_ladder`.

    Also accepts the ``matmul`` rows that ``python -m gpulab bench kernels --record`` writes (kernel
    ``"matmul_<name>"``, ``value`` in GFLOP/s, ``baseline_value`` for cuBLAS, several sizes): the
    largest size is kept and its baseline becomes the reference row.
    """
    rows = list(rows)
    if not rows or "gflops" in rows[0] or "value" not in rows[0]:
        return [dict(r) for r in rows]
    size = max(r.get("size", 0) for r in rows)
    at = [r for r in rows if r.get("size", 0) == size]
    M, K, N = (list(at[0].get("shape", [])) + ["?", "?", "?"])[:3]
    ref_name = "cuBLAS" if "cuBLAS" in str(at[0].get("baseline", "")) else str(at[0].get("baseline", "reference"))
    common = {"M": M, "K": K, "N": N, "reference": ref_name, "mode": at[0].get("mode", "gpu")}
    out = [dict(common, kernel=str(r["kernel"]).removeprefix("matmul_"), gflops=float(r["value"])) for r in at]
    base = [float(r["baseline_value"]) for r in at if r.get("baseline_value")]
    out.append(dict(common, kernel=ref_name, gflops=max(base) if base else float("nan")))
    return out


def ladder_rows_percent(rows: Sequence[Mapping[str, Any]]) -> list[tuple[str, float, float]]:
    """``[(kernel, GFLOP/s, % of the reference)]`` from ladder rows (:func:`gpulab.kernels.matmul.benchmark_ladder`
    or a recording, see :func:`normalize_ladder_rows`). The reference is the row named by
    ``row["reference"]`` (or ``"cuBLAS"``).
    """
    if not rows:
        raise ValueError("no ladder rows to plot: run gpulab.kernels.matmul.benchmark_ladder(...) first.")
    rows = normalize_ladder_rows(rows)
    ref_name = rows[0].get("reference", "cuBLAS")
    ref = [r for r in rows if r["kernel"] == ref_name]
    if not ref:
        raise ValueError(
            f"the ladder rows have no {ref_name!r} row to compare against; got {[r['kernel'] for r in rows]}."
        )
    ref_gflops = float(ref[0]["gflops"])
    return [(str(r["kernel"]), float(r["gflops"]), 100.0 * float(r["gflops"]) / ref_gflops) for r in rows]


def _spec_sheet_chart() -> go.Figure:
    from ..timing import PEAKS

    peaks = [PEAKS[k] for k in ("T4", "L4", "A100", "H100", "H200")]
    fig = go.Figure(
        go.Bar(
            x=[p.name for p in peaks],
            y=[p.fp32_tflops for p in peaks],
            text=[f"{p.fp32_tflops:g}" for p in peaks],
            textposition="outside",
        )
    )
    fig.update_layout(
        title="No GPU recording of the matmul ladder yet: spec-sheet FP32 peaks instead (not measurements)",
        xaxis_title="GPU",
        yaxis_title="FP32 peak, CUDA cores (TFLOP/s, NVIDIA data sheet)",
        height=380,
    )
    fig.layout.meta = {"source": "spec-sheet"}
    return fig


def matmul_ladder_chart(rows: Sequence[Mapping[str, Any]] | None = None, *, label: str | None = None) -> go.Figure:
    """The ladder naive -> tiled -> register-tiled -> cuBLAS as % of cuBLAS.

    - ``rows`` given (gpu mode: measured this run with ``benchmark_ladder``): plotted with ``label``.
    - ``rows`` None: the latest recording (``gpulab.results.latest("matmul")``) with its label; where
      none exists, spec-sheet FP32 peaks of common GPUs, titled as such.

    ``fig.layout.meta["source"]`` says which: ``"measured"``, ``"recorded"`` or ``"spec-sheet"``.
    """
    source = "measured"
    if rows is None:
        from .. import results

        rec = results.latest("matmul")
        if rec is None:
            return _spec_sheet_chart()
        rows, label, source = rec.sections["matmul"], rec.label, "recorded"
    elif label is None:
        mode = rows[0].get("mode", "gpu") if rows else "gpu"
        label = "measured this run" if mode == "gpu" else "CPU simulator timings, not GPU speed"
    rows = normalize_ladder_rows(rows)
    data = ladder_rows_percent(rows)
    first = rows[0]
    size = f"{first.get('M', '?')}x{first.get('K', '?')} @ {first.get('K', '?')}x{first.get('N', '?')}"
    ref_name = first.get("reference", "cuBLAS")
    fig = go.Figure(
        go.Bar(
            x=[d[0] for d in data],
            y=[d[2] for d in data],
            text=[f"{d[2]:.0f}%<br>{d[1]:,.0f} GFLOP/s" for d in data],
            textposition="outside",
            marker_color=["#1f77b4" if d[0] != ref_name else "#7f7f7f" for d in data],
        )
    )
    fig.update_layout(
        title=f"Matmul ladder, {size} float32, as % of {ref_name}: {label}",
        xaxis_title="implementation",
        yaxis_title=f"speed (% of {ref_name})",
        height=400,
        yaxis_range=[0, max(d[2] for d in data) * 1.2],
    )
    fig.layout.meta = {"source": source, "label": label}
    return fig
