"""gpulab.grading: the graded notebook comes from the lab's source, report() returns the points
nbgrader takes, test cells score like nbgrader's autograder, bad paths and options get a message,
and a folder of submissions becomes a gradebook with feedback."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import nbformat
import pytest

from gpulab import labs
from gpulab.exercises import CheckResult
from gpulab.grading import report
from gpulab.grading.assemble import assemble, read_submission, source_for
from gpulab.grading.rows import score_test
from gpulab.grading.assemble import Cell
from gpulab.errors import UsageError

ROOT = Path(__file__).resolve().parents[1]
SOURCE = ROOT / "labs" / "solutions" / "lab01_threads.ipynb"
STUDENT = ROOT / "labs" / "student" / "lab01_threads.ipynb"


def _meta(c):
    return c.metadata.get("nbgrader", {})


def test_assemble_takes_only_answer_cells_from_the_submission(tmp_path):
    sub = nbformat.read(str(STUDENT), as_version=4)
    src = nbformat.read(str(SOURCE), as_version=4)
    answers = [c for c in sub.cells if _meta(c).get("solution")]
    answers[0].source = "MY_ANSWER = 1"
    sub.cells.remove(answers[1])  # a deleted answer cell
    for c in sub.cells:
        if _meta(c).get("grade"):
            c.source, c.metadata["nbgrader"]["points"] = "pass", 1000
    extra = nbformat.v4.new_code_cell("print('mine')")
    sub.cells.append(extra)
    a = assemble(SOURCE, sub)
    src_tests = [c for c in src.cells if _meta(c).get("grade")]
    assert [c.source for c in a.tests] == [c.source for c in src_tests]
    assert [c.points for c in a.tests] == [_meta(c)["points"] for c in src_tests]
    got_answers = [c for c in a.cells if c.kind == "answer"]
    assert got_answers[0].source == "MY_ANSWER = 1"
    assert labs.CODE_STUB in got_answers[1].source and labs.BEGIN not in got_answers[1].source
    assert any("missing" in n for n in a.notes)
    assert all("print('mine')" not in c.source for c in a.cells)
    # the lab's own code cells (imports, banner) come from the source
    assert sum(c.kind == "code" for c in a.cells) == sum(
        1 for c in src.cells if c.cell_type == "code" and not _meta(c).get("grade") and not _meta(c).get("solution")
    )


def _result(score, max_score, status="passed", message="ok", hint=""):
    return CheckResult("k", status, score, max_score, message, hint)


def test_report_returns_the_points_earned():
    assert report(_result(2, 2)) == 2.0
    assert report(_result(1, 2, "over budget")) == 1.0
    # a visible check and a hidden one: the cell stays worth the visible check's points
    assert report(_result(2, 2), _result(0, 2, "failed")) == 1.0
    assert report(_result(3, 3), _result(3, 3), points=3) == 3.0
    assert report(_result(5, 2)) == 2.0  # never above the cell's points
    assert isinstance(report(_result(0, 2, "failed")), float)
    with pytest.raises(UsageError):
        report()


def test_scores_mirror_nbgrader():
    cell = Cell(0, "test", "", "ex-check", 2.0)
    base = {"index": 0, "kind": "test", "tampered": "", "stderr": "", "error": None, "value": None, "results": []}
    assert score_test(cell, dict(base), "").score == 2  # no error, no number: full points
    assert score_test(cell, {**base, "value": 1.5}, "").score == 1.5  # a number: partial credit
    assert score_test(cell, {**base, "value": 50.0}, "").score == 2  # capped at the cell's points
    r = score_test(
        cell,
        {
            **base,
            "error": ["AssertionError", "[FAIL]"],
            "results": [{"status": "failed", "message": "out[3] wrong\nmore", "hint": "guard"}],
        },
        "",
    )
    assert (r.score, r.status, r.message, r.hint) == (0, "failed", "out[3] wrong\nmore", "guard")  # every line
    assert score_test(cell, {**base, "error": ["NotImplementedError", ""]}, "").status == "not implemented"
    assert score_test(cell, {**base, "stderr": "Warning: x"}, "").score == 0  # nbgrader: stderr earns 0
    assert score_test(cell, {**base, "tampered": "numpy.isclose was replaced"}, "").status == "tampered"
    assert score_test(cell, None, "cell 3 timed out").status == "not run"


def test_a_cell_that_checks_two_functions_shows_each_ones_verdict():
    """Lab 09's convolution cell checks im2col and col2im: a wrong col2im shows even when im2col fails first, each
    by name with its verdict's key lines (what is wrong, input, launch); see also tests/test_grading_rows.py."""
    cell = Cell(0, "test", "", "lab09-conv-check", 3.0)
    base = {"index": 0, "kind": "test", "tampered": "", "stderr": "", "error": None, "value": 0.0}
    im2col = {
        "name": "im2col_kernel",
        "status": "failed",
        "message": "cols[0, 3] wrong\ndetail\ninput: size (2, 3)\nlaunch: grid (1, 1)",
        "hint": "a, b",
    }
    hidden = {"name": "im2col_kernel", "status": "failed", "message": "hidden size wrong", "hint": "other"}
    col2im = {"name": "col2im_kernel", "status": "failed", "message": "the pad sign is flipped", "hint": "+ pad"}
    r = score_test(cell, {**base, "results": [im2col, hidden, col2im]}, "")
    assert r.message == (
        "im2col_kernel: cols[0, 3] wrong\n  input: size (2, 3)\n  launch: grid (1, 1)\n"
        "col2im_kernel: the pad sign is flipped"
    )
    assert r.hint == "im2col_kernel: a, b | col2im_kernel: + pad"
    assert r.status == "failed"
    # im2col over its budget (half), col2im wrong (none): a quarter of the cell, "partial", the wrong one's verdict
    over = {**im2col, "status": "over budget", "score": 1.5, "max_score": 3}
    r = score_test(cell, {**base, "value": 0.75, "results": [over, {**col2im, "score": 0, "max_score": 3}]}, "")
    assert (r.status, r.verdict) == ("partial", "failed")
    assert r.message.startswith("im2col_kernel: cols[0, 3] wrong\n  input: size (2, 3)\n"), r.message
    # one failing function (its hidden check too): its first verdict, by name, and the other one passed
    r = score_test(cell, {**base, "results": [im2col, hidden, {**col2im, "status": "passed"}]}, "")
    assert (
        r.message
        == "im2col_kernel: cols[0, 3] wrong\n  input: size (2, 3)\n  launch: grid (1, 1)\ncol2im_kernel: passed"
    )
    assert r.hint == "im2col_kernel: a, b"


