"""``gpulab course``: a learner's edited copy is never lost, and the command says once what it did to each file."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from gpulab import course


@pytest.fixture
def source(tmp_path: Path) -> Path:
    """A small course: one learner lesson, its complete version, one lab."""
    src = tmp_path / "src"
    for rel, text in [
        ("notebooks/learner/00_why.ipynb", "learner 00"),
        ("notebooks/00_why.ipynb", "complete 00"),
        ("labs/student/lab01_threads.ipynb", "lab 01"),
    ]:
        (src / rel).parent.mkdir(parents=True, exist_ok=True)
        (src / rel).write_text(text)
    return src


def _run(dest: Path, source: Path, monkeypatch: pytest.MonkeyPatch, capsys, backup: bool) -> str:
    monkeypatch.setattr(course, "course_source", lambda: source)
    ns = argparse.Namespace(dest=dest, backup=backup, no_jupyter_settings=True)
    assert course.run(ns) == 0
    return capsys.readouterr().out


def test_an_edited_lesson_is_kept_and_backup_keeps_every_version(tmp_path, source, monkeypatch, capsys):
    dest = tmp_path / "course"
    first = _run(dest, source, monkeypatch, capsys, backup=False)
    assert "copied    lessons/00_why.ipynb" in first
    lesson = dest / "lessons" / "00_why.ipynb"
    assert lesson.read_text() == "learner 00"

    lesson.write_text("my work")  # the learner edits it; a plain rerun keeps it
    again = _run(dest, source, monkeypatch, capsys, backup=False)
    assert "skipped   lessons/00_why.ipynb" in again and lesson.read_text() == "my work"

    plan = course.copy_course(dest, backup=True, source=source, today="20261203-101010")
    assert plan.backed_up == [("lessons/00_why.ipynb", "lessons/00_why.bak-20261203-101010.ipynb")]
    assert plan.copied == []  # replaced, not new: listed once, as backed up
    assert lesson.read_text() == "learner 00"
    assert (dest / "lessons" / "00_why.bak-20261203-101010.ipynb").read_text() == "my work"

    lesson.write_text("more work")  # a second backup in the same second keeps the first one
    plan = course.copy_course(dest, backup=True, source=source, today="20261203-101010")
    assert plan.backed_up == [("lessons/00_why.ipynb", "lessons/00_why.bak-20261203-101010-2.ipynb")]
    assert (dest / "lessons" / "00_why.bak-20261203-101010.ipynb").read_text() == "my work"
    assert (dest / "lessons" / "00_why.bak-20261203-101010-2.ipynb").read_text() == "more work"


def test_backup_run_names_a_replaced_file_once(tmp_path, source, monkeypatch, capsys):
    dest = tmp_path / "course"
    _run(dest, source, monkeypatch, capsys, backup=False)
    (dest / "labs" / "lab01_threads.ipynb").write_text("my lab")
    out = _run(dest, source, monkeypatch, capsys, backup=True)
    lines = [ln for ln in out.splitlines() if "labs/lab01_threads.ipynb" in ln]
    assert len(lines) == 1 and lines[0].startswith("replaced  labs/lab01_threads.ipynb (your version kept as")
