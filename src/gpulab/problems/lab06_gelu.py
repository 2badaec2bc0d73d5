"""Lab 06 · exercise 4: the tanh-approximation GELU and its derivative as float32 GPU ufuncs, and a layer that
keeps them on the device.

The learner writes two scalar functions under ``@vectorize(["float32(float32)"], target="cuda")``:
``gelu(x) = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))`` (PyTorch's ``approximate='tanh'``) and
``gelu_grad(x)``, its derivative (what the backward multiplies ``dy`` by), and ``gelu_layer(x_d)``, which takes a
device array and returns the device arrays ``(gelu(x_d), gelu_grad(x_d))``. Three problems, graded in one cell (3
points, as lab 08's dropout is): :data:`GELU` and :data:`GELU_GRAD` (1 point each) run the ufunc on host arrays as
lesson 06's softplus exercise does (:func:`gpulab.problems._ufunc.ufunc_host`: a plain function, a ufunc without a
signature or without a float32 version are told so) and compile its scalar function to PTX as numba-cuda does (a
device function); :data:`GELU_LAYER` (1 point) runs the layer with the lab's own ufuncs in place of the learner's
(:func:`with_lab_ufuncs`), so its point measures only the copies: counted with :mod:`gpulab.copies` in both modes,
any host <-> device copy inside the layer costs half its point, with the bytes in the verdict.

Inputs start with :data:`EXTREMES`: the cancellation near x = -5, |x| where ``x * x * x`` overflows float32
(2e13, past 3.4e38^(1/3) = 7e12) and where ``x * x`` does (2e19), and 3e38. Written in float32 (float32 constants),
the derivative's ``(1 - t^2) * x^2`` is ``0 * inf = nan`` there; clamping x before the powers, or the limits (gelu
x or 0, its derivative 1 or 0), keep it finite. Tolerances: rtol 1e-5 with atol 1e-6 for gelu, 5e-6 for the
derivative: near x = -5 its two terms cancel, and a float32 ``tanh``'s rounding (6e-8 next to -1) is multiplied by
about 9 there (a careful float32 answer is 1.2e-6 off at worst).
"""

from __future__ import annotations

import dataclasses
import math
import types
from collections.abc import Callable
from typing import Any

import numpy as np

from ..errors import UsageError
from ..exercises import Check, CheckResult, Problem
from ..source import rebound
from ._ufunc import GPUUfunc, ufunc_host
from .lab06_specs import SpecProblem

__all__ = [
    "EXTREMES",
    "GELU",
    "GELU_GRAD",
    "GELU_LAYER",
    "gelu_grad_spec",
    "gelu_inputs",
    "gelu_layer_spec",
    "gelu_spec",
    "with_lab_ufuncs",
]

C, A = math.sqrt(2 / math.pi), 0.044715
EXTREMES = np.array([0, 1, -1, 3, -3, 5.4, -5.4, 10, -10, 100, -100, 2e13, -2e13, 2e19, -2e19, 3e38, -3e38], np.float32)


def gelu_inputs(n: int, rng: np.random.Generator) -> tuple[np.ndarray]:
    """``n`` float32 values in [-6, 6], the first of them :data:`EXTREMES`."""
    x = rng.uniform(-6, 6, n).astype(np.float32)
    k = min(n, EXTREMES.size)
    x[:k] = EXTREMES[:k]
    return (x,)


def _tanh_u(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, np.float64)  # x^3 is at most 2.7e115: finite in float64
    return np.tanh(C * (x + A * x**3))


def gelu_spec(x: np.ndarray) -> np.ndarray:
    """0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), in float64, rounded to float32."""
    return (0.5 * np.asarray(x, np.float64) * (1 + _tanh_u(x))).astype(np.float32)


def gelu_grad_spec(x: np.ndarray) -> np.ndarray:
    """d gelu / dx = 0.5 (1 + t) + 0.5 x (1 - t^2) sqrt(2/pi) (1 + 3 * 0.044715 x^2), t the tanh, in float64."""
    x64, t = np.asarray(x, np.float64), _tanh_u(x)
    return (0.5 * (1 + t) + 0.5 * x64 * (1 - t * t) * C * (1 + 3 * A * x64 * x64)).astype(np.float32)


