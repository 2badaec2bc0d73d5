"""The simulator's device arrays offer on the host what numba-cuda's device arrays offer on a GPU, and no more.

``cuda.to_device``, ``cuda.device_array`` and friends return a ``DeviceNDArray`` on a GPU: memory on the device
with a shape, a dtype, copies to and from the host, slicing and ``reshape``; it has no NumPy methods (``sum``,
``max``, ``copy``, ``astype``, ``fill``, ``tolist``, ``item``) and no arithmetic (``d_a + 1`` raises
``TypeError: unsupported operand type(s)``). numba-cuda's simulator stands for it with ``FakeCUDAArray``, which
forwards every unknown attribute to the NumPy array it wraps and defines ``+``, ``-``, ``*``, ``/``, ``==``, ``<``
and the like elementwise. So ``d_out.sum()`` or ``d_a * 2`` ran on the CPU in simulator mode and failed on a GPU,
and ``d_out == 1`` compared elementwise here but compares identities (``False``) there.

:func:`install` (called by :func:`gpulab.simulator.harden`) makes the host side as strict as numba-cuda's class
(checked against numba-cuda 0.22 and 0.30 ``cudadrv/devicearray.py``): a NumPy-only attribute raises
:class:`DeviceArrayAttributeError` (an ``AttributeError``, so ``hasattr`` still answers False) naming the
attribute and what to do; arithmetic and ordering raise ``TypeError`` with Python's words and what to do, unless
the other operand is NumPy's, whose reflected method takes its turn as on a GPU (``d - x`` and ``d == x`` are NumPy
arrays there, through ``__array__``); ``==`` and ``!=`` are object's, as numba-cuda's class. Inside kernels
nothing changes: a kernel sees its arrays through ``FakeWithinKernelCUDAArray``, which now reads attributes
(``a.shape``, ``a.size``, a record's fields) from the NumPy array directly. numba's own simulator code keeps
NumPy's attributes (it calls them on the arrays it wraps).
"""

from __future__ import annotations

import sys
from typing import Any

__all__ = ["DEVICE_ARRAY_NAMES", "DeviceArrayAttributeError", "install"]

# numba-cuda's DeviceNDArray (and its base) on a GPU: its methods and properties, and the attributes its
# __init__ sets. The simulator's class defines most of them itself; the rest it forwards to NumPy, as before.
DEVICE_ARRAY_NAMES = frozenset(
    {
        "T", "alloc_size", "as_cuda_arg", "bind", "copy_to_device", "copy_to_host", "device_ctypes_pointer",
        "dtype", "flags", "get_ipc_handle", "getitem", "gpu_data", "is_c_contiguous", "is_f_contiguous", "nbytes",
        "ndim", "ravel", "reshape", "setitem", "shape", "size", "split", "squeeze", "stream", "strides",
        "transpose", "view",
    }
)  # fmt: skip

# no in-place ones: as on a GPU, `d += x` falls back to `d + x`
_OPERATORS = {
    "__add__": "+", "__radd__": "+", "__sub__": "-", "__rsub__": "-", "__mul__": "*", "__rmul__": "*",
    "__truediv__": "/", "__rtruediv__": "/", "__floordiv__": "//", "__rfloordiv__": "//", "__mod__": "%",
    "__rmod__": "%", "__pow__": "**", "__rpow__": "**", "__matmul__": "@", "__rmatmul__": "@", "__neg__": "-",
}  # fmt: skip
_ORDERING = {"__lt__": "<", "__le__": "<=", "__gt__": ">", "__ge__": ">="}
# The other operand's method Python tries when the left one has none (numba-cuda's class has none): NumPy's
# converts the device array with __array__, so `d - x`, `d < x` give NumPy arrays on a GPU when x is NumPy's.
_REFLECTED = {
    "__add__": "__radd__", "__sub__": "__rsub__", "__mul__": "__rmul__", "__truediv__": "__rtruediv__",
    "__floordiv__": "__rfloordiv__", "__mod__": "__rmod__", "__pow__": "__rpow__", "__matmul__": "__rmatmul__",
    "__lt__": "__gt__", "__le__": "__ge__", "__gt__": "__lt__", "__ge__": "__le__",
}  # fmt: skip


