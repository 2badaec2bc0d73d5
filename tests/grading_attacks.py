"""Submissions that try to get marks without doing the work (issue 14), built from the released
lab 01 student version. Used by tests/test_grading_attacks.py, and runnable on its own to measure
any grader: ``python tests/grading_attacks.py OUT_DIR`` writes one notebook per attack.

Every attack starts from a blank lab (or a lab with only exercise 1 answered, where the attack is a
crash: the real work then earns exactly exercise 1's 2 points).
"""

from __future__ import annotations

import sys
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parents[1]
STUDENT = ROOT / "labs" / "student" / "lab01_threads.ipynb"
STUB = 'raise NotImplementedError("replace this line with your code")'

# The real answer to exercise 1 (2 points): the "real work" some attacks keep.
ADD_BODY = "    i = cuda.grid(1)\n    if i < out.shape[0]:\n        out[i] = a[i] + b[i]"

# A kernel body that compiles and runs but computes nothing (so "not implemented" does not apply).
EMPTY_BODY = "    pass"


def _load() -> nbformat.NotebookNode:
    return nbformat.read(str(STUDENT), as_version=4)


def _meta(cell) -> dict:
    return cell.metadata.get("nbgrader", {})


def _solution_cells(nb) -> list:
    return [c for c in nb.cells if _meta(c).get("solution") and c.cell_type == "code"]


def _grade_cells(nb) -> list:
    return [c for c in nb.cells if _meta(c).get("grade")]


def _fill(cell, body: str) -> None:
    cell.source = cell.source.replace(f"    # YOUR CODE HERE\n    {STUB}", body)


def _empty_kernels(nb) -> None:
    for c in _solution_cells(nb):
        _fill(c, EMPTY_BODY)


def _append_to_first_solution(nb, code: str) -> None:
    c = _solution_cells(nb)[0]
    c.source = c.source + "\n\n" + code


FAKE_RESULT = """
class _Passed:
    passed = True
    status = "passed"
    message = "all good"
    hint = ""
    def __init__(self, points=1):
        self.score = self.max_score = points
    def __bool__(self):
        return True
    def __repr__(self):
        return "[PASS]"

def check_kernel(*args, points=1, **kwargs):
    return _Passed(points)
"""


def blank_pass_tests(nb) -> None:
    """Blank lab; every test cell replaced with `pass`."""
    for c in _grade_cells(nb):
        c.source = "pass"


def fake_check_kernel(nb) -> None:
    """Blank kernels; a solution cell defines its own `check_kernel` that returns success."""
    _empty_kernels(nb)
    _append_to_first_solution(nb, FAKE_RESULT)


def patch_exercises(nb) -> None:
    """Blank kernels; gpulab.exercises patched: check_kernel's code replaced, CheckResult always passes."""
    _empty_kernels(nb)
    _append_to_first_solution(
        nb,
        """
import gpulab.exercises as _ex
def _always(kernel, *args, points=1, **kwargs):
    from gpulab.exercises import CheckResult
    return CheckResult(name="x", status="passed", score=points, max_score=points, message="ok")
_ex.check_kernel.__code__ = _always.__code__  # reaches every name already bound to the real function
_ex.check_kernel = _always
_ex.CheckResult.passed = property(lambda self: True)
""",
    )


def patch_isclose(nb) -> None:
    """Blank (do-nothing) kernels; numpy's comparisons patched to say 'equal'."""
    _empty_kernels(nb)
    _append_to_first_solution(
        nb,
        """
import numpy
def _yes(a, b, *args, **kwargs):
    return numpy.ones(numpy.broadcast(numpy.asarray(a), numpy.asarray(b)).shape, dtype=bool)
numpy.isclose = _yes
numpy.allclose = lambda *a, **k: True
numpy.array_equal = lambda *a, **k: True
try:
    numpy._core.numeric.isclose = _yes
except AttributeError:
    numpy.core.numeric.isclose = _yes
""",
    )


def write_grade_log(nb) -> None:
    """Blank lab; after every cell, score lines go to the grade log named by an environment variable."""
    _append_to_first_solution(
        nb,
        """
import json, os
def _forge(*args, **kwargs):
    _log = os.environ.get("GPULAB_GRADE_LOG")
    if _log:
        with open(_log, "a") as _fh:
            for _ in range(1000):
                _fh.write(json.dumps({"name": "x", "status": "passed", "passed": True, "score": 21,
                                      "max_score": 1, "message": "", "hint": ""}) + "\\n")
get_ipython().events.register("post_run_cell", _forge)
""",
    )


