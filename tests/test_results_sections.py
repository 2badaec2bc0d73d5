"""Every recorded-results section a lesson reads is produced by ``make gpu-check`` in the schema it reads.

Static side: each ``results.latest("X")`` in the notebooks, lab solutions and library names a section of
``gpulab.results.SECTIONS``, its keys are among the section's fields, and gpu-check runs its producer.
Dynamic side: each producer that runs in simulator mode builds rows at tiny size, they are recorded into a
temporary folder (never ``src/gpulab/results/``) and fed to the consumer (the lesson's keys and ``viz``).
"""

from __future__ import annotations

import importlib
import json
import re
import sys
from pathlib import Path

import nbformat
import numpy as np
import pytest

from gpulab import data, gpucheck_plan, results
from gpulab.bench import cnn as bench_cnn
from gpulab.bench import kernels as bench_kernels
from gpulab.bench import lessons
from gpulab.viz.matmul import matmul_ladder_chart
from gpulab.viz.perf import speed_bars
from gpulab.viz.precision import precision_bars

ROOT = Path(__file__).resolve().parents[1]
LATEST = re.compile(r"""latest\(\s*["'](\w+)["']""")
ROW_KEY = re.compile(r"""\b(?:row|r)\[["'](\w+)["']\]""")


def _readers() -> dict[str, list[tuple[str, str]]]:
    """``{section: [(where, code after the latest() call), ...]}`` over notebooks, lab solutions and library."""
    found: dict[str, list[tuple[str, str]]] = {}
    sources = []
    for nb_path in sorted(ROOT.glob("notebooks/*.ipynb")) + sorted(ROOT.glob("labs/solutions/*.ipynb")):
        nb = nbformat.read(nb_path, as_version=4)
        sources += [(nb_path.name, c.source) for c in nb.cells if c.cell_type == "code"]
    sources += [
        (str(p.relative_to(ROOT)), p.read_text())
        for p in sorted((ROOT / "src/gpulab").rglob("*.py"))
        if p.name != "results.py"
    ]
    for where, src in sources:
        for m in LATEST.finditer(src):
            found.setdefault(m.group(1), []).append((where, src[m.end() :]))
    return found


def _note_keys(section: str) -> set[str]:
    """Row keys the notebooks read (``row["x"]`` / ``r["x"]``) after loading ``section``."""
    return {k for where, code in _readers().get(section, []) if where.endswith(".ipynb") for k in ROW_KEY.findall(code)}


def test_every_section_read_has_a_producer_and_the_fields_read():
    readers = _readers()
    assert {"why_gpus", "memory", "reduce", "matmul", "matmul_precision", "conv", "cnn_training"} <= set(readers)
    for section in readers:
        who = [w for w, _ in readers[section]]
        assert section in results.SECTIONS, f"{section} is read by {who} but has no producer"
        missing = _note_keys(section) - set(results.SECTIONS[section].fields)
        assert not missing, f"notebooks read {missing} from {section!r} rows, which SECTIONS does not promise"


def test_every_producer_exists_and_gpu_check_runs_it(tmp_path):
    commands = [" ".join(cmd[1:]) for _, cmd in gpucheck_plan.stages(Path("/venv/bin/python"), tmp_path)]
    for section, spec in results.SECTIONS.items():
        module, func = spec.builder.split(":")
        assert callable(getattr(importlib.import_module(module), func)), spec.builder
        suite = spec.producer.removeprefix("python -m gpulab bench ").split()[0]
        assert any(f"-m gpulab bench {suite} --record" in c for c in commands), f"gpu-check never records {section}"


def test_record_rejects_unknown_sections_and_rows_missing_fields(tmp_path):
    with pytest.raises(ValueError, match="unknown results section 'cnn_speed'"):
        results.record("cnn_speed", [{"x": 1}], "Test GPU", directory=tmp_path)
    with pytest.raises(ValueError, match=r"lacks \['gbps'\]"):
        results.record("reduce", [{"label": "tree"}], "Test GPU", directory=tmp_path)
    assert not list(tmp_path.glob("*.json"))


