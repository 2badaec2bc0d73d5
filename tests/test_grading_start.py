"""labs grade when the grading process dies at start: it is started once more, and when that fails too every
exercise says "not graded" and why (never a silent zero), the notes keep its last output, and the command
exits 1 with the notebooks to grade again."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from gpulab import labs
from gpulab.grading import session
from gpulab.grading.grader import NOT_STARTED, grade_notebook
from gpulab.grading.sandbox import Limits, Sandbox

ROOT = Path(__file__).resolve().parents[1]
SOURCE = ROOT / "labs" / "solutions" / "lab01_threads.ipynb"
STUDENT = ROOT / "labs" / "student" / "lab01_threads.ipynb"
DYING = "import sys; sys.stdout.write('ZMQError: Address already in use\\n'); sys.exit(3)"


def _dying_starts(monkeypatch, failures: int) -> list[int]:
    """Sandbox.start runs a process that dies at once for the first ``failures`` calls; counts the calls."""
    calls: list[int] = []
    real = Sandbox.start

    def start(self, fds, out_fd):
        calls.append(1)
        if len(calls) > failures:
            return real(self, fds, out_fd)
        return subprocess.Popen(
            [sys.executable, "-c", DYING], stdout=out_fd, stderr=subprocess.STDOUT, pass_fds=fds, start_new_session=True
        )

    monkeypatch.setattr(Sandbox, "start", start)
    return calls


def test_a_runner_that_never_starts_leaves_every_exercise_not_graded_with_the_reason(monkeypatch):
    calls = _dying_starts(monkeypatch, failures=session.START_TRIES)
    graded = grade_notebook(STUDENT, SOURCE, Limits(cell_timeout=60))
    assert len(calls) == session.START_TRIES == 2
    assert graded.rows and all(r.status == "not graded" and r.message == NOT_STARTED for r in graded.rows)
    assert graded.score == 0 and graded.max_score > 0  # the points it was not graded for still show
    note = graded.notes[0]
    assert "did not start in 2 tries" in note and "exit code 3" in note, note
    assert "ZMQError: Address already in use" in note  # the process's last output
    assert "before any code of the submission ran" in note and "Grade this notebook again" in note


def test_labs_grade_exits_1_and_names_the_notebook_to_grade_again(monkeypatch, capsys):
    _dying_starts(monkeypatch, failures=session.START_TRIES)
    assert labs.main(["grade", str(STUDENT), "--root", str(ROOT), "--timeout", "60"]) == 1
    out = capsys.readouterr().out
    assert "not graded" in out and "note: The grading process did not start in 2 tries" in out


def test_a_folder_lists_the_notebooks_not_graded(monkeypatch, capsys, tmp_path):
    subs = tmp_path / "subs" / "alice"
    subs.mkdir(parents=True)
    (subs / STUDENT.name).write_bytes(STUDENT.read_bytes())
    _dying_starts(monkeypatch, failures=session.START_TRIES)
    argv = ["grade", str(tmp_path / "subs"), "--out", str(tmp_path / "out"), "--workers", "1", "--root", str(ROOT)]
    assert labs.main(argv) == 1
    out = capsys.readouterr().out
    assert "1 notebook(s) were not graded" in out and str(subs / STUDENT.name) in out
    feedback = (tmp_path / "out" / "feedback" / f"alice__{STUDENT.stem}.html").read_text()
    assert "not graded" in feedback and "did not start" in feedback


def test_a_runner_that_dies_at_first_start_is_started_again_and_grades(monkeypatch):
    calls = _dying_starts(monkeypatch, failures=1)
    graded = grade_notebook(STUDENT, SOURCE, Limits(cell_timeout=120))
    assert len(calls) == 2
    assert graded.rows and all(r.status == "not implemented" for r in graded.rows)  # the blank release, graded
    assert any("did not start at first" in n and "it did on try 2" in n for n in graded.notes), graded.notes


def test_scores_from_before_a_stopped_cell_stand_when_the_restart_does_not_start(monkeypatch, tmp_path):
    """A cell that kills the runner makes it start again without that cell; if that start fails twice, the
    exercises graded before it keep their rows and only the rest say "not graded"."""
    nb = nbformat.read(str(STUDENT), as_version=4)
    answers = [c for c in nb.cells if c.get("metadata", {}).get("nbgrader", {}).get("solution")]
    answers[1].source = "import os\nos._exit(9)"
    sub = tmp_path / STUDENT.name
    nbformat.write(nb, str(sub))
    calls: list[int] = []
    real = Sandbox.start

    def start(self, fds, out_fd):  # the first start is real, the restarts die
        calls.append(1)
        if len(calls) == 1:
            return real(self, fds, out_fd)
        return subprocess.Popen(
            [sys.executable, "-c", DYING], stdout=out_fd, stderr=subprocess.STDOUT, pass_fds=fds, start_new_session=True
        )

    monkeypatch.setattr(Sandbox, "start", start)
    graded = grade_notebook(sub, SOURCE, Limits(cell_timeout=120))
    assert len(calls) == 1 + session.START_TRIES
    statuses = [r.status for r in graded.rows]
    assert statuses[0] == "not implemented" and statuses[1:] == ["not graded"] * (len(statuses) - 1), statuses
    assert any("did not start in 2 tries" in n for n in graded.notes)


def test_a_restart_that_finds_the_total_time_spent_is_not_a_start_failure(monkeypatch):
    """After a stopped cell the runner starts again; if the submission's total time runs out while it starts, that
    is the total time limit (grading again would meet it too), not "did not start, grade again"."""
    calls: list[float] = []

    def never_ready(cells, skip, sandbox, deadline):
        calls.append(deadline)
        raise session._NotReady("ran past the submission's total time limit", "")

    monkeypatch.setattr(session, "_session", never_ready)
    spent = session.time.monotonic() - 1
    with pytest.raises(session._OutOfTime):
        session._started_session([], {}, None, spent, {3: {"index": 3}}, [])  # type: ignore[arg-type]
    assert len(calls) == 1  # not started a second time


def test_run_reports_the_total_time_when_a_restart_runs_out_of_it(monkeypatch):
    from types import SimpleNamespace

    def out_of_time(*args, **kwargs):
        raise session._OutOfTime

    monkeypatch.setattr(session, "_started_session", out_of_time)
    sandbox = SimpleNamespace(limits=Limits(cell_timeout=60))
    records, skip, reason, notes = session.run(SimpleNamespace(cells=[]), sandbox)  # type: ignore[arg-type]
    assert records == {} and skip == {} and notes == [] and "the total time ran out" in reason
