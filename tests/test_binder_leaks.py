"""Teacher material stays out of the student image. repo2docker copies the folder it is given, untracked
files included, and teachers/README.md builds the image from a checkout, which may also hold executed lab
solutions (`make gpu-check`), an nbgrader course folder, a gradebook or students' submissions:
binder/.dockerignore leaves them out, and binder/postBuild fails the build on what slips through."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BINDER = ROOT / "binder"
MARKERS = ("### BEGIN SOLUTION", "### BEGIN HIDDEN TESTS")
# The tracked paths the image leaves out on purpose; every other tracked file is for students.
TEACHERS_ONLY = ("labs/solutions/", "tests/", "teachers/", ".ci/")
LESSON = re.compile(r"notebooks/[0-9][^/]*\.ipynb")  # the complete lessons: the course's source, answers included


def _context(root: Path) -> set[str]:
    """The files repo2docker puts in the build context of ``root`` (docker's own .dockerignore matching)."""
    exclude_paths = pytest.importorskip("docker.utils.build").exclude_paths  # comes with repo2docker (test extra)
    lines = (BINDER / ".dockerignore").read_text(encoding="utf-8").splitlines()
    ignore = [ln.strip() for ln in lines if ln.strip() and not ln.startswith("#")]
    return {p for p in exclude_paths(str(root), ignore) if (root / p).is_file()}


def _write(root: Path, rel: str, text: str = "x") -> None:
    (root / rel).parent.mkdir(parents=True, exist_ok=True)
    (root / rel).write_text(text)


def test_a_teachers_checkout_keeps_its_grading_work_out(tmp_path):
    kept = [
        "README.md",
        "binder/postBuild",
        "notebooks/01_threads_blocks_grids.ipynb",
        "notebooks/learner/01_threads_blocks_grids.ipynb",
        "labs/student/lab01_threads.ipynb",
        "src/gpulab/grading/feedback.py",
        "src/gpulab/source.py",
    ]
    left_out = [
        "labs/solutions/lab01_threads.ipynb",
        "tests/test_labs.py",
        "teachers/nbgrader_config.py",
        "artifacts/gpu-check/notebooks/lab01_threads.ipynb",  # make gpu-check: the executed solution
        "artifacts/gpu-check/summary.json",
        "build/lib/gpulab/_course/labs/student/lab01_threads.ipynb",
        "dist/gpulab-1.0.tar.gz",
        "src/gpulab/_course/notebooks/01_threads_blocks_grids.ipynb",
        ".device/wheels/cupy.whl",
        "course/source/lab01_threads/lab01_threads.ipynb",  # teachers/make_course.py course
        "course/release/lab01_threads/lab01_threads.ipynb",
        "course/submitted/alice/lab01_threads/lab01_threads.ipynb",
        "course/autograded/alice/lab01_threads/lab01_threads.ipynb",
        "course/feedback/alice/lab01_threads/lab01_threads.html",
        "course/gradebook.db",
        "course/.nbgrader.log",
        "gradebook.db",
        "submissions/alice/lab01_threads.ipynb",  # gpulab labs grade submissions/ --out graded/
        "graded/gradebook.csv",
        "graded/feedback/alice__lab01_threads.html",
        # `labs grade submissions/` without --out writes submissions-graded/; gradebooks kept anywhere else
        "submissions-graded/gradebook.csv",
        "submissions-graded/gradebook.json",
        "submissions-graded/feedback/alice__lab01_threads.html",
        "grades-2026/gradebook-20261203-101500.csv",
        "grades-2026/gradebook.json",
        # the Makefile's virtual environments hold an installed copy of the course, lesson answers included
        ".venv/lib/python3.12/site-packages/gpulab/_course/notebooks/02_memory.ipynb",
        ".venv-oldest/lib/python3.12/site-packages/gpulab/_course/notebooks/02_memory.ipynb",
        ".venv-py313/lib/python3.13/site-packages/gpulab/_course/notebooks/02_memory.ipynb",
    ]
    for rel in kept + left_out:
        _write(tmp_path, rel)
    files = _context(tmp_path)
    assert set(kept) <= files, set(kept) - files
    assert not files & set(left_out), sorted(files & set(left_out))


def test_every_tracked_file_for_students_is_in_the_image():
    """The patterns leave out no tracked file but the teachers' (a `**/source` must not catch source.py)."""
    if not (ROOT / ".git").exists():
        pytest.skip("not a git checkout: no tracked files to compare")
    tracked = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    for_students = {f for f in tracked.splitlines() if not f.startswith(TEACHERS_ONLY) and (ROOT / f).is_file()}
    files = _context(ROOT)
    assert for_students <= files, sorted(for_students - files)[:20]


def test_no_answers_in_the_image_outside_the_lessons():
    files = _context(ROOT)
    notebooks = [f for f in files if f.endswith(".ipynb") and not LESSON.fullmatch(f)]
    assert any(f.startswith("labs/student/") for f in notebooks) and any(
        f.startswith("notebooks/learner/") for f in notebooks
    )
    leaks = [f for f in notebooks if any(m in (ROOT / f).read_text(encoding="utf-8") for m in MARKERS)]
    assert not leaks, leaks


def _guard() -> str:
    text = (BINDER / "postBuild").read_text(encoding="utf-8")
    start = text.find("# Nor any other teacher material")
    assert start >= 0, "postBuild: no check for teacher material after `test ! -e labs/solutions`"
    return text[start:]


def _run_guard(root: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["bash", "-c", "set -euo pipefail\n" + _guard()], cwd=root, capture_output=True, text=True, timeout=60
    )


def test_postbuild_refuses_answers_and_gradebooks(tmp_path):
    """nbgrader's gradebook.db and `labs grade`'s gradebook.csv / .json fail the build: every student's scores."""
    lesson = "notebooks/01_threads_blocks_grids.ipynb"
    shutil.copy(ROOT / lesson, tmp_path / "lesson.ipynb")
    assert any(m in (tmp_path / "lesson.ipynb").read_text() for m in MARKERS), "lessons carry answers (the source)"
    _write(tmp_path, lesson, (tmp_path / "lesson.ipynb").read_text())
    (tmp_path / "lesson.ipynb").unlink()
    _write(tmp_path, "labs/student/lab01_threads.ipynb", (ROOT / "labs/student/lab01_threads.ipynb").read_text())
    ok = _run_guard(tmp_path)
    assert ok.returncode == 0, ok.stderr

    solution = (ROOT / "labs/solutions/lab01_threads.ipynb").read_text()
    for leak, text in [
        ("artifacts/gpu-check/notebooks/lab01_threads.ipynb", solution),
        ("my-course/source/lab01_threads/lab01_threads.ipynb", solution),
        ("notebooks/learner/lab01_copy.ipynb", solution),
        ("my-course/gradebook.db", ""),
        ("lab01-graded/gradebook.csv", "student,lab,total"),  # labs grade's gradebooks, by name
        ("grades/gradebook.json", "[]"),
    ]:
        _write(tmp_path, leak, text)
        proc = _run_guard(tmp_path)
        assert proc.returncode == 1 and leak in proc.stderr, (leak, proc.stderr)
        (tmp_path / leak).unlink()
