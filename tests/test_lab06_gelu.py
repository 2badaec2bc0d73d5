"""Lab 06 exercise 4 (``gpulab.problems.lab06_gelu``): the GELU ufuncs' named mistakes, each written as a learner
would write it, get their hints; answers that are not float32 GPU ufuncs are told so; the layer's host copies cost
half its point with the bytes named; the layer is graded with the lab's ufuncs; the solution cells compile to PTX."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from numba import cuda, float32, vectorize

from gpulab import problems

ROOT = Path(__file__).resolve().parents[1]
LAB = ROOT / "labs" / "solutions" / "lab06_cupy_interop.ipynb"
L = problems.lab06
F = ["float32(float32)"]
C, A = float32(0.7978845608), float32(0.044715)
H, ONE = float32(0.5), float32(1.0)


def _solution(name: str) -> str:
    for cell in json.loads(LAB.read_text())["cells"]:
        src = "".join(cell["source"])
        if cell["cell_type"] == "code" and f"def {name}(" in src:
            return src
    raise AssertionError(f"{LAB.name} defines no {name}")


def _namespace() -> dict:
    ns: dict = {"math": math, "float32": float32, "vectorize": vectorize, "cuda": cuda, "np": np}
    for name in ("gelu", "gelu_grad", "gelu_layer"):
        exec(_solution(name), ns)  # noqa: S102 - the lab's own solution cells
    return ns


@pytest.fixture(scope="module")
def solution() -> dict:
    return _namespace()


# --- gelu's mistakes ------------------------------------------------------------------------------------------


def gelu_tanh_from_exp(x):
    e = math.exp(float32(2.0) * C * (x + A * x * x * x))
    return H * x * (ONE + (e - ONE) / (e + ONE))


def gelu_overflow(x):
    return x * (ONE + math.tanh(C * (x + A * x * x * x))) * H


def gelu_erf(x):
    return H * x * (ONE + math.erf(x / float32(1.4142135)))


def gelu_no_half(x):
    return x * (ONE + math.tanh(C * (x + A * x * x * x)))


def gelu_no_sqrt(x):
    return H * x * (ONE + math.tanh(x + A * x * x * x))


@pytest.mark.parametrize(
    "fn, words",
    [
        (gelu_tanh_from_exp, "inf / inf once exp overflows"),
        (gelu_overflow, "an intermediate overflowed"),
        (gelu_erf, "exact GELU's values, with erf"),
        (gelu_no_half, "the factor 0.5 is missing"),
        (gelu_no_sqrt, "sqrt(2/pi) = 0.79788456 inside the tanh is missing"),
    ],
)
def test_gelu_mistakes_get_their_hints(fn, words):
    res = L.GELU.check(vectorize(F, target="cuda")(fn), ptx=None)
    assert res.status == "failed" and res.score == 0, res
    assert words in res.hint, res.hint


# --- gelu_grad's mistakes -------------------------------------------------------------------------------------


def grad_naive(x):
    t = math.tanh(C * (x + A * x * x * x))
    return H * (ONE + t) + H * x * (ONE - t * t) * C * (ONE + float32(3.0) * A * x * x)


def grad_is_gelu(x):
    xc = min(max(x, float32(-10.0)), float32(10.0))
    return H * x * (ONE + math.tanh(C * (xc + A * xc * xc * xc)))


def grad_first_term_only(x):
    xc = min(max(x, float32(-10.0)), float32(10.0))
    return H * (ONE + math.tanh(C * (xc + A * xc * xc * xc)))


def grad_second_term_only(x):
    xc = min(max(x, float32(-10.0)), float32(10.0))
    t = math.tanh(C * (xc + A * xc * xc * xc))
    return H * xc * (ONE - t * t) * C * (ONE + float32(3.0) * A * xc * xc)


def grad_no_inner(x):
    xc = min(max(x, float32(-10.0)), float32(10.0))
    t = math.tanh(C * (xc + A * xc * xc * xc))
    return H * (ONE + t) + H * xc * (ONE - t * t) * C


def grad_erf(x):
    xc = min(max(x, float32(-10.0)), float32(10.0))
    return H * (ONE + math.erf(x / float32(1.4142135))) + xc * math.exp(-H * xc * xc) * float32(0.39894228)


@pytest.mark.parametrize(
    "fn, words",
    [
        (grad_naive, "0 * inf is nan"),
        (grad_is_gelu, "returned gelu itself"),
        (grad_first_term_only, "the product rule adds"),
        (grad_second_term_only, "lacks the product rule's first term"),
        (grad_no_inner, "inner derivative is incomplete"),
        (grad_erf, "exact GELU's derivative"),
    ],
)
def test_gelu_grad_mistakes_get_their_hints(fn, words):
    res = L.GELU_GRAD.check(vectorize(F, target="cuda")(fn), ptx=None)
    assert res.status == "failed" and res.score == 0, res
    assert words in res.hint, res.hint


def test_the_nan_hint_names_the_limits_and_the_clamp():
    hint = next(h for h in L.GELU_GRAD.mistakes if "nan" in h)
    assert "1 and 0" in hint and "xc * xc * xc" in hint and "x * x overflows float32" in hint


# --- what is not a float32 GPU ufunc ---------------------------------------------------------------------------


def test_a_plain_function_or_a_float64_ufunc_is_told_what_to_write(solution):
    plain = L.GELU.check(gelu_overflow, ptx=None)
    assert plain.score == 0 and "not a GPU ufunc" in plain.message and "@vectorize" in plain.message, plain
    f64 = L.GELU.check(vectorize(["float64(float64)"], target="cuda")(gelu_overflow), ptx=None)
    assert f64.score == 0 and "no float32 version" in f64.message, f64


def test_placeholders_are_not_implemented_yet():
    @vectorize(F, target="cuda")
    def gelu(x):
        raise NotImplementedError

    def gelu_layer(x_d):
        raise NotImplementedError

    assert L.GELU.check(gelu).status == "not implemented"
    assert L.GELU_LAYER.check(gelu_layer).status == "not implemented"


# --- the solution, and half points for a failing PTX stage ------------------------------------------------------


def test_the_solution_passes_and_is_finite_on_the_extremes(solution):
    for problem, name in ((L.GELU, "gelu"), (L.GELU_GRAD, "gelu_grad")):
        res = problem.check(solution[name], ptx=None)
        assert res.passed and res.score == 1, res
    y = solution["gelu"](L.EXTREMES)
    assert np.isfinite(y).all() and y[-2] == L.EXTREMES[-2] and y[-1] == 0


def test_values_right_but_no_ptx_get_half(monkeypatch, solution):
    from gpulab.simulator import ufuncs

    monkeypatch.setattr(ufuncs, "python_only_ufunc", lambda fn: [])  # the values alone: only the PTX stage refuses

    def gelu(x):
        xc = np.clip(x, float32(-10.0), float32(10.0))  # numba-cuda's np.clip takes arrays, not numbers
        return H * x * (ONE + math.tanh(C * (xc + A * xc * xc * xc)))

    res = L.GELU.check(vectorize(F, target="cuda")(gelu))
    assert res.status == "failed" and res.score == 0.5 and "PTX" in res.message, res
    assert "clamp with the builtins min and max" in res.hint, res.hint


# --- the layer ---------------------------------------------------------------------------------------------------


def test_the_layer_without_copies_passes_and_copies_cost_half_with_the_bytes(solution):
    gelu, gelu_grad = solution["gelu"], solution["gelu_grad"]
    assert L.GELU_LAYER.check(solution["gelu_layer"]).score == 1

    def host_arrays(x_d):
        x = x_d.copy_to_host()
        return gelu(x), gelu_grad(x)

    res = L.GELU_LAYER.check(host_arrays)
    assert res.status == "over budget" and res.score == 0.5, res
    assert "for x of 300 float32 elements (1,200 bytes)" in res.message and "2,400 host -> device" in res.message
    assert "a GPU ufunc given a host array" in res.hint

    def copied_back(x_d):
        y_d = gelu(x_d)
        y_d.copy_to_host()
        return y_d, gelu_grad(x_d)

    res = L.GELU_LAYER.check(copied_back)
    assert res.score == 0.5 and "0 host -> device, 1,200 device -> host" in res.message, res
    assert ".copy_to_host()" in res.hint


def test_the_layer_is_graded_with_the_lab_ufuncs():
    """A wrong gelu costs gelu's point, not the layer's too: the layer runs with the lab's ufuncs."""
    gelu = vectorize(F, target="cuda")(gelu_no_half)
    gelu_grad = vectorize(F, target="cuda")(grad_first_term_only)

    def gelu_layer(x_d):
        return gelu(x_d), gelu_grad(x_d)

    assert L.GELU_LAYER.check(gelu_layer).passed
    assert problems.lab06_gelu.with_lab_ufuncs(print) is print  # not a plain function: run as it is


