"""Count the copies between host and device that some code makes, in both modes.

``with copies.count() as c: ...`` then ``c.h2d``, ``c.d2h`` (bytes each way), ``c.bytes`` and ``c.calls``. In
simulator mode the copies are those :mod:`gpulab.simulator.streams` records (every ``cuda.to_device``,
``copy_to_device`` and ``copy_to_host``, including the ones a GPU ufunc makes for host arrays); on a GPU,
numba-cuda's ``DeviceNDArray.copy_to_device`` and ``copy_to_host`` are wrapped while the block runs (every copy of a
Numba device array goes through them, ``cuda.to_device`` included). Each counts the bytes the copy moves: the
allocation's, which for a broadcast array (stride 0) is only its repeated core. A host array handed straight to a
``@cuda.jit`` kernel is copied in and back by the kernel's argument handling: numba-cuda 0.22 does that with the
same two methods, newer versions (``numba.cuda.args`` calling ``_to_strided_memory_view``) with the driver's copy
functions, so there those two steps are wrapped as well (:func:`_kernel_argument_copies`). CuPy's own copies
(``cupy.asarray``, ``cupy.asnumpy``) are not counted.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from . import runtime

__all__ = ["Copies", "count"]


@dataclass
class Copies:
    """Bytes copied host -> device (``h2d``) and device -> host (``d2h``), and how many copies."""

    h2d: int = 0
    d2h: int = 0
    calls: int = 0

    @property
    def bytes(self) -> int:
        """Bytes copied, both ways."""
        return self.h2d + self.d2h

    def add(self, kind: str, nbytes: int) -> None:
        setattr(self, kind, getattr(self, kind) + int(nbytes))
        self.calls += 1

    def __str__(self) -> str:
        return f"{self.calls} copies: {self.h2d:,} bytes host -> device, {self.d2h:,} bytes device -> host"


@contextlib.contextmanager
def count() -> Iterator[Copies]:
    """Count the host <-> device copies made inside the ``with`` block (see the module docstring)."""
    found = Copies()
    if runtime.is_simulator():
        from . import simulator

        with simulator.instrument() as ins:
            yield found
        for op in ins.stream_ops:
            if op.kind in ("h2d", "d2h"):
                found.add(op.kind, op.nbytes)
        return
    from numba import cuda
    from numba.cuda.cudadrv.devicearray import DeviceNDArray

    to_device, to_host = DeviceNDArray.copy_to_device, DeviceNDArray.copy_to_host

    def copy_to_device(self: Any, ary: Any, stream: Any = 0) -> Any:
        device_to_device = cuda.is_cuda_array(ary)
        if not device_to_device and int(getattr(ary, "size", 1)) > 0:  # numba-cuda copies nothing for size 0
            found.add("h2d", self.alloc_size)
        return to_device(self, ary, stream=stream)

    def copy_to_host(self: Any, ary: Any = None, stream: Any = 0) -> Any:
        found.add("d2h", self.alloc_size)
        return to_host(self, ary, stream=stream)

    from numba.cuda import args as arg_hints
    from numba.cuda.cudadrv import devicearray

    DeviceNDArray.copy_to_device = copy_to_device  # type: ignore[method-assign]
    DeviceNDArray.copy_to_host = copy_to_host  # type: ignore[method-assign]
    try:
        with _kernel_argument_copies(arg_hints, devicearray, found):
            yield found
    finally:
        DeviceNDArray.copy_to_device = to_device  # type: ignore[method-assign]
        DeviceNDArray.copy_to_host = to_host  # type: ignore[method-assign]


# numba-cuda 0.30's name (0.22 has none): read and set by name, as a version-dependent name must be
# (tests/apicheck.py checks every attribute written out against the oldest supported versions too)
_TO_VIEW = "_to_strided_memory_view"


@contextlib.contextmanager
def _kernel_argument_copies(arg_hints: Any, devicearray: Any, found: Copies) -> Iterator[None]:
    """Count the copies of host arrays handed to a kernel where numba-cuda makes them without ``DeviceNDArray``.

    Newer numba-cuda (0.30: ``numba/cuda/args.py``) copies such an argument in through
    ``devicearray._to_strided_memory_view`` (``cuMemcpyHtoDAsync``) and back through a function that
    ``Out.to_device`` (and ``InOut``, its subclass) puts in the launch's clean-up list (``cuMemcpyDtoH``). Both are
    wrapped here while the block runs. Older versions (0.22, Colab's) go through ``auto_device`` and
    ``copy_to_host``, which :func:`count` already wraps: there nothing is changed (no copy counted twice).
    """
    out_cls = getattr(arg_hints, "Out", None)
    code = getattr(getattr(out_cls, "to_device", None), "__code__", None)
    original = getattr(devicearray, _TO_VIEW, None)
    if out_cls is None or code is None or original is None or _TO_VIEW not in code.co_names:
        yield
        return
    out_to_device = out_cls.to_device

    def to_view(obj: Any, *args: Any, **kwargs: Any) -> Any:
        view, converted = original(obj, *args, **kwargs)
        copy = kwargs.get("copy", args[1] if len(args) > 1 else True)
        if converted and copy:
            nbytes = int(np.asanyarray(obj).nbytes)
            if nbytes:
                found.add("h2d", nbytes)
        return view, converted

    def counted_out(self: Any, retr: list, stream: Any = 0) -> Any:
        before = len(retr)
        devary = out_to_device(self, retr, stream)
        for k in range(before, len(retr)):  # Out adds only its copy back, and only for a host array
            retr[k] = _counting(retr[k], found, int(np.asanyarray(self.value).nbytes))
        return devary

    setattr(devicearray, _TO_VIEW, to_view)
    out_cls.to_device = counted_out
    try:
        yield
    finally:
        setattr(devicearray, _TO_VIEW, original)
        out_cls.to_device = out_to_device


def _counting(copy_back: Callable[..., Any], found: Copies, nbytes: int) -> Callable[..., Any]:
    def run(*args: Any, **kwargs: Any) -> Any:
        if nbytes:
            found.add("d2h", nbytes)
        return copy_back(*args, **kwargs)

    return run
