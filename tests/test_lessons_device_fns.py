"""Lesson 01's device-function exercise (gpulab.lessons.device_fns): the reference `at` passes inside
neighbours4_kernel, each typical mistake gets its named hint, and a kernel that calls a device function compiles to
PTX without a GPU, with the device function inlined (no call left)."""

import inspect

import numpy as np
import pytest
from numba import cuda

from gpulab import lessons, ptx
from gpulab.lessons import device_fns
from gpulab.lessons.device_fns import HINTS
from gpulab.source import define, global_names, py_func, standalone_source


@cuda.jit(device=True)
def at_le(a, i, j):
    if 0 <= i <= a.shape[0] and 0 <= j <= a.shape[1]:
        return a[i, j]
    return 0.0


@cuda.jit(device=True)
def at_swapped_index(a, i, j):
    if 0 <= i < a.shape[0] and 0 <= j < a.shape[1]:
        return a[j, i]
    return 0.0


@cuda.jit(device=True)
def at_swapped_bounds(a, i, j):
    if 0 <= i < a.shape[1] and 0 <= j < a.shape[0]:
        return a[i, j]
    return 0.0


@cuda.jit(device=True)
def at_transposed(a, i, j):
    if 0 <= j < a.shape[0] and 0 <= i < a.shape[1]:
        return a[j, i]
    return 0.0


@cuda.jit(device=True)
def at_wraps(a, i, j):
    if i < a.shape[0] and j < a.shape[1]:
        return a[i, j]
    return 0.0


@cuda.jit(device=True)
def at_no_zero(a, i, j):
    if 0 <= i < a.shape[0] and 0 <= j < a.shape[1]:
        return a[i, j]


@cuda.jit(device=True)
def at_stores(a, i, j):
    if 0 <= i < a.shape[0] and 0 <= j < a.shape[1]:
        a[i, j] = a[i, j] * 1


@cuda.jit(device=True)
def at_ones(a, i, j):
    if 0 <= i < a.shape[0] and 0 <= j < a.shape[1]:
        return a[i, j]
    return 1.0


@cuda.jit(device=True)
def at_last_row_refused(a, i, j):
    if 0 <= i < a.shape[0] - 1 and 0 <= j < a.shape[1]:
        return a[i, j]
    return 0.0


@cuda.jit(device=True)
def at_first_row_refused(a, i, j):
    if 0 < i < a.shape[0] and 0 <= j < a.shape[1]:
        return a[i, j]
    return 0.0


@cuda.jit(device=True)
def at_or(a, i, j):
    if 0 <= i < a.shape[0] or 0 <= j < a.shape[1]:
        return a[i, j]
    return 0.0


@cuda.jit(device=True)
def at_placeholder(a, i, j):
    raise NotImplementedError


@pytest.mark.parametrize(
    ("answer", "hint"),
    [
        (at_le, "bound"),
        (at_swapped_index, "swapped"),
        (at_swapped_bounds, "swapped"),
        (at_transposed, "swapped"),
        (at_wraps, "wraps"),
        (at_no_zero, "none outside"),
        (at_stores, "writes"),
        (at_ones, "not zero"),
        (at_last_row_refused, "too strict"),  # zeros on an edge row: not "swapped" (review finding)
        (at_first_row_refused, "too strict"),
        (at_or, "bound"),  # `or` lets a row past the end through: the hint names `and`
    ],
)
def test_each_typical_mistake_gets_its_named_hint(answer, hint):
    res = lessons.check("01", "at", answer)
    assert not res.passed and res.hint == HINTS[hint], (res.status, res.message, res.hint)
    assert device_fns.diagnose(answer) == HINTS[hint]


def test_the_learner_version_is_not_implemented_yet_and_a_kernel_is_not_a_device_function():
    assert lessons.check("01", "at", at_placeholder).status == "not implemented"
    assert not lessons.check("01", "at", device_fns.neighbours4_kernel).passed


def test_a_right_answer_names_no_mistake():
    assert device_fns.diagnose(device_fns.at) is None


@pytest.mark.ptx
def test_the_reference_passes_with_its_ptx():
    res = lessons.exercise("01", "at").check(device_fns.at, trusted=True)  # gpulab's own: no own-code stage
    assert res.passed, res
    assert any(c.name == "PTX" and c.passed and "compiles" in c.message for c in res.checks)


def test_standalone_source_defines_a_device_function_under_the_name_the_kernel_uses():
    src = standalone_source(device_fns.kernel_with(at_le))
    assert "def at_le(a, i, j):" in src and "\nat = at_le" in src
    namespace: dict = {}
    exec(compile(src, "<rebuilt>", "exec"), namespace)
    assert namespace["at"] is namespace["at_le"]


@pytest.mark.ptx
def test_a_device_function_is_inlined_in_the_kernels_ptx():
    for cc in [(7, 5), (9, 0)]:
        text = ptx.kernel_ptx(device_fns.neighbours4_kernel, device_fns.SIGNATURE, cc=cc)
        lines = [ln.strip() for ln in text.splitlines()]
        assert ".visible .entry" in text and not [ln for ln in lines if ln.startswith(("call", ".func"))]
        assert sum(ln.startswith("ld.f32") for ln in lines) == 4  # at's four reads, in the kernel itself


@pytest.mark.ptx
def test_kernel_ptx_raises_the_compilers_error():
    @cuda.jit
    def launches(out):
        device_fns.neighbours4_kernel[1, 32](out, out)

    with pytest.raises(RuntimeError, match="getitem"):
        ptx.kernel_ptx(launches, "void(float32[:, :])")


def test_neighbours4_kernel_sums_the_four_neighbours_with_zero_padding():
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    out = np.zeros_like(a)
    device_fns.neighbours4_kernel[(1, 1), (16, 16)](a, out)
    assert out[0, 0] == a[1, 0] + a[0, 1] and out[1, 1] == a[0, 1] + a[2, 1] + a[1, 0] + a[1, 2]
    assert np.array_equal(out, device_fns.problem().spec(a))


def test_standalone_source_takes_globals_not_attribute_names():
    namespace = {"grid": (3, 2), "shape": 7}  # a notebook's globals named like cuda.grid and a.shape
    kernel = define(
        inspect.getsource(py_func(device_fns.neighbours4_kernel)),
        "neighbours4_kernel",
        {**namespace, "cuda": cuda, "at": device_fns.at},
    )
    src = standalone_source(kernel)
    assert "grid =" not in src and "shape =" not in src and "def at(a, i, j):" in src
    assert global_names(py_func(device_fns.neighbours4_kernel).__code__) == {"at", "cuda"}