def test_a_file_of_several_commands_names_each_commands_sections(tmp_path):
    """gpu-check's bench kernels, lessons and cnn write one file per device and day: the first H200 file (2026-12-04)
    said "gpulab bench kernels" under lesson 12's attention timings, which bench lessons had written."""
    row = {"label": "copy", "gbps": 1.0}
    results.record("memory", [row], "Test GPU", source="gpulab bench kernels", directory=tmp_path, date="2026-12-04")
    att = {"label": "fused", "seconds": 1e-3, "gflops": 1.0, "n": 64, "d": 16}
    path = results.record(
        "attention", [att], "Test GPU", source="gpulab bench lessons", directory=tmp_path, date="2026-12-04"
    )
    rec = results.latest("attention", directory=tmp_path)  # labelled with the command that wrote that section
    assert rec.label == "recorded on Test GPU, 2026-12-04 (gpulab bench lessons)"
    assert results.latest("memory", directory=tmp_path).label.endswith("(gpulab bench kernels)")
    assert json.loads(path.read_text())["sources"] == {
        "memory": "gpulab bench kernels",
        "attention": "gpulab bench lessons",
    }
    results.record("memory", [row], "Test GPU", source="gpulab bench kernels", directory=tmp_path, date="2026-12-04")
    whole = results.list_recordings(tmp_path)[0]  # the file as a whole names both commands (sections sorted)
    assert whole.label.endswith("(gpulab bench lessons + gpulab bench kernels)"), whole.label
    assert results.latest("memory", directory=tmp_path).label.endswith("(gpulab bench kernels)")


def _bars(section: str, rec: results.Recording):
    """What the lesson draws from a recording: bars of its label key against its value key."""
    keys = _note_keys(section)
    label_key = next(k for k in ("label", "name", "backend") if k in keys)
    value_key = next(k for k in ("gflops", "gbps", "images_per_second") if k in keys)
    rows = rec.sections[section]
    fig = speed_bars([r[label_key] for r in rows], [r[value_key] for r in rows], "units", section, rec.label)
    assert list(fig.data[0].x) == [r[label_key] for r in rows] and all(v > 0 for v in fig.data[0].y)
    return fig


def test_bench_kernels_sections_feed_lessons_02_03_04_05(tmp_path, monkeypatch):
    only = [
        "copy",
        "copy_stride4",
        "transpose_naive",
        "transpose_tiled",
        "sum_atomic",
        "sum_tree",
        "sum_reduce",
        "matmul_naive",
    ]
    report = bench_kernels.measure([64], only=only, repeat=1, log=lambda s: None)
    sections = bench_kernels.section_rows(report, bench_kernels.transfer_rows(4096, repeat=1))
    assert set(sections) == {"kernels", "matmul", "memory", "reduce", "launch"}
    for name, rows in sections.items():
        results.record(name, rows, "Test GPU", directory=tmp_path, date="2026-01-05", source="test")
    mem = results.latest("memory", directory=tmp_path)
    assert [r["label"] for r in mem.sections["memory"]][:2] == ["host -> device", "device -> host"]
    assert "NumPy copy (CPU) (n=64)" in [r["label"] for r in mem.sections["memory"]]
    _bars("memory", mem)
    red = results.latest("reduce", directory=tmp_path)
    assert [r["label"] for r in red.sections["reduce"]] == ["atomic (n=64)", "tree (n=64)", "cuda.reduce (n=64)"]
    _bars("reduce", red)
    monkeypatch.setattr(results, "RESULTS_DIR", tmp_path)
    monkeypatch.setenv("GPULAB_RESULTS_DIR", str(tmp_path / "no-user-recordings"))
    fig = matmul_ladder_chart()
    assert fig.layout.meta["source"] == "recorded" and list(fig.data[0].x) == ["naive", "NumPy matmul (CPU)"]


