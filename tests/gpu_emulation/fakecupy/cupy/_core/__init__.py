"""Emulated ``cupy._core`` (tests only): only the cuBLAS compute-type settings gpulab reads (``_routines_linalg``)."""
