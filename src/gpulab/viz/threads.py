"""Thread maps: which block and thread handles which element of an array, and which threads idle.

A 1-D launch of ``blocks x threads_per_block`` threads over ``n`` elements gives thread
``(blockIdx.x, threadIdx.x)`` the element ``i = blockIdx.x * blockDim.x + threadIdx.x``; the last block
usually has threads with ``i >= n`` that must do nothing (the bounds guard).
"""

from __future__ import annotations

from typing import Any
from collections.abc import Sequence

import numpy as np
import plotly.graph_objects as go

from ..kernels._launch import ceil_div

__all__ = ["divergence_counts", "divergence_map", "launch_summary", "thread_map", "thread_map_2d", "warp_paths"]

# z = 0, 1: working threads of even / odd blocks; z = 2: idle threads.
_COLORSCALE = [
    [0.0, "#4c78a8"],
    [1 / 3, "#4c78a8"],
    [1 / 3, "#9ecae9"],
    [2 / 3, "#9ecae9"],
    [2 / 3, "#e45756"],
    [1.0, "#e45756"],
]
MAX_CELLS = 65536


def launch_summary(n: int, threads_per_block: int) -> dict[str, int]:
    """Blocks, total threads and idle threads of a 1-D launch that covers ``n`` elements."""
    if n < 1 or threads_per_block < 1:
        raise ValueError(
            f"n and threads_per_block must be at least 1, got n={n}, threads_per_block={threads_per_block}."
        )
    blocks = ceil_div(n, threads_per_block)
    total = blocks * threads_per_block
    return {"n": n, "threads_per_block": threads_per_block, "blocks": blocks, "threads": total, "idle": total - n}


def _check_cells(cells: int) -> None:
    if cells > MAX_CELLS:
        raise ValueError(
            f"this launch has {cells:,} threads, too many to draw one cell each (at most {MAX_CELLS:,}). "
            "Pick a smaller n: the pattern is the same at any size."
        )


