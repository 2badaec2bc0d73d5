"""Figures for training a CNN: loss/accuracy curves (optionally live), confusion matrix, mistakes."""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

__all__ = ["confusion_matrix", "confusion_matrix_figure", "misclassified_figure", "training_curves",
           "update_training_curves"]


def training_curves(history: Any, *, live: bool = False) -> go.Figure:
    """Loss (left) and accuracy (right) per epoch from a :class:`gpulab.train.History`.

    ``live=True`` returns a ``go.FigureWidget`` that :func:`update_training_curves` redraws in place.
    """
    fig = make_subplots(rows=1, cols=2, subplot_titles=("Loss", "Accuracy"))
    if live:
        fig = go.FigureWidget(fig)
    for col, (key, name) in [(1, ("train_loss", "train loss")), (1, ("test_loss", "test loss")),
                             (2, ("train_accuracy", "train accuracy")), (2, ("test_accuracy", "test accuracy"))]:
        fig.add_trace(go.Scatter(x=list(history.epoch[: len(getattr(history, key))]), y=list(getattr(history, key)),
                                 mode="lines+markers", name=name), row=1, col=col)
    fig.update_xaxes(title_text="epoch", dtick=1)
    fig.update_yaxes(title_text="cross-entropy (nats)", row=1, col=1)
    fig.update_yaxes(title_text="fraction correct", row=1, col=2)
    fig.update_layout(title="Training curves", height=350)
    return fig


def update_training_curves(fig: go.Figure, history: Any) -> None:
    """Redraw the four traces of :func:`training_curves` from ``history`` (in place)."""
    keys = ("train_loss", "test_loss", "train_accuracy", "test_accuracy")
    with fig.batch_update() if hasattr(fig, "batch_update") else _nullcontext():
        for trace, key in zip(fig.data, keys):
            ys = list(getattr(history, key))
            trace.x, trace.y = list(history.epoch[: len(ys)]), ys


class _nullcontext:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: Any) -> None:
        return None


def confusion_matrix(y_true: Any, y_pred: Any, classes: int = 10) -> np.ndarray:
    """``m[t, p]`` = how many examples of true class t were predicted as p (classes x classes, int64)."""
    y_true, y_pred = np.asarray(y_true).astype(np.int64), np.asarray(y_pred).astype(np.int64)
    if y_true.shape != y_pred.shape:
        raise ValueError(f"y_true and y_pred must have the same shape, got {y_true.shape} and {y_pred.shape}.")
    return np.bincount(y_true * classes + y_pred, minlength=classes * classes).reshape(classes, classes)


def confusion_matrix_figure(y_true: Any, y_pred: Any, class_names: Sequence[str] | None = None) -> go.Figure:
    """Heatmap of the confusion matrix; the diagonal is what the model got right."""
    names = list(class_names) if class_names is not None else [str(i) for i in range(10)]
    m = confusion_matrix(y_true, y_pred, len(names))
    acc = np.trace(m) / max(1, m.sum())
    fig = go.Figure(go.Heatmap(z=m, x=names, y=names, colorscale="Blues", text=m, texttemplate="%{text}",
                               hovertemplate="true %{y}, predicted %{x}: %{z}<extra></extra>",
                               colorbar=dict(title="examples")))
    fig.update_layout(title=f"Confusion matrix (accuracy {acc:.2%})", height=450, width=520,
                      xaxis_title="predicted class", yaxis_title="true class", yaxis_autorange="reversed")
    return fig


def misclassified_figure(images: Any, y_true: Any, y_pred: Any, class_names: Sequence[str] | None = None, *,
                         n: int = 16, cols: int = 8) -> go.Figure:
    """The first ``n`` mistakes as small grey images titled "true -> predicted"."""
    images = np.asarray(images)
    y_true, y_pred = np.asarray(y_true), np.asarray(y_pred)
    wrong = np.flatnonzero(y_true != y_pred)[:n]
    names = list(class_names) if class_names is not None else [str(i) for i in range(10)]
    if wrong.size == 0:
        fig = go.Figure()
        fig.update_layout(title="Misclassified examples: none", xaxis_visible=False, yaxis_visible=False)
        return fig
    rows = -(-wrong.size // cols)
    titles = [f"{names[y_true[i]]} → {names[y_pred[i]]}" for i in wrong]
    fig = make_subplots(rows=rows, cols=cols, subplot_titles=titles, horizontal_spacing=0.01, vertical_spacing=0.08)
    for k, i in enumerate(wrong):
        img = images[i].reshape(images.shape[-2], images.shape[-1])
        fig.add_trace(go.Heatmap(z=img, colorscale="gray_r", showscale=False,
                                 hovertemplate="pixel (%{y}, %{x}): %{z:.2f}<extra></extra>"),
                      row=k // cols + 1, col=k % cols + 1)
    fig.update_xaxes(visible=False)
    fig.update_yaxes(visible=False, autorange="reversed", scaleanchor=None)
    fig.update_annotations(font_size=10)
    fig.update_layout(title=f"Misclassified examples (true → predicted), {wrong.size} shown", height=130 * rows + 60)
    return fig
