"""Lesson 06's GPU-ufunc exercise: a numerically stable softplus written with ``@vectorize([...], target="cuda")``.

The learner's answer is a GPU ufunc (numba-cuda's ``CUDAUFuncDispatcher``), called on a host array like any
NumPy ufunc; :func:`ufunc_host` turns it into the ``host=`` function the exercise's Problem runs, and tells a plain
function or a ufunc without a float32 version apart from a wrong result (that plumbing is
:mod:`gpulab.problems._ufunc`, shared with lab 06). The reference answer is a plain scalar function (importing gpulab
compiles nothing); :class:`GPUUfunc` makes it a GPU ufunc on first call, so the cells after the exercise can use it
as they would the learner's.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ..problems._ufunc import SIGNATURES, GPUUfunc, scalar_function
from ..problems._ufunc import ufunc_host as _ufunc_host

__all__ = ["EXTREMES", "GPUUfunc", "MISTAKES", "SIGNATURES", "scalar_function", "softplus_inputs", "softplus_spec"]

# Inputs every size starts with: 0, both sides of float32's exp overflow (exp(88.8) > 3.4e38) and beyond.
EXTREMES = np.array([0.0, 20.0, -20.0, 88.0, 89.0, -89.0, 100.0, -100.0, 1000.0, -1000.0, 3e38, -3e38], np.float32)


def softplus_spec(x: np.ndarray) -> np.ndarray:
    """softplus(x) = log(1 + e^x), computed in float64 without overflow, rounded to float32."""
    return np.logaddexp(0.0, x.astype(np.float64)).astype(np.float32)


def softplus_inputs(n: int, rng: np.random.Generator) -> np.ndarray:
    """``n`` float32 values in [-8, 8], the first of them :data:`EXTREMES`."""
    x = rng.uniform(-8, 8, n).astype(np.float32)
    k = min(n, EXTREMES.size)
    x[:k] = EXTREMES[:k]
    return x


def _float32(fn: Callable[[np.ndarray], np.ndarray]) -> Callable[[np.ndarray], np.ndarray]:
    def wrong(x: np.ndarray) -> np.ndarray:
        with np.errstate(over="ignore"):
            return fn(x.astype(np.float32)).astype(np.float32)

    return wrong


_STABLE = "the positive part of x, plus log1p of exp of a value that is never positive (so exp never overflows)"
MISTAKES: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "softplus is inf for large x (x = 89, 100, 1000): that is the naive log(1 + exp(x)). In float32, exp(x) "
    f"overflows to inf above x = 88.7 (e^88.7 = 3.4e38, float32's largest value). Rewrite it as {_STABLE}: for "
    "x > 0, log(1 + exp(x)) = x + log(1 + exp(-x)).": _float32(lambda x: np.log1p(np.exp(x))),
    "softplus is wrong for negative x (x = -20 gives 20, x = -100 gives inf): exp(-x) grows there, and overflows "
    "below x = -88.7. exp must see a value that is never positive, whatever the sign of x: -abs(x).": _float32(
        lambda x: np.maximum(x, 0) + np.log1p(np.exp(-x))
    ),
    "you returned max(x, 0), the ReLU: the smooth part is missing, log1p of exp of a value that is never "
    "positive (log 2 = 0.69 at x = 0).": _float32(lambda x: np.maximum(x, 0)),
}


def ufunc_host(answer: Any) -> Callable[..., None]:
    """The ``host=`` function that calls the learner's GPU ufunc ``answer`` on the host array ``x`` (numba-cuda
    copies it in and the result out) and writes the result into ``out`` (:func:`gpulab.problems._ufunc.ufunc_host`)."""
    return _ufunc_host(answer, "softplus")
