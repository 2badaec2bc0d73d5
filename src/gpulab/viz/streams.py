"""A Gantt chart of copies and kernels on CUDA streams (:class:`gpulab.streams.Timeline`)."""

from __future__ import annotations

import textwrap
from collections.abc import Mapping
from typing import Any

import plotly.graph_objects as go

__all__ = ["stream_timeline"]

_COLORS = {"h2d": "#636EFA", "kernel": "#00CC96", "d2h": "#FFA15A"}
_NAMES = {"h2d": "copy in (host -> device)", "kernel": "kernel", "d2h": "copy out (device -> host)"}


def stream_timeline(timelines: Mapping[str, Any] | Any, *, title: str = "", note: str = "") -> go.Figure:
    """One row per stream of each timeline (``{label: Timeline}``, or one Timeline), time in ms on x; each bar
    is a copy in, a kernel or a copy out, marked with its chunk number. ``note`` is printed under the chart
    (say there whether the times are a model, an estimate or a measurement)."""
    if hasattr(timelines, "ops"):
        timelines = {"": timelines}
    if not timelines:
        raise ValueError("stream_timeline needs at least one timeline, e.g. {'1 stream': pipeline_timeline(...)}.")
    fig = go.Figure()
    rows: list[str] = []
    for label, tl in timelines.items():
        for s in sorted({o.stream for o in tl.ops}):
            name = "default stream" if s == 0 else f"stream {s}"
            rows.append(f"{label}: {name}" if label else name)
    for kind in ("h2d", "kernel", "d2h"):
        xs, base, ys, text = [], [], [], []
        for label, tl in timelines.items():
            for o in tl.ops:
                if o.kind != kind:
                    continue
                name = "default stream" if o.stream == 0 else f"stream {o.stream}"
                xs.append((o.end - o.start) * 1e3)
                base.append(o.start * 1e3)
                ys.append(f"{label}: {name}" if label else name)
                text.append(str(o.chunk))
        fig.add_bar(
            name=_NAMES[kind],
            orientation="h",
            x=xs,
            base=base,
            y=ys,
            text=text,
            textposition="inside",
            insidetextanchor="middle",
            marker_color=_COLORS[kind],
            marker_line_color="white",
            marker_line_width=1,
            hovertemplate="chunk %{text}: %{base:.3g} to %{x:.3g} ms long<extra>" + _NAMES[kind] + "</extra>",
        )
    totals = ", ".join(f"{label or 'total'}: {tl.total * 1e3:.3g} ms" for label, tl in timelines.items())
    head = title or f"Copies and kernels on streams ({totals})"
    sub = "<br>".join(textwrap.wrap(note, 110))
    fig.update_layout(
        title=head + (f"<br><sup>{sub}</sup>" if note else ""),
        xaxis_title="time (ms)",
        yaxis_title="stream",
        barmode="overlay",
        template="plotly_white",
        height=220 + 30 * len(rows) + 14 * sub.count("<br>"),
        legend={"orientation": "h", "yanchor": "top", "y": -0.25},
        margin={"t": 90 + 14 * sub.count("<br>"), "b": 90},
    )
    fig.update_yaxes(categoryorder="array", categoryarray=list(reversed(rows)))
    return fig
