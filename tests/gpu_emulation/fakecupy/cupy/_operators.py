"""The emulated ``cupy.ndarray``'s operators (``+``, ``<``, ``+=``, ...) and CuPy's operand rules (tests only).

``cupy/_core/core.pyx`` runs each operator as an elementwise kernel: a ``numpy.ndarray`` operand is refused
(``_kernel.pyx`` ``_preprocess_arg``: "Unsupported type <class 'numpy.ndarray'>"), Python and NumPy scalars are
taken; a comparison first turns a 0-d ``numpy.ndarray`` into its Python scalar (``__richcmp__``); a list or a tuple
gives NotImplemented. ``_array.py``'s ``ndarray`` builds its operator methods with :func:`binary` and :func:`inplace`.
"""

from __future__ import annotations

import operator
from typing import TYPE_CHECKING, Any

import numpy as np

from ._convert import unsupported, unwrap, wrap

if TYPE_CHECKING:
    from ._array import ndarray

COMPARISONS = {"lt", "le", "gt", "ge", "eq", "ne"}


def binary(name: str, *, reflected: bool = False) -> Any:
    op = getattr(operator, name)

    def method(self: ndarray, other: Any) -> Any:
        if name in COMPARISONS and isinstance(other, np.ndarray) and other.ndim == 0:
            other = other.item()  # core.pyx __richcmp__: "Workaround for numpy<1.13"
        if isinstance(other, np.ndarray):
            raise unsupported(other)
        if isinstance(other, (list, tuple)):
            return NotImplemented
        o = unwrap(other)
        return wrap(op(o, self._a) if reflected else op(self._a, o))

    return method


def inplace(name: str) -> Any:
    op = getattr(operator, name)

    def method(self: ndarray, other: Any) -> Any:
        if isinstance(other, np.ndarray):
            raise unsupported(other)
        op(self._a, unwrap(other))
        return self

    return method
