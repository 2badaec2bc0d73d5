"""Figures for lesson 06: matmul throughput and error per precision (FP32, TF32, FP16)."""

from __future__ import annotations

from typing import Any
from collections.abc import Sequence

import plotly.graph_objects as go

__all__ = ["precision_bars", "spec_peak_bars"]


def precision_bars(rows: Sequence[dict[str, Any]], label: str) -> go.Figure:
    """Bars of measured TFLOP/s per precision, from :func:`gpulab.interop.precision_benchmark` rows.

    ``label`` says where the numbers come from (this run's GPU, or a recording's ``.label``).
    """
    names = [r["precision"].upper() for r in rows]
    fig = go.Figure(
        go.Bar(
            x=names,
            y=[r["tflops"] for r in rows],
            text=[f"{r['tflops']:.1f}<br>err {r['rel_error']:.1e}" for r in rows],
            textposition="outside",
        )
    )
    n = rows[0]["n"] if rows else "?"
    fig.update_layout(
        title=f"{n}x{n} matmul through cuBLAS: {label}",
        xaxis_title="precision",
        yaxis_title="throughput (TFLOP/s)",
        height=380,
    )
    return fig


def spec_peak_bars(peaks: Sequence[Any]) -> go.Figure:
    """Spec-sheet FP32, TF32 and FP16 tensor-core peaks for several GPUs (:data:`gpulab.timing.PEAKS`)."""
    fig = go.Figure()
    for kind, name in (
        ("fp32_tflops", "FP32 (CUDA cores)"),
        ("tf32_tensor_tflops", "TF32 tensor cores"),
        ("fp16_tensor_tflops", "FP16 tensor cores"),
    ):
        fig.add_bar(name=name, x=[p.name for p in peaks], y=[getattr(p, kind) or 0 for p in peaks])
    fig.update_layout(
        title="Spec-sheet peaks (NVIDIA data sheets, dense; not a measurement)",
        barmode="group",
        xaxis_title="GPU",
        yaxis_title="peak (TFLOP/s)",
        yaxis_type="log",
        height=400,
    )
    return fig
