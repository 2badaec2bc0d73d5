"""Issue 14's attacks on `labs grade`: each scores what the real work earns, and the grader's files
and the solutions are unchanged afterwards.

The attacks (built in tests/grading_attacks.py from the released lab 01) are grouped into a few
submissions so the suite stays fast: an attack that worked would lift its group's score above what
the real work earns, so a group at the expected score shows every attack in it failed.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import nbformat
import pytest

import grading_attacks as attacks
from gpulab.grading.grader import grade_notebook
from gpulab.grading.sandbox import Limits, bwrap_path

ROOT = Path(__file__).resolve().parents[1]
SOURCE = ROOT / "labs" / "solutions" / "lab01_threads.ipynb"
PACKAGE = ROOT / "src" / "gpulab"

# Hiding labs/solutions from a submission that searches the whole disk needs bubblewrap's mount
# namespace (the fallback, user nobody, still reads world-readable files): CI installs it.
needs_bubblewrap = pytest.mark.skipif(not bwrap_path(), reason="install bubblewrap (apt-get install bubblewrap)")


def _digest(paths: list[Path]) -> str:
    h = hashlib.sha256()
    for p in sorted(paths):
        h.update(str(p).encode())
        h.update(p.read_bytes())
    return h.hexdigest()


@pytest.fixture
def guarded():
    """The grader's package and every solution notebook must be byte-identical afterwards."""
    files = [p for p in PACKAGE.rglob("*.py")] + list((ROOT / "labs").rglob("*.ipynb"))
    before = _digest(files)
    yield
    assert _digest(files) == before, "the submission changed the grader's package or the lab notebooks"


def _combined(tmp_path: Path, name: str, *builders) -> Path:
    nb = nbformat.read(str(attacks.STUDENT), as_version=4)
    for build in builders:
        build(nb)
    path = tmp_path / f"{name}.ipynb"
    nbformat.write(nb, str(path))
    return path


def _grade(path: Path, cell_timeout: float = 60.0):
    return grade_notebook(path, SOURCE, Limits(cell_timeout=cell_timeout, total_timeout=600, output_bytes=500_000))


@pytest.mark.slow
def test_structural_attacks_score_zero(tmp_path, guarded):
    """Test cells replaced by `pass`, points raised to 1000, a 100-point graded cell added."""
    sub = _combined(tmp_path, "structural", attacks.blank_pass_tests, attacks.raise_points, attacks.add_graded_cell)
    g = _grade(sub)
    assert [r.grade_id for r in g.rows] == [
        "lab01-add-check",
        "lab01-affine-check",
        "lab01-saxpy-check",
        "lab01-stencil-check",
        "lab01-blur-check",
    ]
    assert [r.points for r in g.rows] == [2, 2, 2, 3, 3] and g.max_score == 12
    assert g.score == 0 and all(r.status == "not implemented" for r in g.rows), g.rows
    assert any("lab01-bonus" in n for n in g.notes)


@pytest.mark.slow
def test_in_process_attacks_score_zero(tmp_path, guarded):
    """A fake check_kernel, gpulab.exercises patched (attribute, __code__, CheckResult.passed),
    numpy.isclose/allclose patched, and score lines written to the old grade log after every cell."""
    g = _grade(
        _combined(
            tmp_path,
            "in_process",
            attacks.fake_check_kernel,
            attacks.patch_exercises,
            attacks.patch_isclose,
            attacks.write_grade_log,
            attacks.patch_problem_objects,
        )
    )
    assert g.score == 0 and g.max_score == 12, g.rows
    assert all(r.status == "failed" for r in g.rows), g.rows  # the real checks ran on the empty kernels
    # ... and the teacher is told what the submission replaced (review s24-rD H1: nothing said so)
    said = " ".join(n for n in g.notes if "tried to change the checker" in n)
    assert "gpulab.problems.lab01.AFFINE.check" in said and "gpulab.exercises." in said, g.notes


