"""Emulated ``cupy._core._routines_linalg``: cuBLAS's compute-type setting per dtype (its values as in CuPy's
``_routines_linalg.pyx``); NumPy's matmul ignores it (TF32 rounding is not emulated)."""

COMPUTE_TYPE_TBD = 0
COMPUTE_TYPE_DEFAULT = 1
COMPUTE_TYPE_PEDANTIC = 2
COMPUTE_TYPE_FP16 = 3
COMPUTE_TYPE_FP32 = 4
COMPUTE_TYPE_FP64 = 5
COMPUTE_TYPE_BF16 = 6
COMPUTE_TYPE_TF32 = 7

_types: dict = {}


def get_compute_type(dtype):
    import numpy as np

    return _types.get(np.dtype(dtype).char, COMPUTE_TYPE_DEFAULT)


def set_compute_type(dtype, compute_type):
    import numpy as np

    _types[np.dtype(dtype).char] = compute_type
