"""``labs grade`` on submissions a teacher meets: cells the student added (noted, and named in the row whose
NameError they explain), cells that lost their nbgrader metadata (found by place and names, or said plainly),
a timeout that blames no later row, verdicts kept whole, gpu mode without a GPU refused once, "not graded"
never a 0 in the CSV, --json for a folder, earlier feedback kept, and nbgrader trees of several labs."""

from __future__ import annotations

import copy
import csv
import json
import re
from pathlib import Path

import nbformat
import pytest

from gpulab import labs
from gpulab.grading import gradebook, grader
from gpulab.grading.assemble import Cell, assemble
from gpulab.grading.grader import grade_notebook
from gpulab.grading.rows import Graded, GradeRow, format_table, score_test

ROOT = Path(__file__).resolve().parents[1]
SOLUTIONS = ROOT / "labs" / "solutions"
SOURCE = SOLUTIONS / "lab01_threads.ipynb"
STUDENT = ROOT / "labs" / "student" / "lab01_threads.ipynb"
IMPORT_CELL = "import gpulab  # first"  # the lab's import cell (gpulab before numba), not cell 3's `import gpulab`


def _meta(c):
    return c.metadata.get("nbgrader", {})


def _answered() -> nbformat.NotebookNode:
    """The student version with the lab's solutions pasted into its answer cells (what alice handed in)."""
    sols = {
        _meta(c)["grade_id"]: re.sub(r"^\s*### (BEGIN|END) SOLUTION[^\n]*(\n|\Z)", "", c.source, flags=re.M)
        for c in nbformat.read(str(SOURCE), as_version=4).cells
        if _meta(c).get("solution")
    }
    nb = nbformat.read(str(STUDENT), as_version=4)
    for c in nb.cells:
        if _meta(c).get("grade_id") in sols:
            c.source = sols[_meta(c)["grade_id"]]
    return nb


def _cell(nb, gid):
    return next(c for c in nb.cells if _meta(c).get("grade_id") == gid)


def test_an_added_cell_is_noted_and_named_in_the_row_it_breaks(tmp_path):
    """judy: alice's answers, with add_kernel calling a device function `plus` from a cell she added."""
    nb = _answered()
    add = _cell(nb, "lab01-add")
    add.source = add.source.replace("out[i] = a[i] + b[i]", "out[i] = plus(a[i], b[i])")
    assert "plus(" in add.source
    nb.cells.insert(
        nb.cells.index(add), nbformat.v4.new_code_cell("@cuda.jit(device=True)\ndef plus(a, b):\n    return a + b")
    )
    path = tmp_path / "lab01_threads.ipynb"
    nbformat.write(nb, str(path))
    graded = grade_notebook(path, SOURCE)
    row = next(r for r in graded.rows if r.grade_id == "lab01-add-check")
    assert row.score == 0 and row.message.startswith("plus is defined only in cell 7 of 23"), row.message
    assert "put it in the answer cell" in row.message and "not defined" in row.message, row.message
    note = next(n for n in graded.notes if "defines plus" in n)
    assert "was not run" in note and "put helpers in the answer cell" in note, graded.notes
    assert sum(r.score for r in graded.rows) == 10  # the other exercises are alice's
    page = tmp_path / "feedback.html"
    gradebook.write_feedback(graded, page)
    assert "defines plus" in page.read_text()


def _no_metadata(nb):
    nb = copy.deepcopy(nb)
    for c in nb.cells:
        c.metadata.pop("nbgrader", None)
        c.pop("id", None)
    return nb


def test_answers_are_found_when_the_cells_lost_their_metadata():
    """ivan: correct answers in cells without nbgrader metadata (nbformat 4.4: no cell ids either)."""
    nb = _no_metadata(_answered())
    a = assemble(SOURCE, nb)
    got = {c.grade_id: c.source for c in a.cells if c.kind == "answer"}
    want = {_meta(c)["grade_id"]: c.source for c in _answered().cells if _meta(c).get("solution")}
    assert got == want
    assert not any("missing" in n for n in a.notes), a.notes
    assert any("found by their place and the names they define" in n for n in a.notes), a.notes
    assert a.added == {}


def _fake_run(records, skipped=None):
    def run(assembled, sandbox):
        return records(assembled), skipped or {}, "", []

    return run


