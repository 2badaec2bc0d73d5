"""Lab 06 · CuPy and interop: a kernel on another library's strided views, a mixed-precision matmul (float16
in, float32 accumulation, as tensor cores do), a fused Adam update as an ``ElementwiseKernel`` with several
outputs, the gradient norm of float16 gradients as a ``ReductionKernel``, and the tanh GELU and its derivative as float32 GPU
ufuncs with a layer that keeps them on the device (:mod:`.lab06_gelu`).

Exercises 3 and 4 answer with a function that returns the strings CuPy's kernel takes (a dict); on a GPU the
check compiles it with CuPy, in the simulator :mod:`gpulab.lessons.elementwise` evaluates the same spec with a
NumPy model of it. Their Problems are :class:`SpecProblem` s: ``check(spec_fn)`` wraps the function in the
host function that runs it.

Tolerances: the matmul and the norm compare with a float64 reference within the float32 rounding bound of their
sums (``reduction=``, ``min(gamma_K, lam sqrt(K) u)`` times the sum of the terms' magnitudes): float16 products are
exact in float32, so a float32 accumulator meets the bound (margin 0.08 at K = 4096), and a float16 accumulator (11 significant bits) misses it by orders of magnitude. The Adam update has no long
sum: a few float32 roundings per element, well inside ``rtol=1e-5, atol=1e-6`` for values of size 1.
"""

from __future__ import annotations

from typing import Any
from collections.abc import Callable

import numpy as np

from ..errors import UsageError
from ..exercises import Budget, Problem
from ..kernels._launch import blocks_for
from ._common import launch_2d
from .lab06_gelu import (
    EXTREMES,
    GELU,
    GELU_GRAD,
    GELU_LAYER,
    gelu_grad_spec,
    gelu_inputs,
    gelu_layer_spec,
    gelu_spec,
)
from .lab06_specs import SpecProblem, check_order, check_types, cupy_errors, spec_of

__all__ = [
    "ADAM",
    "ADAM_SIGNATURE",
    "BIAS_RELU_VIEW",
    "EXTREMES",
    "GELU",
    "GELU_GRAD",
    "GELU_LAYER",
    "GRAD_NORM",
    "MATMUL_BLOCK",
    "MATMUL_FP16",
    "NORM_SCALE",
    "SpecProblem",
    "TPB",
    "adam_inputs",
    "adam_spec",
    "elementwise_host",
    "gelu_grad_spec",
    "gelu_inputs",
    "gelu_layer_spec",
    "gelu_spec",
    "grad_norm_inputs",
    "grad_norm_spec",
    "matmul_fp16_inputs",
    "matmul_fp32_acc",
    "reduction_host",
    "view_inputs",
]

TPB = 128  # threads per block of exercise 1 (one thread per element, 1-D grid)
MATMUL_BLOCK = (16, 8)  # x: columns of C, y: rows
NORM_SCALE = 1024.0  # exercise 4's gradients are float16 in [-1024, 1024): loss-scaled, squares overflow float16
ADAM_SIGNATURE = ("g", "lr_t", "beta1", "beta2", "eps"), ("p", "m", "v")  # adam(g, lr_t, beta1, beta2, eps, p, m, v)


# --- 1 · a kernel on another library's strided views ---------------------------------------------------


