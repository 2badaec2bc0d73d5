"""Convolution as pictures (lesson 07): the window under one output, and the im2col matrix.

* :func:`conv_window` shows an H x W input with its zero padding, the k x k window that output
  ``(i, j)`` reads (placed at ``(i*stride - pad, j*stride - pad)``), and that output in the
  output grid.
* :func:`im2col_layout` shows the ``cols`` matrix of ``kernels.nn_ops.im2col`` for one image: one row
  per output position ``(i, j)``, one column per tap ``(a, b, c)`` (channels fastest), each cell
  coloured by the input pixel it copies (grey: padding, a zero). The same pixel appears in up to k²
  rows, which is why ``cols`` is about k² times larger than the input.
"""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from ..kernels._launch import conv_out_size

__all__ = ["conv_window", "im2col_indices", "im2col_layout"]

MAX_CELLS = 20000


def _check(h: int, w: int, k: int, stride: int, pad: int) -> tuple[int, int]:
    if min(h, w, k, stride) < 1 or pad < 0:
        raise ValueError(
            f"need H, W, k, stride >= 1 and pad >= 0, got H={h}, W={w}, k={k}, stride={stride}, pad={pad}."
        )
    ho, wo = conv_out_size(h, k, stride, pad), conv_out_size(w, k, stride, pad)
    if ho < 1 or wo < 1:
        raise ValueError(
            f"a {k}x{k} window does not fit a {h}x{w} input with pad={pad}: use a smaller k or more padding."
        )
    return ho, wo


def conv_window(
    h: int = 6, w: int = 7, k: int = 3, i: int = 0, j: int = 0, *, stride: int = 1, pad: int = 1
) -> go.Figure:
    """Left: the padded input; the window of output ``(i, j)`` outlined, its taps on padding marked.
    Right: the output grid with ``(i, j)`` highlighted."""
    ho, wo = _check(h, w, k, stride, pad)
    if not (0 <= i < ho and 0 <= j < wo):
        raise ValueError(f"output ({i}, {j}) is outside the {ho}x{wo} output grid.")
    hp, wp = h + 2 * pad, w + 2 * pad
    z = np.zeros((hp, wp))
    z[pad : pad + h, pad : pad + w] = 1  # 0: padding, 1: input pixel
    r0, c0 = i * stride, j * stride  # window's top-left in padded coordinates
    z[r0 : r0 + k, c0 : c0 + k] += 2  # 2: window on padding, 3: window on a pixel
    rows = np.arange(hp)[:, None] - pad
    cols = np.arange(wp)[None, :] - pad
    hover = np.where(
        (rows >= 0) & (rows < h) & (cols >= 0) & (cols < w),
        "x[" + rows.astype(str) + ", " + cols.astype(str) + "]",
        "padding (reads 0)",
    )
    scale = [
        [0, "#eeeeee"],
        [0.249, "#eeeeee"],
        [0.25, "#9ecae9"],
        [0.499, "#9ecae9"],
        [0.5, "#bdbdbd"],
        [0.749, "#bdbdbd"],
        [0.75, "#f58518"],
        [1, "#f58518"],
    ]
    fig = make_subplots(
        rows=1,
        cols=2,
        column_widths=[wp, wo],
        horizontal_spacing=0.08,
        subplot_titles=(f"input {h}x{w} with padding {pad}", f"output {ho}x{wo}"),
    )
    fig.add_trace(
        go.Heatmap(
            z=z,
            zmin=0,
            zmax=3,
            colorscale=scale,
            showscale=False,
            xgap=1,
            ygap=1,
            x=np.arange(wp) - pad,
            y=np.arange(hp) - pad,
            customdata=hover,
            hovertemplate="%{customdata}<extra></extra>",
        ),
        1,
        1,
    )
    oz = np.zeros((ho, wo))
    oz[i, j] = 1
    fig.add_trace(
        go.Heatmap(
            z=oz,
            zmin=0,
            zmax=1,
            colorscale=[[0, "#9ecae9"], [1, "#f58518"]],
            showscale=False,
            xgap=1,
            ygap=1,
            hovertemplate="out[%{y}, %{x}]<extra></extra>",
        ),
        1,
        2,
    )
    on_pad = int(np.sum(z[r0 : r0 + k, c0 : c0 + k] == 2))
    for c in (1, 2):
        fig.update_yaxes(autorange="reversed", scaleanchor=f"x{'' if c == 1 else 2}", row=1, col=c)
    fig.update_xaxes(title_text="column", row=1, col=1)
    fig.update_xaxes(title_text="j", row=1, col=2)
    fig.update_yaxes(title_text="row", row=1, col=1)
    fig.update_layout(
        title=(
            f"out[{i}, {j}] reads the {k}x{k} window at rows {r0 - pad}..{r0 - pad + k - 1}, columns "
            f"{c0 - pad}..{c0 - pad + k - 1}: {k * k - on_pad} pixels (orange), {on_pad} taps on padding (grey)"
        ),
        template="plotly_white",
        height=380,
    )
    return fig