def test_an_answer_that_cannot_be_matched_safely_says_the_metadata_was_lost(monkeypatch, tmp_path):
    """An answer cell defining another name is never credited to the exercise; every row it leaves unanswered
    says the metadata was lost and how to fix it, not "not implemented yet"."""
    nb = _answered()
    _cell(nb, "lab01-add").source = _cell(nb, "lab01-add").source.replace("def add_kernel", "def my_add")
    nb = _no_metadata(nb)
    a = assemble(SOURCE, nb)
    add = next(c for c in a.cells if c.grade_id == "lab01-add")
    assert "my_add" not in add.source and "lost their nbgrader grading metadata" in add.lost
    assert "my_add" not in " ".join(c.source for c in a.cells)
    not_implemented = {"error": ("NotImplementedError", ""), "results": []}
    monkeypatch.setattr(grader, "run", _fake_run(lambda asm: {c.index: dict(not_implemented) for c in asm.tests}))
    path = tmp_path / "lab01_threads.ipynb"
    nbformat.write(nb, str(path))
    rows = {r.grade_id: r for r in grade_notebook(path, SOURCE).rows}
    assert rows["lab01-add-check"].status == "answer not found"
    assert "freshly fetched copy" in rows["lab01-add-check"].message
    assert rows["lab01-affine-check"].message == "not implemented yet"  # found, so its row is its own


def test_a_timeout_blames_no_later_row(monkeypatch, tmp_path):
    """carol: the saxpy check runs past the limit; the stencil row is her SyntaxError's, not the timeout's."""
    src = {c.grade_id: c.index for c in assemble(SOURCE, _answered()).cells if c.grade_id}

    def records(asm):
        recs = {c.index: {"error": None, "results": [], "value": None} for c in asm.cells}
        recs[src["lab01-stencil"]]["error"] = ("SyntaxError", "expected ':' (<ipython-input-1-8a9d>, line 5)")
        recs[src["lab01-stencil-check"]]["error"] = ("NameError", "name 'stencil3_kernel' is not defined")
        del recs[src["lab01-saxpy-check"]]
        return recs

    skipped = {src["lab01-saxpy-check"]: "ran past the 20 s limit per cell"}
    monkeypatch.setattr(grader, "run", _fake_run(records, skipped))
    path = tmp_path / "lab01_threads.ipynb"
    nbformat.write(_answered(), str(path))
    graded = grade_notebook(path, SOURCE)
    rows = {r.grade_id: r for r in graded.rows}
    assert rows["lab01-saxpy-check"].status == "stopped"
    stencil = rows["lab01-stencil-check"].message
    assert stencil.startswith("your answer cell lab01-stencil raised SyntaxError: expected ':' (line 5)"), stencil
    assert "20 s" not in stencil and "20 s" not in rows["lab01-blur-check"].message
    assert any("ran past the 20 s limit" in n for n in graded.notes)


def test_a_row_keeps_the_whole_verdict_and_the_stderr_note():
    cell = Cell(0, "test", "", "ex-check", 2.0)
    verdict = {
        "name": "k",
        "status": "failed",
        "score": 0,
        "max_score": 2,
        "message": "out[1, 0]: expected 0.000287, got nan\ninput: shape (33, 17)\nlaunch: grid (2, 3), block (16, 16)",
    }
    base = {"tampered": "", "stderr": "", "error": None, "value": 0.0, "results": [verdict]}
    row = score_test(cell, dict(base), "")
    assert "input: shape (33, 17)" in row.message and "launch: grid (2, 3)" in row.message, row.message
    row = score_test(cell, {**base, "value": None, "stderr": "RuntimeWarning: invalid value\n"}, "")
    assert row.score == 0 and row.message.startswith("out[1, 0]: expected 0.000287, got nan\n"), row.message
    assert "the cell wrote to stderr, which nbgrader scores 0: RuntimeWarning" in row.message
    assert "input: shape" not in format_table([row]).splitlines()[1][:40]  # the table stays one line a row
    long = GradeRow("ex-check", 2.0, 0.0, "failed", "x" * 80 + "\ninput: shape (33, 17)\nlaunch: grid (2, 3)")
    table = format_table([long]).splitlines()
    assert len(table) == 3 and table[1].endswith("...") and table[2].startswith("total"), table  # cut after joining


def _subs(tmp_path, names=("alice/lab01_threads.ipynb",)):
    subs = tmp_path / "submitted"
    for name in names:
        (subs / name).parent.mkdir(parents=True, exist_ok=True)
        (subs / name).write_bytes(STUDENT.read_bytes())
    return subs


