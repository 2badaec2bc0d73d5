"""Hints in tiers (``lessons.hint``), the per-session tally (``lessons.progress``), stubs without the answer in
comments, and the "What's next" cells that end every learner version."""

from __future__ import annotations

import re
from pathlib import Path

import nbformat
import pytest
from numba import cuda

from gpulab import lessons
from gpulab.errors import UsageError
from gpulab.lessons import hints, learner, tally
from gpulab.lessons.problems import lesson_exercises
from gpulab.release import CODE_STUB

ROOT = Path(__file__).resolve().parents[1]
OUTLINED = ("05", "06", "07", "08", "09", "10", "12")  # lessons whose stubs carried the outline as comments


@pytest.fixture(autouse=True)
def fresh_session():
    hints.forget()
    tally.forget()
    yield
    hints.forget()
    tally.forget()


# --- hints --------------------------------------------------------------------------------------------


def test_hints_come_in_tiers_then_point_at_reveal(capsys):
    idea, outline = lessons.exercise("05", "dot_atomic").hints
    lessons.hint("05", "dot_atomic")
    first = capsys.readouterr().out
    assert "Hint 1 of 2" in first and idea in first and outline not in first and "again" in first
    lessons.hint("05", "dot_atomic")
    second = capsys.readouterr().out
    assert "Hint 2 of 2" in second and outline in second and 'lessons.reveal("05", "dot_atomic")' in second
    lessons.hint("05", "dot_atomic")
    third = capsys.readouterr().out
    assert "No more hints" in third and 'lessons.reveal("05", "dot_atomic")' in third and outline not in third
    lessons.hint("05", "dot_atomic", 1)  # tier 1 again, on request
    assert idea in capsys.readouterr().out
    lessons.hint("05", "block_max")  # each exercise has its own count
    assert "Hint 1 of 2" in capsys.readouterr().out
    with pytest.raises(UsageError, match="tier must be 1 to 2"):
        lessons.hint("05", "dot_atomic", 3)


def test_unknown_exercise_lists_the_valid_names():
    with pytest.raises(UsageError, match=r"lesson 05's hints: dot_atomic, block_max.*histogram_privatized"):
        lessons.hint("05", "dot_product")
    with pytest.raises(UsageError, match="lesson '99' has none; the lessons with hints: 00, 01"):
        lessons.hint("99", "add")


def test_a_near_miss_name_is_read_or_named():
    """Spaces, case and the stub's function name find the exercise; a typo gets the closest name of its lesson."""
    add = lessons.exercise("01", "add")
    assert lessons.exercise("01 ", " add") is add and lessons.exercise(1, "Add") is add
    assert lessons.exercise("01", "add_kernel") is add  # the name of the function the learner version defines
    with pytest.raises(UsageError, match=r'no exercise 01/ad; did you mean "add"\? lesson 01\'s exercises: add, '):
        lessons.exercise("01", "ad")
    with pytest.raises(UsageError, match=r'no hints for 05/dot_atomc; did you mean "dot_atomic"\?'):
        lessons.hint("05", "dot_atomc")


def test_a_task_without_a_check_ends_with_its_answer(capsys):
    for _ in range(3):
        lessons.hint(1, "block_shape")
    out = capsys.readouterr().out
    assert "Hint 3 of 3" in out and "(16, 8)" in out and "reveal" not in out


def test_every_exercise_has_hints():
    keys = lessons.problems.lesson_exercises()
    assert len(keys) == len(lessons.EXERCISES) + len(lessons.FUNCTION_EXERCISES)
    for les, name in keys:
        tiers = lessons.problems.hints_of(les, name)
        assert tiers and all(len(t) > 20 for t in tiers), (les, name)
        assert "cuda." not in tiers[0], f"{les}/{name}: the first tier is the idea, without code"
        if les in OUTLINED:
            assert len(tiers) >= 2, f"{les}/{name} needs an outline tier"


# --- stubs --------------------------------------------------------------------------------------------

# What an outline of a kernel says and a statement of a contract does not: the kernel's key calls and steps.
ANSWER_LIKE = re.compile(
    r"cuda\.(grid|gridsize|atomic|shared|local|syncthreads|shfl)|syncthreads|shfl_|atomic add|xoroshiro"
    r"|\bguard\b|\+=|range\(|blockIdx|threadIdx|\bfor each\b|\bthen\b"
)


def _stub_comments(cell_source: str) -> list[str]:
    """The comment-only lines between a stub's ``def`` line and its ``# YOUR CODE HERE``."""
    lines = cell_source.splitlines()
    out, inside = [], False
    for line in lines:
        s = line.strip()
        if s.startswith("def "):
            inside, out = True, []
        elif s == "# YOUR CODE HERE":
            return out
        elif inside and s.startswith("#"):
            out.append(s)
    return []


@pytest.mark.parametrize("lesson", [f"{n:02d}" for n in range(13)])
def test_learner_stubs_do_not_carry_the_answer_in_comments(lesson):
    path = next((ROOT / learner.LEARNER_DIR).glob(f"{lesson}_*.ipynb"))
    nb = nbformat.read(str(path), as_version=4)
    stubs = [c.source for c in nb.cells if c.cell_type == "code" and CODE_STUB in c.source]
    assert stubs
    for src in stubs:
        for comment in _stub_comments(src):
            assert not ANSWER_LIKE.search(comment), f"{path.name}: the stub says how: {comment!r}"
            assert comment.count(";") <= 1, f"{path.name}: a stub comment reads like pseudo-code: {comment!r}"