class DeviceArrayAttributeError(AttributeError):
    """A NumPy attribute asked of a device array on the host: numba-cuda's device arrays do not have it."""


def _advice(name: str) -> str:
    if name == "get":
        return "`get()` is CuPy's; a Numba device array comes back to the host with `d.copy_to_host()`."
    if name == "copy":
        return (
            "to copy it on the device: `d2 = cuda.device_array_like(d)` then `d2.copy_to_device(d)`; to the host: "
            "`d.copy_to_host()`."
        )
    return (
        f"copy it to the host first (`d.copy_to_host().{name}`), or, in gpu mode, work on it with CuPy "
        f"(`cupy.asarray(d).{name}`, no copy)."
    )


def _missing(self: Any, name: str) -> AttributeError:
    return DeviceArrayAttributeError(
        f"a Numba device array (from cuda.to_device or cuda.device_array) has no attribute {name!r} on a GPU; the "
        f"simulator would have used NumPy's, so this line fails on a GPU. {_advice(name)}"
    )


def _reflected(fake: type, self: Any, other: Any, dunder: str) -> Any:
    """What Python does on a GPU for ``self <op> other``: the other operand's reflected method (NumPy's converts
    ``self`` with ``__array__``), else NotImplemented (then :func:`install`'s operators raise with what to do)."""
    if isinstance(other, fake) or dunder not in _REFLECTED:
        return NotImplemented
    method = getattr(type(other), _REFLECTED[dunder], None)
    return NotImplemented if method is None else method(other, self)


def _from_numba(depth: int = 2) -> bool:
    """Whether the caller ``depth`` frames up is numba's own code (the simulator reads NumPy attributes)."""
    name = sys._getframe(depth).f_globals.get("__name__", "")
    return name == "numba" or name.startswith(("numba.", "numba_cuda."))


_NUMPY_OPERATORS = (
    *_OPERATORS, *_ORDERING, "__eq__", "__ne__", "__abs__", "__pos__", "__invert__", "__and__", "__or__", "__xor__",
    "__rand__", "__ror__", "__rxor__", "__lshift__", "__rshift__", "__bool__", "__iter__", "__contains__",
)  # fmt: skip
_IN_PLACE = ("__iadd__", "__isub__", "__imul__", "__itruediv__", "__ifloordiv__", "__imod__", "__ipow__")
_VIEWS = ("__getitem__", "reshape", "ravel", "view", "transpose", "bind", "squeeze")


def _mapped_class(fake: Any, forward: Any) -> type:
    """``cuda.mapped_array``'s arrays: on a GPU a ``MappedNDArray``, a NumPy array (an ``np.ndarray`` subclass) in
    mapped host memory that kernels also take, so every NumPy attribute and operator works on it."""

    def numpy_op(dunder: str) -> Any:
        return lambda self, *other: getattr(self._ary, dunder)(*other)

    def in_place(dunder: str) -> Any:
        def op(self: Any, other: Any) -> Any:
            getattr(self._ary, dunder)(other)  # in the mapped memory, as NumPy's in-place operators
            return self

        return op

    def same_kind(name: str) -> Any:
        method = getattr(fake, name)

        def view(self: Any, *args: Any, **kwargs: Any) -> Any:  # NumPy's views of a MappedNDArray are MappedNDArrays
            out: Any = method(self, *args, **kwargs)
            return mapped(out._ary, out.stream) if type(out) is fake else out

        return view

    body: dict[str, Any] = {"__doc__": _mapped_class.__doc__, "__hash__": None, "__getattr__": forward}
    body.update({d: numpy_op(d) for d in _NUMPY_OPERATORS})
    body.update({d: in_place(d) for d in _IN_PLACE})
    body.update({n: same_kind(n) for n in _VIEWS})
    mapped = type("FakeMappedArray", (fake,), body)
    return mapped


