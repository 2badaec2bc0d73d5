"""Launch explorers for lesson 01: pick a problem size and a block size, see the thread map.

Built only from widgets that exist in ipywidgets 7.7 (Colab) and 8: ``IntSlider``, ``Dropdown``,
``HTML``, ``Output``, ``VBox``/``HBox`` and ``observe``. Figures are plain plotly ``go.Figure`` shown
inside an ``Output`` (a ``FigureWidget`` would need anywidget on plotly 6+).
"""

from __future__ import annotations

from typing import Any

import ipywidgets as W

from ..kernels._launch import ceil_div
from ..viz.threads import launch_summary, thread_map, thread_map_2d
from . import figure_out

__all__ = ["LaunchExplorer", "LaunchExplorer2D", "launch_explorer", "launch_explorer_2d"]

THREAD_CHOICES = (32, 64, 96, 128, 256, 512, 1024)
BLOCK_2D_CHOICES = (
    ("8 x 8", (8, 8)),
    ("16 x 16", (16, 16)),
    ("32 x 8", (32, 8)),
    ("16 x 4", (16, 4)),
    ("32 x 32", (32, 32)),
)


class LaunchExplorer(W.VBox):
    """1-D launch: sliders for ``n`` and threads per block; the summary and thread map follow.

    ``.figure`` is the figure shown last and ``.summary`` the numbers behind it.
    """

    def __init__(self, n: int = 100, threads_per_block: int = 32, max_n: int = 2048) -> None:
        self.n = W.IntSlider(value=n, min=1, max=max_n, description="n elements", continuous_update=False)
        self.threads = W.Dropdown(options=list(THREAD_CHOICES), value=threads_per_block, description="threads/block")
        self.info = W.HTML()
        self.out = W.Output()
        self.figure: Any = None
        self.summary: dict[str, int] = {}
        super().__init__(children=[W.HBox([self.n, self.threads]), self.info, self.out])
        self.n.observe(self._update, names="value")
        self.threads.observe(self._update, names="value")
        self._update()

    def _update(self, change: Any = None) -> None:
        s = launch_summary(self.n.value, self.threads.value)
        self.summary = s
        self.info.value = (
            f"<b>blocks = ceil({s['n']} / {s['threads_per_block']}) = {s['blocks']}</b>; "
            f"{s['threads']} threads launched, <b>{s['idle']} idle</b> "
            f"({s['idle'] / s['threads']:.0%}): the bounds guard <code>if i &lt; n</code> keeps them from "
            "touching memory past the end."
        )
        self.figure = thread_map(s["n"], s["threads_per_block"])
        figure_out.show(self.out, self.figure)


class LaunchExplorer2D(W.VBox):
    """2-D launch: sliders for rows and columns, a dropdown of block shapes; the thread map follows."""

    def __init__(self, rows: int = 20, cols: int = 40, block: tuple[int, int] = (16, 16), max_side: int = 128) -> None:
        self.rows = W.IntSlider(value=rows, min=1, max=max_side, description="rows", continuous_update=False)
        self.cols = W.IntSlider(value=cols, min=1, max=max_side, description="columns", continuous_update=False)
        self.block = W.Dropdown(options=list(BLOCK_2D_CHOICES), value=tuple(block), description="block (x, y)")
        self.info = W.HTML()
        self.out = W.Output()
        self.figure: Any = None
        self.summary: dict[str, Any] = {}
        super().__init__(children=[W.HBox([self.rows, self.cols, self.block]), self.info, self.out])
        for w in (self.rows, self.cols, self.block):
            w.observe(self._update, names="value")
        self._update()

    def _update(self, change: Any = None) -> None:
        rows, cols = self.rows.value, self.cols.value
        tx, ty = self.block.value
        gx, gy = ceil_div(cols, tx), ceil_div(rows, ty)
        threads = gx * gy * tx * ty
        self.summary = {
            "rows": rows,
            "cols": cols,
            "block": (tx, ty),
            "grid": (gx, gy),
            "threads": threads,
            "idle": threads - rows * cols,
        }
        self.info.value = (
            f"<b>grid = (ceil({cols} / {tx}), ceil({rows} / {ty})) = ({gx}, {gy})</b> blocks of {tx * ty} threads; "
            f"{threads} threads, <b>{threads - rows * cols} idle</b>."
        )
        self.figure = thread_map_2d((rows, cols), (tx, ty))
        figure_out.show(self.out, self.figure)


def launch_explorer(n: int = 100, threads_per_block: int = 32) -> LaunchExplorer:
    """The 1-D launch explorer (display it as the last expression of a cell)."""
    return LaunchExplorer(n, threads_per_block)


def launch_explorer_2d(rows: int = 20, cols: int = 40, block: tuple[int, int] = (16, 16)) -> LaunchExplorer2D:
    """The 2-D launch explorer."""
    return LaunchExplorer2D(rows, cols, block)
