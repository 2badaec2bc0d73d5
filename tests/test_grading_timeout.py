"""review s24-rD M6: with a short ``--timeout`` an endless kernel still gets the check's "timeout" verdict and its
infinite-loop hint, because the grader keeps a check's time per launch (30 s by default) below the cell's limit."""

from __future__ import annotations

from pathlib import Path

import pytest

from grading_attacks import with_answer
from gpulab.grading.grader import grade_notebook
from gpulab.grading.sandbox import Limits

ROOT = Path(__file__).resolve().parents[1]
SOURCE = ROOT / "labs" / "solutions" / "lab01_threads.ipynb"
ENDLESS = """from numba import cuda

@cuda.jit
def add_kernel(a, b, out):
    i = cuda.grid(1)
    while i < out.size:
        out[i] = a[i] + b[i]  # i never advances
"""


def test_a_cells_limit_caps_a_checks_time_per_launch(monkeypatch):
    from gpulab import problems
    from gpulab.exercises import check
    from gpulab.grading.kernel_time import cap_kernel_time

    assert Limits(cell_timeout=20).kernel_timeout == 16 and Limits().kernel_timeout > 30  # the default: as before
    monkeypatch.setattr(check, "run_problem", check.run_problem)  # put back after the test
    new_cell = cap_kernel_time(1.6)
    ns: dict = {}
    exec(compile(ENDLESS, "<answer>", "exec"), ns)
    new_cell()
    res = problems.lab01.ADD.check(ns["add_kernel"])
    assert res.status == "timeout" and "did not finish within 1.6 s" in res.message, res.message
    assert "an infinite loop?" in res.hint, res.hint
    hidden = problems.lab01.ADD.check(ns["add_kernel"], sizes=[100])  # the same cell: what is left, or 1/16
    assert hidden.status == "timeout" and "did not finish within 0.1 s" in hidden.message, hidden.message


@pytest.mark.slow
def test_an_endless_kernel_gets_its_hint_under_a_short_timeout(tmp_path):
    sub, _ = with_answer(tmp_path, "lab01-add", ENDLESS)
    graded = grade_notebook(sub, SOURCE, Limits(cell_timeout=20))
    row = next(r for r in graded.rows if r.grade_id == "lab01-add-check")  # its hidden check hangs too
    assert row.status == "timeout" and "did not finish within 16 s" in row.message, row
    assert "an infinite loop?" in row.hint, row.hint


def test_the_sandbox_line_says_why_there_is_no_bubblewrap(monkeypatch):
    """review s24-rD L3: "bubblewrap not found; install bubblewrap" was said where bwrap is installed but cannot
    create namespaces, and where GPULAB_GRADE_SANDBOX=user skipped it."""
    from gpulab.grading import sandbox

    monkeypatch.setattr(sandbox, "can_drop", lambda: False)
    monkeypatch.setattr(sandbox.shutil, "which", lambda name: "/usr/bin/bwrap")
    monkeypatch.delenv("GPULAB_GRADE_SANDBOX", raising=False)
    line = sandbox.describe(None)
    assert line.startswith("NO SANDBOX: bubblewrap is installed but cannot create namespaces here"), line
    assert "not found" not in line and "apt-get install" not in line
    monkeypatch.setenv("GPULAB_GRADE_SANDBOX", "user")
    assert "bubblewrap skipped (GPULAB_GRADE_SANDBOX=user)" in sandbox.describe(None)
    monkeypatch.delenv("GPULAB_GRADE_SANDBOX")
    monkeypatch.setattr(sandbox.shutil, "which", lambda name: None)
    assert "bubblewrap not found" in sandbox.describe(None) and "apt-get install bubblewrap" in sandbox.describe(None)
