"""Lesson 11 / lab 11: the naive matmul's roof at 0.25 FLOP/byte counts the bytes the loads request; a recorded
naive matmul is set beside it, and one above it is explained (the H200 measured 1,360 GFLOP/s over a 1,200 roof)."""

from gpulab import results
from gpulab.lessons import naive_matmul_note


def _row(kernel, size, value):
    return {"kernel": kernel, "size": size, "shape": [size, size, size], "value": value}


def test_a_recorded_naive_matmul_above_its_roof_is_explained(tmp_path):
    rows = [_row("matmul_naive", 1024, 1068.0), _row("matmul_naive", 4096, 1359.6), _row("matmul_tiled", 4096, 9e3)]
    results.record("matmul", rows, "NVIDIA H200", directory=tmp_path, date="2026-12-04", source="test")
    note = naive_matmul_note(directory=tmp_path)
    assert "H200 SXM at 0.25 FLOP/B: roof 1,200 GFLOP/s" in note
    assert "measured 1,360 GFLOP/s, 1.13x the roof (recorded on NVIDIA H200, 2026-12-04 (test))" in note
    assert "counts the bytes the loads request" in note and "the caches (L1, L2) serve re-reads" in note


def test_below_the_roof_no_explanation_and_no_recording_says_so(tmp_path):
    results.record("matmul", [_row("matmul_naive", 2048, 200.0)], "Tesla T4", directory=tmp_path, date="2026-01-01")
    note = naive_matmul_note(directory=tmp_path)
    assert "Tesla T4 at 0.25 FLOP/B: roof 80 GFLOP/s" in note  # 320 GB/s x 0.25
    assert "2.50x the roof" in note and "Above it" in note
    low = tmp_path / "low"
    results.record("matmul", [_row("matmul_naive", 2048, 50.0)], "Tesla T4", directory=low, date="2026-01-01")
    assert "0.62x the roof" in naive_matmul_note(directory=low) and "Above" not in naive_matmul_note(directory=low)
    assert naive_matmul_note(directory=tmp_path / "none").startswith("No recorded naive matmul")