def test_gpu_mode_without_a_gpu_stops_before_grading(tmp_path, monkeypatch, capsys):
    from gpulab import runtime

    monkeypatch.setenv("GPULAB_DEVICE", "gpu")
    monkeypatch.delenv("GPULAB_COMPILE_ONLY", raising=False)
    reason = "no CUDA driver library (libcuda) on this machine"
    monkeypatch.setattr(runtime, "probe_driver", lambda: runtime.DriverProbe(False, 0, None, reason))
    calls = []
    monkeypatch.setattr(gradebook, "grade_notebook", lambda *a, **k: calls.append(a))
    out = tmp_path / "graded"
    assert labs.main(["grade", str(_subs(tmp_path)), "--out", str(out), "--root", str(ROOT)]) == 2
    err = capsys.readouterr().err
    assert f"GPULAB_DEVICE=gpu was requested, but {reason}" in err and "GPULAB_DEVICE=simulator" in err, err
    assert "memory-mb" not in err and calls == [] and not (out / "feedback").exists()


def test_not_graded_is_an_empty_cell_never_a_zero(tmp_path, monkeypatch):
    def fake(sub, src, limits):
        rows = [GradeRow("lab01-add-check", 2, 0.0, "not graded", grader.NOT_STARTED)]
        if "bob" in str(sub):
            rows = [GradeRow("lab01-add-check", 2, 0.0, "failed", "wrong")]
        return Graded(str(sub), src.stem, "gpu", "t", rows, [])

    monkeypatch.setattr(gradebook, "grade_notebook", fake)
    subs = _subs(tmp_path, ("alice/lab01_threads.ipynb", "bob/lab01_threads.ipynb"))
    gradebook.grade_folder(subs, SOLUTIONS, tmp_path / "out", progress=False)
    rows = {r["student"]: r for r in csv.DictReader(open(tmp_path / "out" / "gradebook.csv"))}
    assert rows["alice"]["score"] == "" and rows["alice"]["lab01-add-check"] == ""
    assert rows["bob"]["score"] == "0.0" and rows["bob"]["lab01-add-check"] == "0.0"


def _pass(sub, src, limits):
    return Graded(str(sub), src.stem, "simulator", "t", [GradeRow("lab01-add-check", 2, 2, "passed", "ok")], [])


def test_json_for_a_folder_is_written(tmp_path, monkeypatch):
    monkeypatch.setattr(gradebook, "grade_notebook", _pass)
    target = tmp_path / "all.json"
    args = ["grade", str(_subs(tmp_path)), "--out", str(tmp_path / "g"), "--json", str(target), "--root", str(ROOT)]
    assert labs.main(args) == 0
    assert json.loads(target.read_text()) == json.loads((tmp_path / "g" / "gradebook.json").read_text())
    assert json.loads(target.read_text())[0]["student"] == "alice"


def test_a_regrade_keeps_the_earlier_feedback_pages(tmp_path, monkeypatch):
    monkeypatch.setattr(gradebook, "grade_notebook", _pass)
    subs, out = _subs(tmp_path), tmp_path / "graded"
    gradebook.grade_folder(subs, SOLUTIONS, out, progress=False)
    page = out / "feedback" / "alice__lab01_threads.html"
    page.write_text("edited by the teacher")
    book = gradebook.grade_folder(subs, SOLUTIONS, out, progress=False)
    kept = [p for p in out.glob("feedback-*") if p.is_dir()]
    assert len(kept) == 1 and (kept[0] / page.name).read_text() == "edited by the teacher"
    assert "2 / 2" in page.read_text() and kept[0].name in book.summary()


@pytest.mark.parametrize("below", ["", "bob"])
def test_an_nbgrader_tree_names_the_student_and_lab_filters_it(tmp_path, monkeypatch, below):
    monkeypatch.setattr(gradebook, "grade_notebook", _pass)
    names = ("bob/lab01_threads/lab01_threads.ipynb", "bob/lab05_reductions/lab05_reductions.ipynb")
    folder = _subs(tmp_path, names) / below
    book = gradebook.grade_folder(folder, SOLUTIONS, tmp_path / "out", lab="lab01_threads", progress=False)
    assert [(s, g.lab, Path(g.notebook).name) for s, g in book.entries] == [
        ("bob", "lab01_threads", "lab01_threads.ipynb")
    ]
    assert [p.name for p in book.skipped] == ["lab05_reductions.ipynb"] and "skipped 1" in book.summary()


def test_a_regrade_of_one_notebook_keeps_its_earlier_feedback_page(tmp_path, monkeypatch, capsys):
    from gpulab.grading import grader

    monkeypatch.setattr(grader, "grade_notebook", _pass)
    sub, out = _subs(tmp_path) / "alice" / "lab01_threads.ipynb", tmp_path / "graded"
    args = ["grade", str(sub), "--out", str(out), "--root", str(ROOT)]
    assert labs.main(args) == 0
    page = out / "lab01_threads.html"
    page.write_text("edited by the teacher")
    assert labs.main(args) == 0
    kept = [p for p in out.glob("lab01_threads-*.html")]
    assert len(kept) == 1 and kept[0].read_text() == "edited by the teacher", kept
    assert (
        "2 / 2" in page.read_text()
        and f"the earlier feedback page was kept as {kept[0].name}" in capsys.readouterr().out
    )