@pytest.mark.slow
@needs_bubblewrap
def test_file_attacks_score_zero_and_change_nothing(tmp_path, guarded):
    """Reading the solution notebooks, rewriting the installed package, overwriting the solution."""
    sub = _combined(tmp_path, "files", attacks.read_solutions, attacks.rewrite_package, attacks.overwrite_solution)
    g = _grade(sub)
    assert g.score == 0 and all(r.status == "not implemented" for r in g.rows), g.rows
    # a second, blank submission graded afterwards is not affected by the first one's rewrite
    blank = tmp_path / "blank.ipynb"
    blank.write_bytes(attacks.STUDENT.read_bytes())
    assert _grade(blank).score == 0


@pytest.mark.slow
def test_dying_kernels_keep_earlier_scores_and_name_the_cell(tmp_path, guarded):
    """Exercise 1 answered (2 points); then os._exit in exercise 2's cell and a segfault in exercise 3's."""
    nb = nbformat.read(str(attacks.STUDENT), as_version=4)
    attacks.os_exit(nb)  # fills exercise 1, kills in cell 2
    cells = attacks._solution_cells(nb)
    cells[2].source += "\n\nimport ctypes\nctypes.string_at(0)\n"
    path = tmp_path / "crash.ipynb"
    nbformat.write(nb, str(path))
    g = _grade(path)
    rows = {r.grade_id: r for r in g.rows}
    assert g.score == 2 and rows["lab01-add-check"].status == "passed", g.rows
    assert "lab01-affine" in rows["lab01-affine-check"].message and "exit code 3" in rows["lab01-affine-check"].message
    assert "lab01-saxpy" in rows["lab01-saxpy-check"].message and "SIGSEGV" in rows["lab01-saxpy-check"].message
    assert any("exit code 3" in n for n in g.notes) and any("SIGSEGV" in n for n in g.notes)


@pytest.mark.slow
def test_runaway_cells_are_stopped(tmp_path, guarded):
    """Exercise 1 answered; an infinite loop that swallows KeyboardInterrupt, then unbounded output."""
    nb = nbformat.read(str(attacks.STUDENT), as_version=4)
    attacks.infinite_loop(nb)  # fills exercise 1, loops in cell 2
    cells = attacks._solution_cells(nb)
    cells[2].source += '\n\nimport os\nwhile True:\n    os.write(1, b"x" * 65536)\n'
    path = tmp_path / "runaway.ipynb"
    nbformat.write(nb, str(path))
    # 20 s per cell: exercise 1's check (a PTX compile in a subprocess) takes ~3 s alone, >8 s on a loaded machine
    g = _grade(path, cell_timeout=20)
    rows = {r.grade_id: r for r in g.rows}
    assert g.score == 2, g.rows
    assert "lab01-affine" in rows["lab01-affine-check"].message and "20 s limit" in rows["lab01-affine-check"].message
    assert "output limit" in rows["lab01-saxpy-check"].message
    assert rows["lab01-stencil-check"].status == "not implemented"


@pytest.mark.slow
def test_memory_hog_is_stopped(tmp_path, guarded):
    """Exercise 1 answered; exercise 2's cell allocates without end: stopped, exercise 1 keeps its points."""
    nb = nbformat.read(str(attacks.STUDENT), as_version=4)
    cells = attacks._solution_cells(nb)
    attacks._fill(cells[0], attacks.ADD_BODY)
    cells[1].source += "\n\nimport numpy\n_hog = []\nwhile True:\n    _hog.append(numpy.ones(1 << 24))\n"
    path = tmp_path / "hog.ipynb"
    nbformat.write(nb, str(path))
    g = grade_notebook(path, SOURCE, Limits(cell_timeout=60, total_timeout=600, memory_mb=1536))
    rows = {r.grade_id: r for r in g.rows}
    assert g.score == 2, g.rows
    assert "lab01-affine" in rows["lab01-affine-check"].message
    # simulator mode: RLIMIT_AS turns the hog into a MemoryError in its own cell; gpu mode: the watchdog kills it
    assert "MemoryError" in rows["lab01-affine-check"].message or "memory limit" in rows["lab01-affine-check"].message