def view_inputs(shape: tuple[int, int], rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """``(rows, cols)`` -> the library's storage ``x_buf`` (cols, rows), C-ordered, and the bias ``b`` (cols,).
    The kernel gets ``x = x_buf.T``: shape (rows, cols), strides (4, 4 * rows) bytes."""
    rows, cols = shape
    return rng.uniform(-1, 1, (cols, rows)).astype(np.float32), rng.uniform(-1, 1, cols).astype(np.float32)


def _views(ins: tuple, outs: tuple) -> tuple:
    """The kernel's arguments: the transposed views of the storage, as a library hands them over."""
    return ins[0].T, ins[1], outs[0].T


def _launch_elements(x: Any, b: Any, out: Any) -> tuple[int, int]:
    return blocks_for(out.size, TPB), TPB


_launch_elements.one_thread_per_element_of = -1  # type: ignore[attr-defined]  # for the harness's "inside" test


BIAS_RELU_VIEW = Problem(
    "lab06.bias_relu_view",
    ptx="auto",  # a GPU must accept it: compiled for the types of the first case's arguments
    spec=lambda x_buf, b: np.maximum(x_buf + b[:, None], 0),  # in the storage's layout: out.T = relu(x.T + b[:, None])
    inputs=view_inputs,
    sizes=[(1, 1), (5, 3), (3, 37), (40, 33)],
    gpu_sizes=[(1, 1), (5, 3), (4096, 1000), (1000, 4097)],
    launch=_launch_elements,  # ceil(rows * cols / TPB) blocks of TPB threads, one per element
    args=_views,
    out_names=["out.T"],  # the compared array is the storage: out.T[j, i] is the kernel's out[i, j]
    budget=Budget(sectors={"x": 2.0, "out": 2.0}),
    mistakes={
        "out holds x + b with negative values: apply the ReLU, `max(x[i, j] + b[j], 0)` (a float32 zero keeps the "
        "arithmetic in float32: `float32(0.0)`).": lambda x_buf, b: x_buf + b[:, None],
    },
    points=2,
)


# --- 2 · mixed-precision matmul ----------------------------------------------------------------------


def matmul_fp16_inputs(shape: tuple[int, int, int], rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """A (M, K) and B (K, N) in float16, uniform in [0, 1): every partial sum grows, as in P @ V with
    probabilities, so a float16 accumulator runs out of significant bits."""
    m, k, n = shape
    return rng.uniform(0, 1, (m, k)).astype(np.float16), rng.uniform(0, 1, (k, n)).astype(np.float16)


def matmul_fp32_acc(A: np.ndarray, B: np.ndarray) -> np.ndarray:
    """``A @ B`` in float32 for float16 inputs (in float64 for float64 ones: the reference)."""
    t = np.promote_types(A.dtype, np.float32)
    return A.astype(t) @ B.astype(t)


def _acc16(A: np.ndarray, B: np.ndarray, fused: bool = False) -> np.ndarray:
    """A float16 accumulator adding k = 0, 1, ... in order: each product rounded to float16, then each sum
    (``fused``: one rounding per step, a float16 FMA)."""
    A16, B16 = A.astype(np.float16), B.astype(np.float16)
    acc = np.zeros((A.shape[0], B.shape[1]), np.float16)
    for k in range(A.shape[1]):
        if fused:
            acc = (acc.astype(np.float64) + A16[:, k, None].astype(np.float64) * B16[None, k, :]).astype(np.float16)
        else:
            acc = acc + A16[:, k, None] * B16[None, k, :]
    return acc.astype(np.float32)


def _products16(A: np.ndarray, B: np.ndarray) -> np.ndarray:
    """A float32 accumulator of products rounded to float16 (``A[i, k] * B[k, j]`` of two float16 values)."""
    A16, B16 = A.astype(np.float16), B.astype(np.float16)
    return (A16[:, :, None] * B16[None, :, :]).astype(np.float32).sum(axis=1, dtype=np.float32)


_ACC16_HINT = (
    "C is what a float16 accumulator gives: every partial sum was rounded to float16 (11 significant bits), so "
    "long sums lose their low bits. Start the sum as `acc = float32(0.0)` (a bare `0` or `0.0` takes float16, the "
    "type of what you add to it, in the simulator) and add float32 products: "
    "`acc += float32(A[i, k]) * float32(B[k, j])`. Tensor cores accumulate in float32 the same way."
)

MATMUL_FP16 = Problem(
    "lab06.matmul_fp16",
    spec=matmul_fp32_acc,
    inputs=matmul_fp16_inputs,
    sizes=[(2, 3, 5), (8, 8, 8), (13, 10, 7), (20, 33, 17)],
    gpu_sizes=[(2, 3, 5), (13, 10, 7), (512, 4096, 384), (1000, 1000, 1000)],
    launch=launch_2d(MATMUL_BLOCK),  # grid (ceil(N / 16), ceil(M / 8)) over C
    reduction=lambda A, B: A.shape[1],  # K products, exact in float32, summed in float32
    mistakes={
        _ACC16_HINT: _acc16,
        _ACC16_HINT + " (Here the sums look fused: one float16 rounding per multiply-add.)": lambda A, B: _acc16(
            A, B, fused=True
        ),
        "each product was rounded to float16 before the float32 sum: `A[i, k] * B[k, j]` multiplies two float16 "
        "values in float16. Convert first, `float32(A[i, k]) * float32(B[k, j])`: the product of two float16 values "
        "is exact in float32 (11 + 11 significant bits fit in 24), as in a tensor core.": _products16,
    },
    budget=Budget(sectors={"A": 2.0, "B": 2.0, "C": 2.0}),
    ptx="void(float16[:, :], float16[:, :], float32[:, :])",  # float16 loads and conversions on a real GPU
    points=3,
)


# --- 3 · a fused Adam update as an ElementwiseKernel with several outputs -------------------------------


def adam_inputs(size: tuple[int, int], rng: np.random.Generator) -> tuple[Any, ...]:
    """``(n, t)`` -> ``(p, g, m, v, lr_t, beta1, beta2, eps)`` at Adam step t (m = v = 0 at t = 1), with the bias
    corrections folded into the step size: ``lr_t = lr * sqrt(1 - beta2**t) / (1 - beta1**t)``."""
    n, t = size
    f = np.float32
    p, g = rng.uniform(-1, 1, n).astype(f), rng.uniform(-1, 1, n).astype(f)
    g[::7] = 0  # parameters that got no gradient (a dead ReLU, an unused embedding): at t = 1, m = v = 0 there
    first = t == 1
    m = np.zeros(n, f) if first else rng.uniform(-0.3, 0.3, n).astype(f)
    v = np.zeros(n, f) if first else rng.uniform(0, 0.1, n).astype(f)
    lr, beta1, beta2 = 1e-3, 0.9, 0.999
    lr_t = f(lr * np.sqrt(1 - beta2**t) / (1 - beta1**t))
    return p, g, m, v, lr_t, f(beta1), f(beta2), f(1e-8)


def _adam64(p: Any, g: Any, m: Any, v: Any, lr_t: Any, beta1: Any, beta2: Any, eps: Any) -> tuple[np.ndarray, ...]:
    p, g, m, v = (np.asarray(x, np.float64) for x in (p, g, m, v))
    lr_t, beta1, beta2, eps = (float(s) for s in (lr_t, beta1, beta2, eps))
    m1 = beta1 * m + (1 - beta1) * g
    v1 = beta2 * v + (1 - beta2) * g * g
    return p - lr_t * m1 / (np.sqrt(v1) + eps), m1, v1


def adam_spec(p: Any, g: Any, m: Any, v: Any, lr_t: Any, beta1: Any, beta2: Any, eps: Any) -> tuple[np.ndarray, ...]:
    """The updated ``(m, v, p)`` (computed in float64, rounded to float32), in the order the check compares them."""
    p1, m1, v1 = _adam64(p, g, m, v, lr_t, beta1, beta2, eps)
    return m1.astype(np.float32), v1.astype(np.float32), p1.astype(np.float32)


def _adam_old_moments(p: Any, g: Any, m: Any, v: Any, lr_t: Any, beta1: Any, beta2: Any, eps: Any) -> np.ndarray:
    return (np.asarray(p, np.float64) - float(lr_t) * m / (np.sqrt(np.asarray(v, np.float64)) + float(eps))).astype(
        np.float32
    )


def _adam_ascent(p: Any, g: Any, m: Any, v: Any, lr_t: Any, beta1: Any, beta2: Any, eps: Any) -> np.ndarray:
    p1 = _adam64(p, g, m, v, lr_t, beta1, beta2, eps)[0]
    return (2 * np.asarray(p, np.float64) - p1).astype(np.float32)


def _adam_no_sqrt(p: Any, g: Any, m: Any, v: Any, lr_t: Any, beta1: Any, beta2: Any, eps: Any) -> np.ndarray:
    p1, m1, v1 = _adam64(p, g, m, v, lr_t, beta1, beta2, eps)
    return (np.asarray(p, np.float64) - float(lr_t) * m1 / (v1 + float(eps))).astype(np.float32)


def _adam_no_eps(p: Any, g: Any, m: Any, v: Any, lr_t: Any, beta1: Any, beta2: Any, eps: Any) -> np.ndarray:
    p1, m1, v1 = _adam64(p, g, m, v, lr_t, beta1, beta2, eps)
    with np.errstate(all="ignore"):
        return (np.asarray(p, np.float64) - float(lr_t) * m1 / np.sqrt(v1)).astype(np.float32)


def elementwise_host(spec_fn: Callable[[], dict]) -> Callable[..., None]:
    """The host function that runs the learner's Adam ``ElementwiseKernel`` spec: p, m and v are copied into the
    outputs, which the kernel updates in place: ``adam(g, lr_t, beta1, beta2, eps, p, m, v)``."""
    from ..lessons.elementwise import params, run_elementwise

    def adam_host(
        p: Any, g: Any, m: Any, v: Any, lr_t: Any, beta1: Any, beta2: Any, eps: Any, m_out: Any, v_out: Any, p_out: Any
    ) -> None:
        spec = spec_of(spec_fn, ("in_params", "out_params", "operation"))
        ins, outs = params(spec["in_params"], "in_params"), params(spec["out_params"], "out_params")
        want_in, want_out = ADAM_SIGNATURE
        if len(ins) != len(want_in) or len(outs) != len(want_out):
            raise UsageError(
                f"the kernel is called as adam({', '.join(want_in + want_out)}): {len(want_in)} inputs, then the "
                f"{len(want_out)} arrays it updates in place ({', '.join(want_out)}), which must all be outputs "
                f"(CuPy passes in_params as const). Your spec declares {len(ins)} in_params "
                f"({', '.join(n for _, n in ins)}) and {len(outs)} out_params ({', '.join(n for _, n in outs)})."
            )
        call = f"adam({', '.join(want_in + want_out)})"
        check_order(ins, want_in, "in_params", call)
        check_order(outs, want_out, "out_params", call)
        check_types(ins, (g, lr_t, beta1, beta2, eps), "in_params")
        check_types(outs, (p_out, m_out, v_out), "out_params")
        p_out[...], m_out[...], v_out[...] = p, m, v
        with cupy_errors():
            run_elementwise(spec, g, lr_t, beta1, beta2, eps, p_out, m_out, v_out)

    adam_host.__wrapped__ = spec_fn  # type: ignore[attr-defined]  # the harness sees the learner's function
    return adam_host


ADAM = SpecProblem(
    "lab06.adam",
    usage="problems.lab06.ADAM.check(adam_elementwise_spec)",
    spec=adam_spec,
    inputs=adam_inputs,
    sizes=[(1, 20), (100, 1), (1000, 20)],  # (n, t): the first case mid-training, so m, v and p all differ
    gpu_sizes=[(1, 20), (1000, 1), (1 << 20, 1), (1 << 20, 1000)],
    host=None,
    out_names=["m", "v", "p"],
    rtol=1e-5,
    atol=1e-6,
    mistakes={
        "m came back unchanged: the operation must update m in place (`m = beta1 * m + (1 - beta1) * g`, or "
        "`m += (1 - beta1) * (g - m)`).": lambda p, g, m, *s: m,
        "v came back unchanged: the operation must update v in place (`v = beta2 * v + (1 - beta2) * g * g`).": (
            lambda p, g, m, v, *s: v
        ),
        "p came back unchanged: the last statement updates p, `p -= lr_t * m / (sqrt(v) + eps)`.": lambda p, *s: p,
        "p was updated with the old m and v: statements run in order, so update m and v first, then p.": (
            _adam_old_moments
        ),
        "p moved up the gradient: subtract the step, `p -= lr_t * ...` (or `p = p - ...`).": _adam_ascent,
        "p was divided by v + eps, not sqrt(v) + eps: the step is m / (sqrt(v) + eps).": _adam_no_sqrt,
        "p is nan where the gradient is 0 at step 1: m = v = 0 there, and m / sqrt(v) is 0 / 0. Add eps to the "
        "denominator, `m / (sqrt(v) + eps)`: that is what eps is for.": _adam_no_eps,
    },
    points=3,
    adapt=elementwise_host,
)


# --- 4 · the norm of float16 gradients as a ReductionKernel -------------------------------------------


def grad_norm_inputs(n: int, rng: np.random.Generator) -> np.ndarray:
    """float16 gradients after loss scaling, uniform in [-NORM_SCALE, NORM_SCALE): most squares exceed float16's
    65504, so a sum kept in float16 overflows."""
    return (rng.uniform(-1, 1, n) * NORM_SCALE).astype(np.float16)


def grad_norm_spec(g: np.ndarray) -> np.ndarray:
    """``[sqrt(sum g**2)]`` in float32 for float16 gradients (float64 for the float64 reference)."""
    t = np.promote_types(g.dtype, np.float32)
    return np.sqrt(np.sum(g.astype(t) ** 2, keepdims=True, dtype=t)).reshape(1)


def _overflow16(g: np.ndarray) -> np.ndarray:
    big = np.abs(g.astype(np.float32)).max(initial=0) > 255.9  # its square is past float16's 65504
    return np.array([np.inf], np.float32) if big else np.zeros(0, np.float32)  # no overflow: matches nothing


def reduction_host(spec_fn: Callable[[], dict]) -> Callable[..., None]:
    """The host function that runs the learner's ``ReductionKernel`` spec over every element of g and writes
    the result into ``norm[0]``."""
    from ..lessons.elementwise import params, run_reduction

    keys = ("in_params", "out_params", "map_expr", "reduce_expr", "post_map_expr", "identity")

    def grad_norm_host(g: Any, norm: Any) -> None:
        spec = spec_of(spec_fn, keys)
        ins, outs = params(spec["in_params"], "in_params"), params(spec["out_params"], "out_params")
        if len(ins) != 1 or len(outs) != 1:
            raise UsageError(
                f"the kernel is called as grad_norm(g): one input and one output; your spec declares in_params "
                f"{spec['in_params']!r} and out_params {spec['out_params']!r}."
            )
        check_types(ins, (g,), "in_params")
        check_types(outs, (norm,), "out_params")
        with cupy_errors():
            norm[...] = run_reduction(spec, g).reshape(1)

    grad_norm_host.__wrapped__ = spec_fn  # type: ignore[attr-defined]
    return grad_norm_host


GRAD_NORM = SpecProblem(
    "lab06.grad_norm",
    usage="problems.lab06.GRAD_NORM.check(grad_norm_spec)",
    spec=grad_norm_spec,
    inputs=grad_norm_inputs,
    sizes=[1, 100, 1000, 4097],
    gpu_sizes=[1, 4097, 1 << 20, (1 << 20) + 3],
    host=None,
    out_names=["norm"],
    reduction=lambda g: max(g.size, 1),  # a float32 sum of n squares, exact in float32
    # squares are positive: summed one after another their rounding errors lean one way (4e-4 of the sum at 2**20,
    # not the 1e-5 of independent errors), so twice the usual lam (compare.probable_bound)
    reduction_lambda=20.0,
    mistakes={
        "norm is inf: a value stored in float16 overflowed. float16 holds at most 65504, and these gradients reach "
        "1024, their squares 1e6. CuPy computes float16 arithmetic in float, but keeps `a` and `b` in reduce_type, "
        "which defaults to the output's type (float16 when `T` binds to g's float16), and writes the output in its "
        "type. Sum in float32 (`'reduce_type': 'float'`, a C name) and declare `float32 norm`.": _overflow16,
        "norm was rounded to float16 (11 significant bits): the output is stored in its declared type, and `T norm` "
        "binds T to g's float16. Declare `float32 norm` (the sum in reduce_type float was right).": lambda g: (
            grad_norm_spec(g.astype(np.float32)).astype(np.float16)
        ),
        "norm is the sum of squares: post_map_expr must take its square root, `norm = sqrt(a)`.": lambda g: np.sum(
            g.astype(np.float64) ** 2, keepdims=True
        ).reshape(1),
        "norm is sqrt(sum |g|): map_expr must square each element, `(float)g * (float)g`.": lambda g: np.sqrt(
            np.sum(np.abs(g.astype(np.float64)), keepdims=True)
        ).reshape(1),
        "norm is 0 (or nan) though g is not: reduce_expr must add the squares, `a + b`. A product `a * b` stays 0 "
        "from identity 0 on (every thread starts its partial result at identity), and from identity 1 it overflows "
        "to inf in some partial results and to 0 in others (0 * inf is nan).": (
            lambda g: [np.zeros(1, np.float32), np.array([np.nan], np.float32)] if np.any(g) else []
        ),
        "norm is the largest |g|, not the L2 norm: reduce with `a + b` over squares, then `norm = sqrt(a)`.": (
            lambda g: np.abs(g.astype(np.float64)).max(initial=0, keepdims=True).reshape(1)
        ),
    },
    points=3,
    adapt=reduction_host,
)
