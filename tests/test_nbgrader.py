"""nbgrader as a first-class path: `nbgrader generate_assignment` + `nbgrader autograde` on the labs
give the same score per exercise as `python -m gpulab labs grade`, partial credit included, and
hidden tests are out of the release and back at grading.

Runs lab01 with three students: a solution (full marks), a blank release (zero) and a partial answer
(exercise 1 right, the stencil right in the simulator but refused by NVVM, which the check scores
half); lab01 also has hidden tests. Each submission runs twice (nbgrader, then `labs grade`),
a few seconds of CPU each (53 s in all, alone, 2026-12-01); every lab's solution earns full marks
under nbval (tests/nbval_checks.py) and every student version runs in tests/test_labs.py."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import nbformat
import pytest

pytest.importorskip("nbgrader", reason="nbgrader is in the test extra: pip install -e '.[test]'")

from gpulab.grading.gradebook import grade_folder  # noqa: E402
from gpulab.grading.sandbox import Limits  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
LABS = ["lab01_threads"]


def _with_report(nb) -> None:
    """Make test cells end in `report(...)` (the pattern labs use for partial credit), if they do not yet."""
    for cell in nb.cells:
        meta = cell.metadata.get("nbgrader", {})
        if not meta.get("grade") or "report(" in cell.source:
            continue
        src = cell.source
        src = re.sub(r"^assert result\.passed, result$", "_results = [result]", src, flags=re.M)
        src = re.sub(r"^assert (\w+)\.passed, \1$", r"_results.append(\1)", src, flags=re.M)
        lines = src.rstrip().splitlines()
        assert lines[-1].strip() == "result", lines[-1]
        lines[-1] = "report(*_results)"
        cell.source = "from gpulab.grading import report, quiet_warnings\nquiet_warnings()\n" + "\n".join(lines)


ADD = "    i = cuda.grid(1)\n    if i < out.shape[0]:\n        out[i] = a[i] + b[i]"
# Correct in the simulator, but a Python list inside a kernel does not compile for a GPU (PTX check).
STENCIL_LIST = (
    "    i = cuda.grid(1)\n    n = x.shape[0]\n    if i < n:\n"
    "        vals = [x[i - 1] if i > 0 else 0.0, x[i],"
    " x[i + 1] if i + 1 < n else 0.0]\n        out[i] = vals[0] + vals[1] + vals[2]"
)
# An answer cell that rebinds the checker (a Problem's check, report): autograde gave it full marks.
REBIND = """from gpulab import problems as _p
import gpulab.grading as _g
class _R:
    passed = True; score = 2; max_score = 2; status = "passed"; name = "affine"