@pytest.mark.parametrize(
    "content, expected",
    [
        (b"", "is empty"),
        (b"\x89PNG\r\n\x1a\n\x00\x00\xff\xfe", "binary"),
        (b'{"cells": [', "not valid notebook JSON"),
        (b'["a", "list"]', "not a notebook"),
        (b"print('hello')\n", "not valid notebook JSON"),
    ],
)
def test_bad_submissions_get_a_message(tmp_path, capsys, content, expected):
    path = tmp_path / "lab01_threads.ipynb"
    path.write_bytes(content)
    with pytest.raises(UsageError, match=expected):
        read_submission(path)
    assert labs.main(["grade", str(path), "--root", str(ROOT)]) == 2
    err = capsys.readouterr().err
    assert expected in err and "Traceback" not in err


def test_bad_paths_and_options_are_refused_before_any_work(tmp_path, capsys):
    folder = tmp_path / "x.ipynb"
    folder.mkdir()
    assert labs.main(["grade", str(folder), "--root", str(ROOT)]) == 2  # a folder without notebooks
    assert "no .ipynb files" in capsys.readouterr().err
    with pytest.raises(UsageError, match="is a folder"):
        read_submission(folder)
    assert labs.main(["grade", str(tmp_path / "missing.ipynb")]) == 2
    assert "does not exist" in capsys.readouterr().err
    odd = tmp_path / "essay.ipynb"
    odd.write_text(json.dumps({"cells": [], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}))
    assert labs.main(["grade", str(odd), "--root", str(ROOT)]) == 2
    assert "which lab is" in capsys.readouterr().err
    for argv in (
        ["--timeout", "0"],
        ["--timeout", "-1"],
        ["--timeout", "nan"],
        ["--kernel", "julia"],
        ["--workers", "0"],
        ["--memory-mb", "-5"],
    ):
        with pytest.raises(SystemExit) as exc:
            labs.main(["grade", str(STUDENT), *argv])
        assert exc.value.code == 2, argv
        assert "Traceback" not in capsys.readouterr().err


