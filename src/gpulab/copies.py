"""Count the copies between host and device that some code makes, in both modes.

``with copies.count() as c: ...`` then ``c.h2d``, ``c.d2h`` (bytes each way), ``c.bytes`` and ``c.calls``. In
simulator mode the copies are those :mod:`gpulab.simulator.streams` records (every ``cuda.to_device``,
``copy_to_device`` and ``copy_to_host``, including the ones a GPU ufunc makes for host arrays); on a GPU,
numba-cuda's ``DeviceNDArray.copy_to_device`` and ``copy_to_host`` are wrapped while the block runs (every copy of a
Numba device array goes through them, ``cuda.to_device`` included). Each counts the bytes the copy moves: the
allocation's, which for a broadcast array (stride 0) is only its repeated core. CuPy's own copies
(``cupy.asarray``, ``cupy.asnumpy``) are not counted.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

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

    DeviceNDArray.copy_to_device = copy_to_device  # type: ignore[method-assign]
    DeviceNDArray.copy_to_host = copy_to_host  # type: ignore[method-assign]
    try:
        yield found
    finally:
        DeviceNDArray.copy_to_device = to_device  # type: ignore[method-assign]
        DeviceNDArray.copy_to_host = to_host  # type: ignore[method-assign]
