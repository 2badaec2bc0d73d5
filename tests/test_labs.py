"""Labs: solution notebooks are well formed, student versions are current and free of solutions,
and `python -m gpulab labs grade` scores a submission per exercise.

(nbval runs the solution notebooks themselves: `make test` includes labs/solutions.)
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import nbformat
import pytest

from gpulab import labs

ROOT = Path(__file__).resolve().parents[1]
SOLUTIONS = sorted((ROOT / "labs" / "solutions").glob("*.ipynb"))


def test_one_lab_per_lesson():
    names = [p.name for p in SOLUTIONS]
    for prefix in (
        "lab01_",
        "lab02_",
        "lab03_",
        "lab04_",
        "lab05_",
        "lab06_",
        "lab07_",
        "lab08_",
        "lab09_",
        "lab10_",
        "lab11_",
        "lab12_",
    ):  # every lesson after 00 (the tour)
        assert any(n.startswith(prefix) for n in names), f"no {prefix}* lab in labs/solutions"


@pytest.mark.parametrize("path", SOLUTIONS, ids=lambda p: p.name)
def test_solution_notebook_structure(path):
    nb = nbformat.read(str(path), as_version=4)
    first, setup, banner = nb.cells[:3]
    assert first.cell_type == "markdown" and first.source.startswith("# Lab ")
    assert f"blob/main/labs/solutions/{path.name})" in first.source and "colab-badge.svg" in first.source
    assert setup.metadata.get("tags") == ["colab-setup"]
    assert 'if "google.colab" in sys.modules:' in setup.source and "pip install" in setup.source
    assert "import gpulab" in banner.source and "print(gpulab.banner())" in banner.source
    assert nb.metadata["kernelspec"] == {"name": "python3", "display_name": "Python 3", "language": "python"}
    assert path.stat().st_size < 1_000_000

    graded, solutions, ids = [], [], []
    for cell in nb.cells:
        meta = cell.metadata.get("nbgrader")
        if not meta:
            continue
        assert meta["schema_version"] == 3 and {"grade", "solution", "locked", "grade_id"} <= set(meta)
        ids.append(meta["grade_id"])
        if meta["solution"]:
            solutions.append(cell)
            assert labs.BEGIN in cell.source and labs.END in cell.source
        if meta["grade"]:
            graded.append(cell)
            assert meta["points"] > 0 and meta["locked"]
            assert "check_kernel(" in cell.source or ".check(" in cell.source
            # the cell's value is its points (nbgrader partial credit; labs grade reads the same value)
            last = cell.source.rstrip().splitlines()[-1]
            assert last == f"report(*results, points={meta['points']:g})", last
            if "check_kernel(" in cell.source:  # gpulab.problems checks: points compared in test_problems.py
                assert f"points={meta['points']}" in cell.source, "harness points must match nbgrader points"
    assert len(ids) == len(set(ids)), "grade_ids must be unique"
    assert len(graded) >= 3 and len(solutions) >= 3, "several graded exercises per lab"
    assert any("Challenge" in c.source for c in nb.cells if c.cell_type == "markdown")
    # committed executed: every graded check ran and earned full marks
    for cell in graded:
        assert cell.execution_count is not None and not any(o.output_type == "error" for o in cell.outputs)
        values = [o["data"]["text/plain"] for o in cell.outputs if o.output_type == "execute_result"]
        assert values and float(values[-1]) == cell.metadata["nbgrader"]["points"], (cell.metadata["nbgrader"], values)


def test_labs_check_passes_on_the_repository(capsys):
    assert labs.main(["check", "--root", str(ROOT)]) == 0
    assert "contain no solution text" in capsys.readouterr().out


def _copy_labs(tmp_path: Path) -> Path:
    shutil.copytree(ROOT / "labs", tmp_path / "labs")
    return tmp_path


def test_release_replaces_every_solution_region(tmp_path):
    root = _copy_labs(tmp_path)
    shutil.rmtree(root / "labs" / "student")
    written = labs.release(root)
    assert sorted(p.name for p in written) == [p.name for p in SOLUTIONS]
    for path in written:
        text = path.read_text()
        nb = nbformat.reads(text, as_version=4)
        assert labs.BEGIN not in text and labs.END not in text
        assert f"blob/main/labs/student/{path.name})" in nb.cells[0].source
        stubs = [c for c in nb.cells if c.metadata.get("nbgrader", {}).get("solution")]
        assert stubs and all("# YOUR CODE HERE" in c.source and labs.CODE_STUB in c.source for c in stubs)
        assert all(not c.get("outputs") and c.get("execution_count") is None for c in nb.cells if c.cell_type == "code")
    assert labs.check(root) == []  # (that the committed versions are current is test_labs_check_passes...)


def test_check_detects_stale_missing_leaking_and_orphan_versions(tmp_path):
    root = _copy_labs(tmp_path)
    sol = root / "labs" / "solutions" / SOLUTIONS[0].name
    student = root / "labs" / "student" / SOLUTIONS[0].name
    labs.release(root)
    assert labs.check(root) == []

    # stale: the solution changed after the last release
    nb = nbformat.read(str(sol), as_version=4)
    nb.cells.append(nbformat.v4.new_markdown_cell("A new paragraph."))
    nbformat.write(nb, str(sol))
    problems = labs.check(root)
    assert any("stale" in p.problem and p.path.endswith(SOLUTIONS[0].name) for p in problems)
    assert labs.main(["check", "--root", str(root)]) == 1
    labs.release(root)
    assert labs.check(root) == []

    # leaking: a solution line copied into the student version
    leak_line = next(
        line.strip()
        for c in nb.cells
        if labs.BEGIN in c.source
        for line in c.source.split(labs.BEGIN, 1)[1].splitlines()
        if len(line.strip()) >= 12
    )
    snb = nbformat.read(str(student), as_version=4)
    stub_cell = next(c for c in snb.cells if labs.CODE_STUB in c.source)
    stub_cell.source = stub_cell.source.replace(labs.CODE_STUB, leak_line)
    nbformat.write(snb, str(student))
    problems = labs.check(root)
    assert any("contains solution text" in p.problem and leak_line in p.problem for p in problems)

    # missing student version and a student version without a solution
    student.unlink()
    (root / "labs" / "student" / "lab99_orphan.ipynb").write_text(student.with_suffix(".x").name)
    problems = {p.problem.split(":")[0] for p in labs.check(root)}
    assert "missing" in problems and "has no solution notebook in labs/solutions" in problems


def _student_lab01_with(tmp_path: Path, add_body: str) -> Path:
    """The released lab 01 student version with a learner's answer typed into exercise 1."""
    path = ROOT / "labs" / "student" / "lab01_threads.ipynb"
    nb = nbformat.read(str(path), as_version=4)
    cell = next(c for c in nb.cells if "def add_kernel" in c.source)
    cell.source = cell.source.replace(f"    # YOUR CODE HERE\n    {labs.CODE_STUB}", add_body)
    out = tmp_path / "submission.ipynb"
    nbformat.write(nb, str(out))
    return out


