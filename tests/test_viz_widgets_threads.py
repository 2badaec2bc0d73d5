"""Thread maps, memory figures, speed charts and the launch explorers: titled, labelled, responsive."""

import numpy as np
import pytest

from gpulab.kernels import copy_kernel, strided_copy_kernel
from gpulab.timing import PEAKS
from gpulab.trace import trace
from gpulab.viz import launch_summary, roofline, speed_bars, speed_lines, thread_map, thread_map_2d, warp_access
from gpulab.widgets import launch_explorer, launch_explorer_2d


def _labelled(fig):
    assert fig.layout.title.text
    assert fig.layout.xaxis.title.text is not None and fig.layout.yaxis.title.text


def test_thread_map_marks_idle_threads():
    fig = thread_map(100, 32)
    _labelled(fig)
    z = np.asarray(fig.data[0].z)
    assert z.shape == (4, 32)
    assert (z == 2).sum() == 28 == launch_summary(100, 32)["idle"]
    assert "4 blocks" in fig.layout.title.text
    assert (np.asarray(thread_map(1, 32).data[0].z) == 2).sum() == 31


def test_thread_map_2d_counts_idle_threads():
    fig = thread_map_2d((20, 40), (16, 16))
    _labelled(fig)
    z = np.asarray(fig.data[0].z)
    assert z.shape == (32, 48) and (z == 2).sum() == 32 * 48 - 20 * 40


def test_thread_map_rejects_bad_sizes():
    with pytest.raises(ValueError, match="at least 1"):
        thread_map(0, 32)
    with pytest.raises(ValueError, match="too many"):
        thread_map(10**6, 256)


def test_warp_access_counts_sectors():
    src = np.arange(32 * 8, dtype=np.float32)
    out = np.zeros(32, np.float32)
    strided = trace(strided_copy_kernel, 1, 32, src, out, 8, names=("src", "out"))
    fig = warp_access(strided, "src")
    _labelled(fig)
    assert "32 sectors" in fig.layout.title.text and "12% efficiency" in fig.layout.title.text
    coalesced = trace(copy_kernel, 1, 32, src[:32].copy(), out, names=("src", "out"))
    assert "4 sectors" in warp_access(coalesced, "src").layout.title.text
    with pytest.raises(ValueError, match="no array named"):
        warp_access(coalesced, "nope")


def test_roofline_uses_spec_sheet_peaks():
    fig = roofline("T4", [{"label": "add", "intensity": 1 / 12}, {"label": "mine", "intensity": 4, "gflops": 500}])
    _labelled(fig)
    roof = fig.data[0]
    assert max(roof.y) == pytest.approx(PEAKS["T4"].fp32_tflops * 1e3)
    bound = [d for d in fig.data if d.name.startswith("add")][0]
    assert bound.y[0] == pytest.approx(PEAKS["T4"].dram_gbps / 12)
    assert fig.layout.xaxis.type == "log" and fig.layout.yaxis.type == "log"
    with pytest.raises(ValueError, match="known devices"):
        roofline("Voodoo2")


def test_speed_charts():
    fig = speed_bars(["python", "numpy"], [0.01, 50.0], "GFLOP/s", "Matmul speed", "measured on this CPU")
    _labelled(fig)
    assert fig.layout.yaxis.type == "log" and "GFLOP/s" in fig.layout.yaxis.title.text
    assert fig.layout.annotations[0].text == "measured on this CPU"
    with pytest.raises(ValueError, match="log"):
        speed_bars(["a"], [0.0], "GB/s", "t")
    lines = speed_lines([1, 2, 4], {"copy": [1, 2, 3]}, "GB/s", "size (MB)", "Copy bandwidth")
    _labelled(lines)


def test_launch_explorer_responds_to_changes():
    w = launch_explorer(n=100, threads_per_block=32)
    assert w.summary["blocks"] == 4 and "28 idle" in w.info.value
    w.n.value = 33
    assert w.summary == {"n": 33, "threads_per_block": 32, "blocks": 2, "threads": 64, "idle": 31}
    assert "33 elements" in w.figure.layout.title.text
    w.threads.value = 64
    assert w.summary["blocks"] == 1 and w.summary["idle"] == 31


def test_launch_explorer_2d_responds_to_changes():
    w = launch_explorer_2d(rows=20, cols=40, block=(16, 16))
    assert w.summary["grid"] == (3, 2)
    w.block.value = (32, 8)
    assert w.summary["grid"] == (2, 3) and w.summary["idle"] == 2 * 3 * 256 - 800
    w.rows.value = 24
    assert w.summary["idle"] == 2 * 3 * 256 - 960
    _labelled(w.figure)
