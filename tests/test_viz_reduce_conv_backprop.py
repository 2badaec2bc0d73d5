"""Figures of lessons 05, 07 and 08: what they draw matches the kernels they explain."""

import numpy as np
import plotly.graph_objects as go
import pytest

from numba import cuda

from gpulab import nn, runtime, viz
from gpulab.kernels import nn_ops
from gpulab.viz.backprop import SAVES, layer_table
from gpulab.viz.conv import im2col_indices


def test_reduction_tree_counts_steps_and_additions():
    fig = viz.reduction_tree(16)
    assert isinstance(fig, go.Figure)
    assert "4 steps" in fig.layout.title.text and "15 additions" in fig.layout.title.text
    assert "sum = 136" in fig.layout.title.text  # 1 + ... + 16
    last = [t for t in fig.data if t.mode == "markers+text"][-1]
    assert last.text == ("136",)  # only thread 0 is active in the last step


def test_reduction_tree_values_and_bad_sizes():
    fig = viz.reduction_tree(values=[0.5, 0.25, 0.125, 0.125])
    assert "sum = 1" in fig.layout.title.text
    for n in (1, 6, 128):
        with pytest.raises(ValueError, match="power of two"):
            viz.reduction_tree(n)


def test_scan_steps_end_in_the_prefix_sums():
    fig = viz.scan_steps(8)
    last = [t for t in fig.data if t.mode == "markers+text"][-1]
    assert [float(v) for v in last.text] == list(np.cumsum(np.arange(1, 9)))
    assert "3 steps" in fig.layout.title.text and "17 additions" in fig.layout.title.text  # 7 + 6 + 4


@cuda.jit
def _shuffle_rows_kernel(x, rows, xor):  # each lane's value after every step of a warp sum (5 steps, 32 lanes)
    lane = cuda.laneid
    v = x[lane]
    o, step = 16, 0
    while o > 0:
        v += cuda.shfl_xor_sync(0xFFFFFFFF, v, o) if xor else cuda.shfl_down_sync(0xFFFFFFFF, v, o)
        rows[step, lane] = v
        o //= 2
        step += 1


@pytest.mark.parametrize("mode", ["down", "xor"])
def test_shuffle_steps_draw_what_a_warp_computes(mode):
    x = np.arange(1, 33, dtype=np.float64)
    fig = viz.shuffle_steps(values=x, mode=mode)
    drawn = [[float(v) for v in t.text] for t in fig.data if t.mode == "markers+text"][1:]
    rows = np.zeros((5, 32))
    if runtime.is_simulator():
        _shuffle_rows_kernel[1, 32](x, rows, mode == "xor")
        np.testing.assert_array_equal(np.array(drawn), rows)  # every lane, every step, as the simulator's warp
    title = fig.layout.title.text
    assert drawn[-1][0] == 528 and "5 steps" in title and "no cuda.syncthreads()" in title
    assert ("every lane holds 528" if mode == "xor" else "lane 0 holds 528") in fig.layout.title.text


def test_shuffle_steps_refuse_what_is_not_a_warp():
    with pytest.raises(ValueError, match="a warp has 32 lanes"):
        viz.shuffle_steps(64)
    with pytest.raises(ValueError, match="power of two"):
        viz.shuffle_steps(12)
    with pytest.raises(ValueError, match='"down"'):
        viz.shuffle_steps(8, mode="up")


def test_conv_window_counts_padding_taps():
    fig = viz.conv_window(6, 7, 3, 0, 0, pad=1)
    assert "4 pixels" in fig.layout.title.text and "5 taps on padding" in fig.layout.title.text
    fig = viz.conv_window(6, 7, 3, 2, 3, pad=1)
    assert "9 pixels" in fig.layout.title.text
    with pytest.raises(ValueError, match="outside"):
        viz.conv_window(6, 7, 3, 6, 0)


@pytest.mark.parametrize("stride,pad", [(1, 1), (2, 0), (2, 1)])
def test_im2col_indices_match_the_kernel(stride, pad):
    c, h, w, k = 2, 5, 4, 3
    x = (np.arange(c * h * w, dtype=np.float32) + 1).reshape(1, c, h, w)
    cols, _, _ = nn_ops.im2col(x, k, k, stride, pad)
    idx = im2col_indices(c, h, w, k, stride, pad)
    assert np.array_equal(np.where(idx >= 0, x.ravel()[np.maximum(idx, 0)], 0), np.asarray(cols))


def test_im2col_layout_title_states_the_blow_up():
    fig = viz.im2col_layout(2, 4, 4, 3)
    assert "16 x 18 = 288 values for 32 inputs (9.0x)" in fig.layout.title.text
    assert "copied up to 9 times" in fig.layout.title.text


def test_backward_flow_follows_the_model():
    layers = layer_table(nn.mnist_cnn(image_size=8, channels=(2, 3), hidden=6), (1, 8, 8))
    assert [n for n, _ in layers][:3] == ["Conv2d", "ReLU", "MaxPool2d"] and layers[-1][1] == (1, 10)
    fig = viz.backward_flow(layers, (1, 8, 8))
    assert "11 layers, 4 with parameter gradients" in fig.layout.title.text
    caches = next(t for t in fig.data if t.name.startswith("cache")).customdata
    assert len(caches) == len(layers) + 1 and any("arg: which input won" in c for c in caches)
    assert set(SAVES) >= {n for n, _ in layers}
