"""Reductions and scans as pictures (lesson 05): which thread adds which two values, step by step.

* :func:`reduction_tree` draws the shared-memory tree of ``kernels.sum_tree_kernel``: at stride
  ``s = n/2, n/4, ..., 1`` thread ``tx < s`` adds ``buf[tx + s]`` into ``buf[tx]``; after
  ``log2(n)`` steps ``buf[0]`` holds the sum.
* :func:`scan_steps` draws the Hillis-Steele scan of ``kernels.scan.scan_block_kernel``: at offset
  ``o = 1, 2, 4, ...`` every thread ``tx >= o`` adds the value ``o`` places to its left.
* :func:`shuffle_steps` draws a warp sum with shuffles: at offset ``o = n/2, ..., 1`` every lane adds the
  value it reads from lane ``lane + o`` (``shfl_down_sync``) or ``lane ^ o`` (``shfl_xor_sync``), straight
  from that lane's register: no shared buffer, no barrier.

Each row of nodes is the shared buffer after one step (hover a node for its value); each line is
one operand of one addition.
"""

from __future__ import annotations

from collections.abc import Sequence


import numpy as np
import plotly.graph_objects as go

__all__ = ["reduction_tree", "scan_steps", "shuffle_steps"]

MAX_VALUES = 64


def _values(n: int, values: Sequence[float] | None) -> np.ndarray:
    if values is not None:
        v = np.asarray(values, dtype=np.float64).ravel()
        n = v.size
    if n < 2 or n > MAX_VALUES or n & (n - 1):
        raise ValueError(
            f"n must be a power of two between 2 and {MAX_VALUES} (one node per thread), got {n}. "
            "Pad the values with zeros to the next power of two, as the kernel does."
        )
    return v if values is not None else np.arange(1, n + 1, dtype=np.float64)


def _edges(
    segments: Sequence[tuple[float, float, float, float]], color: str, name: str, dash: str = "solid"
) -> go.Scatter:
    xs: list[float | None] = []
    ys: list[float | None] = []
    for x0, y0, x1, y1 in segments:
        xs += [x0, x1, None]
        ys += [y0, y1, None]
    return go.Scatter(
        x=xs, y=ys, mode="lines", line=dict(color=color, width=1.5, dash=dash), name=name, hoverinfo="skip"
    )


def _nodes(x: np.ndarray, y: float, vals: np.ndarray, active: np.ndarray, label: str, show_legend: bool) -> go.Scatter:
    colors = np.where(active, "#f58518", "#c7c7c7")
    return go.Scatter(
        x=x,
        y=np.full(x.size, y),
        mode="markers+text",
        text=[f"{v:g}" for v in vals],
        textposition="middle center",
        marker=dict(size=26, color=colors.tolist(), line=dict(color="#333", width=1)),
        textfont=dict(size=9),
        name="value written in this step (orange); unchanged (grey)",
        showlegend=show_legend,
        customdata=np.stack([x, vals], axis=1),
        hovertemplate=f"{label}<br>buf[%{{customdata[0]}}] = %{{customdata[1]:g}}<extra></extra>",
    )


def _start(n: int, values: Sequence[float] | None) -> tuple[np.ndarray, np.ndarray, go.Figure]:
    """The loaded buffer, the thread indices, and a figure whose first row shows the load."""
    buf = _values(n, values).copy()
    idx = np.arange(buf.size, dtype=float)
    fig = go.Figure()
    fig.add_trace(_nodes(idx, 0, buf, np.zeros(buf.size, bool), "loaded", True))
    return buf, idx, fig


def _layout(
    fig: go.Figure,
    title: str,
    steps: int,
    n: int,
    step_names: list[str],
    xtitle: str = "threadIdx.x = index in the shared buffer",
) -> go.Figure:
    """Axes, title and one legend entry per kind of edge (the first step's)."""
    for k, tr in enumerate(fig.data):
        if k > 2 and tr.mode == "lines":
            tr.showlegend = False
    fig.update_layout(
        title=title,
        template="plotly_white",
        height=150 + 70 * steps,
        showlegend=True,
        legend=dict(orientation="h", y=-0.08),
        margin=dict(l=120),
        xaxis=dict(
            title=xtitle,
            range=[-0.7, n - 0.3],
            dtick=1 if n <= 32 else 4,
            zeroline=False,
        ),
        yaxis=dict(
            tickvals=[-k for k in range(steps + 1)], ticktext=step_names, zeroline=False, range=[-steps - 0.5, 0.5]
        ),
    )
    return fig


