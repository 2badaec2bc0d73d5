"""Host functions checked by the harness write into its output arrays, which in gpu mode are CuPy arrays.

CuPy refuses a NumPy array there (``cupy_out[...] = numpy_array`` raises ``ValueError: non-scalar
numpy.ndarray cannot be used for fill``) and in arithmetic (``cupy_out + numpy_array`` raises ``TypeError``).
``np.allclose(cupy_out, numpy_array)`` is accepted: CuPy 14 dispatches it to ``cupy.allclose`` (``core.pyx``
``__array_function__``, numpy.ndarray in ``_HANDLED_TYPES``), which copies the NumPy array to the device
(``_logic/comparison.py`` ``isclose``: ``cupy.asanyarray``) and returns a 0-d CuPy bool array. No GPU is needed to
see it: :class:`CupyLike` is a NumPy array with those rules.
"""

from __future__ import annotations

import ast
import json
import types
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]


class CupyLike(np.ndarray):
    """A stand-in for a CuPy array: NumPy arrays cannot be assigned into it; of NumPy's functions only
    ``allclose``/``isclose`` take it (as CuPy's do), the others refuse it (stricter than CuPy, which dispatches each
    to its own function of that name)."""

    def __setitem__(self, key, value):
        if isinstance(value, np.ndarray) and not isinstance(value, CupyLike) and value.shape != ():
            raise ValueError("non-scalar numpy.ndarray cannot be used for fill")  # CuPy's words
        super().__setitem__(key, value)

    def __array_function__(self, func, types, args, kwargs):
        if func in (np.allclose, np.isclose):  # cupy.allclose/isclose: cupy.asanyarray of both, a CuPy result
            return device(func(*(_host(a) for a in args), **kwargs))
        raise TypeError("Implicit conversion to a NumPy array is not allowed. Please use `.get()`")  # CuPy's words


def device(a) -> CupyLike:
    return np.array(a).view(CupyLike)


def test_the_stand_in_refuses_what_cupy_refuses():
    out = device(np.zeros(3, np.float32))
    with pytest.raises(ValueError, match="cannot be used for fill"):
        out[...] = np.ones(3, np.float32)
    with pytest.raises(TypeError, match="Unsupported type"):
        out + np.ones(3, np.float32)  # cupy/_core/_kernel.pyx _preprocess_arg
    close = np.allclose(out, np.zeros(3))  # accepted by CuPy 14 (cupy/_logic/comparison.py l. 126-127)
    assert isinstance(close, CupyLike) and close.shape == () and bool(close)
    out[...] = device(np.ones(3, np.float32))  # device into device: accepted
    out[0] = np.float32(2)  # a scalar: accepted
    assert out.view(np.ndarray).tolist() == [2.0, 1.0, 1.0]


def _function_from_notebook(path: Path, name: str) -> str:
    """The source of the top-level function ``name`` defined in a code cell of ``path``."""
    for cell in json.loads(path.read_text())["cells"]:
        src = "".join(cell["source"])
        if cell["cell_type"] != "code" or f"def {name}(" not in src:
            continue
        tree = ast.parse("\n".join(ln for ln in src.splitlines() if not ln.lstrip().startswith(("!", "%"))))
        for node in tree.body:
            if isinstance(node, ast.FunctionDef) and node.name == name:
                return ast.get_source_segment("\n".join(src.splitlines()), node) or ""
    raise AssertionError(f"{path.name} defines no function {name}")


def test_lab09_training_step_check_writes_a_device_array_into_its_output():
    """Lab 09's graded check of a whole training step on the learner's kernels (``check_kernel(..., host=
    step_on_your_kernels)``) assigned the NumPy weights into the harness's output array and compared that array
    with np.allclose: on a GPU the assignment raises, so every learner's lab 09 failed there, whatever their
    kernels (the np.allclose alone is accepted by CuPy 14: cupy.allclose takes a NumPy operand)."""
    src = _function_from_notebook(ROOT / "labs" / "solutions" / "lab09_training.ipynb", "step_on_your_kernels")
    weights_after = np.linspace(-1, 1, 12, dtype=np.float32)
    calls: list[object] = []

    def tiny_step(x, y, ops=None):  # the notebook's step, on the learner's ops or on NumPy: here the same
        calls.append(ops)
        return weights_after.copy()

    cap = types.SimpleNamespace(ops=lambda verify=False: "yours" + (" verified" if verify else ""))
    gpulab = types.SimpleNamespace(to_device=device)  # gpu mode: to_device gives a CuPy array
    scope = {"np": np, "gpulab": gpulab, "tiny_step": tiny_step, "cap": cap}
    exec(compile(src, "lab09 step_on_your_kernels", "exec"), scope)  # noqa: S102 - the notebook's own code
    x, y = device(np.zeros((2, 1, 8, 8), np.float32)), device(np.zeros(2, np.int64))
    weights = device(np.zeros(12, np.float32))  # the check's output, on the device
    scope["step_on_your_kernels"](x, y, weights)
    assert np.array_equal(weights.view(np.ndarray), weights_after)
    assert calls == ["yours", None]  # equal steps: no verify pass


