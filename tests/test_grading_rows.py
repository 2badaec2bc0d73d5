"""What ``labs grade`` says a row is: "partial" for some of a cell's points (the check's own status kept in
``verdict``), each function of a cell that checks several by name with its verdict's key lines, a notebook that
could not be graded "not graded" with the reason (an empty cell in the CSV, never 0/0), and --json / --out paths
that could only fail after grading refused before it."""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path

import nbformat
import pytest

from gpulab import labs
from gpulab.grading import gradebook, grader
from gpulab.grading.assemble import Cell
from gpulab.grading.rows import Graded, GradeRow, format_table, score_test

ROOT = Path(__file__).resolve().parents[1]
SOLUTIONS = ROOT / "labs" / "solutions"
SOURCE = SOLUTIONS / "lab01_threads.ipynb"
STUDENT = ROOT / "labs" / "student" / "lab01_threads.ipynb"
BASE = {"index": 0, "kind": "test", "tampered": "", "stderr": "", "error": None, "value": None}

# lab 09's relu cell checks two functions; these are the verdicts of a wrong relu and a wrong relu_backward
# (from grading such a notebook on 2026-12-03)
RELU = {
    "name": "relu",
    "status": "failed",
    "score": 0.0,
    "max_score": 2.0,
    "message": "y[2]: expected 0, got -0.71168077 (18 of 37 elements wrong)\n"
    "input: size=37, seed=1 (inputs: float32(37,))\nlaunch: host function nn_ops.relu(...)",
    "hint": "",
}
BACKWARD = {
    "name": "relu_backward",
    "status": "failed",
    "score": 0.0,
    "max_score": 2.0,
    "message": "dx[0]: expected 0, got 0.27392337 (1 of 1 elements wrong)\n"
    "input: size=1, seed=0 (inputs: float32(1,), float32(1,))\nlaunch: host function nn_ops.relu_backward(...)",
    "hint": "dx[i] = dout[i] only where y[i] > 0",
}
RELU_CELL = Cell(0, "test", "", "lab09-relu-check", 2.0)


def _meta(c):
    return c.metadata.get("nbgrader", {})


def test_some_of_the_points_is_partial_and_keeps_the_checks_status():
    """A 1/2 row said "failed" (the check's status), as a 0/2 does; now "partial", the check's status in verdict."""
    cell = Cell(0, "test", "", "lab01-affine-check", 2.0)
    rows = {"orientation": "failed", "budget": "over budget"}
    for what, status in rows.items():
        verdict = {"name": "affine_kernel", "status": status, "score": 1.0, "max_score": 2.0, "message": f"but {what}"}
        row = score_test(cell, {**BASE, "value": 1.0, "results": [verdict]}, "")
        assert (row.score, row.status, row.verdict, row.message) == (1.0, "partial", status, f"but {what}")
    wrong = {"name": "affine_kernel", "status": "failed", "score": 0.0, "max_score": 2.0, "message": "out[0] wrong"}
    row = score_test(cell, {**BASE, "value": 0.0, "results": [wrong]}, "")
    assert (row.score, row.status, row.verdict) == (0.0, "failed", "failed")
    row = score_test(cell, {**BASE, "value": 0.0, "results": [{**wrong, "status": "passed"}]}, "")
    assert row.status == "failed"  # 0 points is never "partial"
    row = score_test(cell, {**BASE, "results": [{**wrong, "status": "passed", "message": "correct"}]}, "")
    assert (row.status, row.verdict) == ("passed", "passed")


