"""Emulated ``cupy.fft``: NumPy's functions of the same name, only those the real CuPy has (tests only)."""

from cupy._functions import module_getattr as _getattr


def __getattr__(name: str):
    return _getattr("cupy.fft", name)
