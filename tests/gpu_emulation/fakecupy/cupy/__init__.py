"""An emulated CuPy 14 for tests/test_gpu_emulated.py: CuPy's rules on NumPy memory, no GPU (tests only).

It runs gpulab's gpu-mode code paths (``xp()`` is this module) so that what real CuPy refuses (a NumPy array
where a CuPy array goes, ``np.asarray`` of a CuPy array) fails here too. ``_array.py`` states each rule and where
CuPy does the same; ``_functions.py`` exposes only names the installed CuPy has. What is not emulated raises
:class:`NotEmulated` (the runner reports it as NOT EMULATED, never as passed).
"""

from __future__ import annotations

from typing import Any

from cupy import cuda  # noqa: F401
from cupy import fft, lib, linalg, random  # noqa: F401
from cupy._array import NotEmulated, ndarray  # noqa: F401
from cupy._functions import module_getattr as _getattr
from cupy._kernels import ElementwiseKernel, RawKernel, RawModule, ReductionKernel, fuse  # noqa: F401

__version__ = "14.2.0"
EMULATED = True  # not in the real CuPy: tells the tier's own checks which one they have


def __getattr__(name: str) -> Any:
    return _getattr("cupy", name)
