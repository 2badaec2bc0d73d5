"""``python -m gpulab bench kernels`` in simulator mode at tiny sizes: schema, labels, HTML, no recording."""

from __future__ import annotations

import json

import numpy as np
import pytest

from gpulab import results, runtime
from gpulab.bench import kernels as bk

ROW_KEYS = {
    "kernel",
    "section",
    "metric",
    "size",
    "shape",
    "work",
    "seconds",
    "spread",
    "value",
    "percent_of_peak",
    "baseline",
    "baseline_value",
    "percent_of_baseline",
    "verified",
    "mode",
    "clock",
    "repeat",
}
CASES = ["copy", "transpose_tiled", "sum_tree", "matmul_tiled"]


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    assert runtime.is_simulator()
    out = tmp_path_factory.mktemp("bench")
    argv = ["--sizes", "64", "300", "--kernels", *CASES, "--json", str(out / "k.json"), "--html", str(out / "k.html")]
    assert bk.main(argv) == 0
    return json.loads((out / "k.json").read_text()), (out / "k.html").read_text()


def test_json_schema_and_simulator_label(report):
    data, _ = report
    assert {"device", "mode", "date", "label", "peak", "sizes", "launch", "rows", "skipped"} <= set(data)
    assert data["mode"] == "simulator" and data["label"] == bk.SIMULATOR_LABEL == "simulator: not GPU performance"
    assert data["peak"] is None and data["sizes"] == [64, 300]
    present = [c for c in CASES if c != "matmul_tiled" or "matmul_tiled" in [x.name for x in bk.cases()]]
    assert sorted({r["kernel"] for r in data["rows"]}) == sorted(present)
    for row in data["rows"]:
        assert set(row) == ROW_KEYS
        assert row["verified"] is True and row["mode"] == "simulator" and row["clock"] == "perf_counter"
        assert row["percent_of_peak"] is None  # no spec-sheet comparison for a CPU simulator
        assert row["seconds"] > 0 and row["value"] == pytest.approx(row["work"] / row["seconds"] / 1e9)
        assert row["baseline"].startswith("NumPy") and row["baseline_value"] > 0
        assert row["percent_of_baseline"] == pytest.approx(100 * row["value"] / row["baseline_value"])
        assert row["metric"] == ("GFLOP/s" if row["kernel"].startswith("matmul") else "GB/s")


def test_work_counts(report):
    data, _ = report
    by = {(r["kernel"], r["size"]): r for r in data["rows"]}
    assert by[("copy", 300)]["work"] == 2 * 300 * 4  # one read and one write per element
    assert by[("sum_tree", 64)]["work"] == 64 * 4  # one read per element
    t = by[("transpose_tiled", 300)]
    assert t["shape"] == [17, 18] and t["work"] == 2 * 17 * 18 * 4
    if ("matmul_tiled", 300) in by:
        M, K, N = by[("matmul_tiled", 300)]["shape"]
        assert by[("matmul_tiled", 300)]["work"] == 2 * M * N * K


def test_html_report_has_charts_table_and_label(report):
    data, page = report
    assert page.startswith("<!DOCTYPE html>") and bk.SIMULATOR_LABEL in page
    assert page.count('class="plotly-graph-div"') == 3  # GB/s, GFLOP/s, % of baseline
    assert page.count("<tr>") == len(data["rows"]) + 1


