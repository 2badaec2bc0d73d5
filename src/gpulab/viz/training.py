"""Figures for training a CNN: loss/accuracy curves (optionally live), confusion matrix, learned
first-layer filters and the test images the model gets wrong."""

from __future__ import annotations

from typing import Any
from collections.abc import Sequence

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from ..kernels._launch import ceil_div
from ..runtime import to_host

__all__ = [
    "confusion_matrix",
    "confusion_matrix_figure",
    "filters_figure",
    "misclassified_figure",
    "training_curves",
    "update_training_curves",
]


_CURVES = (
    ("train_loss", "train loss", 1),
    ("test_loss", "test loss", 1),
    ("train_accuracy", "train accuracy", 2),
    ("test_accuracy", "test accuracy", 2),
)


def training_curves(history: Any, *, title: str = "Training curves") -> go.Figure:
    """Loss (left) and accuracy (right) per epoch.

    ``history`` is a :class:`gpulab.train.History`, or ``{run name: History}`` to compare runs (for
    example one per backend) in one figure. The figure is a plain ``go.Figure`` (no FigureWidget, which
    needs anywidget on plotly 6+): :func:`update_training_curves` refreshes it, and ``fit(live_plot=True)``
    redraws it through a display handle.
    """
    runs = history if isinstance(history, dict) else {"": history}
    fig = make_subplots(rows=1, cols=2, subplot_titles=("Loss", "Accuracy"))
    for run, h in runs.items():
        for key, name, col in _CURVES:
            ys = list(getattr(h, key))
            fig.add_trace(
                go.Scatter(
                    x=list(h.epoch[: len(ys)]), y=ys, mode="lines+markers", name=f"{run}: {name}" if run else name
                ),
                row=1,
                col=col,
            )
    fig.update_xaxes(title_text="epoch", dtick=1)
    fig.update_yaxes(title_text="cross-entropy (nats)", row=1, col=1)
    fig.update_yaxes(title_text="fraction correct", row=1, col=2)
    fig.update_layout(title=title, height=350)
    return fig


def update_training_curves(fig: go.Figure, history: Any) -> None:
    """Redraw the traces of :func:`training_curves` from ``history`` (same History or dict of runs)."""
    runs = history if isinstance(history, dict) else {"": history}
    traces = iter(fig.data)
    for h in runs.values():
        for key, _, _ in _CURVES:
            trace, ys = next(traces), list(getattr(h, key))
            trace.x, trace.y = list(h.epoch[: len(ys)]), ys


def _labels(y: Any) -> np.ndarray:
    """Class labels as a flat int64 NumPy array (CuPy arrays are copied to the host)."""
    return to_host(y).ravel().astype(np.int64)


def confusion_matrix(y_true: Any, y_pred: Any, classes: int = 10) -> np.ndarray:
    """``m[t, p]`` = how many examples of true class t were predicted as p (classes x classes, int64)."""
    y_true, y_pred = _labels(y_true), _labels(y_pred)
    if y_true.shape != y_pred.shape:
        raise ValueError(f"y_true and y_pred must have the same length, got {y_true.size} and {y_pred.size}.")
    for name, y in (("y_true", y_true), ("y_pred", y_pred)):
        if y.size and (y.min() < 0 or y.max() >= classes):
            raise ValueError(
                f"{name} must hold class indices 0..{classes - 1}, got values from {y.min()} to "
                f"{y.max()}; pass classes= the number of classes."
            )
    return np.bincount(y_true * classes + y_pred, minlength=classes * classes).reshape(classes, classes)


def confusion_matrix_figure(
    y_true: Any, y_pred: Any, class_names: Sequence[str] | None = None, *, title: str = "Confusion matrix"
) -> go.Figure:
    """Heatmap of the confusion matrix with counts in each cell; the diagonal is what the model got right."""
    names = [str(c) for c in class_names] if class_names is not None else [str(i) for i in range(10)]
    m = confusion_matrix(y_true, y_pred, len(names))
    acc = np.trace(m) / max(1, m.sum())
    fig = go.Figure(
        go.Heatmap(
            z=m,
            x=names,
            y=names,
            colorscale="Blues",
            text=m,
            texttemplate="%{text}",
            hovertemplate="true %{y}, predicted %{x}: %{z}<extra></extra>",
            colorbar=dict(title="examples"),
        )
    )
    fig.update_layout(
        title=f"{title} (accuracy {acc:.2%})",
        height=480,
        width=540,
        xaxis_title="predicted class",
        yaxis_title="true class",
        yaxis_autorange="reversed",
    )
    return fig


def filters_figure(weights: Any, title: str = "First-layer filters") -> go.Figure:
    """One small heatmap per filter of a (F, C, k, k) convolution weight array (channel 0 shown; red
    positive, blue negative, one shared colour scale)."""
    w = to_host(weights)
    if w.ndim != 4:
        raise ValueError(f"expected conv weights of shape (F, C, k, k), got {w.shape}.")
    f = w.shape[0]
    cols = min(8, f)
    rows = ceil_div(f, cols)
    fig = make_subplots(rows=rows, cols=cols, horizontal_spacing=0.01, vertical_spacing=0.02)
    lim = float(np.abs(w).max()) or 1.0
    for i in range(f):
        fig.add_trace(
            go.Heatmap(
                z=w[i, 0],
                zmin=-lim,
                zmax=lim,
                colorscale="RdBu_r",
                showscale=i == 0,
                hovertemplate="row %{y}, col %{x}: %{z:.3f}<extra></extra>",
            ),
            row=i // cols + 1,
            col=i % cols + 1,
        )
    fig.update_xaxes(visible=False)
    fig.update_yaxes(visible=False, autorange="reversed")
    fig.update_layout(title=title, height=90 * rows + 80, width=90 * cols + 120)
    return fig


def misclassified_figure(
    images: Any, y_true: Any, y_pred: Any, class_names: Sequence[str] | None = None, *, n: int = 16, cols: int = 8
) -> go.Figure:
    """The first ``n`` mistakes as small grey images titled "true → predicted"."""
    images = to_host(images)
    y_true, y_pred = _labels(y_true), _labels(y_pred)
    wrong = np.flatnonzero(y_true != y_pred)[:n]
    names = [str(c) for c in class_names] if class_names is not None else [str(i) for i in range(10)]
    if wrong.size == 0:
        fig = go.Figure()
        fig.update_layout(title="Misclassified examples: none", xaxis_visible=False, yaxis_visible=False, height=150)
        return fig
    cols = min(cols, wrong.size)
    rows = ceil_div(wrong.size, cols)
    titles = [f"{names[y_true[i]]} → {names[y_pred[i]]}" for i in wrong]
    fig = make_subplots(rows=rows, cols=cols, subplot_titles=titles, horizontal_spacing=0.01, vertical_spacing=0.08)
    for k, i in enumerate(wrong):
        img = images[i].reshape(images.shape[-2], images.shape[-1])
        fig.add_trace(
            go.Heatmap(
                z=img, colorscale="gray_r", showscale=False, hovertemplate="pixel (%{y}, %{x}): %{z:.2f}<extra></extra>"
            ),
            row=k // cols + 1,
            col=k % cols + 1,
        )
    fig.update_xaxes(visible=False)
    fig.update_yaxes(visible=False, autorange="reversed")
    fig.update_annotations(font_size=10)
    fig.update_layout(
        title=f"Misclassified examples (true → predicted), {wrong.size} shown",
        height=130 * rows + 60,
        width=min(1000, 110 * cols + 60),
    )
    return fig
