"""Emulated ``cupy.lib.stride_tricks``: NumPy's functions of the same name, only those CuPy has (tests only)."""

from cupy._functions import module_getattr as _getattr


def __getattr__(name: str):
    return _getattr("cupy.lib.stride_tricks", name)
