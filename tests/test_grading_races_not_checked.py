"""A kernel whose race check was due and gave no verdict (its logged run stopped at its limit, or failed) keeps its
points, and the grader says so: ``CheckResult.races_not_checked`` -> the grade row and the submission
(``GradeRow``/``Graded.races_not_checked``) -> the grade table and the class table, each with a ** marker and a
footnote, and gradebook.json. Not a CSV column: a teacher's earlier gradebook.csv merges as before."""

from __future__ import annotations

import csv
import json

import pytest

from gpulab.exercises import check_kernel, run
from gpulab.exercises.races import GPU_NOT_CHECKED
from gpulab.exercises.result import Check, CheckResult
from gpulab import grading
from gpulab.grading import gradebook
from gpulab.grading.assemble import Cell
from gpulab.grading.rows import Graded, GradeRow, format_table, score_test
from gpulab.grading.runner import _results_of

from test_exercises_extra_runs import _inputs, copy_stuck_when_logged, logged_flag  # noqa: F401
from test_grading_merge import LAB, _class, _grade, _rows

ADD = f"{LAB.split('_')[0]}-add-check"


@pytest.mark.usefixtures("logged_flag")
def test_a_stopped_logged_run_marks_the_result(monkeypatch):
    monkeypatch.setattr(run, "EXTRA_RUN_S", 1.0)  # the logged run is stopped after 1 s; the plain runs pass
    res = check_kernel(copy_stuck_when_logged, lambda x: x.copy(), inputs=_inputs, sizes=[5, 40], threads=32, timeout=5)
    assert res.status == "passed" and res.score == res.max_score, res  # no points change
    assert res.races_not_checked and res.to_dict()["races_not_checked"] is True, res
    monkeypatch.setattr(grading, "_reported", [res])  # as gpulab.grading.report leaves it in a graded cell
    (kept,) = _results_of({}, None)  # what the grading process hands the grader
    assert kept["races_not_checked"] is True and kept["ptx_not_checked"] is False, kept


def test_a_check_that_ran_or_was_never_due_is_not_marked():
    searched = check_kernel(copy_stuck_when_logged, lambda x: x.copy(), inputs=_inputs, sizes=[5, 40], threads=32)
    assert searched.status == "passed" and not searched.races_not_checked, searched  # LOGGED stays 0: it finishes
    assert "no unsynchronised accesses" in str(searched)
    on_gpu = CheckResult(
        "k", "passed", 1, 1, "ok", checks=[Check("races", True, "same result when re-run" + GPU_NOT_CHECKED)]
    )
    assert not on_gpu.races_not_checked and on_gpu.to_dict()["races_not_checked"] is False
    assert not CheckResult("k", "passed", 1, 1, "ok").races_not_checked  # an exercise without a race check


def test_the_grade_table_marks_the_row_and_says_what_it_means():
    cell = Cell(0, "test", "", ADD, 2.0)
    result = {"name": "add", "status": "passed", "score": 2, "max_score": 2, "message": "passed", "hint": ""}
    row = score_test(cell, {"results": [{**result, "races_not_checked": True}]}, "")
    assert row.status == "passed" and row.score == 2 and row.races_not_checked, row
    plain = score_test(Cell(1, "test", "", "lab01-map-check", 2.0), {"results": [result]}, "")
    assert not plain.races_not_checked
    table = format_table([row, plain]).splitlines()
    assert table[1].split()[:3] == [ADD, "2/2", "passed"] and "passed **" in table[1], table
    assert "**" not in table[2], table
    note = table[-1]
    assert note.startswith("** races not checked: ") and "1 exercise marked ** got its points" in note, note
    assert "without the kernel being searched for races" in note and "--timeout" in note, note
    assert "simulator mode" in note and "60 s" in note, note
    both = GradeRow(ADD, 2, 2, "passed", "", ptx_not_checked=True, races_not_checked=True)
    assert "passed * **" in format_table([both])


@pytest.fixture
def unsearched(monkeypatch):
    """A fake grader (as test_grading_merge's): bob's add check passes without its race search."""
    bob = {"races": False}

    def grade(sub, src, limits):
        flag = bob["races"] and "bob" in str(sub)
        rows = [
            GradeRow(ADD, 2, 2, "passed", "m", races_not_checked=flag),
            GradeRow("lab01-map-check", 2, 2, "passed", ""),
        ]
        return Graded(str(sub), src.stem, "simulator", "t", rows, [])

    monkeypatch.setattr(gradebook, "grade_notebook", grade)
    return bob


def test_merging_into_an_earlier_gradebook_keeps_every_row_and_its_columns(tmp_path, unsearched, capsys):
    subs, out = _class(tmp_path), tmp_path / "graded"
    assert _grade(str(subs), "--out", str(out)) == 0
    header = next(csv.reader(open(out / "gradebook.csv")))
    assert "races_not_checked" not in header, header
    old = json.loads((out / "gradebook.json").read_text())  # as an earlier gpulab wrote it: without the new key
    for e in old:
        e.pop("races_not_checked")
        for x in e["exercises"]:
            x.pop("races_not_checked")
    (out / "gradebook.json").write_text(json.dumps(old))
    capsys.readouterr()

    unsearched["races"] = True
    assert _grade(str(subs / "bob" / LAB), "--out", str(out), "--merge") == 0
    printed = capsys.readouterr().out
    rows = _rows(out)
    assert sorted(rows) == ["alice", "bob", "carol"] and float(rows["bob"]["score"]) == 4, rows
    assert next(csv.reader(open(out / "gradebook.csv"))) == header  # the teacher's columns, as they were
    book = {e["student"]: e for e in json.loads((out / "gradebook.json").read_text())}
    assert sorted(book) == ["alice", "bob", "carol"]
    assert book["bob"]["races_not_checked"] == [ADD] and book["bob"]["exercises"][0]["races_not_checked"] is True
    assert "races_not_checked" not in book["alice"]  # an earlier row, kept as it was
    assert f"races not checked **: {ADD}" in printed, printed
    assert "** races not checked: " in printed and "1 exercise marked ** (in 1 submission) got its points" in printed
    assert "CHANGED BY HAND" not in printed, printed
