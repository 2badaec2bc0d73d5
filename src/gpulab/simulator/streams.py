"""Record the host's stream calls in the simulator: copies, launches and synchronizes, with their stream.

numba-cuda's simulator runs every copy and kernel at once and ignores streams (``cuda.stream()`` has a
``synchronize`` that does nothing, and ``cuda.pinned_array`` returns a plain ndarray), so what a function
asked of a GPU is lost. :func:`install` (called by :func:`gpulab.simulator.harden`) wraps, without changing
what they do:

* ``cuda.to_device(host, stream=s)`` and ``device_array.copy_to_device(host, stream=s)``: an ``"h2d"`` copy;
* ``device_array.copy_to_host(host, stream=s)``: a ``"d2h"`` copy;
* ``kernel[blocks, threads, s](...)``: a ``"kernel"`` launch on stream ``s`` (0 without one; the stream is kept
  by :mod:`gpulab.simulator.limits`, which wraps the launch configuration);
* ``s.synchronize()``, the end of ``with s.auto_synchronize():`` and ``cuda.synchronize()``: a ``"sync"``
  (stream ``None``: all of them);
* ``cuda.pinned_array`` / ``pinned_array_like``: the array is noted as pinned (by id, weakly: it stays a
  plain ndarray), so a copy from or into it or a view of it (``out[a:b]``) counts as pinned (so does an array
  inside a ``with cuda.pinned(a, b):`` block, which takes several arrays as numba's does); a copy of it
  (``x[a:b].copy()``) is pageable, as on a GPU. ``cuda.default_stream()`` is one stream object, the default
  stream, as on a GPU (the simulator made a new one per call);
* the allocations a GPU makes with ``cuMemAlloc`` / ``cuMemHostAlloc``: ``cuda.device_array`` (and
  ``device_array_like``, which calls it), ``cuda.to_device`` without ``to=`` and ``cuda.pinned_array`` (and
  ``pinned_array_like``), each an :class:`Allocation`. CUDA's programming guide ("Implicit Synchronization")
  says two commands from different streams cannot run concurrently if a device or page-locked host memory
  allocation is issued between them, which :func:`gpulab.lessons.pipelined.diagnose` checks.

Each call is told to the functions in ``ON_OP`` as a :class:`StreamOp` or an :class:`Allocation` (built only when
one wants it); :func:`gpulab.simulator.harden` adds one that appends a StreamOp to every active
``Instruments.stream_ops`` and an Allocation to ``Instruments.allocations``.
:func:`gpulab.streams.recorded_timeline` draws a list of StreamOps.
"""

from __future__ import annotations

import contextlib
import threading
import weakref
from collections.abc import Callable, Iterator
from typing import Any, NamedTuple

import numpy as np

__all__ = ["ON_OP", "Allocation", "StreamOp", "install", "is_pinned", "mark_pinned", "unmark_pinned"]


class StreamOp(NamedTuple):
    """One recorded call. ``stream``: the stream object, ``0`` for the default stream, ``None`` for a
    ``cuda.synchronize()``; ``pinned``: the host array of a copy came from ``cuda.pinned_array``;
    ``buffers``: the device allocations it used (a kernel: every device array argument; the arrays themselves,
    so that while the record lives no other allocation can take their id or addresses); ``spans``: for each,
    the ``(low, high)`` host addresses of the part used (a slice ``x_d[a:b]`` is only its own bytes), so that
    two chunks in disjoint slices of one allocation do not count as sharing it;
    ``host_args``: a kernel was given a host (NumPy) array, which numba copies in and out synchronously."""

    kind: str  # "h2d", "d2h", "kernel" or "sync"
    stream: Any
    nbytes: int = 0
    pinned: bool = False
    buffers: tuple[Any, ...] = ()
    name: str = ""
    host_args: bool = False
    spans: tuple[tuple[int, int], ...] = ()


class Allocation(NamedTuple):
    """One memory allocation the host made: ``call`` (``"cuda.device_array"``, ``"cuda.to_device"`` or
    ``"cuda.pinned_array"``), its ``nbytes``, and ``after``: how many stream calls had been recorded before it, so
    ``stream_ops[:after]`` were issued before the allocation and ``stream_ops[after:]`` after it."""

    call: str
    nbytes: int
    after: int = 0


