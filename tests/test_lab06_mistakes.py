"""Lab 06 (``gpulab.problems.lab06``): each common wrong answer gets the verdict and hint designed for it, the
NumPy models of CuPy's ElementwiseKernel and ReductionKernel read what the lab needs, coalescing is counted at a
view's real addresses, and the lab's kernels compile to PTX."""

from __future__ import annotations

import json
import sys
import types
from pathlib import Path

import numpy as np
import pytest
from numba import cuda, float32
from numba.types import float16

from gpulab import problems
from gpulab.errors import UsageError
from gpulab.lessons.elementwise import run_elementwise, run_reduction
from gpulab.trace import trace
from test_gpu_host_outputs import CupyLike, device

ROOT = Path(__file__).resolve().parents[1]
LAB = ROOT / "labs" / "solutions" / "lab06_cupy_interop.ipynb"
L = problems.lab06

# ---------------------------------------------------------------------------------------------------
# Exercise 1 · strided views


@cuda.jit
def view_coalesced(x, b, out):
    k = cuda.grid(1)
    rows, cols = out.shape
    if k < rows * cols:
        i = k % rows
        j = k // rows
        out[i, j] = max(x[i, j] + b[j], float32(0.0))


@cuda.jit
def view_row_major(x, b, out):  # the C-order habit: correct, but lanes are a column (4 * rows bytes) apart
    k = cuda.grid(1)
    rows, cols = out.shape
    if k < rows * cols:
        i = k // cols
        j = k % cols
        out[i, j] = max(x[i, j] + b[j], float32(0.0))


@cuda.jit
def view_bias_by_row(x, b, out):
    k = cuda.grid(1)
    rows, cols = out.shape
    if k < rows * cols:
        i = k % rows
        j = k // rows
        out[i, j] = max(x[i, j] + b[i], float32(0.0))


def test_views_coalesced_kernel_scores_full_marks():
    res = L.BIAS_RELU_VIEW.check(view_coalesced)
    assert res.passed and res.score == 2, res


def test_views_row_major_kernel_is_correct_but_half_marks_with_the_layout_hint():
    res = L.BIAS_RELU_VIEW.check(view_row_major)
    assert res.status == "over budget" and res.score == 1, res
    assert "coalescing of x" in res.message and "uncoalesced" in res.message
    assert "x is a view with strides (4, 160) bytes for shape (40, 33)" in res.hint
    assert "axis 0 is the contiguous one" in res.hint and "not along the last axis" in res.hint


def test_views_bias_indexed_by_row_fails_and_a_bounds_guard_is_not_the_hint():
    """The thread that indexed b past its end has an element to compute (a 1-D grid over a 2-D output)."""
    res = L.BIAS_RELU_VIEW.check(view_bias_by_row)
    assert not res.passed and res.score == 0, res
    assert "indexed past the end" in res.message and "a bounds guard is not the fix" in res.hint, res


def test_trace_counts_sectors_at_a_views_real_addresses():
    """The same kernel, handed a C-ordered array or the transposed view of one: sectors follow the strides."""
    buf = np.arange(64 * 32, dtype=np.float32).reshape(32, 64)
    b = np.zeros(32, np.float32)
    view = buf.T  # (64, 32), strides (4, 256)
    for kernel, ratio in ((view_coalesced, 1.0), (view_row_major, 8.0)):
        out = np.zeros((32, 64), np.float32).T
        log = trace(kernel, 16, 128, view, b, out, names=("x", "b", "out"))
        actual, ideal = log.coalescing("x", "r")
        assert actual / ideal == pytest.approx(ratio), kernel
        assert np.array_equal(out, np.maximum(view + b, 0))
    assert log.strides["x"] == (4, 256) and "b" not in log.strides
    assert log.byte_offsets("x")[:3].tolist() == [0, 256, 512]  # x[0, 0], x[0, 1], x[0, 2]
    c_log = trace(view_coalesced, 16, 128, np.ascontiguousarray(view), b, np.zeros((64, 32), np.float32))
    assert c_log.byte_offsets("x") is None and c_log.coalescing("x", "r")[0] > 4  # a C-ordered copy: i is slow


# ---------------------------------------------------------------------------------------------------
# Exercise 2 · mixed-precision matmul


