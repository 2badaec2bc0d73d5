"""bench lessons without data (issue 17): offline and without scikit-learn the CNN section is skipped
with the reason; the rest of the suite still runs."""

from __future__ import annotations

from gpulab import data
from gpulab.bench import lessons


def test_no_data_skips_cnn_training_with_a_reason(monkeypatch):
    tried = []

    def load(name, **kw):
        tried.append((name, kw.get("download")))
        raise data.DatasetError(f"{name}: nothing here\nDownload failed: offline")

    monkeypatch.setattr(data, "load", load)
    said: list[str] = []
    out = lessons.measure(["cnn_training"], log=said.append)
    assert out == {}
    assert tried == [("mnist", False), ("mnist", True), ("digits", None)]
    assert any("cnn_training      skipped: no data" in s and "GPULAB_DATA_DIR" in s for s in said)


def test_falls_back_to_digits_when_mnist_cannot_be_had(monkeypatch):
    import pytest

    pytest.importorskip("sklearn")
    real = data.load

    def load(name, **kw):
        if name == "mnist":
            raise data.DatasetError("offline")
        return real(name, **kw)

    monkeypatch.setattr(data, "load", load)
    ds, why = lessons._dataset(log=lambda s: None)
    assert why == "" and ds.name == "digits"


def test_a_failing_section_loses_none_of_the_others(tmp_path, monkeypatch, capsys):
    """gpu-check runs `bench lessons --record` once in a lent GPU's few minutes: a section that raises is
    reported (exit status 1) and every other section is still measured, written and recorded, each as soon
    as it is done (a stage cut off later keeps them). It used to stop the run and lose them all."""
    import json

    def conv_fails(*a, **k):
        raise RuntimeError("cuBLAS said no")

    written: list[str] = []

    def attention(*a, **k):
        written.append("attention ran")
        return [{"label": "fused", "seconds": 0.002, "gflops": 100.0, "n": 16, "d": 8}]

    monkeypatch.setattr(lessons, "conv_rows", conv_fails)
    monkeypatch.setattr(lessons, "attention_rows", attention)
    out = tmp_path / "lessons.json"
    assert lessons.main(["--only", "conv", "attention", "--json", str(out)]) == 1
    doc = json.loads(out.read_text())
    assert list(doc["sections"]) == ["attention"] and written == ["attention ran"]
    assert doc["failed"] == {"conv": "RuntimeError: cuBLAS said no"}
    said = capsys.readouterr().out
    assert "conv              FAILED: RuntimeError: cuBLAS said no" in said and "1 section(s) FAILED: conv" in said


def test_each_section_is_written_as_soon_as_it_is_done(tmp_path, monkeypatch):
    """A run cut off during a later section (gpu-check's stage limit) keeps the sections before it: the JSON holds
    each one when the next starts."""
    import json

    out = tmp_path / "lessons.json"
    seen_during_attention: list[dict] = []

    def conv(*a, **k):
        return [{"label": "direct", "seconds": 0.001}]

    def attention(*a, **k):
        seen_during_attention.append(json.loads(out.read_text()))  # what a run stopped here would leave
        return [{"label": "fused", "seconds": 0.002}]

    monkeypatch.setattr(lessons, "conv_rows", conv)
    monkeypatch.setattr(lessons, "attention_rows", attention)
    assert lessons.main(["--only", "conv", "attention", "--json", str(out)]) == 0
    (before,) = seen_during_attention
    assert list(before["sections"]) == ["conv"] and before["failed"] == {}
    assert list(json.loads(out.read_text())["sections"]) == ["conv", "attention"]


def test_a_write_cut_off_leaves_the_previous_complete_file(tmp_path, monkeypatch):
    """The JSON is written beside the file and renamed over it: a run killed during a write (gpu-check's stage
    limit) leaves the last complete document, not half of one."""
    import json
    from pathlib import Path

    out = tmp_path / "lessons.json"
    monkeypatch.setattr(lessons, "conv_rows", lambda *a, **k: [{"label": "direct", "seconds": 0.001}])
    monkeypatch.setattr(lessons, "attention_rows", lambda *a, **k: [{"label": "fused", "seconds": 0.002}])
    real_write = Path.write_text
    calls: list[Path] = []

    def write_half_then_die(self, text, *a, **k):
        calls.append(self)
        if len(calls) == 1:
            return real_write(self, text, *a, **k)
        real_write(self, text[: len(text) // 2], *a, **k)  # the process is killed halfway through this write
        raise KeyboardInterrupt

    monkeypatch.setattr(Path, "write_text", write_half_then_die)
    assert lessons.main(["--only", "conv", "attention", "--json", str(out)]) != 0  # "interrupted"
    assert all(p != out for p in calls), "written in place"
    assert list(json.loads(out.read_text())["sections"]) == ["conv"]


def test_streams_is_skipped_in_simulator_mode_with_the_reason(monkeypatch):
    """Lesson 02's copies and streams need a GPU: in simulator mode the section is skipped, never measured."""
    from gpulab.bench import streams

    def must_not_run(*a, **k):
        raise AssertionError("streams_rows ran in simulator mode")

    monkeypatch.setattr(streams, "streams_rows", must_not_run)
    said: list[str] = []
    assert lessons.measure(["streams"], log=said.append) == {}
    assert said == [
        "  streams           skipped: the simulator runs every copy and kernel at once and times nothing; "
        "pinned copies and streams need gpu mode"
    ]
