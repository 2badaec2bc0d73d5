"""Lesson 06's GPU-ufunc exercise: a numerically stable softplus written with ``@vectorize([...], target="cuda")``.

The learner's answer is a GPU ufunc (numba-cuda's ``CUDAUFuncDispatcher``), called on a host array like any
NumPy ufunc; :func:`ufunc_host` turns it into the ``host=`` function the exercise's Problem runs, and tells a plain
function or a ufunc without a float32 version apart from a wrong result. The reference answer is a plain scalar
function (importing gpulab compiles nothing); :class:`GPUUfunc` makes it a GPU ufunc on first call, so the cells
after the exercise can use it as they would the learner's.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ..errors import UsageError
from ..source import py_func

__all__ = ["EXTREMES", "GPUUfunc", "MISTAKES", "SIGNATURES", "scalar_function", "softplus_inputs", "softplus_spec"]

SIGNATURES = ["float32(float32)"]
DECORATOR = '@vectorize(["float32(float32)"], target="cuda")'
# Inputs every size starts with: 0, both sides of float32's exp overflow (exp(88.8) > 3.4e38) and beyond.
EXTREMES = np.array([0.0, 20.0, -20.0, 88.0, 89.0, -89.0, 100.0, -100.0, 1000.0, -1000.0, 3e38, -3e38], np.float32)


class GPUUfunc:
    """``numba.vectorize(signatures, target="cuda")(fn)``, made on the first call (``show_source`` shows ``fn``)."""

    def __init__(self, fn: Callable[..., Any], signatures: Sequence[str] = tuple(SIGNATURES)) -> None:
        functools.update_wrapper(self, fn)
        self.signatures = list(signatures)
        self._ufunc: Any = None

    def __call__(self, *args: Any, **kws: Any) -> Any:
        if self._ufunc is None:
            from numba import vectorize

            self._ufunc = vectorize(self.signatures, target="cuda")(self.__wrapped__)  # type: ignore[attr-defined]
        return self._ufunc(*args, **kws)


def scalar_function(ufunc: Any) -> Any:
    """The scalar Python function a GPU ufunc was made from; None for anything else (a plain function, a ufunc
    with no signature)."""
    if isinstance(ufunc, GPUUfunc):
        return ufunc.__wrapped__  # type: ignore[attr-defined]
    functions = getattr(ufunc, "functions", None)
    if type(ufunc).__name__ != "CUDAUFuncDispatcher" or not functions:
        return None
    _, kernel = next(iter(functions.values()))  # numba-cuda's kernel around it calls it as __core__
    core = getattr(py_func(kernel), "__globals__", {}).get("__core__")
    return None if core is None else py_func(core)


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


_STABLE = "softplus(x) = max(x, 0) + log1p(exp(-abs(x))): exp then sees only values <= 0, never overflows"
MISTAKES: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "softplus is inf for large x (x = 89, 100, 1000): that is the naive log(1 + exp(x)). In float32, exp(x) "
    f"overflows to inf above x = 88.7 (e^88.7 = 3.4e38, float32's largest value). Rewrite it: {_STABLE}.": _float32(
        lambda x: np.log1p(np.exp(x))
    ),
    "softplus is wrong for negative x (x = -20 gives 20, x = -100 gives inf): exp(-x) grows there, and overflows "
    f"below x = -88.7. Take exp of -abs(x), which is never positive: {_STABLE}.": _float32(
        lambda x: np.maximum(x, 0) + np.log1p(np.exp(-x))
    ),
    "you returned max(x, 0), the ReLU: the smooth part log1p(exp(-abs(x))) is missing (log 2 = 0.69 at x = 0).": (
        _float32(lambda x: np.maximum(x, 0))
    ),
}


def ufunc_host(answer: Any) -> Callable[..., None]:
    """The ``host=`` function that calls the learner's GPU ufunc ``answer`` on the host array ``x`` (numba-cuda
    copies it in and the result out) and writes the result into ``out``."""
    from .. import runtime

    scalar = scalar_function(answer)
    name = getattr(scalar or answer, "__name__", None) or "softplus"

    def softplus(x: Any, out: Any) -> None:
        if scalar is None:
            if type(answer).__name__ == "CUDAUFuncDispatcher":
                raise UsageError(
                    f"{name} is a GPU ufunc with no signature: numba-cuda compiles one only for the signatures "
                    f"listed (it does not compile on first call as on a CPU). Decorate it with {DECORATOR}."
                )
            raise UsageError(
                f"{name} is a {type(answer).__name__}, not a GPU ufunc: put {DECORATOR} on the line above "
                f"`def {name}(x):` and run that cell again."
            )
        try:
            got = answer(np.asarray(runtime.to_host(x)))
        except TypeError as e:
            if "No matching version" not in str(e):
                raise
            raise UsageError(
                f"{name} has no float32 version, and a GPU ufunc does not convert arrays (numba-cuda: {e}). Declare "
                f"the signature for float32 arrays: {DECORATOR}."
            ) from e
        got = np.asarray(runtime.to_host(got))
        out[...] = runtime.array_module(out).asarray(got.astype(out.dtype).reshape(out.shape))

    softplus.__name__ = name
    softplus.__wrapped__ = scalar or answer  # type: ignore[attr-defined]  # the placeholder check reads it
    return softplus
