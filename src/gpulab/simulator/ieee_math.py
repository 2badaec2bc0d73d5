"""A stand-in for the ``math`` module in simulated kernels: what CUDA returns where Python's ``math`` raises.

The simulator runs a kernel's body as Python, where ``math.log(0.0)`` raises "math domain error" and
``math.exp(1000.0)`` "math range error". A GPU computes ``-inf`` and ``inf`` (libdevice's ``logf``, ``expf``, ...,
IEEE 754) and the kernel carries on: a fully masked attention row has ``log(0) = -inf``, a softmax without the
maximum subtracted overflows to ``inf`` and then gives ``inf / inf = nan`` in its output. While a simulated
kernel or device function runs, :mod:`gpulab.simulator.swap` binds its global ``math`` (and names imported with
``from math import exp``) to this module, whose functions give those results:

* overflow is ``inf`` (``exp``, ``exp2``, ``expm1``, ``pow``, ``cosh``, ``sinh``, ``ldexp``, ``hypot``,
  ``gamma``, ``lgamma``; signed where the result has a sign);
* ``log``, ``log2``, ``log10`` of 0 are ``-inf`` and of a negative number ``nan`` (``log1p``: at -1 and below);
  ``sqrt`` of a negative number, ``acos`` / ``asin`` outside [-1, 1], ``acosh`` below 1, ``sin`` / ``cos`` /
  ``tan`` of inf, ``fmod(x, 0)``, ``remainder(x, 0)`` are ``nan``; ``atanh(+-1)`` is ``+-inf``; ``pow(0, y < 0)``
  is ``inf`` (``-inf`` for -0 and an odd y);
* a ``float32`` argument gives a ``float32`` result, judged in float32 (``exp(np.float32(100))`` is inf, as
  ``expf``; in double it is 2.7e43): Numba types ``math.f(float32)`` as float32 and calls the float version of
  CUDA's function. Any other argument (float, float64, an integer) gives a Python float, as Numba's float64.
  Two-argument functions give float32 when both are float32 (``ldexp``: a float32 and any integer; ``pow``: a
  float32 and an int32 or smaller NumPy integer, since Numba types ``pow(float32, int64)``, a literal ``2`` or an
  index, as float64).

The exceptional cases are NumPy's ufuncs with their warnings off (C99's special values, as CUDA's); every
other value is Python's own ``math`` result, rounded to float32 for a float32 argument. The functions Numba
does not compile for a GPU, and ``floor`` / ``ceil`` / ``trunc``, ``isnan`` & co., are ``math``'s own objects.
Each call costs one Python function call on top of ``math``'s: it runs in every simulated thread.
"""

from __future__ import annotations

import math as _math
from collections.abc import Callable
from math import *  # noqa: F403 - every name of math, replaced below where CUDA's result differs
from typing import Any

import numpy as _np

__all__ = sorted(n for n in dir(_math) if not n.startswith("_"))

_f32 = _np.float32
_f64 = _np.float64
_LIM = 2.0**128 - 2.0**103  # a double at or beyond this rounds to inf in float32 (halfway past the largest float32)
_INF32, _NINF32, _NAN32 = _f32(_math.inf), _f32(-_math.inf), _f32(_math.nan)
# -0.0 + r is r rounded to float32, as float32(r) (also -0.0 and nan), in a fifth of its time (0.1 against 0.5 us)
_NZ32 = _f32(-0.0)
if type(_NZ32 + 1.0) is not _f32:  # NumPy 1.x (no NEP 50): float32 + a Python float is float64; round explicitly

    class _Round32:
        def __add__(self, r: float) -> Any:
            return _f32(r)

    _NZ32 = _Round32()
_ERRORS = (ValueError, OverflowError)


def _to32(r: float) -> Any:
    """A double result as float32: beyond float32's range it is +-inf (NumPy's cast would warn)."""
    if -_LIM < r < _LIM:
        return _NZ32 + r
    if r != r:
        return _NAN32
    return _INF32 if r > 0 else _NINF32


