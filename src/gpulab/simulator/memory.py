"""The arrays a kernel sees in the simulator: what new shared and local arrays hold before the kernel writes
them, which block owns them, and how its array arguments are indexed (:func:`fast_arrays`).

On a GPU, ``cuda.shared.array`` and ``cuda.local.array`` start with whatever was in that memory: often
plausible numbers, often zeros. NumPy's ``np.empty``, which Numba's simulator uses, gives leftovers or
zeros as well, so a kernel that reads before it writes (a histogram whose bins are never zeroed, a sum
that does not start at 0.0) can pass in the simulator and fail on a GPU. Here each new array starts
with a *filler* (:func:`filler`) that shows in the result instead:

* floating point and complex: NaN, which stays nan through arithmetic (the harness's inf/nan hint names it);
* integers: ``0xBAADF00D`` (Microsoft's debug heap marks memory nobody initialised with it), cut
  to the dtype's width: int32 -1163005939, uint32 3131961357; ``0xBAADF00DBAADF00D`` for 64 bits,
  ``0xBAAD`` for 16, ``0xBA`` for 8. Not the dtype's minimum or maximum: counts added to the maximum
  wrap around to small, plausible numbers (uint32's maximum + 3 is 2, an answer off by one), and the
  minimum is the top bit alone, which cancels when an even number of blocks add their copies
  (2 * -2**31 is 0 in int32). The 16-, 32- and 64-bit patterns are odd, so no sum of fewer than 2**16
  copies cancels, and a result that holds one or is off by a multiple of one is recognised by
  :func:`filler_hint` (8 bits are too few to tell the filler from chance);
* bool: True, as any non-zero leftover byte reads (False, what zeroed memory gives, would hide a flag
  that is never cleared).

Every block gets its own shared arrays, as on a GPU (numba-cuda's blocks share one, so a block reads
the values the previous block left), dynamic shared memory included: ``cuda.shared.array(0, dtype)``
views one buffer per block of the launch's fourth configuration value in bytes, filled for the dtype
of the block's first request (every request views the same bytes, as on a GPU).
:func:`gpulab.simulator.harden` installs these for ``cuda.shared.array`` and ``cuda.local.array``.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import numpy as np

__all__ = [
    "DYNAMIC",
    "FILLER",
    "LOCK",
    "dynamic_shared_array",
    "fast_arrays",
    "filler",
    "filler_hint",
    "shared_array",
    "uninitialised",
]

Dim = tuple[int, int, int]
# Called with each new shared array (the block's own, or its view of dynamic shared memory), its key, block and,
# for dynamic shared memory, the buffer's size in bytes; returns the array the kernel gets (maybe a logged view).
OnNew = Callable[[np.ndarray, tuple, Dim, "int | None"], np.ndarray]

FILLER = 0xBAADF00DBAADF00D  # integers start as its top 8, 16, 32 or 64 bits
LOCK = threading.Lock()  # new shared arrays, and the instruments that see them (gpulab.simulator)
DYNAMIC = ("<dynamic shared memory>", 0)  # key of a block's dynamic shared memory (buffer, bytes in the instruments)
_FILLS: dict[Any, tuple[np.dtype, Any]] = {}  # dtype as the kernel names it -> (NumPy dtype, filler)
_HINT_BITS = (16, 32, 64)  # fillers the hint recognises (8 bits are too few to tell a filler from chance)


def _fill(dtype: Any) -> tuple[np.dtype, Any]:
    try:
        found = _FILLS.get(dtype)
    except TypeError:  # unhashable (a record dtype as a list of fields): not kept
        found, dtype = None, np.dtype(dtype)
    if found is not None:
        return found
    dt = dtype
    if not isinstance(dtype, (np.dtype, type)):  # a Numba type (or a dtype's name)
        from numba.cuda.simulator import kernelapi

        if isinstance(dtype, kernelapi.types.Type):
            dt = kernelapi.numpy_support.as_dtype(dtype)
    dt = np.dtype(dt)
    value: Any = None  # records and the like: left as np.empty gives them
    if dt.kind in "fc":
        value = np.nan
    elif dt.kind in "iu":
        bits = 8 * dt.itemsize
        value = np.array(FILLER >> (64 - bits), dtype=f"u{dt.itemsize}").view(dt)[()]
    elif dt.kind == "b":
        value = True
    _FILLS[dtype] = (dt, value)
    return dt, value


def filler(dtype: Any) -> Any:
    """The value a new shared or local array of ``dtype`` (NumPy's or Numba's) starts with (module docstring);
    None for dtypes left as ``np.empty`` gives them (records)."""
    return _fill(dtype)[1]


def uninitialised(shape: Any, dtype: Any) -> np.ndarray:
    """A new shared or local array, every element set to :func:`filler`: NaN for floating point, ``0xBAADF00D``
    cut to the width for integers, True for bool. On a GPU it would hold whatever was in memory, often plausible
    numbers; NumPy's ``np.empty`` here would as well, or zeros, which hide the bug. ``dtype`` is NumPy's or Numba's
    (``float32`` inside a kernel)."""
    dt, value = _fill(dtype)
    res = np.empty(shape, dt)
    if value is not None:
        res.fill(value)
    return res


def current_block() -> Dim:
    """The block of the simulator thread that calls (``(0, 0, 0)`` outside a kernel)."""
    b = getattr(threading.current_thread(), "blockIdx", None)
    return (b.x, b.y, b.z) if b is not None else (0, 0, 0)


def shared_array(shared: Any, key: tuple, shape: Any, dtype: Any, on_new: OnNew | None = None) -> np.ndarray:
    """The block's shared array for ``key`` (the allocating source line), created under :data:`LOCK`.

    ``shared`` is the simulator's ``FakeCUDAShared`` of one launch; each block gets its own :func:`uninitialised`
    array. ``on_new`` sees each new array (and may hand out a logged view of it). Every thread of the block calls
    this, so the array already made is returned without the lock (a dict read is atomic; an entry is stored only
    once its array is complete).
    """

    def make(block: Dim) -> np.ndarray:
        res = uninitialised(shape, dtype)
        return res if on_new is None else on_new(res, key, block, None)

    return _once(shared, key, make)


def _once(shared: Any, key: tuple, make: Callable[[Dim], np.ndarray]) -> np.ndarray:
    """The calling block's array for ``key`` in ``shared._allocations``, made by ``make(block)`` under :data:`LOCK`
    the first time (every thread of the block asks: the array already made is returned without the lock)."""
    block = current_block()
    res = shared._allocations.get((key, block))
    if res is not None:
        return res
    with LOCK:
        res = shared._allocations.get((key, block))
        if res is None:
            res = make(block)
            shared._allocations[(key, block)] = res
    return res


def dynamic_shared_array(shared: Any, key: tuple, dtype: Any, on_new: OnNew | None = None) -> np.ndarray:
    """``cuda.shared.array(0, dtype)`` at source line ``key``: the block's view of its dynamic shared memory.

    One buffer per block of ``shared._dynshared_size`` bytes (the launch's fourth configuration value), made on
    the block's first request and filled with that request's :func:`filler`; every request views it as its dtype
    (as many whole elements as fit, as numba-cuda does), so requests alias each other as on a GPU. Each line's
    view is made once per block, as :func:`shared_array`; ``on_new`` gets the buffer's size.
    """

    def make(block: Dim) -> np.ndarray:  # under LOCK
        dt, value = _fill(dtype)
        size = shared._dynshared_size
        whole = size // dt.itemsize * dt.itemsize  # the bytes whole elements of dt cover
        buffer = shared._allocations.get((DYNAMIC, block))
        if buffer is None:
            buffer = np.empty(size, np.uint8)
            buffer.fill(FILLER >> 56)  # bytes no element covers
            if value is not None:
                buffer[:whole].view(dt).fill(value)
            shared._allocations[(DYNAMIC, block)] = buffer
        res = buffer[:whole].view(dt)
        return res if on_new is None else on_new(res, key, block, size)

    return _once(shared, key, make)


_FAST_ARRAYS: list[bool] = []


def fast_arrays() -> None:
    """Index arrays inside simulated kernels with one Python call instead of three (idempotent).

    In Numba's simulator a kernel sees each array as a ``FakeWithinKernelCUDAArray`` wrapping a
    ``FakeCUDAArray`` wrapping the NumPy array; ``a[i, k]`` costs two wrapper calls and a type check
    before NumPy's own indexing. This replaces the outer wrapper's ``__getitem__`` / ``__setitem__``
    with versions that index the NumPy array directly and wrap sub-arrays exactly as before (same
    results, same exceptions, same objects for sub-arrays). Measured on 2 shared cores: a GEMM's
    multiply-add 2.25 -> 1.18 us (CPU time), about half the simulator's cost per loop iteration.
    """
    if _FAST_ARRAYS:
        return
    from numba.cuda.simulator.cudadrv import devicearray as da

    outer, inner = da.FakeWithinKernelCUDAArray, da.FakeCUDAArray

    def getitem(self: Any, idx: Any, _outer: Any = outer, _inner: Any = inner) -> Any:
        item = self.__dict__["_item"]
        ret = item._ary[idx]
        if type(ret) is np.ndarray or type(ret) is np.void:  # a sub-array: wrapped as the simulator does
            return _outer(_inner(ret, stream=item.stream))
        return ret

    def setitem(self: Any, idx: Any, val: Any) -> None:
        self.__dict__["_item"]._ary[idx] = val

    outer.__getitem__, outer.__setitem__ = getitem, setitem  # type: ignore[method-assign]
    _FAST_ARRAYS.append(True)


def _fillers(bits: int, signed: bool) -> list[int]:
    """The integer fillers of 16 to ``bits`` bits, read as signed and as unsigned numbers (``signed``: first)."""
    found = []
    for width in _HINT_BITS:
        if width <= bits:
            u = FILLER >> (64 - width)
            found += [u - (1 << width), u] if signed else [u, u - (1 << width)]
    return found


def _off_by_filler(got: np.ndarray, exp: np.ndarray) -> list[tuple[int, np.ndarray, np.ndarray]]:
    """For each integer filler ``s``: where ``got`` holds it and how many times it is off by it (valid from 1 up)."""
    found = []
    if got.dtype.kind in "iu" and exp.dtype.kind in "iu" and got.dtype.itemsize >= 2:
        bits = 8 * got.dtype.itemsize
        mask = np.uint64((1 << bits) - 1)
        g, e = got.astype(np.int64).astype(np.uint64) & mask, exp.astype(np.int64).astype(np.uint64) & mask
        d = (g - e) & mask  # wraps as the kernel's own integers did
        for s in _fillers(bits, got.dtype.kind == "i"):
            inverse = np.uint64(pow(s, -1, 1 << bits))  # the fillers are odd, so invertible modulo 2**bits
            found.append((s, g == np.uint64(s % (1 << bits)), (d * inverse) & mask))
    elif got.dtype.kind == "f":
        g, e = got.astype(np.float64), exp.astype(np.float64)
        finite = np.isfinite(g) & np.isfinite(e)
        d = np.subtract(g, e, out=np.zeros_like(g), where=finite)  # not inf - inf: no RuntimeWarning on stderr
        for s in _fillers(64, True):
            times = np.rint(d / s)
            exact = finite & (np.abs(d - times * s) <= 1e-6 * np.abs(times * s))
            found.append((s, finite & np.isclose(g, s, rtol=1e-6, atol=0.0), np.where(exact, times, 0.0)))
    return found


def filler_hint(got: Any, exp: Any, name: str, rtol: float = 1e-5, atol: Any = 1e-6) -> str:
    """A hint when the wrong elements of output ``name`` show an integer :func:`filler`: at least half of them hold
    one, or are off by 1 to 4096 times one (each block may add its copy; 64 times at most for 16-bit outputs, where
    more would match by chance), with wrap-around in the output's own integers. "" otherwise. Floating-point
    fillers (NaN) are named by the harness's inf/nan hint."""
    got, exp = np.asarray(got), np.asarray(exp)
    if got.shape != exp.shape or got.size == 0 or got.dtype.kind not in "iuf":
        return ""
    if got.dtype.kind == "f":
        # an infinite allowed error (where the expected value is itself +-inf, which only an equal inf matches) makes
        # np.isclose warn on stderr: where exp is not finite atol plays no part, and elsewhere inf allows anything
        atol = np.asarray(atol, dtype=np.float64)
        if not np.isfinite(atol).all():
            atol = np.where(np.isfinite(atol), atol, np.where(np.isfinite(exp), np.finfo(np.float64).max, 0.0))
        wrong = ~np.isclose(got, exp, rtol=rtol, atol=atol, equal_nan=True)
    else:
        wrong = got != exp
    most = 64 if got.dtype.kind in "iu" and got.dtype.itemsize == 2 else 4096
    found = [
        (s, holds, wrong & (holds | ((times >= 1) & (times <= most))), times)
        for s, holds, times in _off_by_filler(got, exp)
    ]
    match = np.any(np.stack([m for _, _, m, _ in found]), axis=0) if found else np.zeros(got.shape, bool)
    if not match.any() or 2 * int(match.sum()) < int(wrong.sum()):
        return ""
    first = tuple(int(v) for v in np.argwhere(match)[0])
    s, holds, times = next((s, holds[first], times[first]) for s, holds, m, times in found if m[first])
    width = 16 if abs(s) < 1 << 16 else 32 if abs(s) < 1 << 32 else 64
    what = f"{s} (0x{FILLER >> (64 - width):X} read as {'u' if s > 0 else ''}int{width})"
    k = 0 if holds else int(times)
    where = f"{name}[{', '.join(str(v) for v in first)}]"
    if k == 0:
        shows = f"{where} holds {what}"
    elif k == 1:
        shows = f"{where} is off by {what}"
    else:  # e.g. each of k blocks added its unset copy
        shows = f"{where} is off by {k} x {what}, as when each of {k} blocks adds its copy"
    return (
        f"{shows}: the value gpulab's simulator puts in integer cuda.shared.array and cuda.local.array before the "
        "kernel writes them. Shared/local memory is not zeroed on a GPU: initialise it (and cuda.syncthreads() "
        "before reading), e.g. `bins[tx] = 0` for every element, then a barrier before any thread adds to it."
    )