def thread_map(n: int, threads_per_block: int, *, title: str | None = None) -> go.Figure:
    """One row per block, one cell per thread; hover shows the element it handles; idle threads red."""
    s = launch_summary(n, threads_per_block)
    blocks, tpb = s["blocks"], threads_per_block
    _check_cells(s["threads"])
    b = np.arange(blocks)[:, None]
    t = np.arange(tpb)[None, :]
    i = b * tpb + t
    z = np.where(i < n, b % 2, 2)
    hover = np.where(i < n, np.char.add("element i = ", i.astype(str)), "idle: i = " + i.astype(str) + f" >= n = {n}")
    fig = go.Figure(
        go.Heatmap(
            z=z,
            x=np.arange(tpb),
            y=np.arange(blocks),
            zmin=0,
            zmax=2,
            colorscale=_COLORSCALE,
            showscale=False,
            customdata=hover,
            xgap=1 if tpb <= 128 else 0,
            ygap=1 if blocks <= 64 else 0,
            hovertemplate="blockIdx.x = %{y}, threadIdx.x = %{x}<br>%{customdata}<extra></extra>",
            text=i if s["threads"] <= 256 else None,
            texttemplate="%{text}" if s["threads"] <= 256 else None,
        )
    )
    fig.update_layout(
        title=title
        or (
            f"{n} elements, {tpb} threads per block: {blocks} block{'s' if blocks != 1 else ''}, "
            f"{s['threads']} threads, {s['idle']} idle (red)"
        ),
        xaxis_title="threadIdx.x (thread within its block)",
        yaxis_title="blockIdx.x (block)",
        template="plotly_white",
        height=min(700, 160 + 28 * blocks),
    )
    fig.update_xaxes(tick0=0, dtick=max(1, tpb // 16))  # whole-number thread indices
    fig.update_yaxes(autorange="reversed", tick0=0, dtick=max(1, blocks // 16))
    return fig


def thread_map_2d(
    shape: Sequence[int], threads_per_block: Sequence[int] = (16, 16), *, title: str | None = None
) -> go.Figure:
    """A 2-D launch over a ``rows x cols`` array: one cell per thread, coloured by block (checkerboard);
    threads that fall outside the array are red. ``threads_per_block`` is ``(x, y)``, x along columns."""
    rows, cols = (int(v) for v in shape)
    tx, ty = (int(v) for v in threads_per_block)
    if min(rows, cols, tx, ty) < 1:
        raise ValueError(
            f"shape and threads_per_block must be at least 1 in each dimension, got {shape}, {threads_per_block}."
        )
    gx, gy = ceil_div(cols, tx), ceil_div(rows, ty)
    height, width = gy * ty, gx * tx
    _check_cells(height * width)
    i = np.arange(height)[:, None]  # row = y thread index
    j = np.arange(width)[None, :]  # column = x thread index
    inside = (i < rows) & (j < cols)
    z = np.where(inside, (i // ty + j // tx) % 2, 2)
    # per cell: blockIdx.x, blockIdx.y, threadIdx.x, threadIdx.y (numbers keep the figure small)
    cell = np.stack(np.broadcast_arrays(j // tx, i // ty, j % tx, i % ty), axis=-1)
    idle = height * width - rows * cols
    fig = go.Figure(
        go.Heatmap(
            z=z,
            zmin=0,
            zmax=2,
            colorscale=_COLORSCALE,
            showscale=False,
            customdata=cell,
            hovertemplate=(
                "row i = %{y}, column j = %{x}<br>blockIdx = (%{customdata[0]}, %{customdata[1]}), "
                "threadIdx = (%{customdata[2]}, %{customdata[3]})<extra></extra>"
            ),
        )
    )
    fig.add_shape(type="rect", x0=-0.5, y0=-0.5, x1=cols - 0.5, y1=rows - 0.5, line=dict(color="black", width=2))
    fig.update_layout(
        title=title
        or (
            f"{rows} x {cols} array, blocks of {tx} x {ty} threads: grid of {gx} x {gy} blocks, "
            f"{idle} idle threads (red)"
        ),
        xaxis_title="column j = blockIdx.x * blockDim.x + threadIdx.x",
        yaxis_title="row i = blockIdx.y * blockDim.y + threadIdx.y",
        template="plotly_white",
        height=min(700, 200 + 12 * height),
    )
    fig.update_yaxes(autorange="reversed", scaleanchor="x")
    return fig


def warp_paths(log: Any, branches: Sequence[str], *, warp_size: int = 32) -> dict[tuple, list[int]]:
    """Which branch each lane of each warp took, from a :func:`gpulab.trace.trace` log of a kernel whose
    branches each write a different array (``branches``, in order). ``{(block, warp): [branch index
    per lane, -1 for a lane that wrote none]}``."""
    bx, by, bz = log.block
    per_warp = ceil_div(bx * by * bz, warp_size)
    out: dict[tuple, list[int]] = {}
    for b in np.ndindex(*log.grid[::-1]):
        for w in range(per_warp):
            out[(tuple(reversed(b)), w)] = [-1] * warp_size
    for acc in log.accesses:
        if acc.kind != "w" or acc.array not in branches:
            continue
        tid = acc.thread[0] + acc.thread[1] * bx + acc.thread[2] * bx * by
        out[(acc.block, tid // warp_size)][tid % warp_size] = list(branches).index(acc.array)
    return out


def divergence_counts(log: Any, branches: Sequence[str], *, warp_size: int = 32) -> dict[str, int]:
    """Warp divergence counted from a trace: ``warps``, ``divergent`` (warps whose lanes took more than
    one branch) and ``passes`` (branch bodies the warps execute one after another: a warp runs every
    branch any of its lanes takes, with the other lanes masked off)."""
    paths = warp_paths(log, branches, warp_size=warp_size)
    taken = [len({p for p in lanes if p >= 0}) for lanes in paths.values()]
    return {"warps": len(taken), "divergent": sum(1 for t in taken if t > 1), "passes": sum(taken)}


def divergence_map(log: Any, branches: Sequence[str], *, title: str | None = None) -> go.Figure:
    """A heatmap: one row per warp, one cell per lane, coloured by the branch the lane took."""
    paths = warp_paths(log, branches)
    keys = list(paths)
    z = np.array([paths[k] for k in keys], dtype=float)
    z[z < 0] = np.nan
    counts = divergence_counts(log, branches)
    labels = [f"block {k[0][:2]} warp {k[1]}" for k in keys]
    text = [["idle" if np.isnan(v) else branches[int(v)] for v in row] for row in z]
    fig = go.Figure(
        go.Heatmap(
            z=z,
            x=list(range(z.shape[1])),
            y=labels,
            text=text,
            zmin=0,
            zmax=max(1, len(branches) - 1),
            colorscale="Viridis",
            showscale=False,
            hovertemplate="%{y}, lane %{x}: %{text}<extra></extra>",
        )
    )
    fig.update_layout(
        title=title
        or (
            f"Branch taken per lane: {counts['divergent']} of {counts['warps']} warps diverge, "
            f"{counts['passes']} branch passes"
        ),
        xaxis_title="lane (threadIdx.x % 32)",
        yaxis_title="warp",
        yaxis_autorange="reversed",
        height=120 + 22 * len(keys),
        margin=dict(l=140, r=20, t=60, b=50),
    )
    return fig
