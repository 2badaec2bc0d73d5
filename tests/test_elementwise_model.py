"""gpulab's simulator model of CuPy's ElementwiseKernel and ReductionKernel refuses what CuPy refuses.

CuPy 14 (``cupy/_core/_kernel.pyx``, ``_decide_params_type_core``) converts Python and NumPy scalars to a
parameter's declared type but raises ``TypeError('Type is mismatched. ...')`` for an array of another dtype, for an
output of another dtype and for two arrays of different dtypes bound to one placeholder. The model once converted
them, so a spec given ``cupy.arange(n)`` (float64 or int64) passed in simulator mode and failed on a GPU.
"""

from __future__ import annotations

import numpy as np
import pytest

import gpulab
from gpulab.errors import UsageError
from gpulab.lessons.elementwise import run_elementwise, run_reduction

pytestmark = pytest.mark.skipif(gpulab.is_gpu(), reason="the model runs in simulator mode (CuPy itself on a GPU)")

DOUBLE = dict(in_params="float32 x", out_params="float32 y", operation="y = 2 * x")


def test_arrays_of_the_declared_type_and_scalars_of_any_type_run():
    x = np.arange(3, dtype=np.float32)
    assert run_elementwise(DOUBLE, x).tolist() == [0.0, 2.0, 4.0]
    axpy = dict(in_params="float32 a, float32 x", out_params="float32 y", operation="y = a * x")
    assert run_elementwise(axpy, 2.0, x).dtype == np.float32  # a Python float for float32 a: converted
    assert run_elementwise(axpy, np.float64(2.0), x).tolist() == [0.0, 2.0, 4.0]  # a NumPy scalar: converted


@pytest.mark.parametrize("dtype", [np.float64, np.int64])
def test_an_array_of_another_dtype_is_refused_with_what_to_do(dtype):
    with pytest.raises(TypeError) as err:
        run_elementwise(DOUBLE, np.arange(3).astype(dtype))
    text = str(err.value)
    assert text.startswith(f"Type is mismatched. x {np.dtype(dtype)} float32")
    assert "x.astype('float32')" in text and "`T x`" in text


def test_an_output_of_another_dtype_is_refused():
    with pytest.raises(TypeError, match=r"Type is mismatched\. y float64 float32.*Allocate the output"):
        run_elementwise(DOUBLE, np.ones(2, np.float32), np.zeros(2))


def test_one_placeholder_takes_one_dtype():
    add = dict(in_params="T x, T z", out_params="T y", operation="y = x + z")
    assert run_elementwise(add, np.ones(2), np.ones(2)).dtype == np.float64  # T = float64 throughout
    assert run_elementwise(add, np.ones(2, np.float32), 2.0).dtype == np.float32  # a scalar binds nothing
    with pytest.raises(TypeError, match=r"Type is mismatched\. z float64 float32 T.*share the placeholder T"):
        run_elementwise(add, np.ones(2, np.float32), np.ones(2))


def test_a_reduction_refuses_an_array_of_another_dtype():
    spec = dict(
        in_params="float32 x", out_params="float32 y", map_expr="x * x", reduce_expr="a + b", post_map_expr="y = a",
        identity="0",
    )  # fmt: skip
    assert float(run_reduction(spec, np.ones(5, np.float32))) == 5.0
    with pytest.raises(TypeError, match=r"Type is mismatched\. x float64 float32"):
        run_reduction(spec, np.ones(5))


def test_only_arrays_bind_a_placeholder_outputs_first_as_in_cupy():
    """CuPy's _decide_params_type_core binds ``T`` from output arrays, then input arrays; a scalar never binds it
    (its dtype is None there) and is converted to the bound type, wherever it stands in the parameter list."""
    axpy = dict(in_params="T a, T x", out_params="T y", operation="y = a * x")
    x = np.ones(2, np.float32)
    assert run_elementwise(axpy, 2.0, x).dtype == np.float32  # a Python float before the array: T = float32
    assert run_elementwise(axpy, np.float64(0.1), x).tolist() == [np.float32(0.1)] * 2  # converted, then multiplied
    scale = dict(in_params="T a, float32 x", out_params="T y", operation="y = a * x")
    out = np.zeros(2, np.float64)
    assert run_elementwise(scale, 0.1, x, out) is out and out.tolist() == [0.1] * 2  # T = float64 from out


# CuPy 14 (_kernel.pyx, _get_elementwise_kernel_code and carray.cuh's CUPY_FOR) runs the operation in
# `CUPY_FOR(i, _ind.size())`, with each parameter that is not raw bound to one element
# (`const float &x = _raw_x[_ind.get()];`): i is the element's index, and `x[i]` on such a parameter does not compile.
AXPY = dict(in_params="float32 a, float32 x, float32 y", out_params="float32 z", operation="z = a * x + y")


def test_i_is_the_elements_index_and_raw_parameters_are_indexed_with_it():
    x = np.arange(4, dtype=np.float32)
    spec = dict(in_params="float32 x", out_params="float32 z", operation="z = x + i")
    assert run_elementwise(spec, x).tolist() == [0.0, 2.0, 4.0, 6.0]
    raw = dict(in_params="raw float32 w, float32 x", out_params="float32 z", operation="z = w[i] * x")
    w = np.array([1, 2, 3, 4], dtype=np.float32)
    assert run_elementwise(raw, w, x).tolist() == [0.0, 2.0, 6.0, 12.0]


def test_an_element_indexed_like_an_array_is_told_to_drop_the_index():
    """Before: "uses 'i', which is neither a parameter (a, x, y) nor a math function ... declare it in in_params"."""
    x = np.arange(3, dtype=np.float32)
    with pytest.raises(UsageError) as err:
        run_elementwise(dict(AXPY, operation="z[i] = a * x[i] + y[i]"), np.float32(2), x, x)
    text = str(err.value)
    assert "already is one element" in text and "Write it on elements: 'z = a * x + y'" in text, text
    assert "declare it in in_params" not in text
    with pytest.raises(UsageError, match="declared raw but given a scalar"):
        run_elementwise(dict(AXPY, in_params="raw float32 a, float32 x, float32 y", operation="z = a[i] * x + y"),
                        np.float32(2), x, x)  # fmt: skip


def test_lesson_06_axpy_with_its_parameters_in_another_order_is_told_they_bind_by_position():
    from gpulab import lessons

    def spec():
        return dict(AXPY, in_params="float32 x, float32 y, float32 a", name="axpy")

    res = lessons.check("06", "axpy_elementwise", spec)  # before: expected/got and no hint
    assert not res.passed and res.hint.startswith("in_params bind to the arguments by position"), res
    assert lessons.check("06", "axpy_elementwise", lambda: dict(AXPY, name="axpy")).passed


def test_lesson_06s_exercise_states_the_parameter_order_and_elements_not_indices():
    import json
    from pathlib import Path

    root = Path(__file__).resolve().parents[1] / "notebooks"
    for path in (root / "06_cupy_interop.ipynb", root / "learner" / "06_cupy_interop.ipynb"):
        cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
        text = next(
            "".join(c["source"]) for c in cells if "### Exercise 3 · An `ElementwiseKernel`" in "".join(c["source"])
        )
        assert "declare them in that order: `a, x, y`" in text and "write `x`, not `x[i]`" in text, path
