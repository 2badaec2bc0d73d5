"""Tile-size explorer for lesson 04: what a TILE x TILE shared-memory tile buys, and what it costs.

Works with ipywidgets 7.7 (Colab) and 8: sliders and dropdowns, an HTML table, and a plotly
``go.Figure`` rendered into an ``Output`` (no FigureWidget).
"""

from __future__ import annotations

from typing import Any

import plotly.graph_objects as go

from ..kernels._launch import ceil_div, count
from . import figure_out

__all__ = ["SHARED_MEMORY_LIMIT", "THREADS_LIMIT", "tile_explorer", "tiling_figure", "tiling_stats"]

THREADS_LIMIT = 1024  # threads per block, every CUDA GPU since 2010
SHARED_MEMORY_LIMIT = 48 * 1024  # bytes of static shared memory per block (more needs dynamic opt-in)
TILE_CHOICES = (1, 2, 4, 8, 16, 32, 64)


def tiling_stats(n: int, tile: int, itemsize: int = 4) -> dict[str, Any]:
    """Napkin math for an n x n float32 matmul with the shared-memory tiled kernel and TILE x TILE blocks.

    Loads count elements fetched from global memory; the naive kernel needs 2n per output element,
    the tiled one 2 per tile it walks through, i.e. 2 * ceil(n / tile).
    """
    n = count("n", n, example="n is the matrix size, e.g. tiling_stats(1024, 16).")
    tile = count("tile", tile, example="TILE is a whole number of threads per side, e.g. 16.")
    itemsize = count("itemsize", itemsize, example="4 bytes for float32.")
    tiles_along_k = blocks_per_side = ceil_div(n, tile)
    threads = tile * tile
    shared = 2 * tile * tile * itemsize  # one tile of A and one of B
    naive_loads = 2 * n
    tiled_loads = 2 * tiles_along_k
    return {
        "n": n,
        "tile": tile,
        "naive_loads_per_output": naive_loads,
        "tiled_loads_per_output": tiled_loads,
        "reduction": naive_loads / tiled_loads,
        "threads_per_block": threads,
        "shared_bytes_per_block": shared,
        "blocks": blocks_per_side * blocks_per_side,
        "tiled_global_bytes": n * n * tiled_loads * itemsize,
        "naive_global_bytes": n * n * naive_loads * itemsize,
        "fits_threads": threads <= THREADS_LIMIT,
        "fits_shared": shared <= SHARED_MEMORY_LIMIT,
    }


def tiling_figure(stats: dict[str, Any]) -> go.Figure:
    """Bars of global loads per output element, naive vs tiled, for one :func:`tiling_stats` result."""
    s = stats
    fig = go.Figure(
        go.Bar(
            x=["naive", f"tiled (TILE={s['tile']})"],
            y=[s["naive_loads_per_output"], s["tiled_loads_per_output"]],
            text=[f"{s['naive_loads_per_output']:,}", f"{s['tiled_loads_per_output']:,}"],
            textposition="outside",
            marker_color=["#d62728", "#2ca02c"],
        )
    )
    fig.update_layout(
        title=f"{s['n']}x{s['n']} matmul: global loads per output element ({s['reduction']:.1f}x fewer)",
        xaxis_title="kernel",
        yaxis_title="global loads per element of C",
        height=340,
        yaxis_range=[0, s["naive_loads_per_output"] * 1.25],
    )
    return fig


def _fmt_bytes(b: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if b < 1024 or unit == "TiB":
            return f"{b:,.0f} {unit}" if unit == "B" else f"{b:,.1f} {unit}"
        b /= 1024
    return f"{b:.1f}"


def _stats_html(s: dict[str, Any]) -> str:
    ok = '<span style="color:#2ca02c">fits</span>'

    def bad(why: str) -> str:
        return f'<span style="color:#d62728"><b>does not fit</b>: {why}</span>'

    threads = ok if s["fits_threads"] else bad(f"more than {THREADS_LIMIT} threads, the launch fails")
    shared = ok if s["fits_shared"] else bad(f"more than {SHARED_MEMORY_LIMIT // 1024} KiB of static shared memory")
    rows = [
        ("global loads per output, naive", f"{s['naive_loads_per_output']:,}"),
        ("global loads per output, tiled", f"{s['tiled_loads_per_output']:,} ({s['reduction']:.1f}x fewer)"),
        (
            "global traffic, naive / tiled",
            f"{_fmt_bytes(s['naive_global_bytes'])} / {_fmt_bytes(s['tiled_global_bytes'])}",
        ),
        ("threads per block", f"{s['threads_per_block']:,} &nbsp; {threads}"),
        ("shared memory per block", f"{s['shared_bytes_per_block']:,} bytes &nbsp; {shared}"),
        ("blocks launched", f"{s['blocks']:,}"),
    ]
    body = "".join(f"<tr><td style='padding-right:1em'>{k}</td><td>{v}</td></tr>" for k, v in rows)
    return f"<table>{body}</table>"


def tile_explorer(n: int = 1024, tile: int = 16) -> Any:
    """An explorer: choose the matrix size n and TILE, see loads, shared memory, blocks and limits."""
    import ipywidgets as W

    if tile not in TILE_CHOICES:
        raise ValueError(f"tile must be one of {TILE_CHOICES}, got {tile}.")
    n = count("n", n, example="n is the matrix size, from 16 to 8192.")
    if not 16 <= n <= 8192:
        raise ValueError(f"the explorer's n goes from 16 to 8192 (its slider's range), got n={n}.")
    n_slider = W.IntSlider(value=n, min=16, max=8192, step=16, description="n", continuous_update=False)
    tile_dd = W.Dropdown(options=list(TILE_CHOICES), value=tile, description="TILE")
    info = W.HTML()
    out = W.Output()

    def render(*_: Any) -> None:
        s = tiling_stats(n_slider.value, tile_dd.value)
        info.value = _stats_html(s)
        figure_out.show(out, tiling_figure(s))

    n_slider.observe(render, names="value")
    tile_dd.observe(render, names="value")
    render()
    return W.VBox([W.HBox([n_slider, tile_dd]), info, out])
