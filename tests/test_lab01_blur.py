"""Lab 01, exercise 4 (gpulab.problems.lab01_blur): the device function at_clamped and the blur that calls it. The
lab's own solution passes with its PTX; each typical mistake, made in the solution's device function or kernel,
gets its named hint from the full check; a learner version is "not implemented yet"; the probe behind the
diagnosis (gpulab.exercises.device_probe) reports what a call returned and which element it read."""

from __future__ import annotations

from pathlib import Path

import nbformat
import numpy as np
import pytest
from numba import cuda

import gpulab
from gpulab import ptx
from gpulab.exercises.device_probe import OOB, device_function, host_function, probe, sample_matrix
from gpulab.problems import lab01
from gpulab.problems.lab01_blur import BLUR_HINTS
from gpulab.source import define, py_func

LAB01 = Path(__file__).resolve().parents[1] / "labs" / "solutions" / "lab01_threads.ipynb"
_CELLS = nbformat.read(str(LAB01), as_version=4).cells
AT_SRC = next(c.source for c in _CELLS if c.source.startswith("@cuda.jit(device=True)\ndef at_clamped"))
BLUR_SRC = next(c.source for c in _CELLS if c.source.startswith("@cuda.jit\ndef blur3_kernel"))
SIGNATURE = "void(float32[:, :], float32[:, :])"


def _at(body: str):
    return define(f"@cuda.jit(device=True)\ndef at_clamped(a, i, j):\n{body}\n", "at_clamped", {"cuda": cuda})


def _blur(at_fn, src: str = BLUR_SRC):
    return define(src, "blur3_kernel", {"cuda": cuda, "np": np, "at_clamped": at_fn})


SOLUTION_AT = define(AT_SRC, "at_clamped", {"cuda": cuda})
CLAMP = "    i = min(max(i, 0), a.shape[0] - 1)\n    j = min(max(j, 0), a.shape[1] - 1)\n"
PLACEHOLDER = '    raise NotImplementedError("replace this line with your code")'

DEVICE_MISTAKES = {
    "zero": "    if 0 <= i < a.shape[0] and 0 <= j < a.shape[1]:\n        return a[i, j]\n    return 0.0",
    "wraps": "    i = min(i, a.shape[0] - 1)\n    j = min(j, a.shape[1] - 1)\n    return a[i, j]",  # upper side only
    "wraps row": "    i = min(i, a.shape[0] - 1)\n    j = min(max(j, 0), a.shape[1] - 1)\n    return a[i, j]",
    "wraps column": "    i = min(max(i, 0), a.shape[0] - 1)\n    j = min(j, a.shape[1] - 1)\n    return a[i, j]",
    "past end": "    i = max(i, 0)\n    j = max(j, 0)\n    return a[i, j]",  # lower side only
    "off by one": "    i = min(max(i, 0), a.shape[0])\n    j = min(max(j, 0), a.shape[1])\n    return a[i, j]",
    "swapped": CLAMP + "    return a[j, i]",
    "swapped bounds": "    i = min(max(i, 0), a.shape[1] - 1)\n    j = min(max(j, 0), a.shape[0] - 1)\n"
    "    return a[i, j]",
    "no return": CLAMP + "    a[i, j]",
    "writes": CLAMP + "    a[i, j] = a[i, j] + 1.0",  # stores, returns nothing
    "none outside": "    if 0 <= i < a.shape[0] and 0 <= j < a.shape[1]:\n        return a[i, j]",
}


@pytest.mark.parametrize("mistake", sorted(DEVICE_MISTAKES))
def test_each_device_function_mistake_gets_its_named_hint(mistake):
    at_fn = _at(DEVICE_MISTAKES[mistake])
    hint = BLUR_HINTS["swapped" if mistake == "swapped bounds" else mistake]
    assert lab01.diagnose_at_clamped(at_fn) == hint
    res = lab01.BLUR3.check(_blur(at_fn), ptx=None)
    assert not res.passed and res.score == 0 and res.hint == hint, (res.status, res.message, res.hint)


