"""Review of lab 06's checks with answers its mistake tests did not try: correct alternatives a learner may write
(a local variable in the operation, `half` as reduce_type) score full marks, and wrong answers that passed or got
a misleading hint (no eps, parameters in another order, a wrong identity, a product as reduce_expr, no ReLU) are
named."""

from __future__ import annotations

import gpulab  # noqa: F401 - picks the mode before numba is imported

import numpy as np
from numba import cuda, float32

from gpulab import problems
from gpulab.lessons.elementwise import run_reduction

L = problems.lab06
IN = "float32 g, float32 lr_t, float32 beta1, float32 beta2, float32 eps"
OUT = "float32 p, float32 m, float32 v"
M, V, P = (
    "m = beta1 * m + (1.0f - beta1) * g;",
    "v = beta2 * v + (1.0f - beta2) * g * g;",
    "p -= lr_t * m / (sqrtf(v) + eps);",
)
NORM = {
    "in_params": "float16 g",
    "out_params": "float32 norm",
    "map_expr": "(float)g * (float)g",
    "reduce_expr": "a + b",
    "post_map_expr": "norm = sqrtf(a)",
    "identity": "0.0f",
    "reduce_type": "float",
    "name": "grad_norm",
}


def _adam(**changes):
    def adam_elementwise_spec():
        return {"in_params": IN, "out_params": OUT, "operation": M + V + P, "name": "adam", **changes}

    return adam_elementwise_spec


def _norm(**changes):
    def grad_norm_spec():
        return {**NORM, **changes}

    return grad_norm_spec


def _hinted(res, words: str) -> None:
    assert not res.passed, res
    assert words in (res.hint or res.message or ""), res


def test_adam_local_variables_are_valid_c_and_pass():
    op = "float m1 = beta1 * m + (1.0f - beta1) * g; const float v1 = beta2 * v + (1.0f - beta2) * g * g;"
    res = L.ADAM.check(_adam(operation=op + "m = m1; v = v1; p -= lr_t * m1 / (sqrtf(v1) + eps);"))
    assert res.passed, res


def test_adam_without_eps_is_nan_where_the_gradient_is_zero_and_named():
    _hinted(L.ADAM.check(_adam(operation=M + V + "p -= lr_t * m / sqrtf(v);")), "Add eps to the denominator")


def test_adam_parameters_in_another_order_are_named():
    _hinted(L.ADAM.check(_adam(out_params="float32 m, float32 v, float32 p")), "CuPy binds arguments by position")
    _hinted(L.ADAM.check(_adam(in_params=IN.replace("float32 g, float32 lr_t", "float32 lr_t, float32 g"))), "order")


def test_adam_other_names_in_the_same_order_still_pass():
    op = "mo = beta1 * mo + (1.0f - beta1) * g; ve = beta2 * ve + (1.0f - beta2) * g * g;"
    res = L.ADAM.check(
        _adam(
            out_params="float32 w, float32 mo, float32 ve",
            operation=op + P.replace("p -=", "w -=").replace("m /", "mo /").replace("(v)", "(ve)"),
        )
    )
    assert res.passed, res


def test_reduction_model_starts_every_thread_at_identity_so_a_wrong_one_shows():
    g = np.array([3, 4], np.float16)
    assert run_reduction(NORM, g) == np.float32(5)
    assert run_reduction({**NORM, "identity": "1"}, g) > 5.5  # CuPy: sum + one identity per thread (>= 256 of them)
    assert not L.GRAD_NORM.check(_norm(identity="1")).passed


def test_grad_norm_product_reduce_gets_its_hint_not_softmax():
    res = L.GRAD_NORM.check(_norm(reduce_expr="a * b"))
    _hinted(res, "reduce_expr must add the squares")
    assert "softmax" not in (res.hint or "")


def test_grad_norm_half_is_a_c_type_cuda_knows():
    res = L.GRAD_NORM.check(_norm(reduce_type="half"))
    _hinted(res, "norm is inf")  # it compiles (cuda_fp16.h's half), and sums in float16: the overflow hint


@cuda.jit
def view_no_relu(x, b, out):
    k = cuda.grid(1)
    rows, cols = out.shape
    if k < rows * cols:
        i, j = k % rows, k // rows
        out[i, j] = x[i, j] + b[j] + float32(0.0)


def test_bias_without_relu_is_named():
    _hinted(L.BIAS_RELU_VIEW.check(view_no_relu), "apply the ReLU")


def test_grad_norm_output_rounded_to_float16_is_named():
    _hinted(L.GRAD_NORM.check(_norm(in_params="T g", out_params="T norm")), "norm was rounded to float16")
    assert L.GRAD_NORM.check(_norm(in_params="T g")).passed  # T for the input only: a float32 output, correct
