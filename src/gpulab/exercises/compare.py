"""Comparing a kernel's outputs with the spec: tolerances, the float64 reference with the float32
rounding bound (``reduction=``), and the fill values that show elements never written."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any
from collections.abc import Callable

import numpy as np

from .. import runtime

__all__ = [
    "Changed",
    "close",
    "fills",
    "first_change",
    "LAMBDA",
    "float64_reference",
    "probable_bound",
    "reduction_len",
    "rounding_bound",
    "same",
    "unwritten",
]


def rounding_bound(n: int, dtype: Any = np.float32) -> float:
    """gamma_n = n*u / (1 - n*u): |fl(sum of n products) - exact| <= gamma_n * sum |products|.

    ``u`` is the unit roundoff of ``dtype`` (2**-24 for float32). The bound holds for any order of
    summation and with or without fused multiply-add, so it covers a GPU thread's loop, a tree
    reduction and cuBLAS alike (Higham, *Accuracy and Stability of Numerical Algorithms*, 3.1).
    """
    u = float(np.finfo(dtype).eps) / 2
    nu = max(int(n), 1) * u
    if nu >= 1:
        raise ValueError(f"rounding_bound: n={n} is too long for {np.dtype(dtype).name} (n*u >= 1)")
    return nu / (1 - nu)


LAMBDA = 10.0
"""The ``lam`` of :func:`probable_bound` for ``reduction=`` checks (a Problem's ``reduction_lambda`` overrides it)."""


def probable_bound(n: int, dtype: Any = np.float32, lam: float = LAMBDA) -> float:
    """``min(gamma_n, lam * sqrt(n) * u)``: Higham & Mary's probabilistic bound for a sum of n terms.

    Rounding errors that are independent and of mean zero grow like sqrt(n), not n: with ``lam = 10`` the bound
    (to first order in u) fails with probability below n * 2 * exp(-lam**2 / 2), 4e-16 for n = 2**20 (Higham &
    Mary, SIAM J. Sci. Comput. 41(5), 2019, theorem 3.1), while the worst case :func:`rounding_bound` lets a result
    6.7 % off pass at n = 2**20 (a lost update, a dropped block). For n <= lam**2 it is :func:`rounding_bound`
    itself. Same-sign terms summed one after another have rounding errors of one sign (2**20 squares in float32:
    4e-4 relative, 40x the 1e-5 of uniform values): such a check takes a larger ``lam`` (lab06.GRAD_NORM: 20).
    The margins are measured in tests/test_gpu_sizes_tolerances.py.
    """
    gamma = rounding_bound(n, dtype)  # raises for n too long for dtype
    u = float(np.finfo(dtype).eps) / 2
    return min(gamma, float(lam) * math.sqrt(max(int(n), 1)) * u)


def reduction_len(reduction: int | tuple[int, ...] | Callable[..., Any], inputs: tuple, output: int = 0) -> int:
    """The number of terms summed per element of output ``output`` (``reduction=`` given as a number, or a function
    of the inputs returning a number, or a tuple of numbers, one per output: a backward pass's dx, dW and db sum
    different counts)."""
    n = reduction(*inputs) if callable(reduction) else reduction
    if isinstance(n, (tuple, list)):
        return int(n[min(output, len(n) - 1)])
    return int(n)


def float64_reference(
    spec: Callable, ins: tuple, exp: tuple, n_terms: int | tuple[int, ...], atol: float, lam: float = LAMBDA
) -> tuple[tuple, tuple]:
    """Expected outputs computed in float64 (rounded once to the output dtype) and per-element bounds:
    ``atol + probable_bound(n+1, lam) * spec(|inputs|)`` (n terms summed, then one rounding to store; ``n_terms``
    one count for every output or one per output)."""

    def f64(x: Any, absolute: bool) -> Any:
        if isinstance(x, np.ndarray) and np.issubdtype(x.dtype, np.floating):
            x = x.astype(np.float64)
            return np.abs(x) if absolute else x
        return x

    exact = spec(*(f64(x, False) for x in ins))
    scale = spec(*(f64(x, True) for x in ins))
    exact = exact if isinstance(exact, tuple) else (exact,)
    scale = scale if isinstance(scale, tuple) else (scale,)
    out_exp: list[Any] = []
    out_tol: list[Any] = []
    counts = n_terms if isinstance(n_terms, (tuple, list)) else (n_terms,) * len(exp)
    for e, x64, s64, n in zip(exp, exact, scale, counts):
        x64, s64 = np.asarray(x64, np.float64), np.abs(np.asarray(s64, np.float64))
        if not np.issubdtype(e.dtype, np.floating) or x64.shape != e.shape:
            out_exp.append(e)
            out_tol.append(atol)
            continue
        out_exp.append(x64.astype(e.dtype))
        out_tol.append(atol + probable_bound(int(n) + 1, e.dtype, lam) * s64)
    return tuple(out_exp), tuple(out_tol)


def close(got: np.ndarray, exp: np.ndarray, rtol: float, atol: Any) -> np.ndarray:
    """Elementwise: within tolerance for floating outputs (NaN expected and NaN got agree), equal otherwise."""
    if np.issubdtype(exp.dtype, np.floating) or np.issubdtype(exp.dtype, np.complexfloating):
        with np.errstate(invalid="ignore", over="ignore"):
            return np.isclose(got, exp, rtol=rtol, atol=atol, equal_nan=True)
    return np.asarray(got == exp)


def same(a: np.ndarray, b: np.ndarray, rtol: float, atol: Any) -> bool:
    """Same shape and every element :func:`close`."""
    return a.shape == b.shape and bool(np.all(close(a, b, rtol, atol)))


def fills(exp: np.ndarray, out_init: Any) -> tuple[Any, ...]:
    """Two values an output can start filled with (one per run): elements still equal to the fill
    were never written. The first is used for every run, the second to confirm which elements were
    never written (and for bool outputs, which have no spare value, on every run too).

    NaN then the most negative float for floats (two finite values when NaN is an expected value),
    the smallest then the largest integer for integers, False then True for bool. ``out_init``
    (e.g. 0 for ``cuda.atomic.add``) replaces all that: unwritten elements cannot be seen then.
    """
    dt = exp.dtype
    if out_init is not None:
        return (out_init,)
    if dt == np.bool_:
        return (False, True)
    if np.issubdtype(dt, np.floating) or np.issubdtype(dt, np.complexfloating):
        lo, hi = np.finfo(dt).min, np.finfo(dt).max
        return (np.nan, lo) if not np.isnan(exp).any() else (lo, hi)
    if np.issubdtype(dt, np.integer):
        lo, hi = np.iinfo(dt).min, np.iinfo(dt).max
        return (lo, hi) if not np.any(exp == lo) else (hi, lo)
    return (0, 1)


def unwritten(got: Any, fill: Any) -> Any:
    """Elements of ``got`` still equal to ``fill``, by ``got``'s own array module (NumPy, or CuPy for a guard zone
    checked on the GPU)."""
    xp = runtime.array_module(got)
    if isinstance(fill, float) and math.isnan(fill):
        return xp.isnan(got) if np.issubdtype(got.dtype, np.inexact) else xp.zeros(got.shape, bool)
    return xp.asarray(got == fill)


@dataclass(frozen=True)
class Changed:
    """An array that a run changed: its first changed element (``index``, value ``was`` and ``now``) and how many
    elements changed (``count`` of ``size``)."""

    index: tuple[int, ...]
    was: Any
    now: Any
    count: int
    size: int

    def where(self, name: str) -> str:
        """``a[3] was 1.0, is now 3.0`` (and how many more changed)."""
        at = ", ".join(str(i) for i in self.index)
        more = f"; {self.count} of its {self.size} elements changed" if self.count > 1 else ""
        return f"{name}[{at}] was {_value(self.was)}, is now {_value(self.now)}{more}"


def _value(x: Any) -> str:
    if isinstance(x, (np.floating, float)):
        return f"{float(x):.7g}"
    return repr(x.item() if isinstance(x, np.generic) else x)


def first_change(before: np.ndarray, after: np.ndarray) -> Changed | None:
    """Where ``after`` differs from ``before`` bit for bit (a NaN that stays NaN is unchanged; any dtype, records
    included), or None. Both arrays have the same shape and dtype (``after`` is a run's copy of ``before``)."""
    if before.size == 0 or before.shape != after.shape or before.dtype != after.dtype:
        return None
    width = before.dtype.itemsize
    b = np.ascontiguousarray(before).reshape(-1).view(np.uint8).reshape(before.size, width)
    a = np.ascontiguousarray(after).reshape(-1).view(np.uint8).reshape(after.size, width)
    diff = np.flatnonzero(np.any(a != b, axis=1))
    if diff.size == 0:
        return None
    k = int(diff[0])
    index = tuple(int(i) for i in np.unravel_index(k, before.shape))
    return Changed(index, before.reshape(-1)[k], after.reshape(-1)[k], int(diff.size), int(before.size))