def test_source_for_finds_the_lab(tmp_path):
    sols = ROOT / "labs" / "solutions"
    assert source_for(Path("lab01_threads.ipynb"), sols) == SOURCE
    assert source_for(Path("whatever.ipynb"), sols, "lab01_threads") == SOURCE
    assert source_for(Path("lab01.ipynb"), sols) == SOURCE
    assert source_for(STUDENT, sols) == SOURCE
    with pytest.raises(UsageError, match="pass --lab"):
        source_for(Path("essay.ipynb"), sols)
    named_by_cells = tmp_path / "submission.ipynb"  # the lab is found from its graded cells' ids
    named_by_cells.write_bytes((ROOT / "labs" / "student" / "lab02_memory.ipynb").read_bytes())
    assert source_for(named_by_cells, sols).name == "lab02_memory.ipynb"


@pytest.mark.slow
def test_a_class_at_a_time(tmp_path):
    """Two students, graded in parallel: gradebook CSV/JSON and an HTML page each with verdicts and hints."""
    subs = tmp_path / "submitted"
    for student, path in (("alice", SOURCE), ("bob", STUDENT)):
        (subs / student).mkdir(parents=True)
        (subs / student / "lab01_threads.ipynb").write_bytes(path.read_bytes())
    out = tmp_path / "graded"
    assert (
        labs.main(["grade", str(subs), "--out", str(out), "--workers", "2", "--timeout", "120", "--root", str(ROOT)])
        == 0
    )
    rows = list(csv.DictReader(open(out / "gradebook.csv")))
    assert [(r["student"], float(r["score"]), float(r["max_score"])) for r in rows] == [
        ("alice", 12.0, 12.0),
        ("bob", 0.0, 12.0),
    ]
    assert float(rows[0]["lab01-stencil-check"]) == 3
    book = json.loads((out / "gradebook.json").read_text())
    assert {e["student"] for e in book} == {"alice", "bob"}
    bob = (out / "feedback" / "bob__lab01_threads.html").read_text()
    assert "lab01-add-check" in bob and "not implemented" in bob and "0 / 12" in bob
    assert "12 / 12" in (out / "feedback" / "alice__lab01_threads.html").read_text()


def test_hidden_tests_are_put_back(tmp_path):
    """The student never sees a hidden region; the graded notebook has it (from the source)."""
    src = nbformat.read(str(SOURCE), as_version=4)
    test = next(c for c in src.cells if _meta(c).get("grade"))
    test.source += "\n### BEGIN HIDDEN TESTS\nSECRET_CHECK = 1\n### END HIDDEN TESTS"
    source = tmp_path / "lab01_threads.ipynb"
    nbformat.write(src, str(source))
    student = labs.student_notebook(source)
    assert "SECRET_CHECK" not in nbformat.writes(student)
    graded = assemble(source, student)
    assert "SECRET_CHECK = 1" in graded.tests[0].source and labs.BEGIN_HIDDEN in graded.tests[0].source


