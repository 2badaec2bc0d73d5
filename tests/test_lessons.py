"""Lessons: every exercise's reference passes its check, learner versions are current and solution-free,
and each learner version runs top to bottom with "not implemented yet" verdicts and no traceback.

(nbval runs the lesson sources themselves: `make test` includes notebooks/, minus notebooks/learner,
which tests/test_browser.py runs in JupyterLab, or this file under plain nbclient where that cannot run.)
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import numpy as np
import nbformat
import pytest
from numba import cuda

from gpulab import lessons
from gpulab.errors import UsageError
from gpulab.labs import BEGIN, BEGIN_HIDDEN, CODE_STUB, END
from gpulab.lessons import learner as rel

ROOT = Path(__file__).resolve().parents[1]
SOURCES = rel.sources(ROOT)
LEARNERS_WITH_EXERCISES = [rel.learner_path(ROOT, s) for s in SOURCES if BEGIN in s.read_text(encoding="utf-8")]


# --- the exercises ----------------------------------------------------------------------------------


@pytest.mark.parametrize("key", sorted(lessons.EXERCISES), ids=lambda k: f"{k[0]}-{k[1]}")
def test_every_reference_passes_its_check(key):
    ex = lessons.EXERCISES[key]
    result = ex.check(ex.reference, trusted=True)  # gpulab's own: no own-code stage
    assert result.passed, result
    assert result.notes == [], result.notes  # no changed input, no float64 accumulator
    assert "def " in lessons.reveal(*key, display=False)


def test_placeholder_is_not_implemented_and_falls_back(capsys):
    @cuda.jit
    def add_kernel(a, b, out):
        raise NotImplementedError("replace this line with your code")

    result = lessons.check("01", "add", add_kernel)
    assert result.status == "not implemented" and not result.passed
    assert lessons.or_reference(result, add_kernel, "01", "add") is lessons.exercise("01", "add").reference
    assert "reference kernel" in capsys.readouterr().out


def test_wrong_kernels_are_rejected():
    @cuda.jit
    def add_unguarded(a, b, out):
        i = cuda.grid(1)
        out[i] = a[i] + b[i]

    @cuda.jit
    def scale_twice(alpha, a, out):
        j, i = cuda.grid(2)
        if i < out.shape[0] and j < out.shape[1]:
            out[i, j] = 2 * alpha * a[i, j]

    bad = lessons.check("01", "add", add_unguarded)
    assert not bad.passed and "guard" in bad.message + bad.hint
    wrong = lessons.check("01", "scale2d", scale_twice)
    assert not wrong.passed and "expected" in wrong.message


def test_or_reference_checks_again_when_given_another_exercises_verdict(capsys):
    """A passing check of one exercise must not let an unchecked kernel of another through (a learner who
    re-ran an earlier check cell has `result` holding that verdict): or_reference checks the kernel again."""

    def attainable_gflops(intensity, peak_tflops, bandwidth_gbps):  # a learner's, right
        return np.minimum(peak_tflops * 1e3, bandwidth_gbps * np.asarray(intensity, dtype=np.float64))

    passed = lessons.check(11, "attainable", attainable_gflops)
    assert passed.passed and passed.details["exercise"] == ("11", "attainable")

    def cost_per_epoch(images, images_per_second, usd_per_hour):  # a learner's, wrong, never checked
        return -1.0

    ref = lessons.exercise("11", "cost_per_epoch").reference
    assert lessons.or_reference(passed, cost_per_epoch, "11", "cost_per_epoch") is ref
    out = capsys.readouterr().out
    assert "result is the check of lesson 11's 'attainable': checking your 'cost_per_epoch' again" in out
    assert "has not passed its check yet (failed)" in out
    assert lessons.or_reference(passed, ref, "11", "cost_per_epoch") is ref  # a correct one passes its own check
    capsys.readouterr()
    # its own verdict, of this very function: trusted, no check again
    assert lessons.or_reference(passed, attainable_gflops, "11", "attainable") is attainable_gflops
    assert capsys.readouterr().out == ""


def test_unknown_exercise_names_the_known_ones():
    with pytest.raises(UsageError, match="no exercise 01/nope; lesson 01's exercises: add, scale2d"):
        lessons.exercise("01", "nope")


def test_check_function_and_compare(capsys):
    def todo():
        raise NotImplementedError

    assert lessons.check_function(todo, [((), 1)]).status == "not implemented"
    assert lessons.check_function(lambda x: 2 * x, [((3,), 6)]).passed
    wrong = lessons.check_function(lambda x: x, [((3,), 6)])
    assert wrong.status == "failed" and "expected 6" in wrong.message
    assert lessons.check_function(lambda: 1 / 0, [((), 1)]).status == "error"
    assert "right" in lessons.compare(4, 4.2)
    assert "too high" in lessons.compare(40, 4)
    assert "Enter a prediction" in lessons.compare(None, 4, why="because")
    with pytest.raises(UsageError):
        lessons.compare("many", 4)


# --- the sources ------------------------------------------------------------------------------------


@pytest.mark.parametrize("path", [p for p in SOURCES if BEGIN in p.read_text(encoding="utf-8")], ids=lambda p: p.name)
def test_each_exercise_is_followed_by_a_check(path):
    nb = nbformat.read(str(path), as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code"]
    n_ex = 0
    for k, cell in enumerate(code):
        if BEGIN not in cell.source:
            continue
        n_ex += 1
        assert END in cell.source
        nxt = code[k + 1].source
        assert ("lessons.check(" in nxt or "check_function(" in nxt) and BEGIN_HIDDEN in nxt, (
            f"exercise cell {k} of {path.name} is not followed by a check cell with a hidden assert"
        )
        assert "assert result.passed" in nxt
    assert n_ex >= 1
    assert path.stat().st_size < 1_000_000
    for cell in code:  # committed executed, and no check failed
        assert cell.get("execution_count") is not None or not cell.source.strip()
        assert not any(o.get("output_type") == "error" for o in cell.get("outputs", []))


@pytest.mark.parametrize("lesson", ["01", "02", "03", "04"])
def test_kernel_lessons_have_three_exercises_and_a_prediction(lesson):
    path = next(p for p in SOURCES if p.name.startswith(lesson))
    text = path.read_text(encoding="utf-8")
    assert text.count(BEGIN) >= 3
    assert "lessons.compare(" in text


# --- the learner versions ---------------------------------------------------------------------------


def test_learner_versions_are_current_and_solution_free():
    problems = rel.check(ROOT)
    assert not problems, "\n".join(f"{p.path}: {p.problem}" for p in problems)


def test_release_and_check_in_a_fresh_repository(tmp_path):
    (tmp_path / "notebooks").mkdir()
    src = tmp_path / "notebooks" / "01_x.ipynb"
    shutil.copy(ROOT / "notebooks" / "01_threads_blocks_grids.ipynb", src)
    assert [p.problem.split(":")[0] for p in rel.check(tmp_path)] == ["missing"]
    written = rel.release(tmp_path)
    assert [p.name for p in written] == ["01_x.ipynb"] and rel.check(tmp_path) == []
    learner = nbformat.read(str(written[0]), as_version=4)
    text = "".join(c.source for c in learner.cells)
    assert BEGIN not in text and BEGIN_HIDDEN not in text and "assert result.passed" not in text
    assert text.count(CODE_STUB) == 4  # exercises 1-4 of lesson 01
    assert "blob/main/notebooks/learner/01_x.ipynb" in learner.cells[0].source
    assert all(not c.get("outputs") for c in learner.cells if c.cell_type == "code")
    # a leaked answer line, then a stale file, then an orphan are all reported
    nb = nbformat.read(str(written[0]), as_version=4)
    nb.cells[-1].source += "\n    stride = cuda.gridsize(1)  # total threads in the grid"
    nbformat.write(nb, str(written[0]))
    found = " ".join(p.problem for p in rel.check(tmp_path))
    assert "solution text" in found and "stale" in found
    (tmp_path / "notebooks" / "learner" / "99_orphan.ipynb").write_text("{}", encoding="utf-8")
    assert any("no lesson source" in p.problem for p in rel.check(tmp_path))


def test_command_line(tmp_path, capsys):
    assert lessons.main(["check", "--root", str(ROOT)]) == 0
    assert "current" in capsys.readouterr().out
    assert lessons.main(["check", "--root", str(tmp_path)]) == 2
    assert "no notebooks" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        lessons.main(["publish"])


@pytest.mark.parametrize("path", LEARNERS_WITH_EXERCISES, ids=lambda p: p.name)
def test_learner_version_runs_without_a_traceback(path):
    """Headless (nbclient, with the course's 1 s polling), where the browser test does not run them (tests/conftest.py
    decides): no Chromium, `-m "not browser"`, or `make test-oldest` (Colab's ipywidgets 7.7 and plotly 5)."""
    from nbrun import SlicedClient

    nb = nbformat.read(str(path), as_version=4)
    SlicedClient(
        nb, timeout=120, kernel_name="python3", allow_errors=True, resources={"metadata": {"path": str(path.parent)}}
    ).execute()
    errors = [
        (k, o.get("ename"), o.get("evalue"))
        for k, c in enumerate(nb.cells)
        for o in c.get("outputs", [])
        if o.get("output_type") == "error"
    ]
    assert not errors, f"{path.name}: {errors[0]}"
    outputs = " ".join(str(o.get("data", "")) + str(o.get("text", "")) for c in nb.cells for o in c.get("outputs", []))
    stubs = sum(c.source.count(CODE_STUB) for c in nb.cells)
    assert outputs.count("not implemented yet") >= stubs, "every exercise shows a not-implemented verdict"


@pytest.fixture(scope="module")
def compiled_answers():
    """Lessons 00-04's reference kernels compiled for sm_75 in one NVVM process."""
    import inspect

    from gpulab import ptx
    from gpulab.lessons import answers

    source = inspect.getsource(answers)
    items = {}
    for kernel, signature in answers.PTX_SIGNATURES:
        name = getattr(kernel, "py_func", kernel).__name__
        items[name] = {"source": source, "name": name, "signature": signature}
    return ptx.compile_sources(items, cc=(7, 5))


@pytest.mark.ptx
@pytest.mark.parametrize(
    "kernel,signature",
    __import__("gpulab.lessons.answers", fromlist=["x"]).PTX_SIGNATURES,
    ids=lambda x: getattr(getattr(x, "py_func", x), "__name__", str(x)),
)
def test_reference_answers_compile_to_ptx(kernel, signature, compiled_answers):
    name = getattr(kernel, "py_func", kernel).__name__
    assert compiled_answers.get(name) == "ok", f"{name} ({signature}): {compiled_answers.get(name)}"


@pytest.mark.parametrize(
    "typed,value",
    [("4,000,000", 4e6), ("1e6", 1e6), (" 2.5e3 ", 2500), ("1/8", 0.125), ("1000x", 1000), ("50%", 0.5), (7, 7.0)],
)
def test_predictions_typed_as_text_are_read_as_numbers(typed, value):
    from gpulab.lessons.problems import prediction_number

    assert prediction_number(typed) == pytest.approx(value)
    assert prediction_number("40%", unit="%") == 40
    assert "right" in lessons.compare(typed, value)


def test_a_decimal_comma_is_refused_not_misread():
    for typed in ("0,5", "12,5", "1,2,3"):
        with pytest.raises(UsageError, match="0.5, not 0,5"):
            lessons.compare(typed, 0.5)
    assert "right" in lessons.compare("12,000.5", 12000.5)


@pytest.mark.parametrize("bad", [True, float("nan"), float("inf"), "a lot", "1/0", [1, 2], "", {"x": 1}])
def test_predictions_that_are_not_one_number_say_what_to_type(bad):
    with pytest.raises(UsageError, match="prediction must be .*e.g. guess = 4"):
        lessons.compare(bad, 4)


def test_a_negative_prediction_gets_no_negative_ratio():
    text = lessons.compare(-1, 8e5)
    assert "too low" in text and "x the measured" not in text


def test_a_number_typed_with_commas_is_explained():
    with pytest.raises(UsageError, match=r"several numbers: your guess is \(1, 0\).*guess = 1000 or guess = 1_000"):
        lessons.compare((1, 0), 800)  # what `guess = 1,000` gives


@pytest.mark.parametrize("measured", [np.array(4.0), np.array([4.0]), [4], (4.0,), np.float32(4)])
def test_a_one_number_array_is_compared_as_its_number(measured):
    """CuPy reductions give 0-d arrays in gpu mode (NumPy scalars in simulator mode): one number either way."""
    assert "right" in lessons.compare(4, measured)


@pytest.mark.parametrize(
    ("measured", "says"),
    [
        (np.array([4.0, 5.0]), "compare needs one measured number; it was given an array of shape (2,)"),
        ([4, 5], "it was given a list of 2 numbers"),
        (None, "it was given None: the cell that computes it did not produce a number"),
        (float("nan"), "it was given nan: the computation behind it did not give a finite number"),
    ],
)
def test_a_measured_value_that_is_not_one_number_is_refused(measured, says):
    with pytest.raises(UsageError, match=re.escape(says)):
        lessons.compare(3, measured)


def test_compare_tolerance_is_a_fraction():
    with pytest.raises(UsageError, match=r"tolerance=25 \(for 25% write tolerance=0.25\)"):
        lessons.compare(1, 100, tolerance=25)
    with pytest.raises(UsageError, match="a number from 0 to 1"):
        lessons.compare(4, 4, tolerance=-1)
    assert "right" in lessons.compare(4, 4, tolerance=0) and "right" in lessons.compare(5, 4, tolerance=0.25)


def test_or_reference_checks_again_a_kernel_redefined_after_its_check(capsys):
    """A check cell run, then the kernel's cell edited and run again, not the check: the verdict is of the old
    kernel, so the new one is checked before the cells below use it."""
    ref = lessons.exercise("01", "add").reference

    @cuda.jit
    def add_kernel(a, b, out):
        i = cuda.grid(1)
        if i < out.size:
            out[i] = a[i] + b[i]

    first = add_kernel
    good = lessons.check("01", "add", first)
    assert good.passed

    @cuda.jit
    def add_kernel(a, b, out):  # noqa: F811 - the cell run again, now wrong
        i = cuda.grid(1)
        if i < out.size:
            out[i] = a[i] - b[i]

    capsys.readouterr()
    assert lessons.or_reference(good, add_kernel, "01", "add") is ref
    out = capsys.readouterr().out
    assert "result is the check of another version of add_kernel: its cell ran again after the check" in out
    assert "has not passed its check yet (failed)" in out
    assert lessons.or_reference(good, first, "01", "add") is first and capsys.readouterr().out == ""


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (lambda r, k: (k, r), "the check's verdict comes first, then the kernel; it was given the kernel first"),
        (lambda r, k: (None, k), "result must be what lessons.check returned; it was given None. Run the check"),
        (lambda r, k: (k, k), "it was given FakeCUDAKernel"),
    ],
)
def test_or_reference_refuses_what_is_not_a_verdict(args, says):
    ref = lessons.exercise("01", "add").reference
    result = lessons.exercise("01", "add").check(ref, trusted=True)
    with pytest.raises(UsageError, match=re.escape(says) if "Fake" not in says else "result must be what"):
        lessons.or_reference(*args(result, ref), "01", "add")


def test_check_function_given_a_value_asks_for_the_function():
    def conv_flops(n):
        return 2 * n

    res = lessons.check_function(conv_flops(3), [((3,), 6)])
    assert res.status == "error" and res.score == 0
    assert "needs your function itself, e.g. lessons.check_function(your_function, cases); it was given an int" in (
        res.message
    )
    assert lessons.check_function(conv_flops, [((3,), 6)]).passed


def test_lessons_check_names_the_call_for_none_and_a_name():
    res = lessons.check("01", "add", None)
    assert res.status == "error" and 'e.g. lessons.check("01", "add", add_kernel)' in res.message
    text = lessons.check("01", "add", "add_kernel")
    assert "given the text 'add_kernel'. Pass the function, not its name" in text.message
    fn = lessons.check("09", "cnn_forward_macs", None)
    assert "needs your function itself" in fn.message and "cnn_forward_macs)" in fn.message