@pytest.mark.slow
def test_inspecting_the_grader_stops_trusting_the_rest(tmp_path, guarded):
    """Exercise 1 answered; then a cell hunts for the grader's state through sys._current_frames and gc."""
    nb = nbformat.read(str(attacks.STUDENT), as_version=4)
    attacks.inspect_grader(nb)
    path = tmp_path / "inspect.ipynb"
    nbformat.write(nb, str(path))
    g = _grade(path)
    rows = {r.grade_id: r for r in g.rows}
    assert g.score == 2 and rows["lab01-add-check"].status == "passed", g.rows
    assert all(r.score == 0 for k, r in rows.items() if k != "lab01-add-check")
    assert any("grader's memory" in n for n in g.notes), g.notes


def test_no_drop_to_nobody_when_nobody_cannot_exec_this_python(monkeypatch) -> None:
    """A venv whose Python lives under /root (pyenv, mode 700): exec as nobody raises PermissionError in
    the parent. The grader must then not drop (and say so via describe), not crash every submission."""
    from gpulab.grading import sandbox

    def refuse(*args, **kwargs):
        raise PermissionError(13, "Permission denied", "/root/.pyenv/versions/3.11/bin/python")

    monkeypatch.setattr(sandbox.os, "geteuid", lambda: 0)
    monkeypatch.setattr(sandbox.subprocess, "run", refuse)
    monkeypatch.setattr(sandbox, "_CAN_DROP", [])
    assert sandbox.can_drop() is False


def _close_channel_then(tmp_path: Path, then: str, cell_timeout: float):
    """Exercise 1 answered; exercise 2's cell closes every inherited descriptor (the grader's result channel
    among them) and then runs ``then``: graded, with exercise 1's points and exercise 2's message."""
    nb = nbformat.read(str(attacks.STUDENT), as_version=4)
    cells = attacks._solution_cells(nb)
    attacks._fill(cells[0], attacks.ADD_BODY)
    cells[1].source += "\n\nimport os, time\nos.closerange(3, 1024)\n" + then
    path = tmp_path / "close_channel.ipynb"
    nbformat.write(nb, str(path))
    g = _grade(path, cell_timeout=cell_timeout)
    rows = {r.grade_id: r for r in g.rows}
    assert g.score == 2 and rows["lab01-add-check"].status == "passed", g.rows
    assert all(r.score == 0 for k, r in rows.items() if k != "lab01-add-check"), g.rows
    return g, rows["lab01-affine-check"].message


@pytest.mark.slow
def test_closing_the_result_channel_and_sleeping_is_stopped(tmp_path, guarded):
    """... and sleeps: the grader stops it within the cell limit instead of waiting forever."""
    g, msg = _close_channel_then(tmp_path, "time.sleep(3600)\n", cell_timeout=20)
    assert "result channel" in msg or ("lab01-affine" in msg and "20 s limit" in msg), g.rows
    assert any("lab01-affine" in n for n in g.notes), g.notes


@pytest.mark.slow
def test_closing_the_result_channel_then_flooding_output_is_stopped_at_the_output_limit(tmp_path, guarded):
    """... and floods its output: still held to the output limit, not only to the cell's time."""
    g, msg = _close_channel_then(tmp_path, 'while True:\n    os.write(1, b"x" * 65536)\n', cell_timeout=120)
    # Which the grader sees first, the closed channel or the flood, depends on the schedule (under load, the
    # flood: "printed more than 500,000 bytes (the output limit) and was skipped"); either way it is the limit.
    assert "output limit" in msg, g.rows


def test_a_python_under_tmp_stays_visible_in_the_sandbox(monkeypatch):
    """bwrap mounts in order and a later mount hides an earlier one: /tmp's private tmpfs must come before the binds
    of the Python and its venv, which may live under /tmp (a fresh clone there failed every graded notebook)."""
    import shutil

    from gpulab.grading import sandbox

    monkeypatch.setattr(sandbox.sys, "prefix", "/tmp/course/.venv")
    box = sandbox.Sandbox(Limits(), "simulator", None, "/usr/bin/bwrap")
    try:
        args, _, _ = box.command((3, 4))
    finally:
        shutil.rmtree(box.root, ignore_errors=True)
    tmpfs = args.index("--tmpfs")
    assert args[tmpfs + 1] == "/tmp"
    binds = [k for k, a in enumerate(args) if a.startswith("--") and "bind" in a and args[k + 2].startswith("/tmp")]
    assert binds and all(k > tmpfs for k in binds), args
