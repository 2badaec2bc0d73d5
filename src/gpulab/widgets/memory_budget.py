"""Explorer for lesson 10: how batch size, width, optimizer and precision fill a GPU's memory."""

from __future__ import annotations

from typing import Any

import ipywidgets as widgets

from ..scaling import cnn_footprint, max_batch_size, memory_budget
from ..timing import PEAKS
from .explorer import explorer

__all__ = ["memory_budget_explorer", "memory_budget_report"]


def memory_budget_report(width: int, log2_batch: int, optimizer: str, precision: str) -> tuple[dict[str, int], str]:
    """The budget of the course CNN made ``width`` times wider, at batch ``2**log2_batch``, and an HTML
    summary saying which GPUs (spec-sheet memory sizes) it fits."""
    fp = cnn_footprint(channels=(32 * width, 64 * width), hidden=128 * width)
    batch = 2**log2_batch
    budget = memory_budget(fp, batch, optimizer=optimizer, precision=precision)
    total = sum(budget.values())
    rows = []
    for key in ("T4", "L4", "A100", "H100"):
        p = PEAKS[key]
        fits = total <= p.memory_gb * 1e9
        biggest = max_batch_size(fp, p.memory_gb * 1e9, optimizer=optimizer, precision=precision)
        rows.append(
            f"<li>{p.name} ({p.memory_gb:g} GB): {'fits' if fits else '<b>does not fit</b>'}; "
            f"largest batch {biggest:,}</li>"
        )
    html = (
        f"<p>{fp.params:,} parameters; batch {batch:,}; total <b>{total / 1e9:.2f} GB</b> "
        f"(activations + workspace {(budget['activations'] + budget['im2col workspace']) / total:.0%}). "
        "Memory sizes from spec sheets; frameworks also keep a CUDA context (a few hundred MB) and "
        f"allocator slack.</p><ul>{''.join(rows)}</ul>"
    )
    return budget, html


def memory_budget_explorer() -> Any:
    """Sliders for width and batch size, menus for optimizer and precision; shows the stacked budget.

    Built from plain widgets (a VBox of controls, an ``Output`` for the figure and an ``HTML`` for the
    summary) that are updated explicitly when a control changes, not with ``interactive``: a function
    that displays a figure from inside ``interactive`` stalls headless runners (nbclient, nbconvert,
    papermill, nbgrader) for the whole cell timeout. The widgets are ipywidgets 7.7-compatible (Colab).
    """
    from ..viz.scaling import memory_budget_figure

    controls = {
        "width": widgets.IntSlider(value=1, min=1, max=16, description="width x"),
        "log2_batch": widgets.IntSlider(value=7, min=0, max=16, description="log2 batch"),
        "optimizer": widgets.Dropdown(options=["sgd", "momentum", "adam"], value="adam", description="optimizer"),
        "precision": widgets.Dropdown(options=["fp32", "mixed"], value="fp32", description="precision"),
    }

    def view(values: dict[str, Any]) -> tuple[Any, str]:
        budget, html = memory_budget_report(**values)
        label = (
            f"width x{values['width']}, batch {2 ** values['log2_batch']:,}, {values['optimizer']}, "
            f"{values['precision']}"
        )
        fig = memory_budget_figure(
            {label: budget}, limits_gb={"T4": PEAKS["T4"].memory_gb}, title="Course CNN: training memory by component"
        )
        fig.update_layout(height=380)
        return fig, html

    return explorer(controls, view, first_row=2)