@cuda.jit
def mm_fp32_acc(A, B, C):
    j, i = cuda.grid(2)
    if i < C.shape[0] and j < C.shape[1]:
        acc = float32(0.0)
        for k in range(A.shape[1]):
            acc += float32(A[i, k]) * float32(B[k, j])
        C[i, j] = acc


@cuda.jit
def mm_fp16_acc(A, B, C):
    j, i = cuda.grid(2)
    if i < C.shape[0] and j < C.shape[1]:
        acc = float16(0.0)
        for k in range(A.shape[1]):
            acc += A[i, k] * B[k, j]
        C[i, j] = acc


@cuda.jit
def mm_bare_zero(A, B, C):  # `acc = 0.0` takes float16 from what is added to it, in the simulator
    j, i = cuda.grid(2)
    if i < C.shape[0] and j < C.shape[1]:
        acc = 0.0
        for k in range(A.shape[1]):
            acc += A[i, k] * B[k, j]
        C[i, j] = acc


@cuda.jit
def mm_fp16_products(A, B, C):
    j, i = cuda.grid(2)
    if i < C.shape[0] and j < C.shape[1]:
        acc = float32(0.0)
        for k in range(A.shape[1]):
            acc += A[i, k] * B[k, j]
        C[i, j] = acc


def test_matmul_float32_accumulator_passes():
    res = L.MATMUL_FP16.check(mm_fp32_acc, ptx=None)
    assert res.passed and res.score == 3, res


@pytest.mark.parametrize("kernel", [mm_fp16_acc, mm_bare_zero], ids=["float16(0.0)", "0.0"])
def test_matmul_float16_accumulator_is_named(kernel):
    res = L.MATMUL_FP16.check(kernel, ptx=None, budget=None)
    assert res.status == "failed" and res.score == 0, res
    assert res.hint.startswith("C is what a float16 accumulator gives") and "acc = float32(0.0)" in res.hint


@cuda.jit
def mm_row_from_x(A, B, C):  # i, j = cuda.grid(2): correct where the grid happens to cover C both ways
    i, j = cuda.grid(2)
    if i < C.shape[0] and j < C.shape[1]:
        acc = float32(0.0)
        for k in range(A.shape[1]):
            acc += float32(A[i, k]) * float32(B[k, j])
        C[i, j] = acc


def test_matmul_row_from_threadidx_x_is_over_budget_and_the_hint_names_the_grid_order():
    res = L.MATMUL_FP16.check(mm_row_from_x, ptx=None)
    assert res.status == "over budget" and 0 < res.score < 3, res
    assert "`i, j = cuda.grid(2)` takes the row from it" in res.hint, res


def test_matmul_float16_products_are_named():
    res = L.MATMUL_FP16.check(mm_fp16_products, ptx=None, budget=None)
    assert res.status == "failed" and "each product was rounded to float16" in res.hint, res


def test_matmul_fused_float16_accumulation_is_named():
    def fused(A, B, C):
        C[...] = L._acc16(A, B, fused=True)

    res = L.MATMUL_FP16.check(host=fused)
    assert res.status == "failed" and "one float16 rounding per multiply-add" in res.hint, res


# ---------------------------------------------------------------------------------------------------
# Exercise 3 · Adam as an ElementwiseKernel

ADAM_OK = {
    "in_params": "float32 g, float32 lr_t, float32 beta1, float32 beta2, float32 eps",
    "out_params": "float32 p, float32 m, float32 v",
    "operation": "m = beta1 * m + (1.0f - beta1) * g; v = beta2 * v + (1.0f - beta2) * g * g;"
    "p -= lr_t * m / (sqrtf(v) + eps);",
    "name": "adam",
}
M_STEP, V_STEP = "m = beta1 * m + (1.0f - beta1) * g;", "v = beta2 * v + (1.0f - beta2) * g * g;"
P_STEP = "p -= lr_t * m / (sqrtf(v) + eps);"


def _adam(**changes):
    def adam_elementwise_spec():
        return {**ADAM_OK, **changes}

    return adam_elementwise_spec


def test_adam_spec_passes_and_chainers_form_too():
    assert L.ADAM.check(_adam()).passed
    chainer = "m += (1 - beta1) * (g - m); v += (1 - beta2) * (g * g - v); p -= lr_t * m / (sqrt(v) + eps);"
    res = L.ADAM.check(_adam(operation=chainer, in_params="T g, T lr_t, T beta1, T beta2, T eps"))
    assert res.passed, res