def test_lessons_suite_feeds_lessons_00_07_09(tmp_path):
    why = lessons.why_gpus_rows(32, repeat=1, xp=np)
    assert [r["label"] for r in why] == ["NumPy FP32 (CPU) (n=32)", "NumPy FP16 (CPU) (n=32)"]
    conv = lessons.conv_rows((1, 2, 5, 6, 2), repeat=1)
    assert [r["name"] for r in conv][:2] == ["direct kernel", "im2col + lab GEMM"]
    rng = np.random.default_rng(0)
    ds = data.Dataset(
        "random",
        rng.random((48, 1, 8, 8), dtype=np.float32),
        rng.integers(0, 10, 48),
        rng.random((16, 1, 8, 8), dtype=np.float32),
        rng.integers(0, 10, 16),
        tuple(map(str, range(10))),
        "test",
    )
    cnn = lessons.cnn_training_rows(
        ds, ["numpy"], n_train=48, n_test=16, epochs=1, batch_size=16, channels=(2, 4), hidden=8
    )
    assert cnn[0]["backend"] == "CPU (NumPy)" and cnn[0]["n_train"] == 48
    for section, rows in (("why_gpus", why), ("conv", conv), ("cnn_training", cnn)):
        results.record(section, rows, "Test GPU", directory=tmp_path, date="2026-01-06", source="test")
        _bars(section, results.latest(section, directory=tmp_path))


def test_matmul_precision_schema_is_what_precision_bars_reads(tmp_path):
    # precision_benchmark needs CuPy (gpu mode): check that precision_bars needs only the declared fields.
    fields = results.SECTIONS["matmul_precision"].fields
    rows = [{f: 1.0 for f in fields} | {"precision": p, "n": 8} for p in ("fp32", "tf32", "fp16")]
    results.record("matmul_precision", rows, "Test GPU", directory=tmp_path, date="2026-01-07", source="test")
    rec = results.latest("matmul_precision", directory=tmp_path)
    fig = precision_bars(rec.sections["matmul_precision"], rec.label)
    assert list(fig.data[0].x) == ["FP32", "TF32", "FP16"] and "Test GPU" in fig.layout.title.text


def test_bench_cnn_json_is_a_valid_cnn_section(tmp_path):
    out = tmp_path / "cnn.json"
    assert (
        bench_cnn.main(
            [
                "--steps",
                "1",
                "--warmup",
                "0",
                "--rounds",
                "1",
                "--batch-size",
                "4",
                "--channels",
                "2,4",
                "--hidden",
                "8",
                "--threads",
                "1",
                "--json",
                str(out),
            ]
        )
        == 0
    )
    results.check_rows("cnn", json.loads(out.read_text()))


def test_every_committed_recording_fits_sections_and_names_each_sections_source():
    """The recordings shipped in src/gpulab/results/ pass the schema a producer's rows must (results.check_rows), and
    each section names what wrote it: the H200's gemm_shapes came from a diagnostic script, not from gpu-check."""
    recs = results.list_recordings(results.RESULTS_DIR)
    assert recs
    for rec in recs:
        for section, rows in rec.sections.items():
            results.check_rows(section, rows)
            assert rec.sources.get(section), f"{rec.path.name}: section {section!r} names no source"
    h200 = results.latest("gemm_shapes", device="NVIDIA H200", directory=results.RESULTS_DIR)
    assert h200 is not None and h200.source == (  # the script timed the shapes; the blocks were counted later
        "diagnostic script run once on this GPU on 2026-12-04, outside gpu-check; timing.benchmark medians of 10; "
        "blocks computed afterwards from the shapes, not recorded by the script"
    )
    conv1 = {r["kernel"]: r for r in h200.sections["gemm_shapes"] if (r["M"], r["K"], r["N"]) == (32, 100_352, 9)}
    assert {k: (r.get("blocks"), r["seconds"]) for k, r in conv1.items()} == {
        "regtiled": (1, 9.686e-3),
        "tiled": (2, 2.897e-3),
        "cupy": (None, 6.4e-5),
    }


