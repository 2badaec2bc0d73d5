"""teachers/make_course.py: the nbgrader course a teacher lays out from labs/solutions."""

from __future__ import annotations

import pytest

import importlib.util
import os
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
        # the lab's own code cells are locked, so autograde puts them back (review s24-rD H2: an edited import
        # cell counted under nbgrader and not under labs grade)
        for cell in course_nb.cells:
            meta = cell.metadata.get("nbgrader", {})
            lab_own = not meta.get("solution") and not meta.get("grade")
            if cell.cell_type == "code" and lab_own and "= None  # not graded" not in cell.source:
                assert meta.get("locked") and meta.get("grade_id"), (path.name, cell.source[:60])
                assert cell.metadata.get("editable") is False and cell.metadata.get("deletable") is False


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


def _student_branch():
    spec = importlib.util.spec_from_file_location("student_branch", ROOT / "teachers" / "student_branch.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_student_branch_leaves_out_the_solutions(tmp_path):
    """What nbgitpuller hands out: the repository without labs/solutions, tests and teachers, on a
    branch that moves forward (students' clones fast-forward)."""
    import subprocess

    def git(*args):
        return subprocess.run(["git", *args], cwd=tmp_path, check=True, capture_output=True, text=True).stdout

    for rel in [
        "labs/solutions/lab01.ipynb",
        "labs/student/lab01.ipynb",
        "tests/test_x.py",
        "teachers/a.py",
        "README.md",
    ]:
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(rel)
    (tmp_path / "binder").mkdir()
    (tmp_path / "binder" / ".dockerignore").write_text((ROOT / "binder" / ".dockerignore").read_text())
    git("init", "-q")
    git("-c", "user.name=t", "-c", "user.email=t@x", "add", "-A")
    git("-c", "user.name=t", "-c", "user.email=t@x", "commit", "-qm", "course")
    sb = _student_branch()
    first = sb.make("student", root=tmp_path)
    files = git("ls-tree", "-r", "--name-only", "student").split()
    assert "labs/student/lab01.ipynb" in files and "README.md" in files
    assert not [f for f in files if f.startswith(("labs/solutions/", "tests/", "teachers/"))], files
    # the message names what was taken out, not every path binder/.dockerignore lists (artifacts/, build/ ...)
    assert git("log", "-1", "--format=%s", "student").strip().endswith("(without labs/solutions, tests, teachers)")
    assert sb.make("student", root=tmp_path) == first  # nothing new: no empty commit
    (tmp_path / "README.md").write_text("v2")
    git("-c", "user.name=t", "-c", "user.email=t@x", "commit", "-qam", "v2")
    second = sb.make("student", root=tmp_path)
    assert git("rev-parse", "student^").strip() == first and second != first
    assert git("status", "--porcelain") == ""  # the teacher's working tree and index untouched
    # never on top of a history that holds the solutions, nor the branch checked out (its index would keep them)
    current = git("symbolic-ref", "--short", "HEAD").strip()
    with pytest.raises(RuntimeError, match="is the branch checked out here"):
        sb.make(current, root=tmp_path)
    git("branch", "from-course")
    with pytest.raises(RuntimeError, match="its history holds labs/solutions.*git branch -D from-course"):
        sb.make("from-course", root=tmp_path)
    assert git("status", "--porcelain") == ""


def test_nbgrader_config_refuses_a_python_without_gpulab(monkeypatch):
    """Without gpulab every lab's import cell fails and nbgrader scores the class 0; the config says
    what to install instead (nbgrader loads it with exec, where SystemExit stops the command)."""
    import runpy
    import sys

    import pytest
    from traitlets.config import Config

    pytest.importorskip("nbgrader")  # the config is nbgrader's: it imports nbgrader's Execute to replace it
    config = ROOT / "teachers" / "nbgrader_config.py"
    monkeypatch.setenv("PATH", os.environ.get("PATH", ""))  # restored after: the config puts scripts on PATH
    got = runpy.run_path(str(config), init_globals={"get_config": Config})
    assert got["c"].AsyncKernelManager.client_class == "gpulab.grading.sliced.SlicedKernelClient"
    monkeypatch.setitem(sys.modules, "gpulab.grading.sliced", None)
    with pytest.raises(SystemExit) as exc:
        runpy.run_path(str(config), init_globals={"get_config": Config})
    assert "pip install -e 'PATH/TO/gpulab[grade]'" in str(exc.value.code)


def test_feedback_tracebacks_do_not_quote_hidden_tests():
    """nbgrader's feedback shows a test cell's error with the code around it; ShortTracebacks keeps
    only the error's last line, in test cells only."""
    import pytest

    pytest.importorskip("nbconvert")
    from gpulab.grading.feedback import ShortTracebacks

    quoted = [
        "----> 1 result = CHECK(saxpy_kernel)",
        "      3 ### BEGIN HIDDEN TESTS",
        "      4 hidden = CHECK(seed=101)",
    ]
    error = {"output_type": "error", "ename": "NameError", "evalue": "name 'saxpy_kernel' is not defined"}
    test = nbformat.v4.new_code_cell("...", outputs=[nbformat.v4.new_output(**error, traceback=quoted)])
    test.metadata["nbgrader"] = {"grade": True, "grade_id": "lab01-saxpy-check", "points": 2}
    answer = nbformat.v4.new_code_cell("...", outputs=[nbformat.v4.new_output(**error, traceback=quoted)])
    graded_answer = nbformat.v4.new_code_cell("...", outputs=[nbformat.v4.new_output(**error, traceback=quoted)])
    graded_answer.metadata["nbgrader"] = {"grade": True, "solution": True, "grade_id": "essay", "points": 1}
    nb = nbformat.v4.new_notebook(cells=[test, answer, graded_answer])
    nb, _ = ShortTracebacks()(nb, {})  # as nbconvert calls it (only when enabled)
    assert nb.cells[0].outputs[0].traceback == ["NameError: name 'saxpy_kernel' is not defined"]
    assert nb.cells[1].outputs[0].traceback == quoted  # the student's own cells keep their traceback
    assert nb.cells[2].outputs[0].traceback == quoted  # manually graded answers are the student's code too
    config = (ROOT / "teachers" / "nbgrader_config.py").read_text()
    assert '"gpulab.grading.feedback.ShortTracebacks"' in config
