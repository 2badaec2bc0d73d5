"""Speed charts: GFLOP/s or GB/s as bars or lines, on a log scale by default (speeds in this course
span several orders of magnitude, from a Python loop to a tensor core)."""

from __future__ import annotations

import math
import textwrap
from collections.abc import Mapping, Sequence

import plotly.graph_objects as go

__all__ = ["speed_bars", "speed_lines"]

_PALETTE = ("#4c78a8", "#f58518", "#54a24b", "#e45756", "#72b7b2", "#b279a2", "#ff9da6", "#9d755d")


def _fmt(v: float) -> str:
    if v >= 100:
        return f"{v:,.0f}"
    if v >= 1:
        return f"{v:.1f}"
    return f"{v:.3g}"


def _add_note(fig: go.Figure, note: str) -> None:
    if note:
        fig.add_annotation(
            text="<br>".join(textwrap.wrap(note, 120)),
            xref="paper",
            yref="paper",
            x=0,
            y=-0.22,
            showarrow=False,
            xanchor="left",
            yanchor="top",
            font=dict(size=11, color="#555"),
            align="left",
        )
        fig.update_layout(margin=dict(b=110))


def speed_bars(
    labels: Sequence[str],
    values: Sequence[float],
    unit: str,
    title: str,
    note: str = "",
    *,
    log: bool = True,
    colors: Sequence[str] | None = None,
    bounds: Sequence[bool | str] | None = None,
) -> go.Figure:
    """One bar per measurement, value printed on the bar.

    ``unit`` names the y axis unit (``"GFLOP/s"``, ``"GB/s"``); ``note`` is printed under the chart
    (say there where the numbers come from: this run, a recording, or a spec sheet). ``bounds[k]`` True marks
    bar k as an upper bound (a spec-sheet peak, not a measurement): it is drawn hatched and its value label says
    "peak", so a measured bar is never read as the same kind of figure. A string instead of True marks a
    computed figure that is not a bound, one a measurement can exceed (``"estimate"``, such as
    :func:`gpulab.cpu_peak.this_cpu`'s from a clock the cores boost above): hatched too, labelled with that word.
    """
    if len(labels) != len(values):
        raise ValueError(f"speed_bars needs one value per label, got {len(labels)} labels and {len(values)} values.")
    flags = [False] * len(labels) if bounds is None else list(bounds)
    if len(flags) != len(labels):
        raise ValueError(f"speed_bars needs one bounds flag per label, got {len(labels)} labels, {len(flags)} flags.")
    # the word each hatched bar's value label ends with; "" for a measured bar
    words = [b if isinstance(b, str) else ("peak" if b else "") for b in flags]
    if log and any(v <= 0 for v in values):
        raise ValueError("a log-scale chart cannot show zero or negative values; pass log=False or drop them.")
    colors = list(colors) if colors else [_PALETTE[i % len(_PALETTE)] for i in range(len(labels))]
    fig = go.Figure(
        go.Bar(
            x=list(labels),
            y=list(values),
            marker_color=colors,
            marker_pattern_shape=["/" if w else "" for w in words],
            marker_line_color=colors,
            marker_line_width=[1.5 if w else 0 for w in words],
            text=[f"{_fmt(v)} {unit}" + (f" ({w})" if w else "") for v, w in zip(values, words)],
            textposition="outside",
            hovertemplate="%{x}: %{y:.4g} " + unit + "<extra></extra>",
        )
    )
    fig.update_layout(
        title=title,
        template="plotly_white",
        showlegend=False,
        xaxis_title="",
        yaxis_title=f"{unit} ({'log scale' if log else 'linear'})",
    )
    if log:
        fig.update_yaxes(type="log")
        # one gridline per factor of 10; headroom above the tallest bar for its label
        fig.update_yaxes(dtick=1, range=[math.log10(min(values)) - 0.5, math.log10(max(values)) + 1.0])
    estimates = sorted({w for w, b in zip(words, flags) if w and isinstance(b, str)})
    if estimates:
        peaks = any(w and not isinstance(b, str) for w, b in zip(words, flags))
        kinds = (["(peak) marks an upper bound"] if peaks else []) + [
            f"({w}) marks a computed figure that a measurement can exceed" for w in estimates
        ]
        note = "Hatched bars are not measurements: " + "; ".join(kinds) + ". " + note
    elif any(words):
        note = "Hatched bars are upper bounds (peaks), not measurements. " + note
    _add_note(fig, note)
    return fig


def speed_lines(
    x: Sequence[float],
    series: Mapping[str, Sequence[float]],
    unit: str,
    x_title: str,
    title: str,
    note: str = "",
    *,
    log_x: bool = True,
    log_y: bool = True,
) -> go.Figure:
    """One line per series (e.g. per kernel) against a size, speed on the y axis in ``unit``."""
    fig = go.Figure()
    for k, (name, ys) in enumerate(series.items()):
        if len(ys) != len(x):
            raise ValueError(f"series {name!r} has {len(ys)} values for {len(x)} x positions.")
        fig.add_trace(
            go.Scatter(
                x=list(x), y=list(ys), name=name, mode="lines+markers", line=dict(color=_PALETTE[k % len(_PALETTE)])
            )
        )
    fig.update_layout(title=title, template="plotly_white", xaxis_title=x_title, yaxis_title=unit)
    if log_x:
        fig.update_xaxes(type="log")
    if log_y:
        fig.update_yaxes(type="log", dtick=1)
    _add_note(fig, note)
    return fig