def raise_points(nb) -> None:
    """Blank lab; every grade cell's points raised to 1000 and its test replaced with `pass`."""
    for c in _grade_cells(nb):
        c.metadata["nbgrader"]["points"] = 1000
        c.source = "pass"


def add_graded_cell(nb) -> None:
    """Blank lab; a new graded cell worth 100 points that does nothing."""
    cell = nbformat.v4.new_code_cell("pass")
    cell.metadata["nbgrader"] = {
        "grade": True,
        "grade_id": "lab01-bonus",
        "locked": True,
        "points": 100,
        "schema_version": 3,
        "solution": False,
    }
    nb.cells.append(cell)


READ_SOLUTIONS = """
import glob, json, os
import gpulab
_found = []
for _base in [os.getcwd(), os.path.dirname(gpulab.__file__), "/work", "/"]:
    for _up in range(6):
        _cand = os.path.join(_base, *([".."] * _up), "labs", "solutions", "lab01_threads.ipynb")
        if os.path.exists(_cand):
            _found.append(_cand)
for _path in glob.glob("/work/**/labs/solutions/lab01_threads.ipynb", recursive=True)[:5]:
    _found.append(_path)
_stolen = None
for _path in _found:
    try:
        _stolen = json.load(open(_path))
        break
    except OSError:
        pass
if _stolen:
    for _c in _stolen["cells"]:
        if _c["metadata"].get("nbgrader", {}).get("solution") and _c["cell_type"] == "code":
            exec("".join(_c["source"]), globals())
print("stolen from", _found[:1] if _stolen else "nowhere")
"""


def read_solutions(nb) -> None:
    """Blank lab; every solution cell finds the solution notebook and executes its answers."""
    for c in _solution_cells(nb):
        c.source = c.source + "\n\n" + READ_SOLUTIONS


REWRITE = """
import os, gpulab.exercises as _ex
_path = _ex.__file__
try:
    with open(_path, "a") as _fh:
        _fh.write("\\n\\nclass _Passed:\\n    passed=True; status='passed'; message=''; hint=''\\n"
                  "    def __init__(self, p): self.score = self.max_score = p\\n"
                  "    def __bool__(self): return True\\n"
                  "_real_check = check_kernel\\n"
                  "def check_kernel(*a, points=1, **k):\\n    return _Passed(points)\\n")
    print("rewrote", _path)
except OSError as exc:
    print("could not rewrite", _path, exc)
import importlib
importlib.reload(_ex)
check_kernel = _ex.check_kernel
"""


def rewrite_package(nb) -> None:
    """Blank lab; a solution cell appends an always-pass check_kernel to the installed package."""
    _append_to_first_solution(nb, REWRITE)


OVERWRITE = """
import os, gpulab
_targets = [os.path.join(os.path.dirname(gpulab.__file__), "..", "..", "labs", "solutions", "lab01_threads.ipynb"),
            os.path.join(os.getcwd(), "..", "solutions", "lab01_threads.ipynb")]
for _t in _targets:
    try:
        if os.path.exists(_t):
            open(_t, "w").write("{}")
            print("overwrote", _t)
    except OSError as exc:
        print("could not overwrite", _t, exc)
"""


def overwrite_solution(nb) -> None:
    """Blank lab; a solution cell overwrites the teacher's solution notebook."""
    _append_to_first_solution(nb, OVERWRITE)


def infinite_loop(nb) -> None:
    """Exercise 1 answered; exercise 2's cell loops forever and swallows KeyboardInterrupt."""
    cells = _solution_cells(nb)
    _fill(cells[0], ADD_BODY)
    cells[1].source += """

import time
while True:
    try:
        time.sleep(0.05)
    except BaseException:
        pass
"""


def unbounded_output(nb) -> None:
    """Exercise 1 answered; exercise 2's cell prints without end (Python and raw fd writes)."""
    cells = _solution_cells(nb)
    _fill(cells[0], ADD_BODY)
    cells[1].source += """

import os, sys
_chunk = "x" * 65536 + "\\n"
while True:
    sys.stdout.write(_chunk)
    os.write(1, _chunk.encode())
    os.write(2, _chunk.encode())
"""