def _ieee(uf: Callable[..., Any], *args: Any) -> Any:
    """``uf(*args)`` (a NumPy ufunc on NumPy scalars) with its warnings off: the IEEE special value."""
    with _np.errstate(all="ignore"):
        return uf(*args)


def _unary(name: str, f: Callable[[Any], Any], uf: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """``math.<name>`` (``f``) with ``uf`` (a ufunc, or a function of a NumPy scalar) where ``f`` raises."""

    f32, nz, lim, to32, errors = _f32, _NZ32, _LIM, _to32, _ERRORS  # closure cells: read faster than globals

    def g(x: Any) -> Any:
        if type(x) is f32:
            try:
                r = f(x)
            except errors:
                return to32(float(_ieee(uf, x)))
            return nz + r if -lim < r < lim else to32(r)
        try:
            return f(x)
        except errors:
            return float(_ieee(uf, _f64(x)))

    g.__name__ = g.__qualname__ = name
    g.__doc__ = f"math.{name}, with CUDA's result where Python's raises (see gpulab.simulator.ieee_math)."
    return g


_SMALL_INTS = (_np.int8, _np.int16, _np.int32, _np.uint8, _np.uint16)


def _any_int(y: Any) -> bool:
    return isinstance(y, (int, _np.integer))


def _small_int(y: Any) -> bool:
    """A NumPy integer that Numba passes to ``powf`` with a float32: ``math.pow(float32, int64)`` (a literal, an
    index) is typed float64 (checked with NVVM: (f32, int32) -> float32, (f32, int64) -> float64)."""
    return type(y) in _SMALL_INTS


def _binary(
    name: str,
    f: Callable[[Any, Any], Any],
    uf: Callable[[Any, Any], Any],
    int_y: Callable[[Any], bool] | None = None,
) -> Callable[[Any, Any], Any]:
    """Two arguments: float32 when both are float32 (``int_y``: or x float32 and ``int_y(y)``, an integer y that
    Numba types with a float32 result)."""

    def g(x: Any, y: Any) -> Any:
        if type(x) is _f32 and (type(y) is _f32 or (int_y is not None and int_y(y))):
            try:
                r = f(x, y)
            except _ERRORS:
                return _to32(float(_ieee(uf, x, y if int_y else _f32(y))))
            return _NZ32 + r if -_LIM < r < _LIM else _to32(r)
        try:
            return f(x, y)
        except _ERRORS:
            return float(_ieee(uf, _f64(x), y if int_y is not None and _any_int(y) else _f64(y)))

    g.__name__ = g.__qualname__ = name
    g.__doc__ = f"math.{name}, with CUDA's result where Python's raises (see gpulab.simulator.ieee_math)."
    return g


def _gamma(x: Any) -> Any:
    """CUDA's tgamma where Python's raises: +-inf at +-0 and on overflow, nan at negative integers and -inf."""
    v = float(x)
    if v == 0.0:
        return type(x)(_math.copysign(_math.inf, v))
    return type(x)(_math.nan if v < 0.0 else _math.inf)


def _lgamma(x: Any) -> Any:
    """CUDA's lgamma where Python's raises: inf at 0 and the negative integers (a pole), and on overflow."""
    return type(x)(_math.inf)


def _remainder(x: Any, y: Any) -> Any:
    """IEEE remainder where Python's raises (x infinite, y zero): nan (``np.remainder`` is the floored modulo)."""
    return type(x)(_math.nan)


def _ldexp(x: Any, i: Any) -> Any:
    return _np.ldexp(x, _np.int32(max(min(int(i), 1 << 20), -(1 << 20))))  # +-2**20: past any float's range


# one argument
exp = _unary("exp", _math.exp, _np.exp)
exp2 = _unary("exp2", _math.exp2, _np.exp2) if hasattr(_math, "exp2") else None  # Python 3.11+
expm1 = _unary("expm1", _math.expm1, _np.expm1)
_mlog = _math.log
log2 = _unary("log2", _math.log2, _np.log2)
log10 = _unary("log10", _math.log10, _np.log10)
log1p = _unary("log1p", _math.log1p, _np.log1p)
sqrt = _unary("sqrt", _math.sqrt, _np.sqrt)
sin = _unary("sin", _math.sin, _np.sin)
cos = _unary("cos", _math.cos, _np.cos)
tan = _unary("tan", _math.tan, _np.tan)
asin = _unary("asin", _math.asin, _np.arcsin)
acos = _unary("acos", _math.acos, _np.arccos)
atan = _unary("atan", _math.atan, _np.arctan)
sinh = _unary("sinh", _math.sinh, _np.sinh)
cosh = _unary("cosh", _math.cosh, _np.cosh)
tanh = _unary("tanh", _math.tanh, _np.tanh)
asinh = _unary("asinh", _math.asinh, _np.arcsinh)
acosh = _unary("acosh", _math.acosh, _np.arccosh)
atanh = _unary("atanh", _math.atanh, _np.arctanh)
erf = _unary("erf", _math.erf, _math.erf)  # never raises
erfc = _unary("erfc", _math.erfc, _math.erfc)
gamma = _unary("gamma", _math.gamma, _gamma)
lgamma = _unary("lgamma", _math.lgamma, _lgamma)
fabs = _unary("fabs", _math.fabs, _np.fabs)
degrees = _unary("degrees", _math.degrees, _np.degrees)
radians = _unary("radians", _math.radians, _np.radians)

# two arguments
pow = _binary("pow", _math.pow, _np.power, int_y=_small_int)  # noqa: A001 - math.pow
ldexp = _binary("ldexp", _math.ldexp, _ldexp, int_y=_any_int)
atan2 = _binary("atan2", _math.atan2, _np.arctan2)
hypot = _binary("hypot", _math.hypot, _np.hypot)  # type: ignore[assignment]  # two arguments, as CUDA's
copysign = _binary("copysign", _math.copysign, _np.copysign)
fmod = _binary("fmod", _math.fmod, _np.fmod)
remainder = _binary("remainder", _math.remainder, _remainder)


def log(x: Any, *base: Any) -> Any:  # type: ignore[no-redef]
    """math.log, with CUDA's result where Python's raises: -inf at 0, nan below (see gpulab.simulator.ieee_math).
    With a base, Python's ``math.log(x, base)`` (CUDA has no such function). Written out: it is a hot one."""
    if base:
        return _math.log(x, *base)
    if type(x) is _f32:
        try:
            r = _mlog(x)
        except ValueError:
            return _NINF32 if x == 0 else _NAN32
        return _NZ32 + r  # a logarithm is always in float32's range
    try:
        return _mlog(x)
    except ValueError:
        return float(_ieee(_np.log, _f64(x)))


def nextafter(x: Any, y: Any) -> Any:  # type: ignore[no-redef]
    """math.nextafter; for two float32 the next float32 (``nextafterf``), not the next double."""
    if type(x) is _f32 and type(y) is _f32:
        return _np.nextafter(x, y)
    return _math.nextafter(x, y)


def frexp(x: Any) -> tuple[Any, int]:  # type: ignore[no-redef]
    """math.frexp; a float32 mantissa for a float32 argument."""
    m, e = _math.frexp(x)
    return (_NZ32 + m if type(x) is _f32 else m), e


def modf(x: Any) -> tuple[Any, Any]:  # type: ignore[no-redef]
    """math.modf; float32 parts for a float32 argument."""
    a, b = _math.modf(x)
    return (_NZ32 + a, _NZ32 + b) if type(x) is _f32 else (a, b)


if exp2 is None:
    del exp2

#: The names of ``math`` whose functions this module replaces (the others are ``math``'s own objects).
REPLACED = tuple(n for n in __all__ if globals().get(n, None) is not getattr(_math, n))
