"""bench lessons' ``attention`` section (lesson 12's GPU timings): rows fit the schema lesson 12 reads."""

from __future__ import annotations

from gpulab import results
from gpulab.bench import lessons
from gpulab.viz.perf import speed_bars


def test_attention_rows_are_checked_and_fit_the_section(tmp_path):
    rows = lessons.attention_rows(16, 4, repeat=1)
    assert [r["label"].split(" (")[0] for r in rows] == [
        "simulator mode: fused",
        "simulator mode: naive",
        "simulator mode: NumPy",
    ]
    assert all(r["seconds"] > 0 and r["gflops"] > 0 and (r["n"], r["d"]) == (16, 4) for r in rows)
    results.record("attention", rows, "Test GPU", directory=tmp_path, date="2026-01-09", source="test")
    rec = results.latest("attention", directory=tmp_path)
    got = rec.sections["attention"]
    fig = speed_bars([r["label"] for r in got], [r["seconds"] * 1e3 for r in got], "ms", "attention", rec.label)
    assert list(fig.data[0].x) == [r["label"] for r in rows]
    assert "attention" in lessons.SECTIONS