@pytest.mark.parametrize(
    "operation, hint",
    [
        (V_STEP + P_STEP, "m came back unchanged"),
        (M_STEP + P_STEP, "v came back unchanged"),
        (M_STEP + V_STEP, "p came back unchanged"),
        (P_STEP + M_STEP + V_STEP, "p was updated with the old m and v"),
        (M_STEP + V_STEP + P_STEP.replace("-=", "+="), "p moved up the gradient"),
        (M_STEP + V_STEP + "p -= lr_t * m / (v + eps);", "p was divided by v + eps"),
    ],
)
def test_adam_mistakes_are_named(operation, hint):
    res = L.ADAM.check(_adam(operation=operation))
    assert res.status == "failed" and res.score == 0, res
    assert res.hint.startswith(hint), res


def test_adam_array_it_updates_declared_as_an_input_is_explained():
    spec = _adam(in_params=ADAM_OK["in_params"] + ", float32 m", out_params="float32 p, float32 v")
    res = L.ADAM.check(spec)
    assert res.status == "error" and res.score == 0, res
    assert "which must all be outputs" in res.message and "2 out_params (p, v)" in res.message
    assert "not in a line of yours" not in res.message  # gpulab refused the spec: its message says what to do


@pytest.mark.parametrize(
    "changes, declared",
    [
        ({"out_params": "float64 p, float32 m, float32 v"}, "`float64 p`"),
        ({"in_params": "float32 g, float64 lr_t, float32 beta1, float32 beta2, float32 eps"}, "`float64 lr_t`"),
    ],
)
def test_adam_wrong_dtype_declaration_is_named(changes, declared):
    res = L.ADAM.check(_adam(**changes))
    assert res.status == "error" and declared in res.message and "passed as float32" in res.message, res


def test_adam_c_type_name_in_params_is_refused_as_cupy_does():
    res = L.ADAM.check(_adam(in_params="float32 g, double lr_t, float32 beta1, float32 beta2, float32 eps"))
    assert res.status == "error" and "CuPy refuses 'double'" in res.message, res


def test_adam_not_a_dict_and_not_implemented():
    def adam_elementwise_spec():
        raise NotImplementedError

    assert L.ADAM.check(adam_elementwise_spec).status == "not implemented"

    def returns_none():
        return None

    res = L.ADAM.check(returns_none)
    assert res.status == "error" and "returned NoneType, not a dict" in res.message, res
    res = L.ADAM.check(dict(ADAM_OK))  # the dict, not the function that returns it
    assert res.status == "error" and "takes your function itself" in res.message, res


# ---------------------------------------------------------------------------------------------------
# Challenge · the norm of float16 gradients as a ReductionKernel

NORM_OK = {
    "in_params": "float16 g",
    "out_params": "float32 norm",
    "map_expr": "(float)g * (float)g",
    "reduce_expr": "a + b",
    "post_map_expr": "norm = sqrtf(a)",
    "identity": "0.0f",
    "reduce_type": "float",
    "name": "grad_norm",
}


def _norm(**changes):
    def grad_norm_spec():
        return {**NORM_OK, **changes}

    return grad_norm_spec


def test_grad_norm_spec_passes():
    res = L.GRAD_NORM.check(_norm())
    assert res.passed and res.score == 3, res
    # CuPy's float16 converts to float and has no arithmetic of its own: g * g is computed in float32
    assert L.GRAD_NORM.check(_norm(map_expr="g * g")).passed


@pytest.mark.parametrize(
    "changes, hint",
    [
        ({"reduce_type": "float16"}, "norm is inf: a value stored in float16 overflowed"),
        ({"in_params": "T g", "out_params": "T norm", "reduce_type": ""}, "norm is inf: a value stored in float16"),
        ({"post_map_expr": "norm = a"}, "norm is the sum of squares"),
        ({"map_expr": "abs((float)g)"}, "norm is sqrt(sum |g|)"),
        ({"map_expr": "abs((float)g)", "reduce_expr": "max(a, b)", "post_map_expr": "norm = a"}, "norm is the largest"),
    ],
)
def test_grad_norm_mistakes_are_named(changes, hint):
    res = L.GRAD_NORM.check(_norm(**changes))
    assert res.status == "failed" and res.score == 0, res
    assert res.hint.startswith(hint), res


