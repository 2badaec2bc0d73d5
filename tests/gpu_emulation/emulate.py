"""Emulated gpu mode: gpulab's gpu-mode code paths run, without a GPU, on an emulated CuPy and Numba's simulator.

``activate()`` (once per process, before anything imports CuPy or numba):

* puts ``tests/gpu_emulation/fakecupy`` first on ``sys.path``, so ``import cupy`` is the emulated CuPy 14
  (``fakecupy/cupy/_array.py`` lists its rules and where the real CuPy does the same);
* imports gpulab in simulator mode (numba's simulator runs the kernels), then sets gpulab's mode to ``gpu``:
  ``is_gpu()`` is True and ``xp()`` is the emulated CuPy, so every ``if is_gpu():`` branch runs;
* makes ``runtime.sizes(gpu=, simulator=)`` return the simulator value (the gpu one where that is None): this
  tier checks host/device semantics
  (which array goes where), not gpu sizes nor float32 tolerances at those sizes (tests/test_gpu_sizes*.py);
* teaches numba's simulator what numba-cuda does on a GPU with CuPy arrays: a kernel launched on a CuPy array works
  on its memory (``__cuda_array_interface__``), ``cuda.as_cuda_array`` and ``cuda.to_device`` view it; events
  measure host time and ``cuda.event_elapsed_time`` exists (both as in numba-cuda's GPU API).

Nothing here is part of gpulab: the mode switch is a test-only override of ``runtime``'s state.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

FAKECUPY = Path(__file__).resolve().parent / "fakecupy"
REASON = "emulated gpu mode (tests/gpu_emulation): the emulated CuPy and Numba's simulator"
_active = False


ZERO_D = (
    "a 0-d array passed to a kernel (what a CuPy reduction such as x.max() or x.sum() returns, or np.array(3.0)) is "
    "typed by numba-cuda as a 0-d ARRAY, not a number: a kernel that uses it as a number does not compile on a GPU "
    "(numba-cuda 0.30: KeyError: <ufunc 'multiply'>), although the simulator runs it. Pass a number: float(s) (one "
    "read of the GPU), or read it in the kernel as s[()]"
)


class ZeroDimArg:
    """A 0-d array as a kernel sees it on a GPU: numba-cuda types a 0-d CuPy or NumPy argument as
    ``Array(dtype, 0, 'C')`` (``typeof`` of its ``__cuda_array_interface__`` or of the ndarray), so the kernel may
    read and write it as ``s[()]`` but arithmetic, comparisons and ``float(s)`` on the array itself fail to compile
    (checked with ``gpulab.ptx.compile_source``: ``x[i] * s`` with ``s`` an ``Array(float32, 0, 'C')`` raises
    ``KeyError: <ufunc 'multiply'>`` in numba-cuda 0.30.4; a float32 ``s`` compiles). Numba's simulator passes a 0-d
    ndarray to the kernel as it is, where it behaves as a number, so without this a gpu-mode launch with
    ``x.max()`` as an argument passed here and failed on a GPU."""

    __slots__ = ("_a",)
    __array_ufunc__ = None  # NumPy's operators return NotImplemented: x[i] * s comes to __rmul__ and is refused

    def __init__(self, a: Any) -> None:
        self._a = a

    shape = property(lambda s: s._a.shape)
    ndim = property(lambda s: s._a.ndim)
    size = property(lambda s: s._a.size)
    dtype = property(lambda s: s._a.dtype)

    def __getitem__(self, key: Any) -> Any:
        return self._a[key]

    def __setitem__(self, key: Any, value: Any) -> None:
        self._a[key] = value

    def _refuse(self, *args: Any, **kwargs: Any) -> Any:
        raise TypeError(ZERO_D)

    __add__ = __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = __truediv__ = __rtruediv__ = _refuse
    __floordiv__ = __rfloordiv__ = __mod__ = __rmod__ = __pow__ = __rpow__ = __neg__ = __pos__ = __abs__ = _refuse
    __lt__ = __le__ = __gt__ = __ge__ = __eq__ = __ne__ = _refuse
    __float__ = __int__ = __index__ = __bool__ = _refuse
    __hash__ = None  # type: ignore[assignment]


def _unwrap_kernel_args(args: tuple) -> tuple:
    import cupy

    out = []
    for a in args:
        # a CuPy array: the kernel works on its memory (numba-cuda reads __cuda_array_interface__); a NumPy array is
        # copied to the device and back by numba-cuda on a GPU as by the simulator; a 0-d one of either is an array
        a = a._a if isinstance(a, cupy.ndarray) else a
        out.append(ZeroDimArg(a) if isinstance(a, np.ndarray) and a.ndim == 0 else a)
    return tuple(out)


def _patch_numba() -> None:
    from numba import cuda
    from numba.cuda.simulator import kernel as sim_kernel
    from numba.cuda.simulator.cudadrv.devicearray import FakeCUDAArray

    launch = sim_kernel.FakeCUDAKernel.__call__

    def call(self: Any, *args: Any) -> Any:
        return launch(self, *_unwrap_kernel_args(args))

    sim_kernel.FakeCUDAKernel.__call__ = call

    class DeviceView(FakeCUDAArray):
        """``cuda.as_cuda_array``'s view of CuPy memory. Like every simulator device array it has only the attributes
        numba-cuda's DeviceNDArray has (``.copy()``, ``.sum()`` refused: gpulab.simulator.host_arrays)."""

        @property
        def __cuda_array_interface__(self) -> dict:
            import cupy

            return cupy.asarray(self).__cuda_array_interface__  # the same memory, described as CuPy does

        def view(self, *args: Any, **kwargs: Any) -> Any:
            return DeviceView(self._ary.view(*args, **kwargs))

        def reshape(self, *args: Any, **kwargs: Any) -> Any:
            return DeviceView(self._ary.reshape(*args, **kwargs))

    def as_cuda_array(obj: Any, sync: bool = True) -> Any:
        import cupy

        if isinstance(obj, cupy.ndarray):
            return DeviceView(obj._a)
        if isinstance(obj, FakeCUDAArray):
            return obj
        raise TypeError("*obj* doesn't implement the cuda array interface.")  # numba-cuda's words

    cuda.as_cuda_array = as_cuda_array
    to_device = cuda.to_device

    def to_device_like_numba_cuda(obj: Any, stream: Any = 0, copy: bool = True, to: Any = None) -> Any:
        """numba-cuda's ``to_device`` (api.py -> cudadrv/devicearray.py ``auto_device``): device memory is returned
        as it is, an object with ``__cuda_array_interface__`` (a CuPy array) is viewed without a copy."""
        import cupy

        if to is None and isinstance(obj, FakeCUDAArray):
            return obj
        if to is None and isinstance(obj, cupy.ndarray):
            return DeviceView(obj._a)
        return to_device(obj, stream=stream, copy=copy, to=to)

    cuda.to_device = to_device_like_numba_cuda
    if not hasattr(cuda, "from_cuda_array_interface"):
        cuda.from_cuda_array_interface = lambda desc, owner=None, sync=True: as_cuda_array(owner, sync)

    from numba.cuda.simulator.cudadrv import devices

    t4 = {
        "name": b"Tesla T4",
        "id": 0,
        "MULTIPROCESSOR_COUNT": 40,
        "MAX_THREADS_PER_BLOCK": 1024,
        "MAX_THREADS_PER_MULTIPROCESSOR": 1024,
        "ASYNC_ENGINE_COUNT": 3,
        "WARP_SIZE": 32,
        "MAX_SHARED_MEMORY_PER_BLOCK": 49152,
    }
    _check_attribute_names(t4)
    for key, value in t4.items():  # a T4's (Colab's GPU); name is bytes, as older numba-cuda returns it
        if not hasattr(devices.FakeCUDADevice, key):
            setattr(devices.FakeCUDADevice, key, value)

    event_cls = cuda.Event

    def record(self: Any, stream: Any = 0) -> None:
        self._t = time.perf_counter()

    def elapsed_time(self: Any, end: Any) -> float:
        return (end._t - self._t) * 1e3

    event_cls.record, event_cls.elapsed_time = record, elapsed_time
    cuda.event_elapsed_time = lambda start, end: start.elapsed_time(end)


