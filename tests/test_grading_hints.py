"""Hints a student gets from labs grade (review s24-rD L5, L9): a renamed answer kernel is named as such, and a part
score says the rule behind it, in report()'s output (what nbgrader's feedback shows) and on the feedback page."""

from __future__ import annotations

from pathlib import Path

from grading_attacks import with_answer
from gpulab.grading import grader, report
from gpulab.grading.assemble import assemble
from gpulab.grading.grader import grade_notebook
from gpulab.grading.rows import Graded, GradeRow

ROOT = Path(__file__).resolve().parents[1]
SOURCE = ROOT / "labs" / "solutions" / "lab01_threads.ipynb"
VECTOR_ADD = """@cuda.jit
def vector_add(a, b, out):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = a[i] + b[i]
"""


def test_a_renamed_answer_kernel_gets_a_hint(monkeypatch, tmp_path):
    """hugo named his kernel vector_add: the row said "NameError: name 'add_kernel' is not defined", hint ""."""
    sub, nb = with_answer(tmp_path, "lab01-add", VECTOR_ADD)
    check = next(c.index for c in assemble(SOURCE, nb).cells if c.grade_id == "lab01-add-check")

    def run(assembled, sandbox):  # what the runner records: the test cell's NameError (the sandbox is tested elsewhere)
        recs = {c.index: {"error": None, "results": [], "value": None} for c in assembled.cells}
        recs[check]["error"] = ("NameError", "name 'add_kernel' is not defined")
        return recs, {}, "", []

    monkeypatch.setattr(grader, "run", run)
    row = next(r for r in grade_notebook(sub, SOURCE).rows if r.grade_id == "lab01-add-check")
    assert row.message == "NameError: name 'add_kernel' is not defined", row
    assert row.hint.startswith("your answer cell lab01-add defines vector_add, but the check calls add_kernel"), row
    other = next(r for r in grade_notebook(sub, SOURCE).rows if r.grade_id == "lab01-affine-check")
    assert other.hint == "", other  # a cell that defines the lab's name gets no such hint


class _Verdict:
    def __init__(self, name: str, status: str, score: float, max_score: float) -> None:
        self.name, self.status, self.score, self.max_score = name, status, score, max_score

    def __repr__(self) -> str:
        return f"{self.name}: {self.status}"


def test_a_part_score_says_the_rule(capsys, tmp_path):
    from gpulab.grading import PARTIAL_RULE

    assert report(_Verdict("affine_kernel", "failed", 1.0, 2.0), points=2) == 1.0
    printed = capsys.readouterr().out
    assert "This cell: 1/2 points." in printed and PARTIAL_RULE in printed, printed
    assert "right only with x and y exchanged" in PARTIAL_RULE
    assert report(_Verdict("add_kernel", "passed", 2.0, 2.0), points=2) == 2.0
    assert "Partial credit" not in capsys.readouterr().out  # full marks: no rule
    rows = [GradeRow("lab01-affine-check", 2, 1, "partial", "out[0, 0]: expected 1, got 2", "swap i and j", "failed")]
    page = tmp_path / "p.html"
    from gpulab.grading.gradebook import write_feedback

    write_feedback(Graded("x.ipynb", "lab01_threads", "simulator", "t", rows, []), page)
    assert "Partial credit: a check earns all its points, half when" in page.read_text()