class _CupyResult:
    """A stand-in for a CuPy array a layer may return (``cupy.asarray(gelu(x_d))``): a device array (it has the
    CUDA array interface) with ``.get()``, and no ``copy_to_host``, as CuPy's."""

    def __init__(self, a: np.ndarray) -> None:
        self._a = np.asarray(a)
        self.__cuda_array_interface__ = {"shape": self._a.shape, "typestr": self._a.dtype.str, "version": 3}

    def get(self) -> np.ndarray:
        return self._a.copy()


def test_a_layer_returning_cupy_arrays_is_read_back_with_get(monkeypatch, solution):
    """On a GPU the check read a returned device array with ``.copy_to_host()``, which CuPy's arrays lack: a layer
    returning CuPy arrays (device arrays too, no copy) failed with an AttributeError instead of passing."""
    is_cuda_array = cuda.is_cuda_array
    monkeypatch.setattr(cuda, "is_cuda_array", lambda a: isinstance(a, _CupyResult) or is_cuda_array(a))
    gelu, gelu_grad = solution["gelu"], solution["gelu_grad"]

    def as_cupy(x_d):
        return _CupyResult(gelu(x_d).copy_to_host()), _CupyResult(gelu_grad(x_d).copy_to_host())

    log: list = []
    host = problems.lab06_gelu.layer_host(as_cupy, log)
    x = np.float32([-3, 0, 1, 5.4])
    y, dydx = np.zeros_like(x), np.zeros_like(x)
    host(x, y, dydx)
    np.testing.assert_allclose(y, L.gelu_spec(x), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(dydx, L.gelu_grad_spec(x), rtol=1e-5, atol=5e-6)
    assert log and log[-1][2] is False  # device arrays: not counted as host arrays returned
