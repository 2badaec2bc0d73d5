"""A PTX check that could not run (no NVVM where the labs are graded) is told to the teacher: the check passes as
before (not the learner's fault, the same points), and the grade table marks the exercise with `*` and a footnote
that says how many, the class table and gradebook.csv/.json name them. The no-NVVM path is forced by the compiler
child's answer: numba-cuda (0.22 and 0.30) raises NvvmSupportError for each kernel when it finds no NVVM, and the
child answers it as the kernel's error, which the PTX check took for a kernel that NVVM rejected (half points)."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest
from numba import cuda

from gpulab import capstone, grading, labs, ptx
from gpulab.exercises import check_kernel
from gpulab.exercises.result import PTX_NOT_RUN
from gpulab.grading import gradebook, grader, runner
from gpulab.grading.assemble import Cell
from gpulab.grading.rows import Graded, GradeRow, format_table, score_test
from gpulab.kernels import nn_kernels

ROOT = Path(__file__).resolve().parents[1]
STUDENT = ROOT / "labs" / "student" / "lab01_threads.ipynb"
SIG = "void(float32[:], float32[:], float32[:])"
FOOTNOTE = "PTX not checked: no NVVM on this machine"


@cuda.jit
def add_kernel(a, b, out):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = a[i] + b[i]


def _inputs(n, rng):
    return rng.random(n, dtype=np.float32), rng.random(n, dtype=np.float32)


def _check():
    return check_kernel(add_kernel, lambda a, b: a + b, inputs=_inputs, sizes=[40], threads=32, ptx=SIG, points=2)


@pytest.fixture
def no_nvvm(monkeypatch):
    """The compiler child's answer on a machine without NVVM (numba-cuda 0.30's words; 0.22 says "libNVVM cannot
    be found"): the same error for every kernel, whatever its code."""

    def answer(code, payload, timeout):
        return {
            key: {f"{cc[0]}.{cc[1]}": "NvvmSupportError: libNVVM is not available" for cc in payload["ccs"]}
            for key in payload["items"]
        }

    monkeypatch.setattr(ptx, "_run_child", answer)


def _row(res, points=2.0):
    """The grade table's row for a test cell whose check returned ``res``, through the grading runner's record."""
    grading._reported.clear()
    results = runner._results_of({"result": res}, None)
    rec = {"index": 0, "kind": "test", "tampered": "", "stderr": "", "error": None, "value": res.score}
    return score_test(Cell(0, "test", "", "lab01-add-check", points), {**rec, "results": results}, "")


def test_no_nvvm_is_not_a_kernel_error(no_nvvm):
    with pytest.raises(ptx.CompilerMissing, match="libNVVM is not available"):
        ptx.compile_sources({"k": {"source": "", "name": "k", "signature": SIG}})
    res = _check()
    assert res.passed and res.score == 2, res  # "NVVM rejected the kernel": half the points before
    assert [c.message for c in res.checks if c.name == "PTX"] == [
        f"{PTX_NOT_RUN} (NvvmSupportError: libNVVM is not available)"
    ]
    assert res.ptx_not_checked and res.to_dict()["ptx_not_checked"] is True


def test_the_grade_table_marks_an_exercise_whose_ptx_was_not_checked(no_nvvm):
    row = _row(_check())
    assert (row.status, row.score, row.ptx_not_checked) == ("passed", 2.0, True)  # the same points, marked
    other = GradeRow("lab01-map-check", 1, 1, "passed", "correct")
    table = format_table([row, other])
    lines = table.splitlines()
    assert "passed *" in lines[1] and "*" not in lines[2], table
    assert lines[-2].split()[:2] == ["total", "3/3"] and lines[-1].startswith(f"* {FOOTNOTE}"), table
    assert "1 exercise marked * got its points without the check" in lines[-1] and "gpulab[grade]" in lines[-1]
    graded = Graded("alice.ipynb", "lab01_threads", "simulator", "t", [row, other], [])
    assert graded.to_dict()["ptx_not_checked"] == ["lab01-add-check"]
    assert [e["ptx_not_checked"] for e in graded.to_dict()["exercises"]] == [True, False]


