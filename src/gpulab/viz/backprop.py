"""The backward pass's data flow as a picture (lesson 08).

Top row: the forward pass, tensor by tensor, left to right. Bottom row: the backward pass, right to
left, each arrow carrying ``dL/d(tensor)``. Dashed lines: what each layer's ``backward`` reads from
its forward pass (its cache), which is why training keeps the activations in memory. Red labels:
the parameter gradients a layer fills on the way (``dW``, ``db``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import plotly.graph_objects as go

__all__ = ["SAVES", "backward_flow", "layer_table"]

# What each layer's backward needs from its forward pass, and the parameter gradients it produces.
SAVES: dict[str, tuple[str, str]] = {
    "Conv2d": ("cols = im2col(x)", "dW, db"),
    "Linear": ("its input x", "dW, db"),
    "ReLU": ("its output y (y > 0 is the mask)", ""),
    "MaxPool2d": ("arg: which input won", ""),
    "Flatten": ("the input shape", ""),
    "Dropout": ("the random mask", ""),
    "SoftmaxCrossEntropy": ("p = softmax(z) and the labels", ""),
}


def layer_table(model: Any, input_shape: Sequence[int]) -> list[tuple[str, tuple[int, ...]]]:
    """``[(layer class name, output shape), ...]`` from one forward pass of a batch of one zero image
    (``input_shape`` without the batch axis) through a :class:`gpulab.nn.Sequential`."""
    x = np.zeros((1, *input_shape), dtype=np.float32)
    model.train(False)
    out = []
    for layer in model.layers:
        x = layer.forward(x)
        out.append((type(layer).__name__, tuple(int(s) for s in np.shape(x))))
    model.train(True)
    return out


def _shape(s: Sequence[int]) -> str:
    return "(" + ", ".join("N" if k == 0 else str(v) for k, v in enumerate(s)) + ")"


def backward_flow(
    layers: Sequence[tuple[str, Sequence[int]]] | None = None,
    input_shape: Sequence[int] = (1, 28, 28),
    loss: str = "SoftmaxCrossEntropy",
) -> go.Figure:
    """Forward (top) and backward (bottom) through ``layers`` = ``[(name, output shape), ...]`` (from
    :func:`layer_table`; default: the course CNN) and the loss."""
    if layers is None:
        from ..nn import mnist_cnn

        layers = layer_table(mnist_cnn(dropout=0.0), input_shape)
    names = ["input x"] + [n for n, _ in layers] + ["loss L"]
    shapes = [_shape((1, *input_shape))] + [_shape(s) for _, s in layers] + ["scalar"]
    n = len(names)
    xs = np.arange(n, dtype=float)
    fig = go.Figure()
    fig.add_trace(
        go.Scatter(
            x=xs,
            y=np.ones(n),
            mode="markers+text",
            text=[f"<b>{a}</b><br>{s}" for a, s in zip(names, shapes)],
            textposition="top center",
            textfont=dict(size=9),
            marker=dict(size=18, color="#4c78a8", symbol="square"),
            name="forward: layer output (kept for backward where a dashed line leaves it)",
            hovertemplate="%{text}<extra>forward</extra>",
        )
    )
    grads = ["dL/dx (not needed)"] + [f"dL/d out {k}" for k in range(1, n - 1)] + ["dL/dL = 1"]
    fig.add_trace(
        go.Scatter(
            x=xs,
            y=np.zeros(n),
            mode="markers+text",
            text=grads,
            textposition="bottom center",
            textfont=dict(size=9),
            marker=dict(size=18, color="#e45756", symbol="diamond"),
            name="backward: gradient of the loss with respect to that tensor (same shape)",
            hovertemplate="%{text}<extra>backward</extra>",
        )
    )
    for k in range(n - 1):  # forward arrows left to right on the top row, backward right to left below
        for x, y, ax, ay, color in ((k + 1, 1, k, 1, "#4c78a8"), (k, 0, k + 1, 0, "#e45756")):
            fig.add_annotation(
                x=x,
                y=y,
                ax=ax,
                ay=ay,
                xref="x",
                yref="y",
                axref="x",
                ayref="y",
                arrowhead=2,
                arrowwidth=1.5,
                arrowcolor=color,
                text="",
                showarrow=True,
                standoff=10,
                startstandoff=10,
            )
    cx, cy, ct = [], [], []
    for k, name in enumerate(names[1:-1] + [loss]):
        saved, pgrads = SAVES.get(name, ("(nothing)", ""))
        # the layer between tensor k and k+1: its backward (bottom, between k+1 and k) reads its cache (top)
        mid = k + 0.5
        fig.add_shape(type="line", x0=mid, y0=0.93, x1=mid, y1=0.07, line=dict(color="#888", dash="dot", width=1))
        cx.append(mid)
        cy.append(0.5)
        ct.append(f"{'loss' if k == n - 2 else name}.backward reads {saved}" + (f"; fills {pgrads}" if pgrads else ""))
        if pgrads:
            fig.add_annotation(x=mid, y=-0.42, text=pgrads, showarrow=False, font=dict(color="#cf222e", size=11))
    fig.add_trace(
        go.Scatter(
            x=cx,
            y=cy,
            mode="markers",
            marker=dict(size=9, color="#888"),
            customdata=ct,
            name="cache read by backward (hover)",
            hovertemplate="%{customdata}<extra></extra>",
        )
    )
    fig.update_layout(
        title=(
            f"Forward left to right, backward right to left: {len(layers)} layers, "
            f"{sum(1 for nm, _ in layers if SAVES.get(nm, ('', ''))[1])} with parameter gradients"
        ),
        template="plotly_white",
        height=430,
        width=1100,
        legend=dict(orientation="h", y=-0.15),
        xaxis=dict(visible=False, range=[-0.6, n - 0.4]),
        yaxis=dict(visible=False, range=[-0.7, 1.6]),
    )
    return fig
