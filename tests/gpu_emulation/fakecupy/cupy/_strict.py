"""CuPy's functions whose code decides what a non-CuPy argument does (tests only, never shipped).

The generic path (``_functions._from_numpy``) refuses a ``numpy.ndarray`` and hands scalars and lists to NumPy.
These functions do instead what CuPy v14.2.0's own code does with them (paths in github.com/cupy/cupy):

* a Cython function typed ``_ndarray_base a`` takes CuPy arrays only (TypeError for a NumPy array, a NumPy or
  Python scalar, a list);
* ``_util.check_array(a)`` (``_util.pyx`` l. 189-198) raises TypeError for anything but a CuPy array;
* a function whose body is ``return a.method(...)`` runs the argument's own method: a Python scalar or a list has
  none (AttributeError), a NumPy array or scalar runs NumPy's (the result is NumPy's, as in CuPy);
* ``cupy.asarray`` first (``atleast_*d``, ``hstack``, ``vstack``, ``dstack``): NumPy arrays, scalars and lists are
  copied to the device, so they are taken.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ._array import ndarray
from ._convert import unsupported, unwrap, wrap


def _typed_error(arg: str, x: Any) -> TypeError:
    """Cython's TypeError for an argument typed ``_ndarray_base``."""
    expected = "cupy._core.core._ndarray_base"
    return TypeError(f"Argument '{arg}' has incorrect type (expected {expected}, got {type(x).__name__})")


def _typed(name: str, arg: str = "a") -> Any:
    """``cupy.NAME(a, ...)`` that calls a Cython function typed ``_ndarray_base a``: ``_manipulation/dims.py`` l. 150
    (expand_dims -> ``_expand_dims``), l. 131 (broadcast_to), ``transpose.py`` l. 21 (rollaxis), l. 65-66
    (moveaxis)."""
    fn = getattr(np, name)

    def function(a: Any, *args: Any, **kwargs: Any) -> Any:
        from ._functions import call_numpy

        if not isinstance(a, ndarray):
            raise _typed_error(arg, a)
        return call_numpy(fn, (a, *args), kwargs)

    function.__name__ = function.__qualname__ = name
    return function


def _checked(name: str) -> Any:
    """``_util.check_array(a, arg_name='a')`` first: ``_logic/truth.py`` l. 50 (all), l. 87 (any),
    ``_sorting/search.py`` l. 141 (nonzero), l. 163 (flatnonzero)."""
    fn = getattr(np, name)

    def function(a: Any, *args: Any, **kwargs: Any) -> Any:
        from ._functions import call_numpy

        if not isinstance(a, ndarray):
            raise TypeError(f"'a' must be a cupy.ndarray object, not {type(a)}.")
        return call_numpy(fn, (a, *args), kwargs)

    function.__name__ = function.__qualname__ = name
    return function


# Bodies copied from CuPy: ``return a.method(...)`` (file and line of each return).
def take(a: Any, indices: Any, axis: Any = None, out: Any = None) -> Any:
    return a.take(indices, axis, out)  # _indexing/indexing.py l. 30


def clip(a: Any, a_min: Any, a_max: Any, out: Any = None) -> Any:
    return a.clip(a_min, a_max, out=out)  # _math/misc.py l. 178


def reshape(a: Any, newshape: Any, order: str = "C", *, copy: Any = None) -> Any:
    # _manipulation/shape.py l. 61 passes copy=copy; here only when given: NumPy < 2.1's reshape has no copy=
    return a.reshape(newshape, order=order, **({} if copy is None else {"copy": copy}))


def ravel(a: Any, order: str = "C") -> Any:
    return a.ravel(order)  # _manipulation/shape.py l. 95


def transpose(a: Any, axes: Any = None) -> Any:
    return a.transpose(axes)  # _manipulation/transpose.py l. 84


def swapaxes(a: Any, axis1: int, axis2: int) -> Any:
    return a.swapaxes(axis1, axis2)  # _manipulation/transpose.py l. 39


def squeeze(a: Any, axis: Any = None) -> Any:
    return a.squeeze(axis)  # _manipulation/dims.py l. 169