def test_no_mark_when_the_ptx_was_checked():
    res = _check()
    if not any(c.name == "PTX" and c.message.startswith("compiles to PTX") for c in res.checks):
        pytest.skip(f"NVVM cannot run here: {res.checks}")
    row = _row(res)
    assert not res.ptx_not_checked and not row.ptx_not_checked and row.status == "passed"
    table = format_table([row])
    assert "*" not in table and FOOTNOTE not in table and table.splitlines()[-1].startswith("total")


def _graded(sub, src, limits, marked=None):
    """Alice's notebook was graded without NVVM (two exercises unchecked), bob's and carol's with it."""
    marked = "alice" in str(sub) if marked is None else marked
    rows = [
        GradeRow("lab01-add-check", 2, 2, "passed", "ok", ptx_not_checked=marked),
        GradeRow("lab01-map-check", 2, 1, "partial", "over budget", ptx_not_checked=marked),
        GradeRow("lab01-stencil-check", 3, 0, "failed", "wrong"),
    ]
    return Graded(str(sub), src.stem, "simulator", "t", rows, [])


def _class(tmp_path, students):
    subs = tmp_path / "submitted"
    for student in students:
        (subs / student).mkdir(parents=True)
        (subs / student / "lab01_threads.ipynb").write_bytes(STUDENT.read_bytes())
    return gradebook.grade_folder(subs, ROOT / "labs" / "solutions", tmp_path / "out", progress=False)


def test_the_class_table_and_gradebook_name_them_and_count_them(tmp_path, monkeypatch):
    monkeypatch.setattr(gradebook, "grade_notebook", _graded)
    book = _class(tmp_path, ["alice", "bob", "carol"])
    summary = book.summary().splitlines()
    alice = next(ln for ln in summary if ln.startswith("alice"))
    assert "3/7" in alice and alice.endswith("PTX not checked *: lab01-add-check, lab01-map-check"), alice
    assert not any("PTX" in ln for ln in summary if ln.startswith(("bob", "carol")))
    assert summary[-1].startswith(f"* {FOOTNOTE}") and "2 exercises marked * (in 1 submission)" in summary[-1]
    rows = {r["student"]: r for r in csv.DictReader(open(tmp_path / "out" / "gradebook.csv"))}
    assert (
        rows["alice"]["ptx_not_checked"] == "lab01-add-check lab01-map-check" and rows["bob"]["ptx_not_checked"] == ""
    )
    assert float(rows["alice"]["lab01-add-check"]) == 2 and float(rows["alice"]["score"]) == 3  # the points as before
    book_json = {e["student"]: e for e in json.loads((tmp_path / "out" / "gradebook.json").read_text())}
    assert book_json["alice"]["ptx_not_checked"] == ["lab01-add-check", "lab01-map-check"]
    assert book_json["carol"]["ptx_not_checked"] == []


def test_no_footnote_when_every_ptx_check_ran(tmp_path, monkeypatch):
    monkeypatch.setattr(gradebook, "grade_notebook", _graded)
    book = _class(tmp_path, ["bob", "carol"])
    assert FOOTNOTE not in book.summary() and "*" not in book.summary()
    assert {r["ptx_not_checked"] for r in csv.DictReader(open(tmp_path / "out" / "gradebook.csv"))} == {""}


