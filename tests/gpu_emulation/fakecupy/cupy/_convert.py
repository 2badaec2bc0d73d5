"""How values cross between NumPy and the emulated ``cupy.ndarray`` (tests only, never shipped).

Every emulated operation goes through these conversions, each as CuPy 14 does it (paths in github.com/cupy/cupy):

* ``wrap``: NumPy results as CuPy returns them, arrays and NumPy scalars as (0-d) ``cupy.ndarray``;
* ``unwrap`` and ``unsupported``: the NumPy memory behind CuPy arguments, a ``numpy.ndarray`` refused as
  ``_kernel.pyx`` ``_preprocess_arg`` refuses it;
* ``device_array``: what CuPy takes as device memory (its arrays, Numba's device arrays);
* ``is_basic_index`` and ``fill_scalar``: which index assignments go through ``fill``, and what ``fill`` takes;
* ``check_shape``: a shape is ints, never a CuPy array.

The array and the rules of its methods are in ``_array.py``, which imports this module first: the functions here
look the class up when they run.
"""

from __future__ import annotations

from typing import Any

import numpy as np


def unsupported(obj: Any) -> TypeError:
    return TypeError(f"Unsupported type {type(obj)}")  # cupy/_core/_kernel.pyx _preprocess_arg


def wrap(a: Any) -> Any:
    """NumPy results as CuPy returns them: arrays and NumPy scalars become (0-d) ``cupy.ndarray``."""
    from ._array import ndarray

    if isinstance(a, np.ndarray):
        out = object.__new__(ndarray)
        out._a = a
        return out
    if isinstance(a, np.generic) and not isinstance(a, (np.str_, np.bytes_, np.void)):
        return wrap(np.array(a))
    if isinstance(a, tuple):
        return tuple(wrap(x) for x in a)
    if isinstance(a, list):
        return [wrap(x) for x in a]
    return a


def unwrap(x: Any, *, strict: bool = True) -> Any:
    """The NumPy memory behind CuPy arguments; a ``numpy.ndarray`` is refused as CuPy refuses it."""
    from ._array import ndarray

    if isinstance(x, ndarray):
        return x._a
    if isinstance(x, np.ndarray):
        if strict:
            raise unsupported(x)
        return x
    if isinstance(x, (list, tuple)):
        return type(x)(unwrap(v, strict=strict) for v in x)
    return x


def device_array(x: Any) -> Any:
    """The NumPy memory behind a CuPy array or a Numba device array (CuPy views both), else None."""
    from ._array import ndarray

    if isinstance(x, ndarray):
        return x._a
    if any(c.__name__ == "FakeCUDAArray" for c in type(x).__mro__):
        return x._ary
    return None


def is_basic_index(key: Any) -> bool:
    """``_routines_indexing.pyx`` ``_prepare_slice_list``: None, ``...``, slices and non-bool scalar ints stay basic;
    anything else (lists, tuples, NumPy or CuPy arrays of any shape, bools) becomes an index array."""
    from ._array import ndarray

    for s in key if isinstance(key, tuple) else (key,):
        if s is None or s is Ellipsis or isinstance(s, slice):
            continue
        if isinstance(s, (ndarray, list, tuple, np.ndarray)):
            return False
        if np.isscalar(s) and not isinstance(s, (bool, np.bool_)):
            continue
        return False
    return True


def fill_scalar(value: Any, dtype: Any) -> Any:
    """``core.pyx`` ``fill``: a CuPy array must be 0-d; anything else goes through ``numpy.asarray`` and must be 0-d
    (a list of values too)."""
    from ._array import ndarray

    if isinstance(value, ndarray):
        if value.shape != ():
            raise ValueError("non-scalar cupy.ndarray cannot be used for fill")
        return value._a.astype(dtype)
    v = np.asarray(value, dtype=dtype)
    if v.shape != ():
        raise ValueError("non-scalar numpy.ndarray cannot be used for fill")
    return v[()]


def check_shape(shape: Any) -> Any:
    """``_core/internal.pyx`` ``get_size``: a shape is ints; a CuPy array (0-d or not) in it raises TypeError (CuPy's
    ndarray has no ``__index__``)."""
    from ._array import ndarray

    for s in shape if isinstance(shape, (tuple, list)) else (shape,):
        if isinstance(s, ndarray):
            raise TypeError("'cupy.ndarray' object cannot be interpreted as an integer")
    return shape