@pytest.mark.parametrize(
    ("mistake", "edit"),
    [
        ("sum", ("out[i, j] = acc / 9.0", "out[i, j] = acc")),
        ("call swapped", ("at_clamped(a, i + di, j + dj)", "at_clamped(a, j + dj, i + di)")),
    ],
)
def test_each_kernel_mistake_gets_its_named_hint(mistake, edit):
    assert edit[0] in BLUR_SRC
    res = lab01.BLUR3.check(_blur(SOLUTION_AT, BLUR_SRC.replace(*edit)), ptx=None)
    assert not res.passed and res.score == 0 and res.hint == BLUR_HINTS[mistake], (res.status, res.message, res.hint)


def test_the_solution_names_no_mistake_and_the_learner_version_is_not_implemented_yet():
    assert lab01.diagnose_at_clamped(SOLUTION_AT) is None
    blank = _at(PLACEHOLDER)
    stub = BLUR_SRC.split("    ### BEGIN SOLUTION")[0] + PLACEHOLDER + "\n"
    for kernel in (_blur(blank, stub), _blur(blank), _blur(SOLUTION_AT, stub)):
        res = lab01.BLUR3.check(kernel)
        assert res.status == "not implemented" and res.score == 0 and "not implemented yet" in res.message, res
    assert "at_clamped still says" in lab01.BLUR3.check(_blur(blank)).message


@pytest.mark.ptx
def test_the_solution_passes_with_its_ptx_and_a_kernel_with_x_along_the_rows_earns_half():
    res = lab01.BLUR3.check(_blur(SOLUTION_AT))
    assert res.passed and res.score == lab01.BLUR3.points == 3, res
    assert any(c.name == "PTX" and c.passed and "compiles" in c.message for c in res.checks), res
    rows = lab01.BLUR3.check(
        _blur(SOLUTION_AT, BLUR_SRC.replace("j, i = cuda.grid(2)", "i, j = cuda.grid(2)")), ptx=None
    )
    assert not rows.passed and rows.score == lab01.BLUR3.points / 2 and "x and y exchanged" in rows.message, rows


@pytest.mark.ptx
def test_the_device_function_is_inlined_in_the_kernels_ptx():
    for cc in [(7, 5), (9, 0)]:
        text = ptx.kernel_ptx(_blur(SOLUTION_AT), SIGNATURE, cc=cc)
        lines = [ln.strip() for ln in text.splitlines()]
        assert ".visible .entry" in text and not [ln for ln in lines if ln.startswith(("call", ".func"))]


def test_blur3_spec_replicates_the_edges():
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    out = lab01.blur3_spec(a)
    assert out.shape == a.shape and out.dtype == np.float32
    # out[0, 0]: rows 0, 0, 1 and columns 0, 0, 1 of a
    assert out[0, 0] == pytest.approx((4 * a[0, 0] + 2 * a[0, 1] + 2 * a[1, 0] + a[1, 1]) / 9)
    assert np.array_equal(lab01.blur3_spec(np.float32([[5.0]])), np.float32([[5.0]]))  # one pixel: itself


def test_probe_reports_values_and_the_index_read():
    a = sample_matrix(3, 5)
    p = probe(_at(DEVICE_MISTAKES["off by one"]), a, [(1, 2), (4, 2), (-1, 2)])
    assert p.reads[(1, 2)].equals(a[1, 2]) and p.reads[(1, 2)].index == (1, 2)
    assert p.reads[(4, 2)].value == OOB and p.reads[(4, 2)].index == (3, 2)  # clamped to the shape: row 3
    assert p.reads[(-1, 2)].equals(a[0, 2]) and not p.wrote
    assert probe(_at(DEVICE_MISTAKES["writes"]), a, [(0, 0)]).wrote
    assert device_function(_blur(SOLUTION_AT), "at_clamped") is SOLUTION_AT
    assert device_function(_blur(SOLUTION_AT), "at") is None


@pytest.mark.skipif(gpulab.is_gpu(), reason="the simulator's IndexError: on a GPU a read past the end is not caught")
def test_a_read_past_the_end_is_a_failure_with_the_hint_not_a_traceback():
    res = lab01.BLUR3.check(_blur(_at(DEVICE_MISTAKES["off by one"])), ptx=None)
    assert res.status == "failed" and "Traceback" not in str(res), res