def test_labs_grade_of_one_notebook_prints_the_footnote(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(grader, "grade_notebook", lambda sub, src, limits: _graded(sub, src, limits, marked=True))
    out = tmp_path / "alice.json"
    labs.main(["grade", str(STUDENT), "--root", str(ROOT), "--json", str(out)])
    text = capsys.readouterr().out
    assert "passed *" in text and "2 exercises marked * got their points without the check" in text, text
    assert json.loads(out.read_text())["ptx_not_checked"] == ["lab01-add-check", "lab01-map-check"]


def test_the_capstone_says_not_checked_without_nvvm(no_nvvm, capsys):
    cap = capstone.Capstone()
    assert cap.register("relu", nn_kernels.relu_kernel, trusted=True).passed
    cap.check_ptx()  # raised CapstoneError "a GPU would refuse them" (NvvmSupportError) before
    assert (
        "PTX not checked: the PTX compiler (NVVM, from numba-cuda[cu12]) could not run here." in capsys.readouterr().out
    )


# A decorator that raises a class *named* NvvmSupportError only in the compiler's child (there `__name__` is
# builtins'), with a kernel NVVM rejects (np.linalg.norm): review r4's exploit. Before, the child's answer read as a
# missing compiler: full points, marked *; in lab 09 one such op switched check_ptx off for every op.
@cuda.jit
@(
    lambda f: (
        f
        if __name__ != "builtins"
        else (_ for _ in ()).throw(type("NvvmSupportError", (Exception,), {})("libNVVM is not available"))
    )
)  # noqa: E501
def add_norm_kernel(a, b, out):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = a[i] + b[i] + np.linalg.norm(a) * 0


@cuda.jit
@(
    lambda f: (
        f
        if __name__ != "builtins"
        else (_ for _ in ()).throw(type("NvvmSupportError", (Exception,), {})("libNVVM is not available"))
    )
)  # noqa: E501
def forged_relu_kernel(x, y):
    i = cuda.grid(1)
    if i < x.size:
        y[i] = max(x[i], 0.0)


@cuda.jit
def relu_backward_norm_kernel(dout, y, dx):
    i = cuda.grid(1)
    if i < y.size:
        dx[i] = dout[i] * (y[i] > 0) + np.linalg.norm(y) * 0


def _nvvm_here():
    try:
        ptx.compile_sources({"k": {"source": "", "name": "k", "signature": SIG}})
    except ptx.CompilerMissing as exc:
        pytest.skip(f"NVVM cannot run here: {exc}")


@pytest.mark.ptx
def test_a_kernel_that_raises_nvvm_support_error_fails_its_ptx_check():
    _nvvm_here()
    res = check_kernel(add_norm_kernel, lambda a, b: a + b, inputs=_inputs, sizes=[40], threads=32, ptx=SIG, points=2)
    assert (res.status, res.score, res.ptx_not_checked) == ("failed", 1.0, False), res
    assert _row(res).ptx_not_checked is False


@pytest.mark.ptx
def test_lab09_one_forged_kernel_does_not_switch_off_check_ptx():
    _nvvm_here()
    cap = capstone.Capstone()
    cap.kernels.update(relu=forged_relu_kernel, relu_backward=relu_backward_norm_kernel)
    with pytest.raises(capstone.CapstoneError) as err:
        cap.check_ptx()
    assert "- relu:" in str(err.value) and "- relu_backward:" in str(err.value), err.value
    assert cap.ptx_not_run == ""


@pytest.mark.ptx
def test_a_crash_after_a_good_probe_is_the_kernels_failure():
    _nvvm_here()
    source = "import os\nos._exit(3)\n"
    res = ptx.compile_sources({"k": {"source": source, "name": "k", "signature": SIG}, "g": _good_item()})
    assert res["g"] == "ok" and "stopped while compiling it" in res["k"], res


def _good_item():
    src = "from numba import cuda\n@cuda.jit\ndef g(a, b, out):\n    out[0] = a[0] + b[0]\n"
    return {"source": src, "name": "g", "signature": SIG}


def test_lab09_marks_its_row_when_nvvm_is_missing(no_nvvm, capsys):
    cap = capstone.Capstone()
    assert cap.register("relu", nn_kernels.relu_kernel, trusted=True).passed
    cap.check_ptx()
    assert "PTX not checked" in capsys.readouterr().out
    res = check_kernel(add_kernel, lambda a, b: a + b, inputs=_inputs, sizes=[40], threads=32, ptx=None, points=4)
    assert not res.ptx_not_checked  # the training cell's check compiles nothing itself
    res = cap.trained(res, dataset="digits", accuracy=0.9, target=0.85, ops={"relu": 1})
    assert res.ptx_not_checked and _row(res).ptx_not_checked, res.checks