def test_grad_norm_numpy_name_as_reduce_type_is_named():
    """reduce_type is pasted into the CUDA C code (`typedef float32 _type_reduce;` would not compile)."""
    res = L.GRAD_NORM.check(_norm(reduce_type="float32"))
    assert res.status == "error" and "not a C type CUDA knows: write 'float'" in res.message, res


def test_grad_norm_c_name_in_params_is_refused_as_cupy_does():
    res = L.GRAD_NORM.check(_norm(out_params="float norm"))
    assert res.status == "error" and "CuPy refuses 'float'" in res.message, res


def test_grad_norm_wrong_input_type_is_named():
    res = L.GRAD_NORM.check(_norm(in_params="float32 g", map_expr="g * g"))
    assert res.status == "error" and "`float32 g`, but g is passed as float16" in res.message, res


def test_grad_norm_inputs_overflow_float16_squares():
    g = L.grad_norm_inputs(1000, np.random.default_rng(0))
    assert g.dtype == np.float16 and np.abs(g.astype(np.float32)).max() > 256
    with np.errstate(over="ignore"):
        assert np.isinf(g * g).any()


# ---------------------------------------------------------------------------------------------------
# The NumPy models of ElementwiseKernel and ReductionKernel


def test_elementwise_model_several_outputs_casts_and_in_place_updates():
    x = np.array([1.5, -2.0, 3.0], np.float32)
    spec = {"in_params": "float32 x", "out_params": "float32 y, int32 k", "operation": "y = 2 * x; k = (int)(x * 2);"}
    y, k = run_elementwise(spec, x)
    assert y.dtype == np.float32 and k.dtype == np.int32 and k.tolist() == [3, -4, 6]
    acc = np.ones(3, np.float32)
    inc = {"in_params": "T x", "out_params": "T acc", "operation": "acc += x * 1e-1f; /* in place */ acc *= 2"}
    assert run_elementwise(inc, x, acc) is acc
    assert np.allclose(acc, (1 + 0.1 * x) * 2)
    half = {"in_params": "float16 h", "out_params": "float32 s", "operation": "s = (float)h * (float)h"}
    h = np.array([300], np.float16)
    assert run_elementwise(half, h).tolist() == [90000.0]  # no float16 overflow
    assert run_elementwise({**half, "operation": "s = h * h"}, h).tolist() == [90000.0]  # CuPy: in float too
    stored = {**half, "out_params": "float16 s", "operation": "s = h * h; s = s / 1000"}
    assert np.isinf(run_elementwise(stored, h)).all()  # stored in float16 by the first statement: inf
    with pytest.raises(UsageError, match="assigns 'x', an input"):
        run_elementwise({"in_params": "float32 x", "out_params": "float32 y", "operation": "x = 2 * x; y = x"}, x)
    with pytest.raises(UsageError, match="uses 'sqrtff'"):
        run_elementwise({"in_params": "float32 x", "out_params": "float32 y", "operation": "y = sqrtff(x)"}, x)


def test_reduction_model_map_reduce_post_map_and_identity():
    x = np.arange(1, 8, dtype=np.float32)
    spec = dict(NORM_OK, in_params="float32 g")
    assert run_reduction(spec, x) == pytest.approx(np.sqrt((x * x).sum()))
    mx = dict(spec, map_expr="abs(g)", reduce_expr="max(a, b)", post_map_expr="norm = a", identity="0")
    assert run_reduction(mx, -x) == 7
    assert run_reduction(spec, np.zeros(0, np.float32)) == 0  # empty: the identity, post-mapped
    assert run_reduction(dict(spec, post_map_expr="norm = a + 1"), np.zeros(0, np.float32)) == 1
    with pytest.raises(UsageError, match="map_expr is one C expression"):
        run_reduction(dict(spec, map_expr="y = g * g"), x)
    with pytest.raises(UsageError, match="post_map_expr is one C expression"):
        run_reduction(dict(spec, post_map_expr="norm = sqrt(a);"), x)
    with pytest.raises(UsageError, match="write 'float'"):
        run_elementwise({"in_params": "float32 x", "out_params": "float32 y", "operation": "y = (float32)x"}, x)
    with pytest.raises(UsageError, match="needs keys \\['identity'\\]"):
        run_reduction({k: v for k, v in spec.items() if k != "identity"}, x)
    with pytest.raises(UsageError, match="never assigns the output 'norm'"):
        run_reduction(dict(spec, post_map_expr="a = a"), x)


