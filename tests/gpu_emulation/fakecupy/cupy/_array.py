"""The emulated ``cupy.ndarray``: NumPy memory behind CuPy's rules (tests only, never shipped).

Each rule cites where CuPy 14 does the same (paths in github.com/cupy/cupy):

* not a ``numpy.ndarray`` subclass, ``type(a).__module__ == "cupy"`` (``cupy/__init__.py``: ``from cupy._core.core
  import ndarray``; ``ndarray.__module__`` is ``"cupy"``);
* ``__array__`` raises TypeError (``cupy/_core/core.pyx``, ``_ndarray_base.__array__``: "Implicit conversion to a
  NumPy array is not allowed. Please use `.get()` to construct a NumPy array explicitly.");
* operands that are ``numpy.ndarray`` are refused by every elementwise operation and ufunc
  (``cupy/_core/_kernel.pyx``, ``_preprocess_arg``: "Unsupported type <class 'numpy.ndarray'>"); Python and NumPy
  scalars are accepted (``_scalar.scalar_to_numpy_scalar``);
* basic-index assignment (ints, slices, ``...``, None) of anything but a CuPy array goes through ``fill``: a
  NumPy array or a list of more than a 0-d value raises ValueError ("non-scalar numpy.ndarray cannot be used for
  fill": ``_routines_indexing.pyx`` ``_scatter_op`` refuses CPU arrays and calls ``core.pyx`` ``fill``, which runs
  ``numpy.asarray(value)``); advanced-index assignment (integer/bool arrays, lists) copies a NumPy or list value to
  the device (``_scatter_op_single``, ``_scatter_op_mask_single``: ``core.array(value, dtype=a.dtype)``);
* indexing and reductions return 0-d arrays, never NumPy scalars (``core.pyx`` ``__getitem__``, ``_reduction.pyx``);
  a basic index that picks one element returns a 0-d VIEW (``_ndarray_getitem`` -> ``_view_getitem``), an advanced
  one a new array;
* comparisons (``<``, ``==``, ``numpy.less``, ...) turn a 0-d ``numpy.ndarray`` into its Python scalar
  (``core.pyx`` ``__richcmp__`` and ``__array_ufunc__``); arithmetic with one is refused;
* methods have CuPy's signatures: ``item()`` takes no index, ``sum``/``max``/``min``/... take no ``where=`` or
  ``initial=`` (``core.pyx`` ``cpdef`` methods);
* NumPy's ufuncs and functions called on these arrays dispatch to CuPy (``core.pyx`` ``__array_ufunc__``,
  ``__array_function__``; a NumPy function CuPy lacks returns NotImplemented, so NumPy raises TypeError).

The conversions these rules go through (``wrap``, ``unwrap``, ``is_basic_index``, ``fill_scalar``, ...) are in
``_convert.py``; the operators' (``+``, ``<``, ``+=``, ...) in ``_operators.py``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ._convert import check_shape, device_array, fill_scalar, is_basic_index, unsupported, unwrap, wrap
from ._operators import binary, inplace

IMPLICIT = (
    "Implicit conversion to a NumPy array is not allowed. Please use `.get()` to construct a NumPy array explicitly."
)


# Reads of device memory by the host (``get``, ``item``, ``float()``, ``bool()``, ...): each is a wait for the GPU on
# a real one (CuPy copies device to host on the current stream and synchronises). Tests count them: ``_reads[0]``.
_reads = [0]


def _read() -> None:
    _reads[0] += 1


class NotEmulated(NotImplementedError):
    """A CuPy feature the emulation cannot run (CUDA C source, ...): reported as NOT EMULATED, never as passed."""


UFUNC_COMPARISONS = {"greater", "greater_equal", "less", "less_equal", "equal", "not_equal"}


class ndarray:  # noqa: N801 - CuPy's name
    """A CuPy array emulated on NumPy memory (``self._a``)."""

    __slots__ = ("_a",)
    __array_priority__ = 100

    def __init__(self, shape: Any, dtype: Any = float, memptr: Any = None, strides: Any = None, order: str = "C"):
        if memptr is not None or strides is not None:
            raise NotEmulated("cupy.ndarray(shape, memptr=..., strides=...) over raw device memory is not emulated")
        self._a = np.empty(check_shape(shape), dtype, order=order)

    # --- what a host program may read -------------------------------------------------------------------------
    shape = property(lambda s: s._a.shape)
    dtype = property(lambda s: s._a.dtype)
    size = property(lambda s: s._a.size)
    ndim = property(lambda s: s._a.ndim)
    strides = property(lambda s: s._a.strides)
    itemsize = property(lambda s: s._a.itemsize)
    nbytes = property(lambda s: s._a.nbytes)
    flags = property(lambda s: s._a.flags)
    T = property(lambda s: wrap(s._a.T))
    mT = property(lambda s: wrap(np.swapaxes(s._a, -1, -2)))
    real = property(lambda s: wrap(s._a.real))
    imag = property(lambda s: wrap(s._a.imag))

    @shape.setter
    def shape(self, value: Any) -> None:
        self._a.shape = value

    @property
    def base(self) -> Any:
        return None if self._a.base is None else wrap(self._a.base)

    @property
    def device(self) -> Any:
        from .cuda import Device

        return Device(0)

    @property
    def data(self) -> Any:
        from .cuda import MemoryPointer

        return MemoryPointer(self._a)

    @property
    def __cuda_array_interface__(self) -> dict:
        a = self._a
        return {
            "shape": a.shape,
            "typestr": a.dtype.str,
            "descr": a.dtype.descr,
            "data": (a.__array_interface__["data"][0], False),
            "strides": None if a.flags.c_contiguous else a.strides,
            "version": 3,
            "stream": 1,
        }

    # --- to the host: only explicitly -------------------------------------------------------------------------
    def __array__(self, *args: Any, **kwargs: Any) -> Any:
        raise TypeError(IMPLICIT)

    def get(self, stream: Any = None, order: str = "C", out: Any = None, blocking: bool = True) -> np.ndarray:
        _read()
        if out is not None:
            if not isinstance(out, np.ndarray):
                raise TypeError("Only numpy.ndarray can be obtained from cupy.ndarray")
            np.copyto(out, self._a)
            return out
        return np.array(self._a, order=order if order in "CF" else "C", copy=True)

    def set(self, arr: Any, stream: Any = None) -> None:
        if not isinstance(arr, np.ndarray):
            raise TypeError(f"Only numpy.ndarray can be set to cupy.ndarray: {type(arr)}")
        if arr.shape != self._a.shape:
            raise ValueError(f"Shape mismatch. Old shape: {self._a.shape}, new shape: {arr.shape}")
        if arr.dtype != self._a.dtype:
            raise TypeError(f"{arr.dtype} array cannot be set to {self._a.dtype} array")
        self._a[...] = arr

    def tolist(self) -> Any:
        _read()
        return self._a.tolist()

    def item(self) -> Any:  # core.pyx: cpdef item(self), no index argument
        _read()
        if self._a.size != 1:
            raise ValueError("can only convert an array of size 1 to a Python scalar")
        return self._a.item()

    # Reductions with CuPy's signatures (core.pyx cpdef methods): no where=, no initial=.
    def sum(self, axis: Any = None, dtype: Any = None, out: Any = None, keepdims: bool = False) -> Any:
        return _reduce(np.sum, self, out, axis=axis, dtype=dtype, keepdims=keepdims)

    def prod(self, axis: Any = None, dtype: Any = None, out: Any = None, keepdims: Any = None) -> Any:
        return _reduce(np.prod, self, out, axis=axis, dtype=dtype, keepdims=bool(keepdims))

    def mean(self, axis: Any = None, dtype: Any = None, out: Any = None, keepdims: bool = False) -> Any:
        return _reduce(np.mean, self, out, axis=axis, dtype=dtype, keepdims=keepdims)

    def var(self, axis: Any = None, dtype: Any = None, out: Any = None, ddof: int = 0, keepdims: bool = False):
        return _reduce(np.var, self, out, axis=axis, dtype=dtype, ddof=ddof, keepdims=keepdims)

    def std(self, axis: Any = None, dtype: Any = None, out: Any = None, ddof: int = 0, keepdims: bool = False):
        return _reduce(np.std, self, out, axis=axis, dtype=dtype, ddof=ddof, keepdims=keepdims)

    def max(self, axis: Any = None, out: Any = None, keepdims: bool = False) -> Any:
        return _reduce(np.max, self, out, axis=axis, keepdims=keepdims)

    def min(self, axis: Any = None, out: Any = None, keepdims: bool = False) -> Any:
        return _reduce(np.min, self, out, axis=axis, keepdims=keepdims)

    def ptp(self, axis: Any = None, out: Any = None, keepdims: bool = False) -> Any:
        return _reduce(np.ptp, self, out, axis=axis, keepdims=keepdims)

    def argmax(self, axis: Any = None, out: Any = None, dtype: Any = None, keepdims: bool = False) -> Any:
        res = _reduce(np.argmax, self, out, axis=axis, keepdims=keepdims)
        return res if dtype is None else res.astype(dtype)

    def argmin(self, axis: Any = None, out: Any = None, dtype: Any = None, keepdims: bool = False) -> Any:
        res = _reduce(np.argmin, self, out, axis=axis, keepdims=keepdims)
        return res if dtype is None else res.astype(dtype)

    def tobytes(self, order: str = "C") -> bytes:
        return self._a.tobytes(order)

    def __float__(self) -> float:
        _read()
        return float(self._a)

    def __int__(self) -> int:
        _read()
        return int(self._a)

    def __complex__(self) -> complex:
        _read()
        return complex(self._a)

    def __bool__(self) -> bool:
        _read()
        return bool(self._a)

    def __len__(self) -> int:
        return len(self._a)

    def __iter__(self) -> Any:
        if self._a.ndim == 0:
            raise TypeError("iteration over a 0-d array")
        return (self[i] for i in range(len(self._a)))

    def __repr__(self) -> str:
        return repr(self._a).replace("array(", "array(", 1)

    def __str__(self) -> str:
        return str(self._a)

    def __format__(self, spec: str) -> str:  # core.pyx: formats the host copy
        return format(self._a.item() if self._a.ndim == 0 else self._a, spec)

    __hash__ = None  # type: ignore[assignment]

    # --- indexing ----------------------------------------------------------------------------------------------
    def __getitem__(self, key: Any) -> Any:
        k = unwrap(key, strict=False)
        if not is_basic_index(key):
            return wrap(np.array(self._a[k], copy=True))  # advanced indexing: a new array
        res = self._a[k]
        if not isinstance(res, np.ndarray):  # every axis picked by an int: CuPy's _view_getitem gives a 0-d view
            res = self._a[(*(k if isinstance(k, tuple) else (k,)), Ellipsis)]
        return wrap(res)

    def __setitem__(self, key: Any, value: Any) -> None:
        k = unwrap(key, strict=False)
        if not is_basic_index(key):  # _scatter_op_single / _scatter_op_mask_single: core.array(value, dtype=a.dtype)
            src = device_array(value)
            self._a[k] = np.asarray(unwrap(value, strict=False) if src is None else src, dtype=self._a.dtype)
            return
        src = device_array(value)  # _scatter_op: _convert_from_cupy_like, else fill (refuses CPU arrays, gh-2079)
        self._a[k] = fill_scalar(value, self._a.dtype) if src is None else src

    # --- operators (elementwise kernels: numpy.ndarray operands refused) ---------------------------------------
    __add__, __radd__ = binary("add"), binary("add", reflected=True)
    __sub__, __rsub__ = binary("sub"), binary("sub", reflected=True)
    __mul__, __rmul__ = binary("mul"), binary("mul", reflected=True)
    __truediv__, __rtruediv__ = binary("truediv"), binary("truediv", reflected=True)
    __floordiv__, __rfloordiv__ = binary("floordiv"), binary("floordiv", reflected=True)
    __mod__, __rmod__ = binary("mod"), binary("mod", reflected=True)
    __pow__, __rpow__ = binary("pow"), binary("pow", reflected=True)

    def __matmul__(self, other: Any) -> Any:
        from ._functions import _matmul

        return _matmul(self, other)

    def __rmatmul__(self, other: Any) -> Any:
        from ._functions import _matmul

        return _matmul(other, self)

    __and__, __rand__ = binary("and_"), binary("and_", reflected=True)
    __or__, __ror__ = binary("or_"), binary("or_", reflected=True)
    __xor__, __rxor__ = binary("xor"), binary("xor", reflected=True)
    __lshift__, __rlshift__ = binary("lshift"), binary("lshift", reflected=True)
    __rshift__, __rrshift__ = binary("rshift"), binary("rshift", reflected=True)
    __lt__, __le__, __gt__, __ge__ = binary("lt"), binary("le"), binary("gt"), binary("ge")
    __eq__, __ne__ = binary("eq"), binary("ne")  # type: ignore[assignment]
    __iadd__, __isub__, __imul__ = inplace("iadd"), inplace("isub"), inplace("imul")
    __itruediv__, __ifloordiv__, __imod__ = inplace("itruediv"), inplace("ifloordiv"), inplace("imod")
    __ipow__, __iand__, __ior__, __ixor__ = inplace("ipow"), inplace("iand"), inplace("ior"), inplace("ixor")

    def __divmod__(self, other: Any) -> Any:
        return (self // other, self % other)

    def __neg__(self) -> Any:
        return wrap(-self._a)

    def __pos__(self) -> Any:
        return wrap(+self._a)

    def __abs__(self) -> Any:
        return wrap(abs(self._a))

    def __invert__(self) -> Any:
        return wrap(~self._a)

    def __copy__(self) -> Any:
        return wrap(self._a.copy())

    def __deepcopy__(self, memo: Any) -> Any:
        return wrap(self._a.copy())

    def __reduce__(self) -> Any:  # pickling goes through the host (cupy: core.pyx __reduce__ uses get())
        from . import array

        return (array, (self._a.copy(),))

    # --- NumPy's protocols: dispatch to the emulated CuPy ------------------------------------------------------
    def __array_ufunc__(self, ufunc: Any, method: str, *inputs: Any, **kwargs: Any) -> Any:
        from . import _functions

        cupy_ufunc = _functions.lookup("cupy", ufunc.__name__)
        if cupy_ufunc is None:
            return NotImplemented
        if method == "__call__":
            if ufunc.__name__ in UFUNC_COMPARISONS:  # core.pyx __array_ufunc__: workaround for numpy/numpy#12142
                inputs = tuple(x.item() if isinstance(x, np.ndarray) and x.ndim == 0 else x for x in inputs)
            return cupy_ufunc(*inputs, **kwargs)
        if method in ("reduce", "accumulate", "reduceat", "outer", "at"):
            return _functions.call_numpy(getattr(ufunc, method), inputs, kwargs)
        return NotImplemented

    def __array_function__(self, func: Any, types: Any, args: Any, kwargs: Any) -> Any:
        from . import _functions

        module = (func.__module__ or "numpy").split(".")
        cupy_func = _functions.lookup(".".join(["cupy", *module[1:]]), func.__name__)
        if cupy_func is None:
            return NotImplemented
        return cupy_func(*args, **kwargs)

    # --- methods: those CuPy's ndarray has, run by NumPy -------------------------------------------------------
    def __getattr__(self, name: str) -> Any:
        from . import _functions

        if name.startswith("_") or name not in _functions.NAMES["cupy.ndarray"]:
            raise AttributeError(f"'cupy.ndarray' object has no attribute '{name}'")
        if name in ("mdspan", "cstruct", "reduced_view", "scatter_add", "scatter_max", "scatter_min", "flat"):
            raise NotEmulated(f"cupy.ndarray.{name} is not emulated")
        method = getattr(self._a, name)

        def call(*args: Any, **kwargs: Any) -> Any:
            if name == "reshape":
                check_shape(args[0] if len(args) == 1 else args)
            return _functions.call_numpy(method, args, kwargs)

        return call

    def fill(self, value: Any) -> None:
        src = device_array(value)
        self._a.fill(fill_scalar(value if src is None or isinstance(value, ndarray) else wrap(src), self._a.dtype))

    def view(self, dtype: Any = None, *args: Any) -> Any:
        if dtype is None:
            return wrap(self._a.view())
        if isinstance(dtype, type) and issubclass(dtype, np.ndarray):
            raise TypeError("cupy.ndarray.view(type) with a NumPy type is not supported")
        return wrap(self._a.view(dtype))

    def astype(self, dtype: Any, order: str = "K", casting: Any = None, subok: Any = None, copy: bool = True):
        return wrap(self._a.astype(dtype, order=order, copy=copy))

    def copy(self, order: str = "C") -> Any:
        return wrap(self._a.copy(order=order))

    def dot(self, b: Any, out: Any = None) -> Any:  # core.pyx l. 2080: def dot(self, _ndarray_base b, ...)
        from ._functions import call_numpy
        from ._strict import _typed_error

        for arg, x in (("b", b), ("out", out)):
            if x is not None and not isinstance(x, ndarray):
                raise _typed_error(arg, x)
        return call_numpy(np.dot, (self, b), {} if out is None else {"out": out})

    def clip(self, min: Any = None, max: Any = None, out: Any = None) -> Any:  # noqa: A002 - CuPy's names
        """core.pyx l. 1356 -> _routines_math.pyx l. 139-151: None is the dtype's bound, then the ufunc ``_clip``
        (a list or a NumPy array bound: TypeError)."""
        from ._functions import call_numpy

        kind = self._a.dtype.kind
        if min is None and kind in "fiu":
            min = self._a.dtype.type("-inf") if kind == "f" else np.iinfo(self._a.dtype).min  # noqa: A001
        if max is None and kind in "fiu":
            max = self._a.dtype.type("inf") if kind == "f" else np.iinfo(self._a.dtype).max  # noqa: A001
        for v in (min, max):
            if isinstance(v, (np.ndarray, list, tuple)):
                raise unsupported(v)
        return call_numpy(np.clip, (self, min, max), {} if out is None else {"out": out})

    def toDlpack(self) -> Any:  # noqa: N802 - CuPy's name
        raise NotEmulated("cupy.ndarray.toDlpack (DLPack capsules) is not emulated")

    def __dlpack__(self, *args: Any, **kwargs: Any) -> Any:
        raise NotEmulated("cupy.ndarray.__dlpack__ is not emulated")

    def __dlpack_device__(self) -> tuple[int, int]:
        return (2, 0)  # kDLCUDA, device 0


def _reduce(fn: Any, a: ndarray, out: Any, **kwargs: Any) -> Any:
    from ._functions import call_numpy

    return call_numpy(fn, (a,), kwargs if out is None else dict(kwargs, out=out))


ndarray.__module__ = "cupy"
ndarray.__qualname__ = ndarray.__name__ = "ndarray"
