"""teachers/make_course.py: the nbgrader course a teacher lays out from labs/solutions."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parents[1]


def _make_course():
    spec = importlib.util.spec_from_file_location("make_course", ROOT / "teachers" / "make_course.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_course_sources_link_to_the_student_copy(tmp_path):
    """nbgrader releases the source's markdown as is: its Colab badge must not open the solutions."""
    assert _make_course().main([str(tmp_path)]) == 0
    sources = sorted((tmp_path / "source").glob("*/*.ipynb"))
    assert len(sources) == len(list((ROOT / "labs" / "solutions").glob("*.ipynb")))
    for path in sources:
        text = path.read_text(encoding="utf-8")
        assert "labs/solutions/" not in text, path.name
        assert f"labs/student/{path.name}" in text, path.name
        course_nb = nbformat.read(str(path), as_version=4)
        solution = nbformat.read(str(ROOT / "labs" / "solutions" / path.name), as_version=4)
        assert [c.source for c in course_nb.cells if c.cell_type == "code"] == [
            c.source for c in solution.cells if c.cell_type == "code"
        ]


def test_a_teachers_edits_are_kept_unless_forced(tmp_path, capsys):
    mc = _make_course()
    assert mc.main([str(tmp_path)]) == 0
    config = tmp_path / "nbgrader_config.py"
    lab = tmp_path / "source" / "lab01_threads" / "lab01_threads.ipynb"
    config.write_text(config.read_text() + "\nc.Execute.timeout = 60  # mine\n")
    lab.write_text(lab.read_text().replace("Threads, blocks and grids", "Threads (my version)"))
    capsys.readouterr()
    assert mc.main([str(tmp_path)]) == 0
    err = capsys.readouterr().err
    assert "nbgrader_config.py" in err and "lab01_threads.ipynb" in err and "--force" in err
    assert "# mine" in config.read_text() and "my version" in lab.read_text()
    assert mc.main([str(tmp_path), "--force"]) == 0
    assert "# mine" not in config.read_text() and "my version" not in lab.read_text()
