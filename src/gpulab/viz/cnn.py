"""Figures for lesson 09: what a trained CNN gets wrong and what its first layer learned."""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

__all__ = ["confusion_matrix", "confusion_figure", "filters_figure", "misclassified_figure"]


def confusion_matrix(y_true: Any, y_pred: Any, classes: int) -> np.ndarray:
    """``m[t, p]`` = how many examples of true class t were predicted as p."""
    y_true, y_pred = np.asarray(y_true).ravel(), np.asarray(y_pred).ravel()
    if y_true.shape != y_pred.shape:
        raise ValueError(f"y_true and y_pred must have the same length, got {y_true.shape} and {y_pred.shape}.")
    m = np.zeros((classes, classes), dtype=np.int64)
    np.add.at(m, (y_true, y_pred), 1)
    return m


def confusion_figure(m: np.ndarray, class_names: Sequence[str], title: str = "Confusion matrix (test set)") -> go.Figure:
    """Heatmap of a confusion matrix, counts printed in each cell."""
    names = [str(c) for c in class_names]
    fig = go.Figure(go.Heatmap(z=m, x=names, y=names, colorscale="Blues", text=m, texttemplate="%{text}",
                               hovertemplate="true %{y}, predicted %{x}: %{z}<extra></extra>"))
    fig.update_layout(title=title, xaxis_title="predicted class", yaxis_title="true class", height=480, width=520)
    fig.update_yaxes(autorange="reversed")
    return fig


def filters_figure(weights: Any, title: str = "First-layer filters") -> go.Figure:
    """One small heatmap per filter of a (F, 1, k, k) convolution weight array (red positive, blue negative)."""
    w = np.asarray(weights)
    if w.ndim != 4:
        raise ValueError(f"expected conv weights of shape (F, C, k, k), got {w.shape}.")
    f = w.shape[0]
    cols = min(8, f)
    rows = -(-f // cols)
    fig = make_subplots(rows=rows, cols=cols, horizontal_spacing=0.01, vertical_spacing=0.02)
    lim = float(np.abs(w).max()) or 1.0
    for i in range(f):
        fig.add_trace(go.Heatmap(z=w[i, 0], zmin=-lim, zmax=lim, colorscale="RdBu_r", showscale=i == 0),
                      row=i // cols + 1, col=i % cols + 1)
    fig.update_xaxes(visible=False)
    fig.update_yaxes(visible=False, autorange="reversed")
    fig.update_layout(title=title, height=90 * rows + 80, width=90 * cols + 120)
    return fig


def misclassified_figure(images: Any, y_true: Any, y_pred: Any, class_names: Sequence[str], *, limit: int = 12,
                         title: str = "Misclassified test images") -> go.Figure:
    """Up to ``limit`` wrongly predicted images, each titled 'true -> predicted'."""
    x = np.asarray(images)
    wrong = np.flatnonzero(np.asarray(y_true) != np.asarray(y_pred))[:limit]
    if wrong.size == 0:
        fig = go.Figure()
        fig.update_layout(title=f"{title}: none", height=120)
        return fig
    cols = min(6, wrong.size)
    rows = -(-wrong.size // cols)
    names = [str(c) for c in class_names]
    fig = make_subplots(rows=rows, cols=cols, subplot_titles=[
        f"{names[int(np.asarray(y_true)[i])]} -> {names[int(np.asarray(y_pred)[i])]}" for i in wrong])
    for k, i in enumerate(wrong):
        fig.add_trace(go.Heatmap(z=x[i, 0], colorscale="gray_r", showscale=False), row=k // cols + 1, col=k % cols + 1)
    fig.update_xaxes(visible=False)
    fig.update_yaxes(visible=False, autorange="reversed")
    fig.update_layout(title=title + " (true -> predicted)", height=150 * rows + 80, width=130 * cols + 60)
    return fig