def test_the_answer_like_scan_catches_the_old_outlines():
    old = [
        "# i = cuda.grid(1); guard; cuda.atomic.add(total, 0, a[i] * b[i])",
        "# i = cuda.grid(1); guard; dout[i] where y[i] > 0, else 0",
        "# c1, c2 = channels; each conv: (output pixels x filters) x (input channels x 3 x 3); each linear: n_in",
        "# copy, cut into N chunks; N-1 reduce-scatter steps (add), N-1 all-gather steps (overwrite); count bytes",
    ]
    for comment in old:
        assert ANSWER_LIKE.search(comment) or comment.count(";") > 1, comment


# --- progress -----------------------------------------------------------------------------------------


def test_progress_counts_passed_failed_and_not_tried():
    @cuda.jit
    def add_kernel(a, b, out):
        i = cuda.grid(1)
        if i < out.size:
            out[i] = a[i] + b[i]

    @cuda.jit
    def add_unguarded(a, b, out):  # the lesson's demonstration of a broken kernel
        i = cuda.grid(1)
        out[i] = a[i] + b[i]

    @cuda.jit
    def scale2d_kernel(alpha, a, out):
        j, i = cuda.grid(2)
        if i < out.shape[0] and j < out.shape[1]:
            out[i, j] = 2 * alpha * a[i, j]

    @cuda.jit
    def add_grid_stride_kernel(a, b, out):
        raise NotImplementedError("replace this line with your code")

    before = lessons.progress("01")
    assert before.rows == tuple((n, "not tried") for n in ("add", "scale2d", "grid_stride", "at"))
    assert (before.done, before.total) == (0, 4)
    assert lessons.check("01", "add", add_kernel).passed
    assert not lessons.check("01", "add", add_unguarded).passed  # does not undo the learner's pass
    assert lessons.check("01", "scale2d", scale2d_kernel).status == "failed"
    assert lessons.check("01", "grid_stride", add_grid_stride_kernel).status == "not implemented"
    table = lessons.progress(1)
    assert dict(table.rows) == {
        "add": "passed",
        "scale2d": "failed",
        "grid_stride": "not tried",
        "at": "not tried",
    }
    text = repr(table)  # what a notebook cell ending in lessons.progress("01") shows
    assert "1 of 4 done." in text and re.search(r"scale2d\s+failed\n", text)
    assert 'lessons.hint("01", "NAME")' in text


def test_progress_says_not_passed_with_the_reason_for_a_correct_kernel_that_misses_a_requirement():
    def block_max_kernel(x, partial):  # stands for a serial kernel: correct, over the per-thread budget
        pass

    tally.record("05", "block_max", block_max_kernel, "over budget")
    assert dict(lessons.progress("05").rows)["block_max"] == "not passed (over budget)"
    tally.record("05", "block_max", block_max_kernel, "passed")
    assert dict(lessons.progress("05").rows)["block_max"] == "passed"


def test_progress_counts_napkin_math_checked_by_check_function():
    def conv_flops(h_out, w_out, c_out, k, c_in):
        return 2 * h_out * w_out * c_out * k * k * c_in

    assert lessons.progress("00").rows == (("conv_flops", "not tried"),)
    assert lessons.check_function(conv_flops, [((56, 56, 256, 3, 256), 3_699_376_128)]).passed
    done = lessons.progress("00")
    assert done.rows == (("conv_flops", "passed"),) and "1 of 1 done." in str(done)


@pytest.mark.parametrize("source", learner.sources(ROOT), ids=lambda p: p.name[:2])
def test_progress_lists_the_exercises_in_the_order_the_lesson_checks_them(source):
    """lessons.progress reads top to bottom: its rows follow the lesson's first ``check("NN", name, ...)`` or
    ``check_function(name, ...)`` of each exercise (lesson 05 listed histogram_privatized after scan_block)."""
    number = source.name[:2]
    code = "\n".join(c.source for c in nbformat.read(str(source), as_version=4).cells if c.cell_type == "code")
    pattern = rf"""check\(\s*["']{number}["'],\s*["'](\w+)|check_function\(\s*(\w+)"""
    met: list[str] = []
    for m in re.finditer(pattern, code):
        name = m.group(1) or m.group(2)
        if name not in met:
            met.append(name)
    names = [n for _, n in lesson_exercises(number)]
    assert [n for n in met if n in names] == [n for n in names if n in met]
    assert [n for n, _ in lessons.progress(number).rows] == names if names else True


def test_progress_of_a_lesson_without_exercises_says_which_have_them():
    with pytest.raises(UsageError, match="lessons with exercises are 00, 01"):
        lessons.progress("13")


# --- the learner versions' last cells -----------------------------------------------------------------


@pytest.mark.parametrize("source", learner.sources(ROOT), ids=lambda p: p.name[:2])
def test_learner_versions_end_with_whats_next_and_progress(source):
    number = source.name[:2]
    nb = nbformat.read(str(learner.learner_path(ROOT, source)), as_version=4)
    md, code = nb.cells[-2], nb.cells[-1]
    assert md.cell_type == "markdown" and md.source.startswith(learner.WHATS_NEXT)
    assert code.cell_type == "code" and f'lessons.progress("{number}")' in code.source
    labs = sorted((ROOT / "labs" / "student").glob(f"lab{number}_*.ipynb"))
    if labs:  # the lab is named with the command that grades it, and the file is there
        lab = labs[0].relative_to(ROOT).as_posix()
        assert f"python -m gpulab labs grade {lab}" in md.source
    else:
        assert "labs grade" not in md.source
    namespace: dict = {}
    exec(code.source, namespace)  # noqa: S102 - the generated cell, as a learner runs it
    table = lessons.progress(number)
    assert table.total >= 1 and table.done == 0