@pytest.mark.slow
def test_grade_a_student_version_with_one_wrong_answer(tmp_path, capsys):
    """All exercises 'not implemented' except exercise 1, answered without a bounds guard."""
    sub = _student_lab01_with(tmp_path, "    i = cuda.grid(1)\n    out[i] = a[i] + b[i]")
    report = tmp_path / "grade.json"
    assert labs.main(["grade", str(sub), "--json", str(report), "--timeout", "120"]) == 0
    table = capsys.readouterr().out
    data = json.loads(report.read_text())
    rows = {r["grade_id"]: r for r in data["exercises"]}
    assert set(rows) == {
        "lab01-add-check",
        "lab01-affine-check",
        "lab01-saxpy-check",
        "lab01-stencil-check",
        "lab01-blur-check",
    }
    add = rows.pop("lab01-add-check")
    assert add["status"] == "failed" and add["score"] == 0 and add["points"] == 2
    assert "indexed past the end" in add["message"] and "missing bounds guard" in add["hint"]
    assert all(r["status"] == "not implemented" and r["score"] == 0 for r in rows.values())
    assert data["score"] == 0 and data["max_score"] == 12 and data["mode"] == "simulator"
    assert "lab01-add-check" in table and "not implemented" in table and "total" in table


@pytest.mark.slow
@pytest.mark.parametrize("name", [p.name for p in SOLUTIONS])
def test_student_version_runs_and_reports_not_implemented(name):
    """The released notebook executes top to bottom; every exercise says 'not implemented yet'."""
    rows = labs.grade(ROOT / "labs" / "student" / name, timeout=120)
    assert len(rows) >= 3
    for row in rows:
        assert row.status == "not implemented" and row.score == 0 and row.points > 0, row
        # lab 09's training check lists each op that is not written yet (the capstone's gate)
        assert "not implemented yet" in row.message or "not written yet" in row.message, row


def test_grade_requires_an_existing_notebook(tmp_path, capsys):
    assert labs.main(["grade", str(tmp_path / "nope.ipynb")]) == 2
    assert "does not exist" in capsys.readouterr().err


def test_format_table_totals():
    rows = [labs.GradeRow("a", 2, 2, "passed", "ok"), labs.GradeRow("b", 3, 0, "not implemented", "x")]
    table = labs.format_table(rows)
    assert table.splitlines()[-1].split()[:2] == ["total", "2/5"]