def gelu_layer_spec(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(gelu(x), gelu_grad(x))``: the activation and the derivative the backward multiplies dy by."""
    return gelu_spec(x), gelu_grad_spec(x)


# --- named mistakes (each an answer's values, as a GPU computes them) ------------------------------------------


def _f32(fn: Callable[[np.ndarray], np.ndarray]) -> Callable[[np.ndarray], np.ndarray]:
    """``fn`` computed on float32 values with float32 arithmetic (overflow to inf, 0 * inf = nan, as a GPU does)."""

    def wrong(x: np.ndarray) -> np.ndarray:
        with np.errstate(all="ignore"):
            return np.asarray(fn(np.asarray(x, np.float32)), np.float32)

    return wrong


def _f64(fn: Callable[[np.ndarray, np.ndarray], np.ndarray]) -> Callable[[np.ndarray], np.ndarray]:
    """``fn(x, t)`` in float64 (t the tanh), rounded to float32: a mistake in the formula, not in the rounding."""
    return lambda x: np.asarray(fn(np.asarray(x, np.float64), _tanh_u(x)), np.float32)


def _naive_grad32(x: np.ndarray) -> np.ndarray:
    c, a, h, one = np.float32(C), np.float32(A), np.float32(0.5), np.float32(1)
    t = np.tanh(c * (x + a * x * x * x))
    return h * (one + t) + h * x * (one - t * t) * c * (one + np.float32(3) * a * x * x)


def _tanh_from_exp32(x: np.ndarray) -> np.ndarray:
    c, a, h, one = np.float32(C), np.float32(A), np.float32(0.5), np.float32(1)
    e = np.exp(np.float32(2) * c * (x + a * x * x * x))
    return h * x * (one + (e - one) / (e + one))


def _erf(x: np.ndarray) -> np.ndarray:
    return np.array([math.erf(v) for v in np.ravel(x)], np.float64).reshape(np.shape(x))


_LIMITS = (
    "For large |x| use the limits: gelu(x) is x for x > 10 and 0 for x < -10, its derivative 1 and 0 (tanh is "
    "already +-1 in float32 there); or clamp first, `xc = min(max(x, float32(-10.0)), float32(10.0))`, and take the "
    "powers of xc only (`xc * xc * xc`), keeping the outer x in gelu's `0.5 * x * (...)`."
)
_NAN_GRAD = (
    "gelu_grad is nan for huge |x| (x = 2e19, 3e38): there x * x overflows float32 (past 1.8e19) to inf while "
    "1 - t * t is exactly 0, and 0 * inf is nan (x * x * x overflows already past 7e12, 2e13 here). " + _LIMITS
)
_NAN_EXP = (
    "gelu is nan for large x (x = 100, 2e13, 3e38): tanh written with exp, (e - 1) / (e + 1) with e = exp(2u), is "
    "inf / inf once exp overflows (u > 44). Use math.tanh, which is +-1 there. " + _LIMITS
)
_ERF = (
    "these are the exact GELU's values, with erf (PyTorch's default, approximate='none'); the lab asks for the tanh "
    "approximation, 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))): they differ by up to 5e-4."
)

GELU_MISTAKES: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    _NAN_EXP: _f32(_tanh_from_exp32),
    "gelu is inf at x = 3e38 though the answer is 3e38: an intermediate overflowed. x * (1 + t) is 6e38, past "
    "float32's largest value 3.4e38; multiply by 0.5 first, `0.5 * x * (1 + t)`, or return x for x > 10.": _f32(
        lambda x: x * (np.float32(1) + np.tanh(np.float32(C) * (x + np.float32(A) * x * x * x))) * np.float32(0.5)
    ),
    _ERF: _f64(lambda x, t: 0.5 * x * (1 + _erf(x / math.sqrt(2)))),
    "gelu is twice the answer: the factor 0.5 is missing, 0.5 * x * (1 + t).": _f64(lambda x, t: x * (1 + t)),
    "the factor sqrt(2/pi) = 0.79788456 inside the tanh is missing: tanh(sqrt(2/pi) * (x + 0.044715 * x^3)).": _f64(
        lambda x, t: 0.5 * x * (1 + np.tanh(x + A * x**3))
    ),
}

GRAD_MISTAKES: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    _NAN_GRAD: _f32(_naive_grad32),
    "gelu_grad returned gelu itself: return its derivative, 0.5 (1 + t) + 0.5 x (1 - t^2) u', with "
    "u' = sqrt(2/pi) (1 + 3 * 0.044715 x^2).": _f64(lambda x, t: 0.5 * x * (1 + t)),
    "gelu_grad is only 0.5 (1 + t): gelu is a product, 0.5 x times (1 + t), so the product rule adds "
    "0.5 x * d(1 + t)/dx = 0.5 x (1 - t^2) u', with u' = sqrt(2/pi) (1 + 3 * 0.044715 x^2).": _f64(
        lambda x, t: 0.5 * (1 + t)
    ),
    "gelu_grad lacks the product rule's first term 0.5 (1 + t) (the derivative of 0.5 x times (1 + t)): add it to "
    "0.5 x (1 - t^2) u'.": _f64(lambda x, t: 0.5 * x * (1 - t * t) * C * (1 + 3 * A * x * x)),
    "the chain rule's inner derivative is incomplete: d/dx of u = sqrt(2/pi) (x + 0.044715 x^3) is "
    "sqrt(2/pi) (1 + 3 * 0.044715 x^2), not sqrt(2/pi).": _f64(lambda x, t: 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * C),
    "these are the exact GELU's derivative, Phi(x) + x phi(x) with erf; the lab asks for the tanh approximation's: "
    "0.5 (1 + t) + 0.5 x (1 - t^2) sqrt(2/pi) (1 + 3 * 0.044715 x^2).": _f64(
        lambda x, t: (
            0.5 * (1 + _erf(x / math.sqrt(2))) + x * np.exp(-0.5 * np.minimum(x * x, 1e4)) / math.sqrt(2 * math.pi)
        )
    ),
}


def _ufunc_host(default: str) -> Callable[[Any], Callable[..., None]]:
    def adapt(answer: Any) -> Callable[..., None]:
        return ufunc_host(answer, default)

    return adapt


GELU = SpecProblem(
    "lab06.gelu",
    usage="problems.lab06.GELU.check(gelu)",
    spec=gelu_spec,
    inputs=gelu_inputs,
    sizes=[EXTREMES.size, 300],
    gpu_sizes=[EXTREMES.size, 300, 1 << 20, (1 << 20) + 3],
    host=None,
    out_names=["out"],
    rtol=1e-5,
    atol=1e-6,
    mistakes=GELU_MISTAKES,
    ptx="float32(float32)",  # the scalar function, compiled as numba-cuda compiles it: a device function
    points=1,
    adapt=_ufunc_host("gelu"),
)

GELU_GRAD = SpecProblem(
    "lab06.gelu_grad",
    usage="problems.lab06.GELU_GRAD.check(gelu_grad)",
    spec=gelu_grad_spec,
    inputs=gelu_inputs,
    sizes=[EXTREMES.size, 300],
    gpu_sizes=[EXTREMES.size, 300, 1 << 20, (1 << 20) + 3],
    host=None,
    out_names=["out"],
    rtol=1e-5,
    atol=5e-6,  # near x = -5 the two terms cancel: a float32 tanh's rounding, times about 9
    mistakes=GRAD_MISTAKES,
    ptx="float32(float32)",
    points=1,
    adapt=_ufunc_host("gelu_grad"),
)


# --- 3 · the layer: device arrays in, device arrays out ------------------------------------------------------


def with_lab_ufuncs(layer: Any) -> Any:
    """``layer`` (the learner's ``gelu_layer``) run with the lab's GELU ufuncs (:mod:`._stand_ins`) as its ``gelu``
    and ``gelu_grad``: the same code with a copy of its globals, so a wrong ufunc, graded by :data:`GELU` and
    :data:`GELU_GRAD`, does not cost the layer's point too. ``layer`` is returned as it is when it is not a plain
    function or names neither itself (a global or a closure's name)."""
    code = getattr(layer, "__code__", None)
    names = {"gelu", "gelu_grad"} & set(getattr(code, "co_names", ()) + getattr(code, "co_freevars", ()))
    if not isinstance(layer, types.FunctionType) or not names:
        return layer
    from ._stand_ins import gelu_grad_scalar, gelu_scalar

    # a global, or a closure's name for a layer defined inside a function: rebound replaces both
    return rebound(layer, {"gelu": GPUUfunc(gelu_scalar), "gelu_grad": GPUUfunc(gelu_grad_scalar)})


def _copies_hint(h2d: int, d2h: int, nbytes: int) -> str:
    if h2d:
        why = (
            f"{h2d:,} bytes went host -> device: a GPU ufunc given a host array (x_d.copy_to_host(), np.asarray(x_d)) "
            "copies it in, and its result back out"
        )
    else:
        why = f"{d2h:,} bytes came device -> host: a .copy_to_host() (or np.asarray) of x_d or of a result"
    return (
        f"{why}. Call the ufuncs on the device array itself and return their results as they are: given a device "
        f"array, a GPU ufunc returns a device array and copies nothing. Each copy crosses PCIe, about 20 to 80 times "
        f"slower than the GPU's own memory (spec sheets, per direction: a T4's PCIe 3.0 x16 15.8 GB/s against 320 "
        f"GB/s, an H200's PCIe 5.0 x16 63 GB/s against 4.8 TB/s): here {nbytes:,} bytes "
        "for an element-wise layer that should move none."
    )


def layer_host(layer: Any, log: list) -> Callable[..., None]:
    """The ``host=`` function that copies ``x`` to the device (not counted), calls ``layer(x_d)`` while
    :func:`gpulab.copies.count` counts, and writes the two arrays it returns into ``y`` and ``dydx``; each call
    appends ``(elements, copies, returned host arrays)`` to ``log``."""
    from numba import cuda

    from .. import copies, runtime

    name = getattr(layer, "__name__", None) or "gelu_layer"
    run = with_lab_ufuncs(layer)

    def host(x: Any, y: Any, dydx: Any) -> None:
        if not callable(layer):
            raise UsageError(
                f"the check takes your function itself, check(gelu_layer) (no parentheses); it was given a "
                f"{type(layer).__name__}."
            )
        x_d = cuda.to_device(np.ascontiguousarray(runtime.to_host(x)))
        with copies.count() as counted:
            got = run(x_d)
            cuda.synchronize()
        if not isinstance(got, tuple) or len(got) != 2:
            raise UsageError(
                f"{name}(x_d) returned {type(got).__name__}: return a pair, the GELU of x_d and its derivative, two "
                "device arrays of x_d's shape."
            )
        on_host = [not cuda.is_cuda_array(a) for a in got]
        for out, value in zip((y, dydx), got):
            h = np.asarray(runtime.to_host(value))  # a NumPy, CuPy or numba device array (CuPy's has no copy_to_host)
            out[...] = runtime.array_module(out).asarray(h.astype(out.dtype).reshape(out.shape))
        log.append((int(np.size(x)), counted, any(on_host)))

    host.__name__ = name
    host.__wrapped__ = layer  # type: ignore[attr-defined]  # the placeholder check reads it
    return host


@dataclasses.dataclass
class LayerProblem(Problem):
    """``check(gelu_layer)``: the values with :func:`layer_host`, then the copies: right values with a host copy
    inside the layer (or host arrays returned) get half the points ("over budget"), as a correct kernel over its
    budget does. ``check(host=fn)`` (the emulated gpu-size tests) checks ``fn``'s values only."""

    def check(self, kernel: Any = None, *, scale: str | None = None, **overrides: Any) -> Any:
        if kernel is None:
            return super().check(None, scale=scale, **overrides)  # host=fn
        log: list = []
        overrides.setdefault("host", layer_host(kernel, log))
        overrides.setdefault("name", getattr(kernel, "__name__", self.name))
        res: CheckResult = super().check(None, scale=scale, **overrides)
        if not res.passed or not log:
            return res
        if not any(c.calls or host for _, c, host in log):
            return dataclasses.replace(res, checks=[*res.checks, Check("copies", True, "no host <-> device copy")])
        n, counted, _ = max(log, key=lambda e: (e[1].calls > 0, e[0]))  # the largest call that copied
        h2d, d2h, calls, nbytes = counted.h2d, counted.d2h, counted.calls, counted.bytes
        what = (
            f"for x of {n:,} float32 elements ({4 * n:,} bytes), {calls} copies, {nbytes:,} bytes ({h2d:,} host -> "
            f"device, {d2h:,} device -> host)"
            if calls
            else "it returned host arrays (NumPy's), not device arrays"
        )
        hint = (
            _copies_hint(h2d, d2h, nbytes)
            if calls
            else "return device arrays: the ufuncs' results on x_d are device arrays already; leave them there."
        )
        message = f"{res.message[:-1]}, but the layer moved data between host and device: {what}. Half the points."
        return dataclasses.replace(
            res,
            status="over budget",
            score=self.points / 2,
            message=message,
            hint=hint,
            checks=[*res.checks, Check("copies", False, what, hint)],
        )


GELU_LAYER = LayerProblem(
    "lab06.gelu_layer",
    usage="problems.lab06.GELU_LAYER.check(gelu_layer)",
    spec=gelu_layer_spec,
    inputs=gelu_inputs,
    sizes=[EXTREMES.size, 300],
    gpu_sizes=[EXTREMES.size, 300, 1 << 20],
    host=None,
    out_names=["y", "dydx"],
    rtol=1e-5,
    atol=5e-6,
    points=1,
)