# ---------------------------------------------------------------------------------------------------
# PTX: the lab's kernels, as the solution notebook writes them


def _solution_source(name: str) -> str:
    for cell in json.loads(LAB.read_text())["cells"]:
        src = "".join(cell["source"])
        if cell["cell_type"] == "code" and f"def {name}(" in src:
            return "from numba import cuda, float32\n\n" + src
    raise AssertionError(f"{LAB.name} defines no {name}")


def test_lab06_kernels_compile_to_ptx():
    from gpulab.ptx import compile_sources

    items = {
        "view": {
            "source": _solution_source("bias_relu_view_kernel"),
            "name": "bias_relu_view_kernel",
            "signature": "void(float32[:, :], float32[:], float32[:, :])",  # any layout: the views are strided
        },
        "matmul": {
            "source": _solution_source("matmul_fp16_kernel"),
            "name": "matmul_fp16_kernel",
            "signature": L.MATMUL_FP16.ptx,
        },
    }
    assert compile_sources(items) == {"view": "ok", "matmul": "ok"}


# ---------------------------------------------------------------------------------------------------
# gpu mode: the host functions hand CuPy device arrays only (tests/test_gpu_host_outputs.py's stand-in)


def _fake_cupy(calls: list) -> types.ModuleType:
    """A ``cupy`` whose kernels check that they get device arrays and run the NumPy model on their memory."""
    from gpulab.lessons import elementwise as ew

    def host(args):
        assert all(isinstance(a, CupyLike) for a in args if isinstance(a, np.ndarray)), [type(a) for a in args]
        return [a.view(np.ndarray) if isinstance(a, np.ndarray) else a for a in args]

    def elementwise_kernel(in_params, out_params, operation, name):
        spec = {"in_params": in_params, "out_params": out_params, "operation": operation}
        ins, outs = ew.params(in_params, "in_params"), ew.params(out_params, "out_params")

        def call(*args):
            calls.append(name)
            ew._elementwise_model(spec, ins, outs, tuple(host(args)))  # writes into the outputs' memory
            return args[len(ins) :]

        return call

    def reduction_kernel(in_params, out_params, map_expr, reduce_expr, post_map_expr, identity, name, reduce_type):
        spec = dict(in_params=in_params, out_params=out_params, map_expr=map_expr, reduce_expr=reduce_expr)
        spec.update(post_map_expr=post_map_expr, identity=identity, reduce_type=reduce_type or "")
        ins, outs = ew.params(in_params, "in_params"), ew.params(out_params, "out_params")

        def call(*args):
            calls.append(name)
            return device(ew._reduction_model(spec, ins, outs, tuple(host(args))))

        return call

    fake = types.ModuleType("cupy")
    fake.ElementwiseKernel = elementwise_kernel  # type: ignore[attr-defined]
    fake.ReductionKernel = reduction_kernel  # type: ignore[attr-defined]
    return fake


def test_host_functions_pass_only_device_arrays_in_gpu_mode(monkeypatch):
    from gpulab import runtime

    calls: list = []
    monkeypatch.setattr(runtime, "is_gpu", lambda: True)
    monkeypatch.setitem(sys.modules, "cupy", _fake_cupy(calls))
    ins = L.adam_inputs((50, 3), np.random.default_rng(0))
    dev = [device(x) if isinstance(x, np.ndarray) else x for x in ins]
    outs = [device(np.full(50, np.nan, np.float32)) for _ in range(3)]
    L.elementwise_host(_adam())(*dev, *outs)
    for got, exp in zip(outs, L.adam_spec(*ins)):
        assert np.allclose(got.view(np.ndarray), exp, rtol=1e-5, atol=1e-6)
    g = L.grad_norm_inputs(300, np.random.default_rng(1))
    norm = device(np.full(1, np.nan, np.float32))
    L.reduction_host(_norm())(device(g), norm)
    assert np.allclose(norm.view(np.ndarray), L.grad_norm_spec(g.astype(np.float64)), rtol=1e-6)
    assert calls == ["adam", "grad_norm"]