@pytest.mark.ptx
def test_a_device_function_only_the_simulator_runs_gets_half_the_points():
    """Correct values, but a Python list in at_clamped: NVVM rejects the kernel that calls it (the harness's PTX
    check compiles the kernel with its device functions), so half the points, as for any kernel."""
    listed = _at(CLAMP + "    ij = [i, j]\n    return a[ij[0], ij[1]]")
    res = lab01.BLUR3.check(_blur(listed))
    assert res.status == "failed" and res.score == 1.5 and "PTX" in res.message, res


def _nested_at(clamp_body: str):
    """at_clamped that clamps through two device functions of its own (inner calls clamp), as a learner may."""
    ns = {"cuda": cuda}
    define(f"@cuda.jit(device=True)\ndef clamp(k, n):\n    return {clamp_body}\n", "clamp", ns)
    define("@cuda.jit(device=True)\ndef inner(k, n):\n    return clamp(k, n)\n", "inner", ns)
    src = "@cuda.jit(device=True)\ndef at_clamped(a, i, j):\n    return a[inner(i, a.shape[0]), clamp(j, a.shape[1])]\n"
    return define(src, "at_clamped", ns)


def test_a_clamp_in_device_functions_of_its_own_is_probed_through_them():
    # the probe calls at_clamped's Python code; the device functions it calls refuse a call from the host, so it
    # runs with their Python code in their place (recursively): the reviewer's N1 (right) and N2 (clamped to n)
    right, wrong = _nested_at("min(max(k, 0), n - 1)"), _nested_at("min(max(k, 0), n)")
    a = sample_matrix(3, 5)
    p = probe(right, a, [(1, 2), (-1, 2), (4, 7)])
    assert p.reads[(1, 2)].equals(a[1, 2]) and p.reads[(-1, 2)].equals(a[0, 2]) and p.reads[(4, 7)].equals(a[2, 4])
    assert lab01.diagnose_at_clamped(right) is None
    assert lab01.diagnose_at_clamped(wrong) == BLUR_HINTS["off by one"]
    res = lab01.BLUR3.check(_blur(wrong), ptx=None)
    assert not res.passed and res.hint == BLUR_HINTS["off by one"], res
    assert lab01.BLUR3.check(_blur(right), ptx=None).passed
    assert "clamp" in right.py_func.__globals__ and host_function(right) is not py_func(right)  # not changed
    assert py_func(right.py_func.__globals__["inner"]).__globals__["clamp"] is right.py_func.__globals__["clamp"]


@pytest.mark.skipif(gpulab.is_gpu(), reason="on a GPU the kernel calling a plain Python function does not compile")
def test_at_clamped_without_its_decorator_is_told_to_decorate_it():
    plain = define("def at_clamped(a, i, j):\n" + CLAMP + "    return a[i, j]\n", "at_clamped", {"cuda": cuda})
    res = lab01.BLUR3.check(_blur(plain))
    assert res.status == "failed" and res.score == 1.5, res
    assert "a plain Python function" in res.message and "@cuda.jit(device=True)" in res.hint, res
    assert "cannot rebuild" not in res.message, res  # not the check's limitation: the learner's function


@pytest.mark.ptx
def test_np_clip_in_at_clamped_is_named_with_min_and_max():
    clipped = _at("    return a[np.clip(i, 0, a.shape[0] - 1), np.clip(j, 0, a.shape[1] - 1)]")
    py_func(clipped).__globals__["np"] = np
    res = lab01.BLUR3.check(_blur(clipped))
    if any(c.name == "PTX" and "not checked" in c.message for c in res.checks):
        pytest.skip("NVVM is not installed: the PTX check cannot run")
    assert res.status == "failed" and res.score == 1.5, res
    assert "np.clip" in res.hint and "`min(max(v, lo), hi)`" in res.hint, res


@pytest.mark.skipif(gpulab.is_gpu(), reason="the re-run on copies that finds the write is the simulator's")
def test_a_kernel_writing_its_input_is_told_so_not_a_shared_memory_race():
    inplace = BLUR_SRC.replace("out[i, j] = acc / 9.0", "a[i, j] = acc / 9.0\n        out[i, j] = a[i, j]")
    assert inplace != BLUR_SRC
    res = lab01.BLUR3.check(_blur(SOLUTION_AT, inplace), ptx=None)
    assert not res.passed and res.hint.startswith("the kernel writes into its input a,"), res
    assert "cuda.local.array" not in res.hint, res