def test_resident_size_of_a_process_tree():
    """The memory watchdog (gpu mode, where RLIMIT_AS cannot apply) sums a process and its children."""
    import os
    import subprocess
    import sys

    from gpulab.grading.session import _tree_rss

    child = subprocess.Popen([sys.executable, "-c", "import time; x = bytearray(50 << 20); time.sleep(30)"])
    try:
        import time

        deadline = time.monotonic() + 30
        while _tree_rss(os.getpid()) - _tree_rss(child.pid) < 0 or _tree_rss(child.pid) < (50 << 20):
            assert time.monotonic() < deadline, "the child's 50 MB never showed"
            time.sleep(0.1)
        assert _tree_rss(os.getpid()) >= _tree_rss(child.pid) + (1 << 20)
    finally:
        child.kill()
        child.wait()


def test_notes_name_tampered_test_cells_and_other_releases():
    """The scores ignore edited test cells; the notes tell the teacher they were edited."""
    clean = nbformat.read(str(STUDENT), as_version=4)
    assert assemble(SOURCE, clean).notes == []
    solution = nbformat.read(str(SOURCE), as_version=4)  # the solution itself: its test cells hold the hidden tests
    assert assemble(SOURCE, solution).notes == []
    sub = nbformat.read(str(STUDENT), as_version=4)
    sub.cells = [c for c in sub.cells if _meta(c).get("grade_id") != "lab01-stencil-check"]
    for c in sub.cells:
        if _meta(c).get("grade_id") == "lab01-add-check":
            c.source, c.metadata["nbgrader"]["points"] = "2", 100
    notes = " | ".join(assemble(SOURCE, sub).notes)
    assert "missing from the submission (deleted, or an older release): lab01-stencil-check" in notes, notes
    assert "differ from the lab's (edited, or an older release): lab01-add-check" in notes, notes
    assert "lab01-add-check (100 instead of 2)" in notes, notes
    old = nbformat.read(str(STUDENT), as_version=4)  # an older release: an answer cell renamed, and other cell ids
    for k, c in enumerate(old.cells):
        c.id = f"older-{k}"
        if _meta(c).get("grade_id") == "lab01-saxpy":
            c.metadata["nbgrader"]["grade_id"] = "lab01-gridstride"
    notes = " | ".join(assemble(SOURCE, old).notes)
    assert "lab01-gridstride are not in this release of lab01_threads, which asks for lab01-saxpy" in notes, notes
    assert assemble(SOURCE, old).other_lab == ""  # some answer cells of this release: graded, with the note
    other = nbformat.read(str(ROOT / "labs" / "student" / "lab05_reductions.ipynb"), as_version=4)
    why = assemble(SOURCE, other).other_lab  # none: not graded for that reason (tests/test_grading_rows.py)
    assert why.startswith("is lab05_reductions's notebook, not lab01_threads's: its answer cells (lab05-atomic,"), why


