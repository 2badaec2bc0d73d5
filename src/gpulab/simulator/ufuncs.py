"""GPU ufuncs in the simulator: ``numba.vectorize([...], target="cuda")`` and ``guvectorize(..., target="cuda")``.

numba-cuda builds a GPU ufunc from a scalar function in pure Python (``numba.cuda.vectorizers`` and
``deviceufunc``): it compiles the function as a device function, writes a one-line kernel around it, and at each
call picks the signature, broadcasts, copies host inputs in, launches with ``kernel.forall(n)`` and copies the
result out. Its simulator lacks four things that path needs; :func:`install` (called by
:func:`gpulab.simulator.harden`, in simulator mode only) adds them, so numba-cuda's own dispatch runs unchanged:

* the return type of the compiled device function (``overloads[args].signature.return_type``): the simulator
  keeps no overloads, so ``CUDAVectorize._compile_core`` takes it from the signature, which numba-cuda requires
  to be explicit here (a signature without a return type is refused, with what to write);
* ``cuda.is_cuda_array`` (how it tells device arrays from host ones);
* ``DeviceNDArray(shape, strides, dtype, gpu_data=...)`` and ``gpu_data``, with which it makes the zero-stride
  views that broadcast a device array or a scalar (here a view of the simulator array's NumPy array);
* a launch of ``n`` threads: the simulator's ``forall`` ran one block per element (200 us each), it now runs
  blocks of threads as a GPU does (:mod:`gpulab.simulator.limits`), about 15 us per element.

So the signature is matched as numba-cuda matches it (arrays must have its exact dtypes; scalars are cast; no
match raises its ``TypeError: No matching version``), inputs broadcast as numba-cuda broadcasts them, ``out=`` and
``stream=`` work, host inputs give a host array and device inputs a device array, every copy is recorded by
:mod:`gpulab.simulator.streams`, and results have the signature's return dtype (the kernel stores into an array
of it). The scalar function runs as Python, per element, like any device function (its ``math`` is
:mod:`gpulab.simulator.ieee_math`'s). What a GPU compile refuses and can be read cheaply from the source is
refused when the ufunc is made, as the compile would refuse it: Python objects and array-building NumPy calls
(:func:`gpulab.exercises.static.python_only`), NumPy ufuncs that numba-cuda's CUDA target lacks for scalars
(``np.exp``, ``np.abs``, ``np.log1p``, ``np.logaddexp``: :func:`gpulab.exercises.static.scalar_ufuncs_off_gpu`)
and calls of plain Python functions (a GPU calls only device functions). Anything else the compiler would reject
(a type it cannot unify, a ufunc called under another name) still runs here: compile the scalar function with
``cuda.compile_ptx(fn, sig, device=True)`` (:mod:`gpulab.ptx`, the exercise's PTX stage) to be sure.
"""

from __future__ import annotations

import inspect
import types
from typing import Any

import numpy as np

__all__ = ["install", "python_only_ufunc"]


def python_only_ufunc(fn: Any) -> list[str]:
    """What in the scalar function ``fn`` a GPU compile refuses, read from its source and code (empty: nothing
    found). ``return value`` is what a ufunc's function does, so only a kernel's rule about it is left out."""
    from ..exercises.static import numpy_ufunc_fix, python_only, scalar_ufuncs_off_gpu
    from ..source import global_names

    objects = [(line, what, fix) for line, what, fix in python_only(fn) if not what.startswith("`return")]
    found = [f"line {line}: {what}" for line, what, _ in objects]
    if objects:
        found[-1] += f" ({objects[0][2]})"
    for line, call, ufunc in scalar_ufuncs_off_gpu(fn):
        found.append(
            f"line {line}: `{call}(...)` on a scalar, a NumPy ufunc numba-cuda has no GPU version of "
            f"(use {numpy_ufunc_fix(ufunc)})"
        )
    try:
        nonlocals = inspect.getclosurevars(fn).nonlocals
    except (TypeError, ValueError):
        return found
    fn_globals = getattr(fn, "__globals__", {})
    loaded = {n: fn_globals[n] for n in global_names(fn.__code__) if n in fn_globals}  # not `np.name`'s name
    for name, obj in sorted({**loaded, **nonlocals}.items()):
        if isinstance(obj, types.FunctionType):
            found.append(
                f"it calls `{name}`, a plain Python function: a GPU calls only device functions (decorate "
                f"`{name}` with @cuda.jit(device=True), or write its code inline)"
            )
    return found


