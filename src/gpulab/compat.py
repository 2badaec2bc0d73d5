"""Keep numba-cuda compiling under NumPy 2.5, whose ``np.row_stack`` is gone.

numba-cuda (0.22 to 0.30.4, the newest) registers its CUDA overload of ``np.row_stack`` whenever NumPy is
2.0 or newer; NumPy 2.5 removed that alias of ``np.vstack``. The registration runs when the CUDA target
first loads its NumPy support, at the first kernel compiled, so on NumPy 2.5 every kernel failed:
``AttributeError: module 'numpy' has no attribute 'row_stack'``, in gpu mode at the first launch and in
the PTX tier for every check. numba 0.67 guards the same line; numba-cuda is in maintenance mode and will
not (NVIDIA/numba-cuda#907, #916). NumPy 2.5 needs Python 3.12 or newer, the Python of Colab and of most
GPU images, so the pinned stack (NumPy below 2.5 in the ``lab`` extra) cannot be relied on there.

:func:`keep_numba_cuda_compiling` gives NumPy back the alias, pointing at ``np.vstack`` (what it always
was), only when NumPy lacks it; gpulab calls it once at import, before any kernel compiles.
"""

from __future__ import annotations

from typing import Any

__all__ = ["keep_numba_cuda_compiling"]


def keep_numba_cuda_compiling(numpy: Any = None) -> bool:
    """Define ``numpy.row_stack`` as ``numpy.vstack`` when NumPy has no ``row_stack`` (NumPy 2.5 and newer),
    so that numba-cuda's CUDA target can register its overloads; return True when it was added."""
    if numpy is None:
        import numpy
    if hasattr(numpy, "row_stack"):
        return False
    numpy.row_stack = numpy.vstack
    return True