# ---------------------------------------------------------------------------------------------------------
# The harness in an emulated gpu mode: inputs and outputs are CupyLike, the array module is a CuPy stand-in


class _FakeCupy(types.ModuleType):
    """The few CuPy functions the harness and the host functions call, on CupyLike arrays."""

    ndarray = CupyLike

    def __init__(self) -> None:
        super().__init__("cupy")

    @staticmethod
    def asarray(a, dtype=None):
        return a if isinstance(a, CupyLike) and dtype is None else device(np.asarray(_host(a), dtype=dtype))

    @staticmethod
    def full(n, fill, dtype=None):
        return device(np.full(n, fill, dtype=dtype))

    @staticmethod
    def zeros(n, dtype=None):
        return device(np.zeros(n, dtype=dtype))

    @staticmethod
    def empty(n, dtype=None):
        return device(np.empty(n, dtype=dtype))

    def __getattr__(self, name):  # any other function: NumPy's, on the arrays inside, results as CupyLike
        fn = getattr(np, name)
        if not callable(fn):
            return fn

        def call(*args, **kwargs):
            res = fn(*(_host(a) for a in args), **{k: _host(v) for k, v in kwargs.items()})
            return device(res) if isinstance(res, np.ndarray) else res

        return call


def _host(a):
    return a.view(np.ndarray).copy() if isinstance(a, CupyLike) else a


def _ufunc(self, ufunc, method, *inputs, **kwargs):
    """CuPy refuses to mix its arrays with NumPy arrays in arithmetic (``TypeError: Unsupported type``)."""
    for x in inputs:
        if isinstance(x, np.ndarray) and not isinstance(x, CupyLike) and x.ndim > 0:
            raise TypeError(f"Unsupported type {type(x)}")
    plain = [x.view(np.ndarray) if isinstance(x, CupyLike) else x for x in inputs]
    if "out" in kwargs:
        kwargs["out"] = tuple(o.view(np.ndarray) if isinstance(o, CupyLike) else o for o in kwargs["out"])
    res = getattr(ufunc, method)(*plain, **kwargs)
    return device(res) if isinstance(res, np.ndarray) else res


CupyLike.__array_ufunc__ = _ufunc  # type: ignore[method-assign]
CupyLike.__module__ = "cupy._stand_in"  # gpulab.runtime.array_module() tells CuPy arrays by their module


@pytest.fixture
def emulated_gpu_mode(monkeypatch):
    import sys

    from gpulab import runtime

    fake = _FakeCupy()
    monkeypatch.setitem(sys.modules, "cupy", fake)
    monkeypatch.setattr(runtime, "is_gpu", lambda: True)
    monkeypatch.setattr(runtime, "is_simulator", lambda: False)
    monkeypatch.setattr(runtime, "xp", lambda: fake)
    monkeypatch.setattr(runtime, "to_device", lambda a: fake.asarray(a))
    monkeypatch.setattr(runtime, "to_host", lambda a: np.asarray(_host(a)))
    monkeypatch.setattr(runtime, "synchronize", lambda: None)
    return fake


def _host_exercises():
    from gpulab import lessons

    out = []
    for (lesson, name), ex in sorted(lessons.problems.EXERCISES.items()):
        if (ex.adapt is None and ex.checker is None) or hasattr(ex.reference, "py_func"):
            continue  # a kernel (an adapt= or host= only launches it): Numba takes CuPy arrays as they are
        skip = (lesson, name) == ("06", "axpy_elementwise")  # needs cupy.ElementwiseKernel (NVRTC): a real GPU
        out.append(pytest.param(lesson, name, marks=pytest.mark.skip("needs a GPU") if skip else ()))
    return out


@pytest.mark.parametrize("lesson, name", _host_exercises())
def test_lesson_exercises_checked_as_host_functions_pass_in_gpu_mode(lesson, name, emulated_gpu_mode):
    """Each lesson exercise whose answer is a plain function (FLOP counts, the ring all-reduce, energy and cost
    formulas, a systolic array's step) passes with its reference answer when the harness hands it CuPy-like
    inputs and outputs, as it does in gpu mode."""
    from gpulab import lessons

    ex = lessons.exercise(lesson, name)
    res = ex.check(ex.reference, trusted=True)
    assert res.passed, res


@pytest.mark.parametrize(
    "check, host, functions",
    [
        ("LINEAR_BACKWARD", "linear_host", ["linear_backward", "linear_host"]),
        ("CONV2D_BACKWARD", "conv_backward_host", ["conv2d_backward", "conv_backward_host"]),
    ],
)
def test_lab08_host_answers_pass_in_gpu_mode(check, host, functions, emulated_gpu_mode):
    """Lab 08's array-level answers (the backward passes of a linear and a convolution layer, written with the
    library's NumPy/CuPy ops) run on the check's CuPy inputs and write CuPy results into its outputs."""
    from gpulab import nn, problems

    nb = ROOT / "labs" / "solutions" / "lab08_backprop.ipynb"
    scope = {"np": np, "reference": nn.ops.get("numpy")}
    for name in functions:
        exec(compile(_function_from_notebook(nb, name), f"lab08 {name}", "exec"), scope)  # noqa: S102
    res = getattr(problems.lab08, check).check(host=scope[host])
    assert res.passed, res