def test_a_two_function_cell_names_each_function_with_its_key_lines():
    """Both wrong: the second function kept only its first line (no input, no launch); one wrong: its lines
    without its name, so a 1/2 did not say which function earned it."""
    note = {**RELU, "message": RELU["message"] + "\nyour kernel changed its input x"}  # not a key line
    row = score_test(RELU_CELL, {**BASE, "value": 0.0, "results": [note, BACKWARD]}, "")
    assert row.message.splitlines() == [
        "relu: y[2]: expected 0, got -0.71168077 (18 of 37 elements wrong)",
        "  input: size=37, seed=1 (inputs: float32(37,))",
        "  launch: host function nn_ops.relu(...)",
        "relu_backward: dx[0]: expected 0, got 0.27392337 (1 of 1 elements wrong)",
        "  input: size=1, seed=0 (inputs: float32(1,), float32(1,))",
        "  launch: host function nn_ops.relu_backward(...)",
    ], row.message
    assert (row.status, row.hint) == ("failed", "relu_backward: dx[i] = dout[i] only where y[i] > 0")
    passed = {**RELU, "status": "passed", "score": 2.0, "message": "correct on all 3 inputs"}
    row = score_test(RELU_CELL, {**BASE, "value": 1.0, "results": [passed, BACKWARD]}, "")
    assert row.message.splitlines() == [
        "relu: passed",
        "relu_backward: dx[0]: expected 0, got 0.27392337 (1 of 1 elements wrong)",
        "  input: size=1, seed=0 (inputs: float32(1,), float32(1,))",
        "  launch: host function nn_ops.relu_backward(...)",
    ], row.message
    assert (row.score, row.status, row.verdict) == (1.0, "partial", "failed")
    table = format_table([row]).splitlines()[1]
    assert "partial" in table and "relu: passed / relu_backward: dx[0]" in table, table


def _answered(**edits: tuple[str, str]) -> nbformat.NotebookNode:
    """The student version with the lab's solutions pasted in, ``edits[grade_id] = (old, new)`` applied."""
    sols = {
        _meta(c)["grade_id"]: re.sub(r"^\s*### (BEGIN|END) SOLUTION[^\n]*(\n|\Z)", "", c.source, flags=re.M)
        for c in nbformat.read(str(SOURCE), as_version=4).cells
        if _meta(c).get("solution")
    }
    nb = nbformat.read(str(STUDENT), as_version=4)
    for c in nb.cells:
        gid = _meta(c).get("grade_id")
        if gid in sols:
            old, new = edits.get(gid.replace("-", "_"), ("", ""))
            c.source = sols[gid].replace(old, new) if old else sols[gid]
    return nb


def test_a_partial_row_reads_partial_in_the_table_json_and_feedback(tmp_path, capsys):
    """alice's affine kernel takes the row from x: right only with x and y exchanged, half the cell."""
    nb = _answered(lab01_affine=("j, i = cuda.grid(2)", "i, j = cuda.grid(2)"))
    path, out, target = tmp_path / "lab01_threads.ipynb", tmp_path / "out", tmp_path / "alice.json"
    nbformat.write(nb, str(path))
    assert labs.main(["grade", str(path), "--json", str(target), "--out", str(out), "--root", str(ROOT)]) == 0
    line = next(ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("lab01-affine-check"))
    assert re.match(r"lab01-affine-check\s+1/2\s+partial\s+correct on all", line), line
    row = next(r for r in json.loads(target.read_text())["exercises"] if r["grade_id"] == "lab01-affine-check")
    assert (row["score"], row["status"], row["verdict"]) == (1.0, "partial", "failed"), row
    assert "x and y exchanged" in row["message"]
    page = (out / "lab01_threads.html").read_text()
    assert "<td>1 / 2</td><td style='color:#9a6700'><b>partial</b>" in page


