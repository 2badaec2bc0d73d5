"""tests/nbval_checks.py, the plugin of `make test`'s nbval run: a notebook over its CPU budget and a lab
solution that loses points both fail, each with a message that says so; a notebook within both passes."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
pytest.importorskip("nbval")

ROOT = Path(__file__).resolve().parents[1]


def _notebook(path: Path, *cells: tuple[str, dict]) -> Path:
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nb.cells = [nbformat.v4.new_code_cell(src, metadata=meta) for src, meta in cells]
    path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, str(path))
    return path


def _graded(points: float) -> dict:
    return {"nbgrader": {"grade": True, "solution": False, "grade_id": "demo-check", "points": points}}


def _nbval(*paths: Path, budget: str = "30") -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "GPULAB_NOTEBOOK_BUDGET_S": budget, "PYTHONDONTWRITEBYTECODE": "1"}
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "tests.nbval_checks", "-p", "no:cacheprovider", "--nbval-lax",
         "--nbval-current-env", "-q", "-rA", *map(str, paths)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip


@pytest.mark.slow
def test_budget_and_full_marks(tmp_path):
    good = _notebook(tmp_path / "solutions" / "good.ipynb", ("x = 2", {}), ("float(x)", _graded(2)))
    short = _notebook(tmp_path / "solutions" / "short.ipynb", ("1.5", _graded(2)))
    silent = _notebook(tmp_path / "solutions" / "silent.ipynb", ("y = 2", _graded(2)))
    lesson = _notebook(tmp_path / "lesson.ipynb", ("1.0", _graded(2)))  # not a lab solution: points not checked
    note = "note: your kernel changed its input a (a[0] was 1, is now 2): callers expect their inputs unchanged"
    noted = _notebook(tmp_path / "noted.ipynb", (f"print({note!r})", {}))  # a verdict's note in a shipped answer
    proc = _nbval(good, short, silent, lesson, noted)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out
    assert "the reference solution scored 1.5 of 2 points in demo-check" in out
    assert "graded cell demo-check showed no value (it must end in its score, 2)" in out
    assert "a shipped answer's verdict holds a note: ...note: your kernel changed its input a" in out, out
    assert "3 failed, 3 passed" in out, out
    assert "good.ipynb: " in out and " s wall under nbval (budget 30 s of CPU)" in out
    baseline = float(re.search(r"good\.ipynb: ([\d.]+) s of CPU", out).group(1))  # a kernel's start-up

    # a budget above the start-up but below start-up + 1.5 s: the notebook that spins fails, the idle one passes
    burn = "import time\nt = time.process_time()\nwhile time.process_time() - t < 1.5:\n    pass"
    spin = _notebook(tmp_path / "spin.ipynb", (burn, {}))
    idle = _notebook(tmp_path / "idle.ipynb", ("x = 1", {}))
    proc = _nbval(spin, idle, budget=f"{baseline + 0.75:.2f}")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1 and "2 passed, 1 error" in out, out
    assert "ERROR at teardown of" in out and "spin.ipynb used" in out and "idle.ipynb used" not in out, out

    # a cell that waits burns no CPU: the wall-time bound (4 x the budget) catches it
    wait = _notebook(tmp_path / "wait.ipynb", ("import time\ntime.sleep(6)", {}))
    proc = _nbval(wait, budget="1")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1 and "wait.ipynb took" in out and "a cell waited rather than computed" in out, out