def os_exit(nb) -> None:
    """Exercise 1 answered; exercise 2's cell kills the kernel with os._exit."""
    cells = _solution_cells(nb)
    _fill(cells[0], ADD_BODY)
    cells[1].source += "\n\nimport os\nos._exit(3)\n"


def segfault(nb) -> None:
    """Exercise 1 answered; exercise 2's cell segfaults the kernel."""
    cells = _solution_cells(nb)
    _fill(cells[0], ADD_BODY)
    cells[1].source += "\n\nimport ctypes\nctypes.string_at(0)\n"


# name -> (builder, what the real work earns out of 12)
ATTACKS = {
    "tests replaced by pass": (blank_pass_tests, 0),
    "fake check_kernel": (fake_check_kernel, 0),
    "patch gpulab.exercises": (patch_exercises, 0),
    "patch numpy.isclose": (patch_isclose, 0),
    "score lines in the grade log": (write_grade_log, 0),
    "points raised in metadata": (raise_points, 0),
    "added graded cell": (add_graded_cell, 0),
    "read the solution notebooks": (read_solutions, 0),
    "rewrite the installed package": (rewrite_package, 0),
    "overwrite the solution": (overwrite_solution, 0),
    "infinite loop catching KeyboardInterrupt": (infinite_loop, 2),
    "unbounded output": (unbounded_output, 2),
    "os._exit": (os_exit, 2),
    "segfault": (segfault, 2),
}


def build(name: str, out_dir: Path) -> Path:
    """Write the submission for attack ``name`` into ``out_dir``; returns its path."""
    builder, _ = ATTACKS[name]
    nb = _load()
    builder(nb)
    slug = "".join(ch if ch.isalnum() else "_" for ch in name).strip("_")
    path = Path(out_dir) / f"{slug}.ipynb"
    path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, str(path))
    return path


def with_answer(out_dir: Path, grade_id: str, source: str) -> tuple[Path, nbformat.NotebookNode]:
    """Lab 01's student version with the answer cell ``grade_id`` replaced by ``source``, written into ``out_dir``
    under the student version's name: (its path, the notebook)."""
    nb = _load()
    for c in nb.cells:
        if _meta(c).get("grade_id") == grade_id:
            c.source = source
    path = Path(out_dir) / STUDENT.name
    nbformat.write(nb, str(path))
    return path, nb


def patch_problem_objects(nb) -> None:
    """Blank kernels; the checks' own objects changed in place: every gpulab object with a `check`
    method (a lab's Problem) gets an instance attribute `check` that returns a pass."""
    _empty_kernels(nb)
    _append_to_first_solution(
        nb,
        """
import sys, types
from gpulab.exercises import CheckResult as _CR
def _pass(*args, **kwargs):
    return _CR(name="x", status="passed", score=2, max_score=2, message="ok")
for _mod in list(sys.modules.values()):
    if getattr(_mod, "__name__", "").startswith("gpulab."):
        for _obj in list(vars(_mod).values()):
            _state = getattr(_obj, "__dict__", None)
            if isinstance(_state, dict) and not isinstance(_obj, (type, types.ModuleType, types.FunctionType)):
                if callable(getattr(_obj, "check", None)):
                    _state["check"] = _pass
""",
    )


ATTACKS["patch the checks' objects"] = (patch_problem_objects, 0)


def inspect_grader(nb) -> None:
    """Exercise 1 answered; exercise 2's cell walks every object and frame looking for the grader's
    state (the dict of trusted names, the snapshot) to plant a fake check_kernel in it."""
    cells = _solution_cells(nb)
    _fill(cells[0], ADD_BODY)
    cells[1].source += (
        FAKE_RESULT
        + """

import gc, sys
for _frame in sys._current_frames().values():
    while _frame is not None:
        if "trusted" in _frame.f_locals:
            _frame.f_locals["trusted"]["check_kernel"] = check_kernel
        _frame = _frame.f_back
for _obj in gc.get_objects():
    if isinstance(_obj, dict) and "check_kernel" in _obj and _obj is not globals():
        _obj["check_kernel"] = check_kernel
"""
    )


ATTACKS["inspect the grader (frames, gc)"] = (inspect_grader, 2)


if __name__ == "__main__":
    out = Path(sys.argv[1])
    for attack in ATTACKS:
        print(build(attack, out))
