"""The hint under "name ... is not defined" in a notebook (gpulab.notebook_hints, installed by banner()):
the cell still fails (nbclient raises CellExecutionError, the output stays an "error" that nbgrader scores
0), its traceback gains one line naming the cell to re-run, other NameErrors are left as they were, and
nothing changes outside IPython."""

from __future__ import annotations

import pytest

from gpulab.notebook_hints import install_name_hint, name_hint

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
from nbrun import SlicedClient, stdout_text  # noqa: E402  (after the importorskip)

BROKEN_KERNEL_CELL = "from numba import cuda\n\n@cuda.jit\ndef matvec_kernel(A, x, out:\n    pass\n"


def test_name_hint_says_which_cell_to_rerun() -> None:
    history = ["", "import gpulab", BROKEN_KERNEL_CELL, "matvec_kernel"]
    hint = name_hint("name 'matvec_kernel' is not defined", history)
    assert "`matvec_kernel` is not defined" in hint and "(In [2]) stopped with an error" in hint
    assert "run it again, then run this cell again" in hint
    never = name_hint("name 'softmax_kernel' is not defined", history)
    assert "has not run yet" in never and "check its spelling" in never
    # other NameErrors (a local read before assignment) keep Python's own message
    assert name_hint("cannot access local variable 'y' where it is not associated with a value", history) == ""


def test_a_local_of_an_earlier_cell_is_not_taken_for_its_definition() -> None:
    """``i`` assigned inside a kernel is the kernel's own: a later NameError for ``i`` must not blame that cell
    (which ran fine); a name assigned at a cell's top level (also under if/for/with) still points at the cell."""
    kernel_cell = (
        "@cuda.jit\ndef add_kernel(a, out):\n    i = cuda.grid(1)\n    if i < out.size:\n        out[i] = a[i]\n"
    )
    hint = name_hint(
        "name 'i' is not defined", ["", "import gpulab", kernel_cell + "sq = [i * i for i in range(3)]\n", "out[i]"]
    )
    assert "has not run yet" in hint and "(In [2])" not in hint, hint
    looped = "for n in [1, 2]:\n    total = n\nwith open('f') as fh:\n    data = 1\nimport numpy.linalg as la\n"
    for name in ("n", "total", "fh", "data", "la", "add_kernel"):
        assert "(In [1]) stopped" in name_hint(f"name '{name}' is not defined", ["", looped + kernel_cell, name]), name


def test_a_name_defined_further_down_this_cell_does_not_send_the_learner_to_this_cell_as_another() -> None:
    history = ["", "import gpulab", "print(total)\ntotal = 0"]  # the last entry is the cell that failed
    hint = name_hint("name 'total' is not defined", history)
    assert "used in this cell before the line that defines it" in hint and "(In [2])" not in hint, hint


def test_nothing_is_installed_outside_ipython() -> None:
    assert install_name_hint() is False


def _errors(cell) -> list:
    return [o for o in cell.outputs if o.get("output_type") == "error"]


def test_notebook_name_error_keeps_failing_and_gains_the_hint(monkeypatch) -> None:
    monkeypatch.setenv("GPULAB_DEVICE", "simulator")
    nb = nbformat.v4.new_notebook()
    cells = [
        "import gpulab\nprint(gpulab.banner())\nprint(gpulab.banner() != '')",  # twice: installed once
        BROKEN_KERNEL_CELL,
        "matvec_kernel",
        "def f():\n    print(y)\n    y = 1\n\nf()",  # UnboundLocalError, a NameError of another kind
        "softmax_kernel",
        "print('still works', 6 * 7)",
    ]
    nb.cells = [nbformat.v4.new_code_cell(src) for src in cells]
    SlicedClient(nb, timeout=120, kernel_name="python3", allow_errors=True).execute()
    assert not _errors(nb.cells[0]), nb.cells[0].outputs
    assert _errors(nb.cells[1])[0]["ename"] == "SyntaxError"
    (err,) = _errors(nb.cells[2])
    assert err["ename"] == "NameError" and err["evalue"] == "name 'matvec_kernel' is not defined"
    assert "matvec_kernel" in "".join(err["traceback"][:-1])  # IPython's usual traceback, then the hint
    assert err["traceback"][-1].startswith("gpulab: `matvec_kernel` is not defined because the cell")
    assert "(In [2]) stopped with an error" in err["traceback"][-1]
    (other,) = _errors(nb.cells[3])
    assert other["ename"] == "UnboundLocalError" and "gpulab:" not in "".join(other["traceback"])
    assert "has not run yet" in _errors(nb.cells[4])[0]["traceback"][-1]
    assert stdout_text(nb.cells[5]) == "still works 42\n"
    nbgrader_utils = pytest.importorskip("nbgrader.utils")
    nb.cells[2].metadata["nbgrader"] = {"grade": True, "solution": False, "grade_id": "check", "points": 2}
    assert nbgrader_utils.determine_grade(nb.cells[2]) == (0, 2.0)  # nbgrader still scores the cell 0

    # without allow_errors the run stops at the NameError cell, as before
    nb2 = nbformat.v4.new_notebook()
    nb2.cells = [nbformat.v4.new_code_cell(src) for src in ("import gpulab\nprint(gpulab.banner())", "matvec_kernel")]
    with pytest.raises(nbclient.exceptions.CellExecutionError) as info:
        SlicedClient(nb2, timeout=120, kernel_name="python3").execute()
    assert "NameError" in str(info.value) and "has not run yet" in str(info.value)
    assert _errors(nb2.cells[1])[0]["ename"] == "NameError"


def test_feedback_keeps_the_hint_line_but_no_code():
    pytest.importorskip("nbconvert")
    from gpulab.grading.feedback import ShortTracebacks

    hint = name_hint("name 'saxpy_kernel' is not defined", ["", "import gpulab"])
    quoted = ["----> 1 result = CHECK(saxpy_kernel)", "      3 ### BEGIN HIDDEN TESTS", hint]
    error = {"output_type": "error", "ename": "NameError", "evalue": "name 'saxpy_kernel' is not defined"}
    test = nbformat.v4.new_code_cell("...", outputs=[nbformat.v4.new_output(**error, traceback=quoted)])
    test.metadata["nbgrader"] = {"grade": True, "grade_id": "lab01-saxpy-check", "points": 2}
    nb, _ = ShortTracebacks()(nbformat.v4.new_notebook(cells=[test]), {})
    assert nb.cells[0].outputs[0].traceback == ["NameError: name 'saxpy_kernel' is not defined", hint]
