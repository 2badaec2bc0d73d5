"""The explorer every lesson widget with a figure is built from: plain widgets, redrawn on change.

Controls in two rows, an ``Output`` for the figure and an ``HTML`` for the summary, updated explicitly
when a control changes. Not ``ipywidgets.interactive``: a function that displays a figure from inside
``interactive`` can stall headless runners (nbclient, nbconvert, papermill, nbgrader) for the whole cell
timeout with the kernel idle (lesson 10's and lesson 11's explorers did, under nbclient). Compatible
with ipywidgets 7.7 (Colab) and 8, plotly 5 and 6; on Colab the figure is drawn as :mod:`.figure_out` says.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import ipywidgets as widgets

from .figure_out import show as figure_out_show

__all__ = ["explorer"]


def explorer(controls: dict[str, Any], view: Callable[[dict[str, Any]], tuple[Any, str]], *, first_row: int) -> Any:
    """A ``VBox``: ``controls`` (the first ``first_row`` in one row, the rest below), the figure and the
    summary that ``view(values)`` returns as ``(figure, html)``, redrawn whenever a control changes.
    ``box.controls`` is ``controls``, for tests and for learners who want to set values from code."""
    figure_out = widgets.Output()
    summary = widgets.HTML()

    def render(_change: Any = None) -> None:
        fig, html = view({name: w.value for name, w in controls.items()})
        summary.value = html
        figure_out_show(figure_out, fig, fig.show)

    for w in controls.values():
        w.observe(render, names="value")
    render()
    items = list(controls.values())
    box = widgets.VBox([widgets.HBox(items[:first_row]), widgets.HBox(items[first_row:]), figure_out, summary])
    box.controls = controls
    return box
