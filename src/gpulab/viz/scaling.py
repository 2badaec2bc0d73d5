"""Figures for lesson 10: memory budgets, a GPipe pipeline schedule, a tensor-parallel matmul."""

from __future__ import annotations

from typing import Any
from collections.abc import Sequence

import plotly.graph_objects as go

__all__ = ["memory_budget_figure", "pipeline_figure", "tensor_parallel_figure"]

_COLORS = ("#636EFA", "#EF553B", "#00CC96", "#AB63FA", "#FFA15A", "#19D3F3", "#FF6692", "#B6E880")


def memory_budget_figure(
    budgets: dict[str, dict[str, int]],
    *,
    limits_gb: dict[str, float] | None = None,
    title: str = "Training memory by component",
) -> go.Figure:
    """Stacked bars, one per configuration (``{label: memory_budget(...)}``), in GB (10^9 bytes);
    ``limits_gb`` draws horizontal lines (e.g. spec-sheet GPU memory sizes)."""
    fig = go.Figure()
    parts = list(next(iter(budgets.values())).keys()) if budgets else []
    for k, part in enumerate(parts):
        fig.add_bar(
            name=part,
            x=list(budgets),
            y=[b[part] / 1e9 for b in budgets.values()],
            marker_color=_COLORS[k % len(_COLORS)],
        )
    for name, gb in (limits_gb or {}).items():
        fig.add_hline(
            y=gb, line_dash="dot", annotation_text=f"{name}: {gb:g} GB (spec sheet)", annotation_position="top left"
        )
    fig.update_layout(
        barmode="stack",
        title=title,
        xaxis_title="configuration",
        yaxis_title="memory (GB)",
        height=420,
        legend_title="component",
    )
    return fig


def pipeline_figure(schedule: Sequence[dict[str, Any]], *, title: str = "") -> go.Figure:
    """A Gantt chart of a pipeline schedule (:func:`gpulab.scaling.pipeline_schedule`): devices on the
    y axis, time slots on the x axis, forward passes light and backward passes dark; gaps are the bubble."""
    stages = max(s["stage"] for s in schedule) + 1
    slots = max(s["start"] for s in schedule) + 1
    fig = go.Figure()
    for kind, opacity in (("forward", 0.55), ("backward", 1.0)):
        items = [s for s in schedule if s["kind"] == kind]
        fig.add_bar(
            name=kind,
            orientation="h",
            base=[s["start"] for s in items],
            x=[1] * len(items),
            y=[f"GPU {s['stage']}" for s in items],
            text=[f"{kind[0].upper()}{s['microbatch']}" for s in items],
            textposition="inside",
            insidetextanchor="middle",
            opacity=opacity,
            marker_color=[_COLORS[s["microbatch"] % len(_COLORS)] for s in items],
            marker_line_color="white",
            marker_line_width=1,
        )
    busy = len(schedule) / (stages * slots)
    fig.update_layout(
        title=title or f"GPipe schedule: {stages} stages, busy {busy:.0%} of the time (gaps = bubble)",
        xaxis_title="time (slots of one micro-batch pass)",
        yaxis_title="pipeline stage",
        barmode="overlay",
        height=120 + 50 * stages,
        yaxis_autorange="reversed",
        showlegend=False,
    )
    fig.update_xaxes(range=[0, slots], dtick=1)
    return fig


def tensor_parallel_figure(n_devices: int = 2) -> go.Figure:
    """Y = X W with W split by columns over ``n_devices``: each device holds a slice of W, computes the
    matching columns of Y, and the slices are gathered. Drawn as coloured blocks."""
    fig = go.Figure()

    def block(x0: float, y0: float, w: float, h: float, color: str, text: str) -> None:
        fig.add_shape(
            type="rect",
            x0=x0,
            y0=y0,
            x1=x0 + w,
            y1=y0 + h,
            fillcolor=color,
            opacity=0.7,
            line=dict(color="black", width=1),
        )
        fig.add_annotation(x=x0 + w / 2, y=y0 + h / 2, text=text, showarrow=False, font=dict(size=12))

    block(0, 0, 2, 3, "#DDDDDD", "X<br>(batch x in)<br>copy on<br>every GPU")
    fig.add_annotation(x=2.5, y=1.5, text="@", showarrow=False, font=dict(size=22))
    for d in range(n_devices):
        w = 3 / n_devices
        block(3 + d * w, 0, w, 3, _COLORS[d % len(_COLORS)], f"W<sub>{d}</sub><br>GPU {d}")
        block(7.5 + d * w, 0, w, 3, _COLORS[d % len(_COLORS)], f"Y<sub>{d}</sub>")
    fig.add_annotation(x=7, y=1.5, text="=", showarrow=False, font=dict(size=22))
    fig.update_xaxes(visible=False, range=[-0.2, 10.7])
    fig.update_yaxes(visible=False, range=[-0.5, 3.5], scaleanchor="x")
    fig.update_layout(
        title=f"Tensor (model) parallelism: W split by columns over {n_devices} GPUs; each computes its columns of Y",
        height=300,
        plot_bgcolor="white",
    )
    return fig