ON_OP: list[Callable[[Callable[[], StreamOp | Allocation]], None]] = []
_PINNED: dict[int, weakref.ref] = {}
_LOCK = threading.Lock()
_DEFAULT: list[Any] = []  # the one default stream object


def mark_pinned(array: np.ndarray) -> np.ndarray:
    """Note ``array`` (a whole allocation) as page-locked host memory; returns it unchanged."""
    key = id(array)

    def forget(_: Any, key: int = key) -> None:
        with _LOCK:
            _PINNED.pop(key, None)

    with _LOCK:
        _PINNED[key] = weakref.ref(array, forget)
    return array


def unmark_pinned(array: np.ndarray) -> None:
    """Forget that ``array`` is page-locked (the end of a ``cuda.pinned`` block)."""
    with _LOCK:
        ref = _PINNED.get(id(array))
        if ref is not None and ref() is array:
            del _PINNED[id(array)]


def is_pinned(array: Any) -> bool:
    """Whether ``array`` is, or is a view of, an array made by ``cuda.pinned_array`` (in the simulator)."""
    obj = array
    while obj is not None:
        ref = _PINNED.get(id(obj))
        if ref is not None and ref() is obj:
            return True
        obj = getattr(obj, "base", None)
    return False


def _owner(array: Any) -> Any:
    """The allocation (an ndarray that owns its data) a (device) array belongs to."""
    obj = getattr(array, "_ary", array)
    while isinstance(getattr(obj, "base", None), np.ndarray):
        obj = obj.base
    return obj


def _span(array: Any) -> tuple[int, int]:
    """The ``(low, high)`` addresses of the bytes a (device) array view covers."""
    try:
        from numpy.lib.array_utils import byte_bounds  # NumPy 2
    except ImportError:  # NumPy 1.26
        byte_bounds = np.byte_bounds  # type: ignore[attr-defined]
    return byte_bounds(np.asarray(getattr(array, "_ary", array)))


def _copied_bytes(ary: Any) -> int:
    """Bytes a copy of host ``ary`` to the device moves: a broadcast array (a stride of 0, as a GPU ufunc makes of a
    scalar) only its repeated core, as numba-cuda copies it."""
    from numba.cuda.simulator.cudadrv.devicearray import array_core

    return int(array_core(np.asarray(ary)).nbytes)


def _emit(build: Callable[[], StreamOp | Allocation]) -> None:
    if threading.current_thread().__class__.__name__ == "BlockThread":
        return  # inside a simulated kernel: not a host call
    for fn in list(ON_OP):
        fn(build)