def test_gemm_shapes_rows_feed_lesson_09(tmp_path):
    """bench lessons' gemm_shapes at a tiny size in the simulator: each kernel's product checked, rows in the schema,
    recorded and read back by lesson 09's note."""
    from gpulab.bench import gemm_shapes
    from gpulab.lessons import ex_09_splitk

    rows = gemm_shapes.gemm_shapes_rows()
    assert [r["kernel"] for r in rows] == ["regtiled", "tiled", "splitk", "numpy"]
    assert [r.get("blocks") for r in rows] == [1, 2, 6, None] and rows[2]["slices"] == 3
    assert "gemm_shapes" in lessons.SECTIONS
    results.record("gemm_shapes", rows, "Test GPU", directory=tmp_path, date="2026-01-10", source="test")
    note = ex_09_splitk.recorded_gemm_note((20, 70, 9), directory=tmp_path)
    assert note.startswith("(20 x 70) @ (70 x 9) alone, recorded on Test GPU, 2026-01-10 (test), not this run: the")
    assert "split-K" in note and "(6 blocks, 3 slices)" in note


@pytest.mark.parametrize("suite", [bench_kernels, lessons, bench_cnn])
def test_simulator_results_are_never_recorded(suite, capsys):
    before = sorted(results.RESULTS_DIR.glob("*.json")) if results.RESULTS_DIR.exists() else []
    assert suite.main(["--record"]) == 2
    assert "gpu mode" in capsys.readouterr().err
    after = sorted(results.RESULTS_DIR.glob("*.json")) if results.RESULTS_DIR.exists() else []
    assert after == before


# ------------------------------------------------------------ issue 16: the user's data folder


def test_record_goes_to_the_user_data_folder_not_the_package(tmp_path, monkeypatch):
    monkeypatch.delenv("GPULAB_RESULTS_DIR", raising=False)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    if sys.platform in ("win32", "darwin"):
        pytest.skip("XDG_DATA_HOME is the Linux convention")
    assert results.user_results_dir() == tmp_path / "xdg" / "gpulab" / "results"
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    monkeypatch.setattr(results, "RESULTS_DIR", pkg)
    path = results.record("reduce", [{"label": "tree", "gbps": 1.0}], "Test GPU", date="2026-01-08", source="t")
    assert path.parent == tmp_path / "xdg" / "gpulab" / "results" and not list(pkg.iterdir())
    # read from both: a shipped recording in the package and the user's own
    results.record(
        "conv",
        [{"name": "direct", "gflops": 1.0, "seconds": 1.0}],
        "Shipped GPU",
        directory=pkg,
        date="2026-01-01",
        source="package",
    )
    assert {r.device for r in results.list_recordings()} == {"Test GPU", "Shipped GPU"}
    assert results.latest("reduce").device == "Test GPU" and results.latest("conv").device == "Shipped GPU"
    monkeypatch.setenv("GPULAB_RESULTS_DIR", str(tmp_path / "explicit"))
    assert results.user_results_dir() == tmp_path / "explicit"


# ------------------------------------------------------------ lesson 02: copies and streams