def test_record_refuses_simulator_results(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(results, "RESULTS_DIR", tmp_path)
    assert bk.main(["--record", "--sizes", "32", "--kernels", "copy"]) == 2
    assert "never recorded" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def test_missing_launcher_is_skipped_with_a_note(monkeypatch):
    real = bk._launcher
    monkeypatch.setattr(bk, "_launcher", lambda name: None if name == "add" else real(name))
    data = bk.measure([32], only=["add", "copy"], log=lambda s: None)
    assert [r["kernel"] for r in data["rows"]] == ["copy"]
    assert data["skipped"] == [{"kernel": "add", "reason": "gpulab.kernels.add does not exist yet"}]


def test_unknown_kernel_name_is_an_error():
    from gpulab.errors import UsageError

    with pytest.raises(UsageError, match="unknown kernel"):
        bk.measure([32], only=["no_such_kernel"], log=lambda s: None)


def test_cli_refuses_bad_values_before_any_work(tmp_path, capsys):
    from gpulab.cli import main

    for argv, match in (
        (["--sizes", "0"], "--sizes: expected an element count >= 1, got 0"),
        (["--repeat", "-1"], "--repeat: expected a whole number >= 1"),
        (["--kernels", "nope"], "unknown kernel(s) nope"),
        (["--json", str(tmp_path)], "is a folder"),
    ):
        assert main(["bench", "kernels", *argv], prog="gpulab") == 2
        err = capsys.readouterr().err
        assert err.count("error:") == 1 and match in err and "Traceback" not in err, err


def test_figures_live_in_viz():
    from gpulab.viz.bench import kernel_figures

    report = bk.measure([32], only=["add", "copy"], log=lambda s: None)
    figs = kernel_figures(report)
    assert figs and all(type(f).__name__ == "Figure" for f in figs)
    assert "<table" in bk.to_html(report)


def test_the_sum_check_accepts_an_atomic_running_total_at_the_largest_gpu_size():
    """``bench kernels`` checks sum_atomic at 2**24 elements on a GPU: one float32 running total, added to in
    the order the warps arrive (emulated: a shuffled order). Its error reaches 1.25e-4 of the sum there, which the
    old rtol=1e-4 refused now and then, stopping the whole benchmark (and gpu-check's bench stage)."""
    from gpulab.bench import cases as bc

    atomic = next(c for c in bk.cases() if c.name == "sum_atomic")
    n = max(bk.default_sizes(atomic, "gpu"))
    assert n == 1 << 24
    x_h = np.random.default_rng(0).random(n, dtype=np.float32)  # what _build_sum draws with seed 0
    order = np.random.default_rng(22).permutation(n)  # an arrival order with an error of 1.25e-4
    total = float(np.cumsum(x_h[order], dtype=np.float32)[-1])
    exact = float(x_h.astype(np.float64).sum())
    assert abs(total - exact) > 1e-4 * exact  # the emulation has teeth: over the old tolerance
    prob = bc._build_sum(lambda x: total, n, np.random.default_rng(0))
    prob.check(total)  # accepted
    with pytest.raises(AssertionError):
        prob.check(total * 1.01)  # a wrong sum is still refused


def test_a_case_that_fails_its_check_loses_none_of_the_others(tmp_path, monkeypatch, capsys):
    """On a lent GPU a whole ``bench kernels`` run is a minute of a 15-minute budget: one case whose check
    fails (or whose kernel raises) is reported under ``failed`` and the exit status is 1, but every other case
    is still measured and written (it used to stop the run and lose them all)."""
    import dataclasses

    from gpulab.bench import cases as bc

    real = bc._build_sum

    def wrong_sum(fn, n, rng):
        prob = real(fn, n, rng)

        def check(got):
            raise AssertionError(f"the sum disagrees with the float64 reference (got {got})")

        return dataclasses.replace(prob, check=check)

    monkeypatch.setattr(bc, "_build_sum", wrong_sum)
    out = tmp_path / "k.json"
    assert bk.main(["--sizes", "64", "100", "--kernels", "copy", "sum_tree", "add", "--json", str(out)]) == 1
    report = json.loads(out.read_text())
    assert sorted({r["kernel"] for r in report["rows"]}) == ["add", "copy"]
    assert len(report["rows"]) == 4  # both sizes of each case that passed
    assert (
        report["failed"] == [{"kernel": "sum_tree", "size": 64, "error": report["failed"][0]["error"]}]
        and "disagrees" in report["failed"][0]["error"]
    )
    assert "1 FAILED (sum_tree)" in capsys.readouterr().out


def test_each_kind_of_case_has_its_own_gpu_sizes():
    """On an H200 each timed call of a case costs about 130 us of launch (2026-12-04): at the old largest size, 2**24
    floats, a copy took 162 us, mostly launch. Memory-bound cases now go to 2**28 elements; the atomic sum (a float32
    running total: at 2**28 it stalls near 2**24 and fails its check) and matmul (naive: seconds at side 16384) stay
    at 2**24 elements at most. The simulator's sizes are unchanged."""
    by = {c.name: c for c in bk.cases()}
    gpu = {name: bk.default_sizes(c, "gpu") for name, c in by.items()}
    streaming = ["copy", "copy_stride4", "transpose_naive", "transpose_tiled", "add", "sum_tree", "sum_warp"]
    for name in [*streaming, "sum_reduce", "softmax_rows"]:
        assert max(gpu[name]) == 1 << 28 and min(gpu[name]) == 1 << 20, (name, gpu[name])
    assert max(gpu["sum_atomic"]) == 1 << 24
    for name in (n for n in by if n.startswith("matmul_")):
        assert max(gpu[name]) == 1 << 24 and by[name].ladder == "matmul"
    assert all(bk.default_sizes(c, "simulator") == [256, 1000] for c in by.values())
    assert by["add"].device_bytes(1 << 28) == 5 << 30  # a, b, out and the baseline's two arrays


def test_a_size_that_does_not_fit_in_device_memory_is_skipped_with_a_line(monkeypatch):
    """The free memory is read before each size (gpu mode; here it is given): a size whose arrays would not fit is
    skipped and named, the sizes that fit are measured."""
    assert bk._free_device_bytes() == (None, "simulator mode: no device memory to read")
    seen = []
    monkeypatch.setattr(bk, "_free_device_bytes", lambda: (seen.append(1) or 20_000, ""))
    lines: list[str] = []
    report = bk.measure([64, 4096], only=["copy", "add"], log=lines.append)
    assert [(r["kernel"], r["size"]) for r in report["rows"]] == [("copy", 64), ("add", 64)]
    skipped = {(s["kernel"], s["size"]): s["reason"] for s in report["skipped"]}
    assert set(skipped) == {("copy", 4096), ("add", 4096)} and seen
    assert skipped[("add", 4096)] == "n=4,096 needs about 0.0 GB of device memory (5 float32 arrays), 0.0 GB is free"
    assert any(line.startswith("  skip copy n=4096: n=4,096 needs") for line in lines)


def test_a_free_memory_or_peak_that_cannot_be_read_is_said_once_with_why(monkeypatch):
    """gpu mode: when CuPy cannot read the free device memory, _free_device_bytes says what failed (it does not
    raise: every size is then tried), and the report's first lines say so, and why a GPU without its own spec row
    has no % of peak (the nearest row named as such)."""
    import types

    def broken():
        raise RuntimeError("cudaErrorNoDevice: no CUDA-capable device is detected\n(details)")

    fake = types.SimpleNamespace(
        get_default_memory_pool=lambda: types.SimpleNamespace(free_all_blocks=lambda: None),
        cuda=types.SimpleNamespace(runtime=types.SimpleNamespace(memGetInfo=broken)),
    )
    monkeypatch.setattr(bk.runtime, "is_gpu", lambda: True)
    monkeypatch.setattr(bk.runtime, "xp", lambda: fake)
    why = "the GPU's free memory could not be read (cuda.runtime.memGetInfo: RuntimeError: cudaErrorNoDevice: no "
    why += "CUDA-capable device is detected)"
    assert bk._free_device_bytes() == (None, why)
    copy = next(c for c in bk.cases() if c.name == "copy")
    assert bk._memory_short(copy, 1 << 20) == ""  # the size is tried
    lines = bk._unread_lines("NVIDIA H200 NVL")
    assert lines[0] == f"device memory: {why}; every size is tried, and one that does not fit fails alone"
    assert lines[1].startswith("% of peak: not shown: NVIDIA H200 NVL: this exact model has no row"), lines
    assert "the nearest row is H200 SXM" in lines[1], lines
    fake.cuda.runtime.memGetInfo = lambda: (7 << 30, 8 << 30)
    assert bk._free_device_bytes() == (7 << 30, "") and bk._unread_lines("NVIDIA H200") == []


def test_the_report_starts_with_the_launch_floor_and_records_it(tmp_path):
    """An empty kernel's launch, given an array as the launchers pass them and given a Numba device array, and a
    launcher on one element, timed as the cases are; the report's line says it, and --record keeps the rows."""
    report = bk.measure([64], only=["copy"], log=lambda s: None)
    launch = report["launch"]
    assert [r["kind"] for r in launch["rows"]] == ["array", "numba", "launcher"]
    # the floor is the cases' own path: a launcher's call (checks, device_args, launch) on one element
    assert all(r["seconds"] > 0 for r in launch["rows"]) and launch["seconds"] == launch["rows"][-1]["seconds"]
    assert launch["line"].startswith("each call costs about ") and "simulator timings" in launch["line"]
    rows = bk.section_rows(report)["launch"]
    assert [r["kind"] for r in rows] == ["array", "numba", "launcher"]
    path = results.record("launch", rows, "Test GPU", directory=tmp_path)
    assert json.loads(path.read_text())["sections"]["launch"][-1]["seconds"] == launch["seconds"]


def test_the_floor_line_names_the_element_count_below_which_a_copy_is_mostly_launch():
    from gpulab.bench.launch import floor_line

    floor = {"rows": [{"kind": "array", "seconds": 130e-6}, {"kind": "numba", "seconds": 65e-6}]}
    copy = {"kernel": "copy", "size": 1 << 28, "value": 2000.0, "baseline_value": 4000.0}
    line = floor_line({"mode": "gpu", "launch": floor, "rows": [copy]})
    # 130 us at 4,000 GB/s moves 520 MB: a copy's 8 bytes per element, 65 million elements
    assert line == (
        "each call costs about 130 us on this machine before any work, timed as the cases are (an empty kernel "
        "given a CuPy array 130 us, given a Numba device array 65 us): below about 65,000,000 elements a copy's time "
        "is mostly launch (4,000 GB/s, the best copy rate measured at n=268,435,456)"
    )
    # with the launcher's row (what every case pays), that is the floor
    with_launcher = {"rows": [*floor["rows"], {"kind": "launcher", "seconds": 200e-6}]}
    line = floor_line({"mode": "gpu", "launch": with_launcher, "rows": [copy]})
    assert line.startswith(
        "each call costs about 200 us on this machine before any work, timed as the cases are "
        "(kernels.copy of 1 element; an empty kernel given a CuPy array 130 us"
    )
    assert "below about 100,000,000 elements" in line
    peak = {"dram_gbps": 4800}
    assert "below about 78,000,000 elements" in floor_line({"mode": "gpu", "launch": floor, "rows": [], "peak": peak})


def test_a_lesson_note_on_a_recording_says_what_a_launch_cost_there():
    """Lessons 02 and 05 show recorded figures in simulator mode: the note says each includes its launch, from the
    recording's launch rows, or for an older recording from its copy times at two sizes."""
    from gpulab.bench.launch import recorded_note
    from gpulab.results import Recording

    def rec(sections):
        return Recording("NVIDIA H200", "2026-12-04", "test", sections, None)  # type: ignore[arg-type]

    copies = [
        {"kernel": "copy", "size": 1 << 20, "seconds": 130.6e-6},
        {"kernel": "copy", "size": 1 << 24, "seconds": 162.3e-6},
    ]
    note = recorded_note(rec({"kernels": copies}))
    assert "took 131 us at n=1,048,576 and 162 us at n=16,777,216, 16x the bytes, so most of each call" in note
    assert "(about 128 us)" in note
    note = recorded_note(rec({"launch": [{"label": "x", "kind": "array", "seconds": 64e-6}], "kernels": copies}))
    assert "an empty kernel took about 64 us per call there" in note


def test_a_size_that_does_not_fit_in_host_memory_is_skipped_after_the_kept_inputs_are_dropped(monkeypatch):
    """At 2**28 elements a case's host arrays are 1 GiB each (Colab has 12.7 GB of RAM): a size whose host arrays
    would not fit what is available is skipped with a line, after the inputs kept for later cases are dropped."""
    available = iter([10_000, 10_000, 10 << 30, 10 << 30])  # short for the size 4096 (twice), then plenty
    monkeypatch.setattr(bk, "_free_host_bytes", lambda: next(available, 10 << 30))
    dropped = []
    monkeypatch.setattr(bk, "clear_draws", lambda: dropped.append(1))
    lines: list[str] = []
    report = bk.measure([4096, 64], only=["copy"], log=lines.append)
    assert [(r["kernel"], r["size"]) for r in report["rows"]] == [("copy", 64)]
    assert report["skipped"][0]["reason"].startswith("n=4,096 needs about 0.0 GB of host memory")
    assert dropped and any(line.startswith("  skip copy n=4096: n=4,096 needs about") for line in lines)
    assert bk._free_host_bytes() is None or bk._free_host_bytes() > 0


def test_the_softmax_case_checks_rows_spread_over_the_matrix_without_a_whole_reference():
    """A whole reference and NumPy's comparison at 2**28 elements took several GiB of host memory: the check reads
    CHECKED_ROWS rows, the first and the last among them, and still catches a wrong row."""
    from gpulab.bench import cases as bc

    prob = bc._build_softmax(lambda x, out: None, 4100 * 4100, np.random.default_rng(0))
    bc.clear_draws()
    rows, cols = prob.shape
    assert rows > bc.CHECKED_ROWS  # only some rows are checked
    x = np.random.default_rng(0).standard_normal((rows, cols), dtype=np.float32)
    e = np.exp(x - x.max(axis=1, keepdims=True))
    good = e / e.sum(axis=1, keepdims=True)
    prob.check(good)
    for bad_row in (0, rows - 1):
        bad = good.copy()
        bad[bad_row] = 1.0 / cols
        with pytest.raises(AssertionError):
            prob.check(bad)