def repeat(a: Any, repeats: Any, axis: Any = None) -> Any:
    return a.repeat(repeats, axis)  # _manipulation/tiling.py l. 73


def argsort(a: Any, axis: int = -1, kind: Any = None) -> Any:
    return a.argsort(axis=axis, kind=kind)  # _sorting/sort.py l. 114


def dot(a: Any, b: Any, out: Any = None) -> Any:
    return a.dot(b, out)  # linalg/_product.py l. 100


def where(condition: Any, x: Any = None, y: Any = None) -> Any:
    """``_sorting/search.py`` l. 175-210: ``condition.astype('?')`` (a Python bool or a list: AttributeError), then the
    ufunc ``_where_ufunc`` (a list or NumPy array operand: TypeError, ``_kernel.pyx`` ``_preprocess_arg``)."""
    from ._functions import call_numpy

    missing = (x is None, y is None).count(True)
    if missing == 1:
        raise ValueError("Must provide both 'x' and 'y' or neither.")
    if missing == 2:
        return _checked("nonzero")(condition)  # l. 205: nonzero(condition) -> check_array
    c = condition.astype("?", copy=False)
    for v in (c, x, y):
        if isinstance(v, (np.ndarray, list, tuple)):
            raise unsupported(v)
    return call_numpy(np.where, (c, x, y), {})


def _asarrays(name: str) -> Any:
    """``cupy.asarray`` of each element first: ``_manipulation/dims.py`` l. 25 (``atleast_1d``/``2d``/``3d``),
    ``join.py`` l. 104 (hstack), l. 133 (vstack), l. 80 (dstack): a NumPy array, a scalar or a list is taken."""
    fn = getattr(np, name)

    def function(*args: Any, **kwargs: Any) -> Any:
        from ._functions import _asarray, call_numpy

        if name.startswith("atleast"):
            return call_numpy(fn, [_asarray(a) for a in args], kwargs)
        tup, *rest = args
        return call_numpy(fn, ([_asarray(a) for a in tup], *rest), kwargs)

    function.__name__ = function.__qualname__ = name
    return function


def _concatenate_method(tup: Any) -> None:
    """``_core/_routines_manipulation.pyx`` ``concatenate_method`` l. 663-678: ``_preprocess_args`` (a NumPy array or
    a list: "Unsupported type", ``_scalar.pyx`` l. 344), then "Only cupy arrays can be concatenated" (a scalar), then
    0-d arrays are refused (TypeError)."""
    if len(tup) == 0:
        raise ValueError("Cannot concatenate from empty tuple")
    for o in tup:
        if not isinstance(o, ndarray) and not (type(o) in (bool, int, float, complex) or isinstance(o, np.generic)):
            raise unsupported(o)
    for o in tup:
        if not isinstance(o, ndarray):
            raise TypeError("Only cupy arrays can be concatenated")
    for o in tup:
        if o.ndim == 0:
            raise TypeError("zero-dimensional arrays cannot be concatenated")


def concatenate(tup: Any, axis: Any = 0, out: Any = None, *, dtype: Any = None, casting: str = "same_kind") -> Any:
    """``_manipulation/join.py`` l. 61-64: ``m.ravel()`` of each when ``axis`` is None, then ``concatenate_method``."""
    from ._functions import call_numpy

    if axis is None:
        tup = [m.ravel() for m in tup]
        axis = 0
    tup = list(tup)
    _concatenate_method(tup)
    kw = {"axis": axis, "dtype": dtype, "casting": casting}
    return call_numpy(np.concatenate, (tup,), kw if out is None else dict(kw, out=out))


def stack(tup: Any, axis: int = 0, out: Any = None, *, dtype: Any = None, casting: str = "same_kind") -> Any:
    """``_manipulation/join.py`` l. 165: ``concatenate([cupy.expand_dims(x, axis) for x in tup], ...)``; dims.py
    l. 150 ``_expand_dims(_ndarray_base a, ...)`` takes CuPy arrays only."""
    expand_dims = _typed("expand_dims")
    return concatenate([expand_dims(x, axis) for x in tup], axis, out, dtype=dtype, casting=casting)