def test_streams_rows_feed_lesson_02(tmp_path):
    # The row builder runs in the simulator too (never recorded there: bench lessons skips the section), so the rows
    # the lesson reads are built by the real code path at a tiny size: copies, pipelines (results checked), model.
    from gpulab.bench.streams import streams_rows

    rows = streams_rows(1024, 256, repeat=1)
    assert [r["kind"] for r in rows] == ["copy"] * 3 + ["pipeline"] * 3 + ["overlap"] + ["model"] * 2
    assert all(r["label"].startswith("simulator mode: ") for r in rows)
    assert [r.get("streams") for r in rows[3:]] == [1, 4, 4, None, 1, 4] and rows[3]["bytes"] == 3 * 1024 * 4
    overlap = rows[6]
    assert overlap["bytes"] == 3 * 256 * 4 and overlap["alone_seconds"] > 0
    results.record("streams", rows, "Test GPU", directory=tmp_path, date="2026-01-09", source="test")
    rec = results.latest("streams", directory=tmp_path)
    # what lesson 02 draws in simulator mode: the copies as bars, the other rows as lines
    copies = [r for r in rec.sections["streams"] if r["kind"] == "copy"]
    fig = speed_bars([r["label"] for r in copies], [r["gbps"] for r in copies], "GB/s", "copies", rec.label)
    assert (
        len(fig.data[0].x) == 3 and all(v > 0 for v in fig.data[0].y) and "Test GPU" in fig.layout.annotations[0].text
    )
    assert _note_keys("streams") == {"kind", "label", "gbps", "bytes", "seconds"}


def _fake_benchmark(times: dict[str, float]):
    """timing.benchmark's stand-in: calls ``fn`` once (so the results are still checked) and reports the time
    given for its label (0.05 s for the others)."""
    from gpulab import timing

    def fake(fn, *args, warmup=1, repeat=5, label="", **kwargs):
        fn(*args, **kwargs)
        return timing.BenchResult((times.get(label, 0.05),), "gpu", "fake", label)

    return fake


@pytest.mark.parametrize("engines, four_ms", [(None, 11), (2, 11), (4, 11), (1, 16)])
def test_streams_model_rows_come_from_the_chunk_times(monkeypatch, engines, four_ms):
    # The lesson's numbers as fake chunk times (2 ms in, 1 ms kernel, 2 ms out, 4 chunks): 20 ms on one stream,
    # 11 ms on four with two copy engines, 16 with one (gpulab.streams' rules).
    from gpulab import timing
    from gpulab.bench import streams as bench_streams

    fake = {"pageable -> device": 4e-6, "pinned -> device": 1e-6, "device -> pinned": 2e-6}
    fake |= {"chunk copy in": 2e-3, "chunk kernel": 1e-3, "chunk copy out": 2e-3}
    monkeypatch.setattr(timing, "benchmark", _fake_benchmark(fake))
    monkeypatch.setattr(bench_streams, "_copy_engines", lambda: engines)
    rows = bench_streams.streams_rows(1024, 256, repeat=1)
    results.check_rows("streams", rows)
    gbps = {r["label"].removeprefix("simulator mode: "): r["gbps"] for r in rows if r["kind"] == "copy"}
    assert gbps == {
        "pageable -> device": 4096 / 4e-6 / 1e9,
        "pinned -> device": 4096 / 1e-6 / 1e9,
        "device -> pinned": 4096 / 2e-6 / 1e9,
    }
    model = [r for r in rows if r["kind"] == "model"]
    assert [round(r["seconds"] * 1e3, 9) for r in model] == [20, four_ms]
    assert model[1]["copy_engines"] == (1 if engines == 1 else 2) and model[1]["async_engine_count"] == engines
    assert model[0]["chunk_h2d_seconds"] == 2e-3 and model[0]["chunks"] == 4
    assert [r["seconds"] for r in rows if r["kind"] == "pipeline"] == [0.05] * 3