def _broken_class(tmp_path: Path) -> Path:
    """alice: a notebook (graded by a stand-in); bob: cut in the middle of its JSON; carol: no cells at all."""
    subs = tmp_path / "submitted"
    for who in ("alice", "bob", "carol"):
        (subs / who).mkdir(parents=True)
    (subs / "alice" / STUDENT.name).write_bytes(STUDENT.read_bytes())
    raw = STUDENT.read_bytes()
    (subs / "bob" / STUDENT.name).write_bytes(raw[: len(raw) // 2])
    empty = nbformat.read(str(STUDENT), as_version=4)
    empty.cells = []
    nbformat.write(empty, str(subs / "carol" / STUDENT.name))
    return subs


def test_a_notebook_that_could_not_be_graded_is_not_graded_never_0_of_0(tmp_path, monkeypatch, capsys):
    """bob's and carol's rows were 0/0 in the table (a score of 0 in gradebook.json, max_score 0 in the CSV),
    carol's 0/12 with "answer not found" rows, and the command exited 0."""
    real = gradebook.grade_notebook

    def grade(sub, src, limits):  # the real grader refuses bob's and carol's before any sandbox starts
        if "alice" in str(sub):
            return Graded(str(sub), src.stem, "simulator", "t", [GradeRow("lab01-add-check", 2, 2, "passed", "")], [])
        return real(sub, src, limits)

    monkeypatch.setattr(gradebook, "grade_notebook", grade)
    subs, out = _broken_class(tmp_path), tmp_path / "out"
    assert (
        labs.main(["grade", str(subs), "--out", str(out), "--json", str(tmp_path / "all.json"), "--root", str(ROOT)])
        == 1
    )
    printed = capsys.readouterr().out
    table = {ln.split()[0]: ln for ln in printed.splitlines() if ln.startswith(("alice", "bob", "carol"))}
    assert [table[w].split()[2] for w in ("alice", "bob", "carol")] == ["2/2", "not", "not"], table  # no 0/0
    assert "not graded  note: not graded: " in table["bob"] and "not valid notebook JSON" in table["bob"], table
    assert "not graded  note: not graded: " in table["carol"] and "has no code in it" in table["carol"], table
    assert printed.splitlines()[0].startswith("graded with mode: simulator;") and " | " not in printed.splitlines()[0]
    assert "2 notebook(s) were not graded" in printed
    assert "may be truncated. For the teacher: ask for the submission again" in printed
    rows = {r["student"]: r for r in csv.DictReader(open(out / "gradebook.csv"))}
    exercises = [e for e in rows["bob"] if e.endswith("-check")]
    assert len(exercises) == 5  # lab01's, from the source, although nothing of bob's could be read
    for who in ("bob", "carol"):
        assert rows[who]["score"] == "" and float(rows[who]["max_score"]) == 12, rows[who]
        assert all(rows[who][e] == "" for e in exercises), rows[who]
    book = {e["student"]: e for e in json.loads((tmp_path / "all.json").read_text())}
    assert [book[w]["not_graded"] for w in ("alice", "bob", "carol")] == [False, True, True]
    assert {r["status"] for r in book["carol"]["exercises"]} == {"not graded"}
    assert all("has no code in it" in r["message"] for r in book["carol"]["exercises"])
    page = (out / "feedback" / "bob__lab01_threads.html").read_text()
    assert "lab01_threads: not graded</h1>" in page and "0 / 12" not in page and "Graded in  mode" not in page
    assert "<td>&ndash; / 2</td>" in page and "may be truncated" in page
    # one notebook: refused with the reason, as a truncated one is
    assert labs.main(["grade", str(subs / "carol" / STUDENT.name), "--root", str(ROOT)]) == 2
    assert "has no code in it" in capsys.readouterr().err


@pytest.fixture
def no_grading(monkeypatch):
    """Records any grading (none must start); the calls made."""
    calls: list = []
    monkeypatch.setattr(gradebook, "grade_notebook", lambda *a, **k: calls.append(a))
    monkeypatch.setattr(grader, "grade_notebook", lambda *a, **k: calls.append(a))
    return calls


def test_json_folder_and_out_file_are_refused_before_grading(tmp_path, capsys, no_grading):
    """--json DIR failed with IsADirectoryError after grading the whole class (exit 1); --out FILE with
    FileExistsError (before grading for a folder, after it for one notebook)."""
    subs = _broken_class(tmp_path)
    folder, file = tmp_path / "scores", tmp_path / "graded.txt"
    folder.mkdir()
    file.write_text("not a folder")
    one = subs / "alice" / STUDENT.name
    cases = [
        ([str(subs), "--json", str(folder)], f"--json {folder} is a folder; --json takes the name of the file"),
        ([str(one), "--json", str(folder)], f"--json {folder} is a folder"),
        ([str(subs), "--out", str(file)], f"--out {file} is a file"),
        ([str(one), "--out", str(file)], f"--out {file} is a file; --out takes a folder"),
        ([str(subs), "--out", str(file / "graded")], f"is below {file}, a file, not a folder"),
    ]
    for argv, expected in cases:
        assert labs.main(["grade", *argv, "--root", str(ROOT)]) == 2, argv
        err = capsys.readouterr().err
        assert expected in err and "Traceback" not in err, (argv, err)
    assert no_grading == [] and not (tmp_path / "submitted-graded").exists()


def _other_labs_class(tmp_path: Path) -> Path:
    """alice: lab01 (graded by a stand-in); bob: lab03's notebook saved as lab01_threads.ipynb; carol: lab03's
    notebook under its own name; dave: lab01 from a much older release (none of its answer cells' ids is in any lab);
    erin: lab03's notebook as submission.ipynb (lab03's by its cells' ids)."""
    subs = tmp_path / "submitted"
    for who in ("alice", "bob", "carol", "dave", "erin"):
        (subs / who).mkdir(parents=True)
    lab03 = (ROOT / "labs" / "student" / "lab03_matmul.ipynb").read_bytes()
    (subs / "alice" / STUDENT.name).write_bytes(STUDENT.read_bytes())
    (subs / "bob" / STUDENT.name).write_bytes(lab03)
    (subs / "carol" / "lab03_matmul.ipynb").write_bytes(lab03)
    (subs / "erin" / "submission.ipynb").write_bytes(lab03)
    old = nbformat.read(str(STUDENT), as_version=4)
    for c in old.cells:
        if _meta(c).get("solution"):
            c.metadata["nbgrader"]["grade_id"] = _meta(c)["grade_id"].replace("lab01-", "lab01-v0-")
            c["id"] = f"v0-{c['id']}"  # a much older release: its cells' ids differ too (the current ones find answers)
    nbformat.write(old, str(subs / "dave" / STUDENT.name))
    return subs


def test_another_labs_notebook_is_not_graded_and_says_whose_it_is(tmp_path, monkeypatch, capsys):
    """bob's and dave's rows read 0/12 (every exercise "not implemented") with a note "another lab, or an older
    release?", and the command exited 0; now "not graded" with what the notebook is, as an unreadable one."""
    real = gradebook.grade_notebook

    def grade(sub, src, limits):  # the real grader refuses bob's and dave's before any sandbox starts
        if "alice" in str(sub):
            return Graded(str(sub), src.stem, "simulator", "t", [GradeRow("lab01-add-check", 2, 2, "passed", "")], [])
        return real(sub, src, limits)

    monkeypatch.setattr(gradebook, "grade_notebook", grade)
    subs, out, book_file = _other_labs_class(tmp_path), tmp_path / "out", tmp_path / "all.json"
    argv = ["grade", str(subs), "--lab", "lab01", "--out", str(out), "--json", str(book_file), "--root", str(ROOT)]
    assert labs.main(argv) == 1
    printed = capsys.readouterr().out
    table = {ln.split()[0]: ln for ln in printed.splitlines() if ln.startswith(("alice", "bob", "carol", "dave", "e"))}
    assert sorted(table) == ["alice", "bob", "dave"], table  # carol's and erin's are lab03's by name, ids: skipped
    assert [table[w].split()[2] for w in ("alice", "bob", "dave")] == ["2/2", "not", "not"], table
    who = "not graded  note: not graded: lab01_threads.ipynb is lab03_matmul's notebook, not lab01_threads's"
    assert who in table["bob"], table
    assert "not graded  note: not graded: lab01_threads.ipynb is not lab01_threads's notebook" in table["dave"], table
    skipped = f"skipped 2 notebook(s) of other labs: {subs / 'carol' / 'lab03_matmul.ipynb'}, {subs / 'erin'}"
    assert skipped in printed, printed  # as before, and only those: bob and dave are not skipped and not graded
    again = printed.split("2 notebook(s) were not graded; grade them again, or ask for them again, as each says:\n")
    listed = again[1].splitlines()
    assert [ln.split(": ")[0].strip() for ln in listed] == [str(subs / w / STUDENT.name) for w in ("bob", "dave")]
    assert (
        ": is lab03_matmul's notebook, not lab01_threads's: its answer cells (lab03-dense, lab03-matmul, lab03-vecmat) "
        "are lab03_matmul's, and lab01_threads asks for lab01-add, lab01-affine, "
    ) in listed[0], listed[0]
    assert "in none of the course's labs (a much older release?): lab01-v0-add, lab01-v0-affine" in listed[1], listed
    rows = {r["student"]: r for r in csv.DictReader(open(out / "gradebook.csv"))}
    exercises = [e for e in rows["bob"] if e.endswith("-check")]
    assert len(exercises) == 5 and "carol" not in rows and "erin" not in rows
    for w in ("bob", "dave"):
        assert rows[w]["score"] == "" and float(rows[w]["max_score"]) == 12, rows[w]
        assert all(rows[w][e] == "" for e in exercises), rows[w]
    book = {e["student"]: e for e in json.loads(book_file.read_text())}
    assert [book[w]["not_graded"] for w in ("alice", "bob", "dave")] == [False, True, True]
    assert {r["status"] for r in book["bob"]["exercises"]} == {"not graded"}
    assert all("or grade this one alone with --lab lab03_matmul" in r["message"] for r in book["bob"]["exercises"])
    assert book["dave"]["notes"] == [book["dave"]["exercises"][0]["message"]]  # the reason, no "answer not found"
    page = (out / "feedback" / "bob__lab01_threads.html").read_text()
    assert "lab01_threads: not graded</h1>" in page and "0 / 12" not in page
    assert "<td>&ndash; / 2</td>" in page and "is lab03_matmul&#x27;s notebook, not lab01_threads&#x27;s" in page
    # one notebook: refused with the reason (exit 2), nothing run and nothing written
    target = tmp_path / "bob.json"
    assert labs.main(["grade", str(subs / "bob" / STUDENT.name), "--json", str(target), "--root", str(ROOT)]) == 2
    err = capsys.readouterr().err
    assert "lab01_threads.ipynb is lab03_matmul's notebook, not lab01_threads's" in err and "Traceback" not in err
    assert not target.exists()


# lab 09's challenge cell: a check that passed (the tiny training step), then an error; or an error and no check
TRAIN_CELL = Cell(0, "test", "", "lab09-train-check", 4.0)
TINY_STEP = {
    "name": "step_on_your_kernels",
    "status": "passed",
    "score": 4.0,
    "max_score": 4.0,
    "message": "correct on all 2 inputs (2, 5).",
    "hint": "",
}


def test_an_error_after_a_passed_check_shows_the_error_not_the_passed_message():
    nan = (
        "op 'relu': your kernel produced NaN or inf during training (launch 1 of this training): its output of shape "
        "(16, 16, 8, 8) has 16384 of 16384 elements NaN or inf, the first at [0, 0, 0, 0] (its check passed ...)."
    )
    row = score_test(TRAIN_CELL, {**BASE, "results": [TINY_STEP], "error": ["CapstoneError", nan]}, "")
    assert row.score == 0 and row.status == "failed", row
    # before: "correct on all 2 inputs (2, 5)." (the passed tiny step's message)
    assert row.message.startswith("CapstoneError: op 'relu': your kernel produced NaN"), row.message
    assert "correct on all" not in row.message


def test_an_error_without_a_check_shows_every_line_of_it():
    ptx = (
        "matmul: the simulator ran this kernel, but a GPU would refuse it (NVVM could not compile it to PTX):\n"
        "- matmul: `cuda.shared.array((TILE, TILE + 1), ...)` (line 3): `TILE + 1` is arithmetic ..."
    )
    row = score_test(TRAIN_CELL, {**BASE, "results": [], "error": ["CapstoneError", ptx]}, "")
    # before: the first line only, which (then) did not name the op
    assert row.message == f"CapstoneError: {ptx}", row.message
    assert row.status == "failed" and row.score == 0


def test_not_ready_to_train_lists_each_op_and_a_stub_is_not_implemented_yet():
    ready = "training starts once every op is yours; not yet:\n- matmul: its check failed: fix it with the verdict"
    row = score_test(TRAIN_CELL, {**BASE, "results": [], "error": ["NotImplementedError", ready]}, "")
    assert row.status == "not implemented" and row.message == ready, row  # before: "not implemented yet"
    stub = score_test(
        TRAIN_CELL, {**BASE, "results": [], "error": ["NotImplementedError", "replace this line with your code"]}, ""
    )
    assert stub.status == "not implemented" and stub.message == "not implemented yet", stub


def test_student_of_a_notebook_in_its_assignment_folder():
    """`labs grade submitted/bob/lab01_threads` grades bob (review s24-rD M1: it named him lab01_threads);
    a folder lab01_threads/ of notebooks named after students still takes each file's name."""
    from gpulab.grading.gradebook import _student

    labs = ["lab01_threads", "lab03_matmul"]
    sub = Path("submitted")
    nb = sub / "bob" / "lab01_threads" / "lab01_threads.ipynb"
    assert _student(nb, sub / "bob" / "lab01_threads", labs) == "bob"
    assert _student(nb, sub / "bob", labs) == "bob"
    assert _student(nb, sub, labs) == "bob"
    copy = sub / "bob" / "lab01" / "lab01_threads (1).ipynb"
    assert _student(copy, copy.parent, labs) == "bob"
    assert _student(Path("lab01_threads") / "alice.ipynb", Path("lab01_threads"), labs) == "alice"