def test_two_notebooks_for_one_lab_keep_both_feedback_pages(tmp_path, monkeypatch):
    """A student who hands in `lab01_threads.ipynb` and `lab01_threads (1).ipynb` gets two rows, two
    feedback pages (the second used to overwrite the first) and a note; the summary flags notes."""
    from gpulab.grading import gradebook
    from gpulab.grading.rows import Graded, GradeRow

    def fake_grade(sub, src, limits):
        score = 2.0 if "(1)" in sub.name else 1.0
        return Graded(str(sub), src.stem, "simulator", "test", [GradeRow("lab01-add-check", 2, score, "x", "m")], [])

    monkeypatch.setattr(gradebook, "grade_notebook", fake_grade)
    subs = tmp_path / "submitted"
    for name in ("alice/lab01_threads.ipynb", "heidi/lab01_threads.ipynb", "heidi/lab01_threads (1).ipynb"):
        (subs / name).parent.mkdir(parents=True, exist_ok=True)
        (subs / name).write_bytes(STUDENT.read_bytes())
    book = gradebook.grade_folder(subs, ROOT / "labs" / "solutions", tmp_path / "out", progress=False)
    pages = sorted(p.name for p in (tmp_path / "out" / "feedback").iterdir())
    assert pages == [
        "alice__lab01_threads.html",
        "heidi__lab01_threads__lab01_threads.html",
        "heidi__lab01_threads__lab01_threads_1.html",
    ]
    assert "2 / 2" in (tmp_path / "out" / "feedback" / pages[2]).read_text()
    summary = book.summary()
    assert [ln.startswith("heidi") for ln in summary.splitlines() if "note:" in ln] == [True, True], summary
    assert summary.splitlines()[0].startswith("graded with mode: simulator; sandbox: "), summary  # as README says
    book_json = json.loads((tmp_path / "out" / "gradebook.json").read_text())
    notes = {(e["student"], Path(e["notebook"]).name): e["notes"] for e in book_json}
    assert notes[("alice", "lab01_threads.ipynb")] == []
    assert not any("although" in n for n in notes[("heidi", "lab01_threads.ipynb")])
    renamed = notes[("heidi", "lab01_threads (1).ipynb")]
    assert "graded as lab01_threads although the file is named 'lab01_threads (1).ipynb'" in renamed
    for key in [("heidi", "lab01_threads.ipynb"), ("heidi", "lab01_threads (1).ipynb")]:
        assert any("heidi has 2 submissions for lab01_threads" in n for n in notes[key]), notes[key]


def test_an_earlier_gradebook_is_kept(tmp_path, monkeypatch):
    """Grading lab 05 into the folder that holds lab 01's (hand-edited) gradebook renames the old one."""
    from gpulab.grading import gradebook
    from gpulab.grading.rows import Graded, GradeRow

    monkeypatch.setattr(
        gradebook,
        "grade_notebook",
        lambda sub, src, limits: Graded(str(sub), src.stem, "simulator", "t", [GradeRow("x", 1, 1, "passed", "")], []),
    )
    subs, out = tmp_path / "submitted", tmp_path / "graded"
    (subs / "alice").mkdir(parents=True)
    (subs / "alice" / "lab01_threads.ipynb").write_bytes(STUDENT.read_bytes())
    gradebook.grade_folder(subs, ROOT / "labs" / "solutions", out, progress=False)
    (out / "gradebook.csv").write_text("my manual grades\n")
    book = gradebook.grade_folder(subs, ROOT / "labs" / "solutions", out, progress=False)
    kept = sorted(p.name for p in out.glob("gradebook-*"))
    assert len(kept) == 2 and kept[0].endswith(".csv") and kept[1].endswith(".json"), kept
    assert (out / kept[0]).read_text() == "my manual grades\n"
    assert "alice" in (out / "gradebook.csv").read_text()
    assert "the previous gradebook was kept as " + kept[0] in book.summary()


def test_quiet_warnings_silences_numba_cudas_own_performance_warning():
    """numba-cuda 0.30 (the pinned version) warns of low occupancy with numba.cuda.core.errors' own
    NumbaPerformanceWarning, not a subclass of numba.core.errors' (0.22, Colab's, uses that one): silencing only
    numba's let the warning reach a grade cell's stderr on a GPU, which nbgrader scores 0."""
    import importlib
    import warnings

    from gpulab.grading import quiet_warnings

    categories = []
    for module in ("numba.core.errors", "numba.cuda.core.errors"):
        try:
            categories.append(importlib.import_module(module).NumbaPerformanceWarning)
        except (ImportError, AttributeError):
            pass
    assert categories
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        quiet_warnings()
        for category in categories:
            warnings.warn(
                category("Grid size 3 will likely result in GPU under-utilization due to low occupancy."), stacklevel=1
            )
        warnings.warn(UserWarning("other warnings still show"), stacklevel=1)
    assert [type(w.message) for w in caught] == [UserWarning]