def im2col_indices(c: int, h: int, w: int, k: int, stride: int = 1, pad: int = 0) -> np.ndarray:
    """For one image: ``idx[r, q]`` = the flat input index ``(ch*H + row)*W + col`` that ``cols[r, q]``
    copies, or -1 for padding. Rows ``r = i*Wo + j``; columns ``q = (a*k + b)*C + ch``."""
    ho, wo = _check(h, w, k, stride, pad)
    idx = np.full((ho * wo, k * k * c), -1, dtype=np.int64)
    for i in range(ho):
        for j in range(wo):
            for a in range(k):
                for b in range(k):
                    for ch in range(c):
                        y, x = i * stride + a - pad, j * stride + b - pad
                        if 0 <= y < h and 0 <= x < w:
                            idx[i * wo + j, (a * k + b) * c + ch] = (ch * h + y) * w + x
    return idx


def im2col_layout(c: int = 2, h: int = 4, w: int = 4, k: int = 3, *, stride: int = 1, pad: int = 1) -> go.Figure:
    """The im2col matrix of one C x H x W image as a heatmap coloured by source pixel."""
    idx = im2col_indices(c, h, w, k, stride, pad)
    if idx.size > MAX_CELLS:
        raise ValueError(
            f"cols would have {idx.size:,} cells, too many to draw (at most {MAX_CELLS:,}): use a smaller image."
        )
    ho, wo = _check(h, w, k, stride, pad)
    ch = np.where(idx >= 0, idx // (h * w), -1)
    yy = np.where(idx >= 0, (idx // w) % h, -1)
    xx = np.where(idx >= 0, idx % w, -1)
    text = np.where(idx >= 0, "x[" + ch.astype(str) + ", " + yy.astype(str) + ", " + xx.astype(str) + "]", "padding: 0")
    col_labels = [f"a={q // (k * c)} b={(q // c) % k} c={q % c}" for q in range(k * k * c)]
    row_labels = [f"out ({r // wo}, {r % wo})" for r in range(ho * wo)]
    z = np.where(idx >= 0, idx, np.nan).astype(float)
    fig = go.Figure(
        go.Heatmap(
            z=z,
            x=col_labels,
            y=row_labels,
            colorscale="Viridis",
            xgap=1,
            ygap=1,
            colorbar=dict(title="flat input<br>index"),
            customdata=text,
            hovertemplate="row %{y}, column %{x}<br>copies %{customdata}<extra></extra>",
        )
    )
    copies = np.bincount(idx[idx >= 0], minlength=c * h * w)
    fig.update_layout(
        title=(
            f"im2col of a {c}x{h}x{w} image, {k}x{k} window, stride {stride}, pad {pad}: cols is "
            f"{idx.shape[0]} x {idx.shape[1]} = {idx.size} values for {c * h * w} inputs "
            f"({idx.size / (c * h * w):.1f}x); each pixel copied up to {int(np.max(copies))} times; grey = padding"
        ),
        xaxis_title="column q = (a, b, c): tap row, tap column, channel (fastest)",
        yaxis_title="row r = output position (i, j)",
        yaxis_autorange="reversed",
        template="plotly_white",
        height=min(900, 200 + 18 * idx.shape[0]),
        plot_bgcolor="#dddddd",
    )
    return fig