def reduction_tree(n: int = 16, values: Sequence[float] | None = None) -> go.Figure:
    """The tree of a shared-memory sum of ``n`` values (a power of two, at most 64): one row per step.

    Every step halves the number of active threads; the figure's title counts the steps
    (``log2 n``) and the additions (``n - 1``). ``values`` default to 1..n.
    """
    buf, idx, fig = _start(n, values)
    n = buf.size
    names = ["load"]
    adds, step, s = 0, 0, n // 2
    while s > 0:
        step += 1
        new = buf.copy()
        new[:s] = buf[:s] + buf[s : 2 * s]
        adds += s
        own = [(t, -step + 1, t, -step) for t in range(s)]
        other = [(t + s, -step + 1, t, -step) for t in range(s)]
        fig.add_trace(_edges(own, "#4c78a8", "buf[tx] (own value)"))
        fig.add_trace(_edges(other, "#e45756", "buf[tx + s] (added by thread tx)"))
        active = np.zeros(n, bool)
        active[:s] = True
        shown = np.where(active, new, np.nan)
        keep = ~np.isnan(shown)
        fig.add_trace(_nodes(idx[keep], -step, shown[keep], active[keep], f"after stride s = {s}", False))
        names.append(f"s = {s}: {s} thread{'s' if s > 1 else ''}")
        buf = new
        s //= 2
    return _layout(
        fig,
        f"Tree reduction of {n} values: {step} steps with a syncthreads after each, {adds} additions "
        f"(sum = {buf[0]:g})",
        step,
        n,
        names,
    )


def scan_steps(n: int = 8, values: Sequence[float] | None = None) -> go.Figure:
    """The Hillis-Steele inclusive scan of ``n`` values (a power of two, at most 64): one row per step.

    At offset ``o`` each thread ``tx >= o`` adds ``buf[tx - o]``; after ``log2 n`` steps ``buf[i]``
    is ``x[0] + ... + x[i]``. The title counts the additions, ``n log2 n - (n - 1)``.
    """
    buf, idx, fig = _start(n, values)
    n = buf.size
    names = ["load"]
    adds, step, o = 0, 0, 1
    while o < n:
        step += 1
        new = buf.copy()
        new[o:] = buf[o:] + buf[:-o]
        adds += n - o
        fig.add_trace(_edges([(t, -step + 1, t, -step) for t in range(n)], "#4c78a8", "buf[tx] (own value)"))
        fig.add_trace(
            _edges(
                [(t - o, -step + 1, t, -step) for t in range(o, n)], "#e45756", "buf[tx - offset] (added by thread tx)"
            )
        )
        active = idx >= o
        fig.add_trace(_nodes(idx, -step, new, active, f"after offset {o}", False))
        names.append(f"offset {o}: {n - o} adds")
        buf = new
        o *= 2
    return _layout(
        fig,
        f"Hillis-Steele scan of {n} values: {step} steps, {adds} additions "
        f"(a running total needs {n - 1}, one after another)",
        step,
        n,
        names,
    )


def shuffle_steps(n: int = 8, values: Sequence[float] | None = None, mode: str = "down") -> go.Figure:
    """A warp sum of ``n`` values (a power of two, at most 32) with shuffles, one row per step.

    At offset ``o = n/2, ..., 1`` every lane adds the value of lane ``lane + o`` (``mode="down"``,
    ``cuda.shfl_down_sync``; a lane whose source is past the last lane reads its own value, as CUDA
    defines) or of lane ``lane ^ o`` (``mode="xor"``, ``cuda.shfl_xor_sync``). Every lane computes at every
    step; orange marks the values the result still needs (the lanes ``< o`` with ``down``, where lane 0 ends
    with the sum; every lane with ``xor``, where all end with it). The picture has ``n`` lanes; a warp has 32.
    """
    if mode not in ("down", "xor"):
        raise ValueError(f'mode must be "down" (cuda.shfl_down_sync) or "xor" (cuda.shfl_xor_sync), got {mode!r}')
    buf, idx, fig = _start(n, values)
    fig.data[0].name = "a value the sum still needs (orange); computed, not needed (grey)"
    n = buf.size
    if n > 32:
        raise ValueError(f"a warp has 32 lanes; got {n} values. Draw at most 32 (a block sums its warps' results).")
    names = ["load"]
    step, o = 0, n // 2
    while o > 0:
        step += 1
        lanes = np.arange(n)
        src = lanes + o if mode == "down" else lanes ^ o
        inside = src < n
        got = np.where(inside, buf[np.minimum(src, n - 1)], buf)  # past the last lane: the lane's own value
        new = buf + got
        fig.add_trace(_edges([(t, -step + 1, t, -step) for t in range(n)], "#4c78a8", "own register"))
        fig.add_trace(
            _edges(
                [(int(src[t]), -step + 1, t, -step) for t in range(n) if inside[t]],
                "#e45756",
                f"value read from lane {'lane + offset' if mode == 'down' else 'lane ^ offset'} (a shuffle)",
            )
        )
        needed = lanes < o if mode == "down" else np.ones(n, bool)
        fig.add_trace(_nodes(idx, -step, new, needed, f"after offset {o}", False))
        names.append(f"offset {o}")
        buf = new
        o //= 2
    who = "lane 0 holds" if mode == "down" else "every lane holds"
    return _layout(
        fig,
        f"Warp sum of {n} values with shfl_{mode}_sync: {step} steps, no shared memory, no cuda.syncthreads(); "
        f"{who} {buf[0]:g}",
        step,
        n,
        names,
        xtitle="lane (cuda.laneid): each value lives in that lane's register",
    )
