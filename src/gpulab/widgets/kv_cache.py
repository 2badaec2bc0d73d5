"""Explorer for lesson 12: how model size, context, batch and precision fill a GPU when serving an LLM.

Weights plus KV cache against the memory of lesson 11's GPUs (spec sheets), and the roofline bound on
decode speed for each GPU the budget fits. Napkin math from :mod:`gpulab.transformer.llm`, not a measurement.
"""

from __future__ import annotations

from typing import Any

import ipywidgets as widgets
import plotly.graph_objects as go

from ..hardware import GPUS
from ..transformer import llm
from .explorer import explorer

__all__ = ["FP8_STORAGE_ONLY", "kv_cache_explorer", "kv_cache_figure", "kv_cache_report"]

PRECISIONS = ("bf16", "fp8", "fp32")
# What "fits" means at FP8 on a GPU whose spec sheet has no FP8 tensor-core peak (V100, T4, A100): the memory
# budget holds, but the numbers are only stored in FP8; every multiply upcasts them first.
FP8_STORAGE_ONLY = "this GPU has no FP8 tensor cores: FP8 is storage only there, compute upcasts"


def _math(d) -> str:
    """The widest-first format a GPU without FP8 units computes FP8-stored numbers in (its spec sheet's)."""
    return "BF16/FP16" if d.peak("bf16") else "FP32"


def kv_cache_report(
    model_name: str, log2_context: int, log2_batch: int, precision: str
) -> tuple[dict[str, float], str]:
    """The memory budget (bytes of ``weights`` and ``kv_cache``) of serving ``model_name`` to ``2**log2_batch``
    sequences of ``2**log2_context`` tokens at ``precision`` (weights and cache), and an HTML summary: per GPU
    of lesson 11, whether it fits, the largest batch that does, and the decode speed's roofline bound."""
    m = llm.model(model_name)
    context, batch = 2**log2_context, 2**log2_batch
    budget = llm.memory_budget(m, context=context, batch=batch, precision=precision)
    total = sum(budget.values())
    per_seq = budget["kv_cache"] / batch
    rows = []
    for key, d in GPUS.items():
        cap = d.memory_gb * 1e9
        biggest = llm.max_batch(m, cap, context=context, precision=precision)
        # stored in FP8, multiplied in a wider format: said wherever something fits, as a flag next to "fits"
        storage = f"; <b>{FP8_STORAGE_ONLY}</b> (to {_math(d)})" if precision == "fp8" and not d.peak("fp8") else ""
        if total <= cap:
            bound = llm.decode_bound(m, d, context=context, batch=batch, precision=precision)
            speed = f"decode at most {bound['tokens_per_s']:,.0f} tokens/s ({bound['bound']}-bound)"
            fits = f"<b>fits</b> in memory{storage}; largest batch {biggest:,}"
            rows.append(f"<li>{key} ({d.memory_gb:g} GB): {fits}; {speed}</li>")
        elif budget["weights"] > cap:
            rows.append(f"<li>{key} ({d.memory_gb:g} GB): the weights alone do not fit</li>")
        elif biggest == 0:  # the weights fit, but the memory left over holds less than one sequence's cache
            rows.append(
                f"<li>{key} ({d.memory_gb:g} GB): the weights fit, but the {(cap - budget['weights']) / 1e9:,.1f} GB "
                f"left do not hold one sequence's KV cache</li>"
            )
        else:
            rows.append(f"<li>{key} ({d.memory_gb:g} GB): does not fit; largest batch {biggest:,}{storage}</li>")
    html = (
        f"<p>{m.name}: {m.params / 1e9:,.2f} B parameters; {context:,} tokens x batch {batch:,} at "
        f"{precision.upper()}. Weights <b>{budget['weights'] / 1e9:,.1f} GB</b>, KV cache "
        f"<b>{budget['kv_cache'] / 1e9:,.1f} GB</b> ({per_seq / 1e6:,.1f} MB per sequence), total "
        f"<b>{total / 1e9:,.1f} GB</b>.</p><ul>{''.join(rows)}</ul>"
        "<p><i>Memory sizes, bandwidths and peaks from spec sheets (lesson 11); speeds are roofline bounds "
        "(every weight and cache entry read once per step), not measurements. Real servers also need "
        "activations, a CUDA context and allocator slack.</i></p>"
    )
    return budget, html


def kv_cache_figure(budget: dict[str, float], label: str) -> go.Figure:
    """One stacked bar (weights, KV cache; GB) with the memory of lesson 11's GPUs as horizontal lines."""
    fig = go.Figure()
    for part, color in (("weights", "#4c78a8"), ("kv_cache", "#f58518")):
        fig.add_bar(name=part.replace("_", " "), x=[label], y=[budget[part] / 1e9], marker_color=color)
    for key, d in GPUS.items():
        fig.add_hline(
            y=d.memory_gb,
            line_dash="dot",
            line_color="grey",
            annotation_text=f"{key} {d.memory_gb:g} GB",
            annotation_position="right",
        )
    fig.update_layout(
        barmode="stack",
        yaxis_title="GB",
        height=420,
        margin={"r": 140},
        title="Serving memory: weights + KV cache vs GPU memory (spec sheets)",
    )
    return fig


def kv_cache_explorer() -> Any:
    """Menus for the model and precision, sliders for context and batch; shows the budget against the GPUs.

    Plain widgets updated explicitly when a control changes (not ``interactive``, whose displaying
    function stalls headless runners such as nbclient); ipywidgets 7.7 and 8 (Colab), plotly 5 and 6.
    """
    controls = {
        "model_name": widgets.Dropdown(options=list(llm.MODELS), value="Llama-2-7B", description="model"),
        "log2_context": widgets.IntSlider(value=12, min=8, max=17, description="log2 context"),
        "log2_batch": widgets.IntSlider(value=3, min=0, max=10, description="log2 batch"),
        "precision": widgets.Dropdown(options=list(PRECISIONS), value="bf16", description="precision"),
    }

    def view(values: dict[str, Any]) -> tuple[Any, str]:
        budget, html = kv_cache_report(**values)
        label = (
            f"{values['model_name']}, {2 ** values['log2_context']:,} tokens x {2 ** values['log2_batch']:,}, "
            f"{values['precision']}"
        )
        return kv_cache_figure(budget, label), html

    return explorer(controls, view, first_row=2)