_p.lab01.AFFINE.check = lambda *a, **k: _R()
_g.report = lambda *a, **k: 2"""


def _answer(nb, kernel_name: str, body: str) -> None:
    cell = next(
        c for c in nb.cells if f"def {kernel_name}(" in c.source and c.metadata.get("nbgrader", {}).get("solution")
    )
    lines = cell.source.splitlines()
    head = [ln for ln in lines if ln.startswith("@") or ln.startswith("def ")]
    cell.source = "\n".join(head) + "\n" + body


def _nbgrader(course: Path, *args: str) -> None:
    env = {**os.environ, "GPULAB_COURSE_DIR": str(course), "GPULAB_DEVICE": "simulator", "GPULAB_CELL_TIMEOUT": "300"}
    proc = subprocess.run(
        [sys.executable, "-m", "nbgrader", *args, "--force"],
        cwd=course,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]


@pytest.mark.slow
@pytest.mark.timeout(1800)  # two nbgrader runs, each with its own 900 s limit (53 s in all, alone, here)
def test_nbgrader_and_labs_grade_agree(tmp_path, monkeypatch):
    # nbgrader runs `alembic` from PATH to set up its gradebook; nbgrader_config.py puts this Python's scripts
    # folder on PATH, so a teacher's `.venv/bin/python -m nbgrader ...` works without activating the venv: here
    # that folder is taken off PATH, as for such a teacher.
    scripts = {os.path.dirname(sys.executable), sysconfig.get_path("scripts")}
    path = [d for d in os.environ.get("PATH", "").split(os.pathsep) if d and d not in scripts]
    monkeypatch.setenv("PATH", os.pathsep.join(path))
    course = tmp_path / "course"
    (course / "source").mkdir(parents=True)
    shutil.copy(ROOT / "teachers" / "nbgrader_config.py", course / "nbgrader_config.py")
    sources = tmp_path / "sources"
    sources.mkdir()
    for lab in LABS:
        nb = nbformat.read(str(ROOT / "labs" / "solutions" / f"{lab}.ipynb"), as_version=4)
        _with_report(nb)
        (course / "source" / lab).mkdir()
        nbformat.write(nb, str(course / "source" / lab / f"{lab}.ipynb"))
        nbformat.write(nb, str(sources / f"{lab}.ipynb"))
        _nbgrader(course, "generate_assignment", lab)

    submitted = course / "submitted"
    subs: dict[tuple[str, str], Path] = {}
    for lab in LABS:
        released = nbformat.read(str(course / "release" / lab / f"{lab}.ipynb"), as_version=4)
        text = nbformat.writes(released)
        assert "BEGIN HIDDEN TESTS" not in text and "BEGIN SOLUTION" not in text
        versions = {"alice": nbformat.read(str(sources / f"{lab}.ipynb"), as_version=4), "bob": released}
        if lab == "lab01_threads":
            carol = nbformat.from_dict(released)
            _answer(carol, "add_kernel", ADD)
            _answer(carol, "stencil3_kernel", STENCIL_LIST)
            versions["carol"] = carol
            # mallory (review s24-rD H1): exercise 1 right, an empty affine kernel and the checker rebound after it
            mallory = nbformat.from_dict(released)
            _answer(mallory, "add_kernel", ADD)
            _answer(mallory, "affine_kernel", "    pass\n" + REBIND)
            versions["mallory"] = mallory
        for student, nb in versions.items():
            path = submitted / student / lab / f"{lab}.ipynb"
            path.parent.mkdir(parents=True)
            nbformat.write(nb, str(path))
            subs[(student, lab)] = path
    for lab in LABS:
        _nbgrader(course, "autograde", lab)
        _nbgrader(course, "generate_feedback", lab)

    from nbgrader.api import Gradebook

    nbgrader_scores: dict[tuple[str, str], dict[str, float]] = {}
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gb:
        for student, lab in subs:
            nb = gb.find_submission_notebook(lab, lab, student)
            nbgrader_scores[(student, lab)] = {g.name: g.score for g in nb.grades if g.max_score_gradecell}

    ours: dict[tuple[str, str], dict[str, float]] = {}
    notes: dict[tuple[str, str], str] = {}
    for lab in LABS:
        folder = tmp_path / "ours" / lab
        for (student, lab_name), path in subs.items():
            if lab_name == lab:
                (folder / student).mkdir(parents=True)
                shutil.copy(path, folder / student / f"{lab}.ipynb")
        book = grade_folder(
            folder, sources, tmp_path / "graded" / lab, workers=2, progress=False, limits=Limits(cell_timeout=300)
        )
        for student, g in book.entries:
            ours[(student, lab)] = {r.grade_id: r.score for r in g.rows}
            notes[(student, lab)] = " ".join(g.notes)

    report = {k: (sum(nbgrader_scores[k].values()), sum(ours[k].values())) for k in subs}
    print("nbgrader vs labs grade:", report)
    for key in subs:
        assert nbgrader_scores[key] == pytest.approx(ours[key]), (key, nbgrader_scores[key], ours[key])
    for lab in LABS:
        maximum = sum(1 for _ in ours[("alice", lab)])
        assert maximum and all(s > 0 for s in ours[("alice", lab)].values())
        assert sum(ours[("bob", lab)].values()) == 0
    carol = ours[("carol", "lab01_threads")]
    # partial credit: the stencil is right but refused by NVVM (half), its hidden check skips PTX: half the cell
    assert carol["lab01-add-check"] == 2 and carol["lab01-stencil-check"] == 1.5, carol
    # the rebound checker was put back: the real check scored the empty kernel 0 in both, and both say so
    mallory = ours[("mallory", "lab01_threads")]
    assert mallory["lab01-add-check"] == 2 and mallory["lab01-affine-check"] == 0, mallory
    graded = (course / "autograded" / "mallory" / "lab01_threads" / "lab01_threads.ipynb").read_text()
    assert "tried to change the checker" in graded and "gpulab.problems.lab01.AFFINE.check" in graded
    assert "gpulab.grading.report" in graded
    said = notes[("mallory", "lab01_threads")]
    assert "gpulab.problems.lab01.AFFINE.check" in said and "gpulab.grading.report" in said, said
    # hidden tests: in the autograded notebook when the source has them
    for lab in LABS:
        src = (sources / f"{lab}.ipynb").read_text()
        graded = (course / "autograded" / "bob" / lab / f"{lab}.ipynb").read_text()
        if "BEGIN HIDDEN TESTS" in src:
            assert "BEGIN HIDDEN TESTS" in graded
        # ... and not in the feedback the students get, which still shows every verdict
        feedback = (course / "feedback" / "carol" / lab / f"{lab}.html").read_text()
        assert "HIDDEN TESTS" not in feedback and "seed=101" not in feedback
        assert "lab01-add-check" in feedback and "passed" in feedback