def test_streams_compare_rows_sets_the_pipelines_against_the_model(monkeypatch):
    # The lesson's numbers (2 ms in, 1 ms kernel, 2 ms out, 4 chunks): measured as the model says, they agree; the
    # pipeline that allocates inside its loop is not the one compared.
    from gpulab import timing
    from gpulab.bench import streams as bench_streams

    fake = {"chunk copy in": 2e-3, "chunk kernel": 1e-3, "chunk copy out": 2e-3}
    fake |= {"pipelined saxpy, 1 stream": 20e-3, "pipelined saxpy, 4 streams": 11e-3}
    monkeypatch.setattr(timing, "benchmark", _fake_benchmark(fake))
    monkeypatch.setattr(bench_streams, "_copy_engines", lambda: 2)
    rows = bench_streams.streams_rows(1024, 256, repeat=1)
    assert [r["allocating"] for r in rows if r["kind"] == "pipeline"] == [False, False, True]
    lines = bench_streams.compare_rows(rows)
    assert lines[:2] == [
        "1 stream: measured 20.00 ms, the model 20.00 ms (1.00x the model)",
        "4 streams: measured 11.00 ms, the model 11.00 ms (1.00x the model)",
    ]
    assert lines[2].startswith("Measured and model agree")
    assert lines[3].startswith("one chunk's copy in and copy out: 4.000 ms one after the other")  # the overlap row
    assert bench_streams.compare_rows([r for r in rows if r["kind"] != "model"]) == []


@pytest.mark.parametrize(
    "at_once_ms, says",
    [
        (2.0, "about the longer one alone, so the two directions ran at the same time."),
        (3.9, "about their sum, so on this machine the two directions did not run at the same time."),
        (3.0, "between the longer one and their sum, so the two directions overlapped in part."),
    ],
)
def test_streams_overlap_row_says_whether_a_copy_in_and_a_copy_out_ran_at_once(monkeypatch, at_once_ms, says):
    """What would tell why 4 streams were no faster than 1 on the H200 (2026-12-04): one chunk's copy in (2 ms
    alone) and copy out (2 ms alone) issued together on two streams."""
    from gpulab import timing
    from gpulab.bench import streams as bench_streams

    fake = {"chunk copy in": 2e-3, "chunk kernel": 1e-3, "chunk copy out": 2e-3}
    fake |= {"copy in and copy out at once": at_once_ms * 1e-3}
    monkeypatch.setattr(timing, "benchmark", _fake_benchmark(fake))
    monkeypatch.setattr(bench_streams, "_copy_engines", lambda: 2)
    rows = bench_streams.streams_rows(1024, 256, repeat=1)
    results.check_rows("streams", rows)
    (row,) = [r for r in rows if r["kind"] == "overlap"]
    assert row["alone_seconds"] == 4e-3 and row["seconds"] == at_once_ms * 1e-3
    assert bench_streams.compare_rows(rows)[-1].endswith(says)


def test_streams_compare_rows_reads_the_h200_recording_without_the_allocating_key():
    # Recorded before rows had "allocating": the label tells. There 4 streams were no faster than 1 (5.21 vs 5.16 ms)
    # while the model said 3.99 ms: lesson 02 must say so rather than promise the overlap.
    from gpulab.bench import streams as bench_streams

    rec = results.latest("streams", device="NVIDIA H200", directory=results.RESULTS_DIR)
    assert rec is not None and not any("allocating" in r for r in rec.sections["streams"])
    lines = bench_streams.compare_rows(rec.sections["streams"])
    assert lines[1] == "4 streams: measured 5.21 ms, the model 3.99 ms (1.31x the model)"
    assert lines[2].startswith("They disagree") and len(lines) == 3


def test_streams_without_copy_engines_has_no_model_rows_and_chunks_must_be_equal(monkeypatch):
    from gpulab import timing
    from gpulab.bench import streams as bench_streams

    monkeypatch.setattr(timing, "benchmark", _fake_benchmark({}))
    monkeypatch.setattr(bench_streams, "_copy_engines", lambda: 0)  # no copy can overlap a kernel: no model
    assert [r["kind"] for r in bench_streams.streams_rows(512, 256, repeat=1)] == ["copy"] * 3 + ["pipeline"] * 3
    with pytest.raises(ValueError, match="n a multiple of chunk"):
        bench_streams.streams_rows(1000, 256)