def _compile_core(self: Any, sig: Any) -> tuple[Any, Any]:
    """``CUDAVectorize._compile_core`` in the simulator: the device function and the signature's return type."""
    from numba import cuda
    from numba.core.errors import TypingError

    name = getattr(self.pyfunc, "__name__", "function")
    if sig.return_type is None:
        raise TypeError(
            f"vectorize(target='cuda'): the signature {sig} of {name} has no return type; the simulator needs it "
            "written out, e.g. 'float32(float32, float32)' (numba-cuda on a GPU would infer it)."
        )
    refused = python_only_ufunc(self.pyfunc)
    if refused:
        raise TypingError(
            f"{name} cannot be compiled for a GPU (the simulator would run it, a GPU compile refuses it): "
            + "; ".join(refused)
        )
    return cuda.jit(sig, device=True, inline="always")(self.pyfunc), sig.return_type


def _tuple(value: Any) -> tuple[int, ...]:
    return (int(value),) if isinstance(value, (int, np.integer)) else tuple(int(v) for v in value)


def install() -> None:
    """Make numba-cuda's GPU ufuncs run in the simulator (idempotent; nothing in gpu mode)."""
    from .. import runtime

    if not runtime.is_simulator():  # numba.cuda is the real target (harden() called by gpulab.trace): not ours
        return
    from numba import cuda
    from numba.cuda.simulator.cudadrv import devicearray as da

    from numba.cuda import vectorizers

    cls: Any = vectorizers.CUDAVectorize
    if getattr(cls, "_gpulab_ufuncs", False):
        return
    cls._compile_core = _compile_core

    if not hasattr(cuda, "is_cuda_array"):

        def is_cuda_array(obj: Any) -> bool:
            """Whether ``obj`` is a device array (numba-cuda: it has ``__cuda_array_interface__``)."""
            return bool(da.is_cuda_ndarray(obj)) or hasattr(obj, "__cuda_array_interface__")

        cuda.is_cuda_array = is_cuda_array

    fake: Any = da.FakeCUDAArray
    if not hasattr(fake, "gpu_data"):
        fake.gpu_data = property(lambda self: self._ary, doc="The NumPy array that stands for the device memory.")

    module: Any = da  # the simulator's devicearray module gets a name it lacks (an alias: not a numba name we call)
    if not hasattr(module, "DeviceNDArray"):

        class DeviceNDArray(fake):
            """A view of a simulated device array with the given shape and strides (numba-cuda builds its
            broadcast views this way: ``DeviceNDArray(shape, strides, dtype, gpu_data=ary.gpu_data)``)."""

            def __init__(self, shape: Any, strides: Any, dtype: Any, stream: Any = 0, gpu_data: Any = None) -> None:
                shape, strides = _tuple(shape), _tuple(strides)  # numba-cuda takes an int for one axis
                if gpu_data is None:  # a new allocation
                    base = np.empty(max(1, int(np.prod(shape))), dtype=dtype)
                else:
                    base = gpu_data.view(dtype) if gpu_data.dtype != np.dtype(dtype) else gpu_data
                view = np.lib.stride_tricks.as_strided(base, shape=shape, strides=strides)
                super().__init__(view, stream=stream)

        module.DeviceNDArray = DeviceNDArray
    cls._gpulab_ufuncs = True