def column_stack(tup: Any) -> Any:
    from ._functions import call_numpy

    if any(not isinstance(a, ndarray) for a in tup):  # _manipulation/join.py l. 24-25
        raise TypeError("Only cupy arrays can be column stacked")
    return call_numpy(np.column_stack, (list(tup),), {})


def _like(name: str) -> Any:
    """``_creation/basic.py`` empty_like/zeros_like/ones_like/full_like: ``a.dtype`` (l. 103, 223, 290, 368) and
    ``a.flags`` (l. 57) of the prototype: a NumPy array or scalar works, a list or a Python scalar raises
    AttributeError; ``full_like`` fills with ``cupy.copyto(casting='unsafe')``."""
    fn = getattr(np, "empty_like" if name == "full_like" else name)

    def function(a: Any, *args: Any, **kwargs: Any) -> Any:
        from ._functions import _copyto, call_numpy

        if name == "full_like":
            fill_value, *args = args if args else (kwargs.pop("fill_value"),)
        dtype = args[0] if args else kwargs.get("dtype")
        a.dtype if dtype is None else a.flags  # noqa: B018 - CuPy reads them: a list raises AttributeError here
        out = call_numpy(fn, (unwrap(a, strict=False), *args), kwargs, strict=False)
        if name == "full_like":
            _copyto(out, fill_value, casting="unsafe")
        return out

    function.__name__ = function.__qualname__ = name
    return function


def shares_memory(a: Any, b: Any, max_work: Any = None) -> bool:
    """``_misc/memory_ranges.py`` l. 32-47: ``a.size``/``x.dtype`` are read (a list: AttributeError), then an
    elementwise kernel runs on each (a NumPy array: TypeError); ``MAY_SHARE_BOUNDS`` is typed ``_ndarray_base``."""
    if a is b and a.size != 0:
        return True
    if max_work == "MAY_SHARE_BOUNDS":
        for arg, x in (("a", a), ("b", b)):
            if not isinstance(x, ndarray):
                raise _typed_error(arg, x)
        return bool(np.may_share_memory(a._a, b._a))
    if max_work in (None, "MAY_SHARE_EXACT"):
        for x in (a, b):
            x.dtype  # noqa: B018 - l. 24: x.dtype.kind
            if isinstance(x, np.ndarray):
                raise unsupported(x)
        return bool(np.shares_memory(unwrap(a), unwrap(b)))
    raise NotImplementedError("Not supported for integer `max_work`.")


def as_strided(x: Any, shape: Any = None, strides: Any = None) -> Any:
    """``lib/stride_tricks.py`` l. 38-42: ``x.shape``, ``x.dtype`` (a list: AttributeError), then
    ``cupy.ndarray(..., memptr=x.data)``: a NumPy array's ``data`` is a memoryview, not a MemoryPointer (TypeError)."""
    shape = x.shape if shape is None else tuple(shape)
    strides = x.strides if strides is None else tuple(strides)
    x.dtype  # noqa: B018
    if not isinstance(x, ndarray):
        raise TypeError(f"Cannot convert {type(x.data).__name__} to cupy.cuda.memory.MemoryPointer")
    return wrap(np.lib.stride_tricks.as_strided(x._a, shape=shape, strides=strides))


CUPY = {
    **{n: _typed(n) for n in ("expand_dims", "moveaxis", "rollaxis")},
    "broadcast_to": _typed("broadcast_to", "array"),
    **{n: _checked(n) for n in ("all", "any", "nonzero", "flatnonzero")},
    **{f.__name__: f for f in (take, clip, reshape, ravel, transpose, swapaxes, squeeze, repeat, argsort, dot)},
    **{n: _asarrays(n) for n in ("atleast_1d", "atleast_2d", "atleast_3d", "hstack", "vstack", "dstack")},
    **{n: _like(n) for n in ("empty_like", "zeros_like", "ones_like", "full_like")},
    "where": where,
    "concatenate": concatenate,
    "stack": stack,
    "column_stack": column_stack,
    "shares_memory": shares_memory,
}
STRIDE_TRICKS = {"as_strided": as_strided}