def install() -> None:
    """Wrap the simulator's copies, launches, synchronizes and pinned allocations (idempotent)."""
    from numba import cuda
    from numba.cuda import simulator as sim
    from numba.cuda.simulator import api, kernel
    from numba.cuda.simulator.cudadrv import devicearray as da

    arr_cls = da.FakeCUDAArray
    if getattr(arr_cls, "_gpulab_streams", False):
        return
    modules = (cuda, sim, da, api)  # numba.cuda is the simulator's only in simulator mode

    def replace(name: str, new: Any) -> None:
        old = getattr(da, name, None) or getattr(api, name, None)
        if old is None:  # an older simulator without it (numba's own numba.cuda, before numba-cuda): nothing to wrap
            return
        for m in modules:
            if getattr(m, name, None) is old:  # in gpu mode (trace), numba.cuda's own functions stay
                setattr(m, name, new)

    orig_to_device, orig_pinned, orig_device_array = da.to_device, da.pinned_array, da.device_array

    def to_device(ary: Any, stream: Any = 0, copy: bool = True, to: Any = None) -> Any:
        if to is not None:  # copy_to_device records it
            return orig_to_device(ary, stream, copy, to)
        out = orig_to_device(ary, stream, copy, to)
        _emit(lambda: Allocation("cuda.to_device", int(out.nbytes)))  # a GPU allocates, then copies
        _emit(lambda: StreamOp("h2d", stream, _copied_bytes(ary), is_pinned(ary), (_owner(out),), spans=(_span(out),)))
        return out

    def pinned_array(shape: Any, dtype: Any = np.float64, strides: Any = None, order: str = "C") -> Any:
        out = mark_pinned(orig_pinned(shape, dtype, strides, order))
        _emit(lambda: Allocation("cuda.pinned_array", int(out.nbytes)))
        return out

    def device_array(*args: Any, **kwargs: Any) -> Any:  # device_array_like calls the module's device_array
        out = orig_device_array(*args, **kwargs)
        _emit(lambda: Allocation("cuda.device_array", int(out.nbytes)))
        return out

    @contextlib.contextmanager
    def pinned(*arylist: Any) -> Iterator[None]:  # numba's signature; the simulator's own takes one array only
        newly = [a for a in arylist if isinstance(a, np.ndarray) and not is_pinned(a)]
        for a in newly:
            mark_pinned(a)
        try:
            yield
        finally:
            for a in newly:
                unmark_pinned(a)

    replace("to_device", to_device)
    replace("pinned_array", pinned_array)  # pinned_array_like calls the module's pinned_array
    replace("device_array", device_array)  # so does device_array_like (and mapped_array) device_array
    replace("pinned", pinned)

    orig_d2h, orig_h2d = arr_cls.copy_to_host, arr_cls.copy_to_device

    def copy_to_host(self: Any, ary: Any = None, stream: Any = 0) -> Any:
        out = orig_d2h(self, ary, stream)
        pinned = ary is not None and is_pinned(ary)
        _emit(lambda: StreamOp("d2h", stream, int(self.nbytes), pinned, (_owner(self),), spans=(_span(self),)))
        return out

    def copy_to_device(self: Any, ary: Any, stream: Any = 0) -> Any:
        out = orig_h2d(self, ary, stream)
        host = not isinstance(ary, arr_cls)
        pinned = host and is_pinned(ary)
        _emit(lambda: StreamOp("h2d", stream, int(self.nbytes), pinned, (_owner(self),), spans=(_span(self),)))
        return out

    arr_cls.copy_to_host = copy_to_host  # type: ignore[method-assign]
    arr_cls.copy_to_device = copy_to_device  # type: ignore[method-assign]

    kcls = kernel.FakeCUDAKernel
    orig_call = kcls.__call__

    def call(self: Any, *args: Any) -> Any:  # the launch's stream was kept by gpulab.simulator.limits
        out = orig_call(self, *args)
        if not self._device:

            def build() -> StreamOp:
                arrays = [a for a in args if isinstance(a, arr_cls)]
                devs, spans = tuple(_owner(a) for a in arrays), tuple(_span(a) for a in arrays)
                host = any(isinstance(a, np.ndarray) and a.ndim > 0 for a in args)
                name = getattr(self.fn, "__name__", "kernel")
                return StreamOp("kernel", getattr(self, "_gpulab_stream", 0), 0, False, devs, name, host, spans)

            _emit(build)
        return out

    kcls.__call__ = call  # type: ignore[method-assign]

    orig_stream_sync, orig_sync = api.stream.synchronize, api.synchronize

    def stream_synchronize(self: Any) -> None:
        orig_stream_sync(self)
        _emit(lambda: StreamOp("sync", 0 if getattr(self, "_gpulab_default", False) else self))

    def synchronize() -> None:
        orig_sync()
        _emit(lambda: StreamOp("sync", None))

    def default_stream() -> Any:
        if not _DEFAULT:
            s = api.stream()
            s._gpulab_default = True  # type: ignore[attr-defined]
            _DEFAULT.append(s)
        return _DEFAULT[0]

    orig_auto = api.stream.auto_synchronize

    @contextlib.contextmanager
    def auto_synchronize(self: Any) -> Any:  # a GPU synchronizes the stream when the block ends: so does the record
        with orig_auto(self):
            yield self
        stream_synchronize(self)

    api.stream.synchronize = stream_synchronize  # type: ignore[method-assign]
    api.stream.auto_synchronize = auto_synchronize  # type: ignore[method-assign]
    replace("synchronize", synchronize)
    replace("default_stream", default_stream)
    replace("legacy_default_stream", default_stream)
    arr_cls._gpulab_streams = True  # type: ignore[attr-defined]