def _edit_imports(nb) -> nbformat.NotebookNode:
    nb = copy.deepcopy(nb)
    imports = next(c for c in nb.cells if c.cell_type == "code" and c.source.startswith(IMPORT_CELL))
    imports.source += "\nfrom numba import float32 as f32"
    return nb


def test_an_edited_lab_cell_is_named_as_the_labs_and_what_it_imports():
    """ivan (review s24-rD H2): `from numba import float32 as f32` added to the lab's import cell. The student
    version locks that cell (nbgrader's locked, JupyterLab's editable/deletable false); an edit that got through
    (an older release, another editor) is noted as an edit of the lab's cell, not as a cell "not of the lab",
    found by the grade_id the release gives it or by its cell id (nbgrader's release keeps the source's ids),
    and a NameError of f32 points at it."""
    student = nbformat.read(str(STUDENT), as_version=4)
    imports = next(c for c in student.cells if c.cell_type == "code" and c.source.startswith(IMPORT_CELL))
    assert _meta(imports).get("locked") and _meta(imports).get("grade_id") == "lab01-code-4"
    assert imports.metadata.get("editable") is False and imports.metadata.get("deletable") is False
    with_ids = nbformat.read(str(SOURCE), as_version=4)  # nbgrader's release: the source's cells and ids
    for c in with_ids.cells:
        if c.cell_type == "code" and not _meta(c).get("grade"):
            c.metadata.pop("nbgrader", None) if not _meta(c).get("solution") else None
    for nb in (_edit_imports(_answered()), _edit_imports(with_ids)):
        a = assemble(SOURCE, nb)
        note = next(n for n in a.notes if "f32" in n)
        assert note.startswith("your edit of the lab's cell 5 (counting from 1") and "was not run" in note, note
        assert "imports f32" in note and "not a cell of the lab" not in note, note
        assert "f32" in a.added
        rec = {"error": ["NameError", "name 'f32' is not defined"]}
        said = grader._name_in_added_cell("NameError: name 'f32' is not defined", rec, a.added)
        assert said.startswith("f32 is defined only in your edit of the lab's cell 5"), said


def test_a_renamed_grade_id_found_by_cell_id_is_said_to_be_graded():
    """eve (review s24-rD M2): lab01-affine renamed lab01-affine-mine in an nbgrader release (cell ids kept): the
    answer is found by its cell id and graded, and the note says so, not "their code was not graded"."""
    nb = nbformat.read(str(SOURCE), as_version=4)
    _cell(nb, "lab01-affine").metadata["nbgrader"]["grade_id"] = "lab01-affine-mine"
    a = assemble(SOURCE, nb)
    note = next(n for n in a.notes if "lab01-affine-mine" in n)
    assert "found by cell id and graded" in note and "not graded" not in note, note
    affine = next(c for c in a.cells if c.grade_id == "lab01-affine")
    assert "cuda.grid" in affine.source


def test_an_answer_cell_that_never_finishes_is_stopped_not_failed(monkeypatch, tmp_path):
    """frank (review s24-rD M4): a right affine_kernel, then `while True: pass` at top level. The row is "stopped"
    and says the answer never finished, not "failed" with a NameError; cells are numbered from 1."""
    src = {c.grade_id: c.index for c in assemble(SOURCE, _answered()).cells if c.grade_id}

    def records(asm):
        recs = {c.index: {"error": None, "results": [], "value": None} for c in asm.cells}
        del recs[src["lab01-affine"]]
        recs[src["lab01-affine-check"]]["error"] = ("NameError", "name 'affine_kernel' is not defined")
        return recs

    skipped = {src["lab01-affine"]: "ran past the 120 s limit per cell"}
    monkeypatch.setattr(grader, "run", _fake_run(records, skipped))
    path = tmp_path / "lab01_threads.ipynb"
    nbformat.write(_answered(), str(path))
    graded = grade_notebook(path, SOURCE)
    row = next(r for r in graded.rows if r.grade_id == "lab01-affine-check")
    assert row.status == "stopped" and row.score == 0, row
    assert row.message.startswith(
        "your answer cell never finished (a loop at top level?), so affine_kernel was not defined"
    ), row.message
    assert "NameError" not in row.message
    assert f"cell {src['lab01-affine'] + 1} (lab01-affine) ran past" in row.message, row.message
