"""Explorer for lesson 11: how the link between GPUs limits data parallelism (lesson 10's ring all-reduce)."""

from __future__ import annotations

from typing import Any

import ipywidgets as widgets

from ..hardware import INTERCONNECTS, link
from ..multigpu import crossover_gpus, step_seconds
from .explorer import explorer

__all__ = ["allreduce_explorer", "allreduce_report"]


def allreduce_report(
    link_name: str, params_millions: float, compute_ms: float, n_gpus: int, fixed_global_batch: bool = True
) -> tuple[dict[str, float], str]:
    """Step time for ``params_millions`` FP32 gradients all-reduced over ``link_name`` on ``n_gpus``, and an
    HTML summary (speed-up over one GPU, where communication overtakes compute). A model, not a measurement."""
    ln = link(link_name)
    grad_bytes = params_millions * 1e6 * 4
    t = step_seconds(
        compute_ms / 1e3, grad_bytes, n_gpus, ln.gbps, latency_us=ln.latency_us, fixed_global_batch=fixed_global_batch
    )
    one = step_seconds(compute_ms / 1e3, grad_bytes, 1, ln.gbps, fixed_global_batch=fixed_global_batch)["step"]
    images_speedup = (one / t["step"]) * (1 if fixed_global_batch else n_gpus)
    cross = (
        crossover_gpus(compute_ms / 1e3, grad_bytes, ln.gbps, latency_us=ln.latency_us) if fixed_global_batch else None
    )
    where = (
        f"communication outweighs compute from <b>{cross} GPUs</b>"
        if cross
        else "communication stays below compute up to 4,096 GPUs"
        if fixed_global_batch
        else "per-GPU batch fixed: compute per step stays the same, communication approaches 2 x gradients / bandwidth"
    )
    html = (
        f"<p>{ln.name}: {ln.gbps:g} GB/s per direction ({ln.scope}; {ln.gbps_kind.split(':')[0]}). "
        f"{params_millions:g} M parameters "
        f"= {grad_bytes / 1e6:,.0f} MB of FP32 gradients. On {n_gpus} GPU(s): "
        f"compute {t['compute'] * 1e3:,.2f} ms, "
        f"all-reduce {t['communication'] * 1e3:,.2f} ms, step {t['step'] * 1e3:,.2f} ms; "
        f"throughput {images_speedup:,.1f}x one GPU. {where[0].upper() + where[1:]}.</p>"
        "<p><i>A model (no overlap of communication with compute, ring all-reduce, link latency of order "
        f"{ln.latency_us:g} us: an estimate, no specification gives it), not a measurement.</i></p>"
    )
    return t, html


def allreduce_explorer() -> Any:
    """Menu for the link, sliders for model size, compute time and GPU count; shows step time against GPUs.

    Plain widgets updated explicitly when a control changes (as ``memory_budget_explorer``), not
    ``interactive``: a function that displays a figure from inside ``interactive`` can stall headless
    runners (nbclient, nbconvert, nbgrader) for the whole cell timeout (measured: 600 s under nbclient
    after this cell, with the kernel idle). ipywidgets 7.7-compatible (Colab).
    """
    from ..viz.hardware import step_time_figure

    controls = {
        "link_name": widgets.Dropdown(options=list(INTERCONNECTS), value="NVLink 4 (H100)", description="link"),
        "params_millions": widgets.IntSlider(value=25, min=1, max=2000, description="params (M)"),
        "compute_ms": widgets.IntSlider(value=300, min=1, max=2000, description="1-GPU ms"),
        "log2_gpus": widgets.IntSlider(value=6, min=1, max=12, description="log2 GPUs"),
        "scaling": widgets.Dropdown(
            options=["fixed global batch", "fixed per-GPU batch"], value="fixed global batch", description="scaling"
        ),
    }

    def view(v: dict[str, Any]) -> tuple[Any, str]:
        fixed = v["scaling"].startswith("fixed global")
        fig = step_time_figure(
            v["compute_ms"] / 1e3,
            v["params_millions"] * 4e6,
            v["link_name"],
            max_gpus=max(2, 2 ** v["log2_gpus"]),
            fixed_global_batch=fixed,
        )
        fig.update_layout(height=380)
        html = allreduce_report(v["link_name"], v["params_millions"], v["compute_ms"], 2 ** v["log2_gpus"], fixed)[1]
        return fig, html

    return explorer(controls, view, first_row=3)