def _check_attribute_names(attrs: dict[str, Any]) -> None:
    """Every device attribute the emulated T4 answers must be one a real device answers: numba-cuda (0.22 and 0.30)
    reads ``dev.X`` as ``cuda.bindings.driver.CUdevice_attribute.CU_DEVICE_ATTRIBUTE_X``, so a misspelt name raises
    AttributeError on a GPU (lesson 02 once read MAX_THREADS_PER_MULTI_PROCESSOR, which the stand-in answered)."""
    try:
        from cuda.bindings import driver
    except ImportError:  # no CUDA bindings installed: nothing to check against
        return
    known = {n.removeprefix("CU_DEVICE_ATTRIBUTE_") for n in dir(driver.CUdevice_attribute)}
    wrong = sorted(k for k in attrs if k not in ("name", "id") and k not in known)
    if wrong:
        raise AssertionError(f"the emulated device answers attributes no real device has: {wrong}")


def activate() -> None:
    """Enter emulated gpu mode in this process (idempotent); raises if the real CuPy or numba came first."""
    global _active
    if _active:
        return
    if "cupy" in sys.modules and not getattr(sys.modules["cupy"], "EMULATED", False):
        raise RuntimeError("the real CuPy was imported before the emulated gpu mode was activated")
    sys.path.insert(0, str(FAKECUPY))
    os.environ["GPULAB_DEVICE"] = "simulator"
    from gpulab import runtime

    if runtime.select_mode() != "simulator":
        raise RuntimeError("emulated gpu mode needs numba's simulator; this process chose gpu mode")
    import cupy

    assert getattr(cupy, "EMULATED", False), cupy.__file__
    _patch_numba()
    runtime._MODE, runtime._REASON = "gpu", REASON
    runtime.sizes.__code__ = _simulator_sizes.__code__  # every `from gpulab import sizes` sees it too
    from gpulab.exercises.problem import Problem

    sizes_for = Problem.sizes_for  # the exercises' checks: the simulator's sizes unless a scale is asked for
    Problem.sizes_for = lambda self, scale=None: sizes_for(self, scale or "simulator")
    os.environ["GPULAB_EMULATED_GPU"] = "1"  # for the tier's own subprocesses and reports only
    _active = True


def _simulator_sizes(gpu: Any, simulator: Any) -> Any:
    return gpu if simulator is None else simulator  # None: a size only gpu mode uses (lesson 00's cuBLAS matmul)
