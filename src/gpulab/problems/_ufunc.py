"""GPU ufuncs as answers (lesson 06's softplus, lab 06's GELU): the learner writes a scalar function under
``@vectorize(["float32(float32)"], target="cuda")`` and the check calls the ufunc it gets, numba-cuda's
``CUDAUFuncDispatcher``, on a host array like any NumPy ufunc.

:func:`ufunc_host` turns such an answer into the ``host=`` function a Problem runs, and tells a plain function, a
ufunc without a signature or without a float32 version apart from a wrong result; the Problem's PTX stage
(``ptx="float32(float32)"``) compiles the scalar function it finds (:func:`scalar_function`) as numba-cuda does, as
a device function. A reference answer stays a plain scalar function (importing gpulab compiles nothing):
:class:`GPUUfunc` makes it a GPU ufunc on its first call. Here rather than in :mod:`gpulab.lessons` because
``gpulab.lessons`` imports ``gpulab.problems``; :mod:`gpulab.lessons.gpu_ufunc` re-exports these names.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ..errors import UsageError
from ..source import scalar_function as source_scalar_function

__all__ = ["DECORATOR", "GPUUfunc", "SIGNATURES", "scalar_function", "ufunc_host"]

SIGNATURES = ["float32(float32)"]
DECORATOR = '@vectorize(["float32(float32)"], target="cuda")'


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
    return source_scalar_function(ufunc)


def refuse_non_ufunc(answer: Any, name: str) -> None:
    """Raise the learner-facing UsageError for an answer that is not a GPU ufunc with a signature."""
    if scalar_function(answer) is not None:
        return
    if type(answer).__name__ == "CUDAUFuncDispatcher":
        raise UsageError(
            f"{name} is a GPU ufunc with no signature: numba-cuda compiles one only for the signatures "
            f"listed (it does not compile on first call as on a CPU). Decorate it with {DECORATOR}."
        )
    raise UsageError(
        f"{name} is a {type(answer).__name__}, not a GPU ufunc: put {DECORATOR} on the line above "
        f"`def {name}(x):` and run that cell again."
    )


def call_float32(answer: Any, name: str, *args: Any) -> Any:
    """``answer(*args)``, with numba-cuda's "No matching version" told as a missing float32 signature."""
    try:
        return answer(*args)
    except TypeError as e:
        if "No matching version" not in str(e):
            raise
        raise UsageError(
            f"{name} has no float32 version, and a GPU ufunc does not convert arrays (numba-cuda: {e}). Declare "
            f"the signature for float32 arrays: {DECORATOR}."
        ) from e


def ufunc_host(answer: Any, default: str = "the ufunc") -> Callable[..., None]:
    """The ``host=`` function that calls the learner's GPU ufunc ``answer`` on the host array ``x`` (numba-cuda
    copies it in and the result out) and writes the result into ``out``; named after the scalar function
    (``default`` when it has no name)."""
    from .. import runtime

    scalar = scalar_function(answer)
    name = getattr(scalar or answer, "__name__", None) or default

    def host(x: Any, out: Any) -> None:
        refuse_non_ufunc(answer, name)
        got = np.asarray(runtime.to_host(call_float32(answer, name, np.asarray(runtime.to_host(x)))))
        out[...] = runtime.array_module(out).asarray(got.astype(out.dtype).reshape(out.shape))

    host.__name__ = name
    host.__wrapped__ = scalar or answer  # type: ignore[attr-defined]  # the placeholder and PTX checks read it
    return host
