"""gpulab: learn why GPUs matter for deep learning by writing CUDA kernels in Python.

Importing gpulab picks the mode once (gpu or simulator, see :mod:`gpulab.runtime`) before numba is
imported, and does no GPU work. Kernels live in :mod:`gpulab.kernels`.
"""

from __future__ import annotations

from . import runtime
from .runtime import ModeError, banner, is_gpu, is_simulator, mode, sizes, to_device, to_host, xp

runtime.select_mode()
if runtime.is_simulator():
    from . import simulator  # noqa: E402

    simulator.harden()  # imports numba's simulator (no GPU work): see gpulab.simulator

from .source import show_source  # noqa: E402  (after the mode is fixed)
from .timing import benchmark, gbps, gflops, percent_of_peak  # noqa: E402

__version__ = "0.1.0"

__all__ = [
    "ModeError",
    "__version__",
    "banner",
    "benchmark",
    "gbps",
    "gflops",
    "is_gpu",
    "is_simulator",
    "mode",
    "percent_of_peak",
    "runtime",
    "show_source",
    "sizes",
    "to_device",
    "to_host",
    "xp",
]