def install() -> None:
    """Make the simulator's host-side device arrays as strict as numba-cuda's (idempotent; see the docstring)."""
    from numba.cuda.simulator.cudadrv import devicearray as da

    fake: Any = da.FakeCUDAArray
    if getattr(fake, "_gpulab_strict", False):
        return
    forward = fake.__getattr__  # the simulator's: NumPy's attribute

    def getattr_(self: Any, name: str) -> Any:
        if name.startswith("_") or name in DEVICE_ARRAY_NAMES or _from_numba():
            return forward(self, name)
        raise _missing(self, name)

    def refusing(dunder: str, symbol: str, words: str) -> Any:
        """``dunder`` as on a GPU: the other operand's turn (:func:`_reflected`), else a TypeError in Python's
        ``words`` and what to do; numba's own code keeps the simulator's elementwise version."""
        original = fake.__dict__.get(dunder)

        def refuse(self: Any, *other: Any) -> Any:
            if _from_numba():
                return original(self, *other) if original is not None else NotImplemented
            if other and (result := _reflected(fake, self, other[0], dunder)) is not NotImplemented:
                return result
            raise TypeError(
                f"{words.format(kind='operand' if other else 'unary operand')} (Python's words on a GPU: numba-cuda's "
                f"device arrays have no arithmetic and no ordering). Do it in a kernel, on the host after "
                f"`d.copy_to_host()`, or, in gpu mode, with CuPy (`cupy.asarray(d) {symbol} ...`, no copy)."
            )

        return refuse

    for dunder, symbol in _OPERATORS.items():
        setattr(
            fake, dunder, refusing(dunder, symbol, f"unsupported {{kind}} type(s) for {symbol}: a Numba device array")
        )
    for dunder, symbol in _ORDERING.items():
        setattr(fake, dunder, refusing(dunder, symbol, f"'{symbol}' not supported for a Numba device array"))
    fake.__getattr__ = getattr_

    def squeeze(self: Any, axis: Any = None, stream: Any = 0) -> Any:
        """As numba-cuda's: a device-array view without the size-one axes (the simulator forwarded it to NumPy, so
        ``d.squeeze()`` was a NumPy array here and a device array on a GPU)."""
        return fake(self._ary.squeeze(axis=axis), stream=stream or self.stream)

    fake.squeeze = squeeze
    # object's == and != as numba-cuda's class: the same array, or the other operand's turn (NumPy's compares
    # elementwise after __array__), else Python compares identities (`d == 1` is False)
    fake.__eq__ = object.__eq__
    fake.__ne__ = object.__ne__
    fake.__hash__ = object.__hash__

    inner: Any = da.FakeWithinKernelCUDAArray
    wrap = inner._FakeWithinKernelCUDAArray__wrap_if_fake

    def within_getattr(self: Any, name: str) -> Any:
        """In a kernel: the attribute of the array (NumPy's, as before), else a record's field."""
        item = self.__dict__["_item"]
        try:
            value = object.__getattribute__(item, name)
        except AttributeError:
            value = getattr(item._ary, name, None)
        if value is not None:
            return wrap(self, value)
        return wrap(self, item.__getitem__(name))

    inner.__getattr__ = within_getattr

    # cuda.mapped_array: the simulator's gives its device array class, a GPU a NumPy array (MappedNDArray)
    from numba import cuda
    from numba.cuda import simulator as sim

    orig_mapped = da.mapped_array
    mapped = _mapped_class(fake, forward)

    def mapped_array(*args: Any, **kwargs: Any) -> Any:
        out = orig_mapped(*args, **kwargs)
        return mapped(out._ary, out.stream)

    modules: tuple[Any, ...] = (cuda, sim, da)
    for module in modules:
        if getattr(module, "mapped_array", None) is orig_mapped:  # in gpu mode (trace), numba.cuda's own stays
            module.mapped_array = mapped_array
    fake._gpulab_strict = True
