"""Matmul figures and the tile-size explorer: built from real trace counts and ladder rows, labelled honestly."""

import numpy as np
import plotly.graph_objects as go
import pytest

from gpulab import results
from gpulab.kernels.matmul import TILE, benchmark_ladder, launch_config, matmul_naive_kernel, matmul_tiled_kernel
from gpulab.trace import trace
from gpulab.viz import ladder_rows_percent, loads_per_output_bars, matmul_ladder_chart, read_count_heatmaps
from gpulab.widgets import tile_explorer, tiling_figure, tiling_stats


def test_loads_and_heatmaps_from_trace_counts():
    n = TILE
    rng = np.random.default_rng(0)
    a, b = rng.random((n, n), np.float32), rng.random((n, n), np.float32)
    logs = {}
    for name, kernel in (("naive", matmul_naive_kernel), ("tiled", matmul_tiled_kernel)):
        c = np.zeros((n, n), np.float32)
        logs[name] = trace(kernel, *launch_config(kernel, n, n), a, b, c)
    loads = {k: log.reads() / (n * n) for k, log in logs.items()}
    fig = loads_per_output_bars(loads, shape=(n, n, n))
    assert isinstance(fig, go.Figure)
    assert list(fig.data[0].y) == [2.0 * n, 2.0]
    assert "Global-memory loads" in fig.layout.title.text and fig.layout.yaxis.title.text

    heat = read_count_heatmaps({k: log.per_element("A") for k, log in logs.items()})
    assert len(heat.data) == 2
    assert np.asarray(heat.data[0].z).max() == n and np.asarray(heat.data[1].z).max() == 1
    assert "read 16-16x" in heat.layout.annotations[0].text


def test_ladder_chart_from_rows_and_spec_sheet_fallback(tmp_path, monkeypatch):
    rows = benchmark_ladder(4, 4, 4, repeat=1, kernels=["naive"])
    pct = ladder_rows_percent(rows)
    assert pct[-1][0] == "NumPy" and pct[-1][2] == pytest.approx(100.0)
    fig = matmul_ladder_chart(rows)
    assert fig.layout.meta["source"] == "measured"
    assert "CPU simulator" in fig.layout.title.text  # simulator rows are never passed off as GPU speed

    monkeypatch.setattr(results, "RESULTS_DIR", tmp_path)
    spec = matmul_ladder_chart()
    assert spec.layout.meta["source"] == "spec-sheet" and "spec-sheet" in spec.layout.title.text
    assert "H200" in " ".join(spec.data[0].x)


def test_ladder_chart_uses_a_recording_with_its_label(tmp_path, monkeypatch):
    rows = [
        {"kernel": "naive", "gflops": 100.0, "reference": "cuBLAS", "M": 8, "N": 8, "K": 8},
        {"kernel": "cuBLAS", "gflops": 400.0, "reference": "cuBLAS", "M": 8, "N": 8, "K": 8},
    ]
    results.record("matmul", rows, "Test GPU", directory=tmp_path, date="2026-01-02", source="test")
    monkeypatch.setattr(results, "RESULTS_DIR", tmp_path)
    fig = matmul_ladder_chart()
    assert fig.layout.meta["source"] == "recorded"
    assert "recorded on Test GPU, 2026-01-02" in fig.layout.title.text
    assert list(fig.data[0].y) == [25.0, 100.0]


def test_ladder_chart_reads_bench_kernels_recordings(tmp_path, monkeypatch):
    def row(kernel, size, value, base):
        return {
            "kernel": kernel,
            "section": "matmul",
            "metric": "GFLOP/s",
            "size": size,
            "shape": [size, size + 3, size + 1],
            "value": value,
            "baseline": "cuBLAS (CuPy @)",
            "baseline_value": base,
            "mode": "gpu",
        }

    rows = [
        row("matmul_naive", 256, 10.0, 50.0),
        row("matmul_naive", 1024, 100.0, 1000.0),
        row("matmul_regtiled", 1024, 500.0, 1000.0),
    ]
    results.record("matmul", rows, "Test GPU", directory=tmp_path, date="2026-01-03", source="bench")
    monkeypatch.setattr(results, "RESULTS_DIR", tmp_path)
    fig = matmul_ladder_chart()
    assert list(fig.data[0].x) == ["naive", "regtiled", "cuBLAS"]
    assert list(fig.data[0].y) == [10.0, 50.0, 100.0]
    assert "1024x1027 @ 1027x1025" in fig.layout.title.text and "Test GPU, 2026-01-03" in fig.layout.title.text


def test_ladder_rows_need_a_reference():
    with pytest.raises(ValueError, match="no 'cuBLAS' row"):
        ladder_rows_percent([{"kernel": "naive", "gflops": 1.0}])


def test_tiling_stats_and_limits():
    s = tiling_stats(1024, 16)
    assert s["naive_loads_per_output"] == 2048 and s["tiled_loads_per_output"] == 128
    assert s["shared_bytes_per_block"] == 2 * 16 * 16 * 4 and s["blocks"] == 64 * 64
    assert s["fits_threads"] and s["fits_shared"]
    assert not tiling_stats(1024, 64)["fits_threads"]  # 4096 threads in one block
    assert tiling_stats(100, 32)["tiled_loads_per_output"] == 2 * 4  # ceil(100 / 32) tiles
    assert tiling_figure(s).layout.title.text.startswith("1024x1024")
    with pytest.raises(ValueError):
        tiling_stats(0, 16)


def test_tile_explorer_updates():
    box = tile_explorer(n=256, tile=8)
    (n_slider, tile_dd), info = box.children[0].children, box.children[1]
    assert "512" in info.value  # naive: 2n loads per output
    tile_dd.value = 64
    assert "does not fit" in info.value and "4,096" in info.value
    n_slider.value = 512
    assert "1,024" in info.value
    with pytest.raises(ValueError):
        tile_explorer(tile=3)


def test_tiling_stats_counts_are_whole_numbers():
    s = tiling_stats(1024, 16.0)  # a whole float is read as the number it is
    assert s["threads_per_block"] == 256 and isinstance(s["threads_per_block"], int)
    with pytest.raises(ValueError, match=r"tile must be a whole number >= 1, but got 16.5"):
        tiling_stats(1024, 16.5)


def test_tile_explorer_refuses_an_n_its_slider_cannot_show():
    with pytest.raises(ValueError, match=r"n must be >= 1, but got 0"):
        tile_explorer(n=0)
    with pytest.raises(ValueError, match=r"the explorer's n goes from 16 to 8192"):
        tile_explorer(n=10_000)
