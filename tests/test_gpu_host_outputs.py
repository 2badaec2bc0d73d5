"""Host functions checked by the harness write into its output arrays, which in gpu mode are CuPy arrays.

CuPy refuses a NumPy array there (``cupy_out[...] = numpy_array`` raises ``ValueError: non-scalar
numpy.ndarray cannot be used for fill``) and refuses NumPy functions on its arrays (``np.allclose(cupy_out, ...)``
raises ``TypeError``). No GPU is needed to see it: :class:`CupyLike` is a NumPy array with those two rules.
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
    """A stand-in for a CuPy array: NumPy arrays cannot be assigned into it, NumPy functions refuse it."""

    def __setitem__(self, key, value):
        if isinstance(value, np.ndarray) and not isinstance(value, CupyLike) and value.shape != ():
            raise ValueError("non-scalar numpy.ndarray cannot be used for fill")  # CuPy's words
        super().__setitem__(key, value)

    def __array_function__(self, func, types, args, kwargs):
        raise TypeError("Implicit conversion to a NumPy array is not allowed. Please use `.get()`")  # CuPy's words


def device(a) -> CupyLike:
    return np.array(a).view(CupyLike)


def test_the_stand_in_refuses_what_cupy_refuses():
    out = device(np.zeros(3, np.float32))
    with pytest.raises(ValueError, match="cannot be used for fill"):
        out[...] = np.ones(3, np.float32)
    with pytest.raises(TypeError, match="Implicit conversion"):
        np.allclose(out, np.ones(3))
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
    with np.allclose: on a GPU both raise, so every learner's lab 09 failed there, whatever their kernels."""
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
