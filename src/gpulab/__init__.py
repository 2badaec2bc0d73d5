"""gpulab: learn why GPUs matter for deep learning by writing CUDA kernels in Python.

Importing gpulab picks the mode once (gpu or simulator, see :mod:`gpulab.runtime`) before numba is
imported, and does no GPU work. Kernels live in :mod:`gpulab.kernels`.
"""

from __future__ import annotations

from . import compat, runtime
from .runtime import ModeError, banner, is_gpu, is_simulator, mode, sizes, to_device, to_host, xp

try:
    runtime.select_mode()
except runtime.ModeError:
    # The `gpulab` command still answers --help, --version and doctor (which explains the error);
    # every command that needs the mode reports it. In Python and notebooks the error stands.
    if not runtime.started_from_command_line():
        raise
compat.keep_numba_cuda_compiling()  # NumPy 2.5 removed np.row_stack, which numba-cuda's CUDA target registers
if runtime.selected_mode() == "simulator":
    from . import simulator  # noqa: E402

    simulator.harden()  # imports numba's simulator (no GPU work): see gpulab.simulator

from .source import show_source  # noqa: E402  (after the mode is fixed)
from .timing import benchmark, device_name, gbps, gflops, percent_of_peak  # noqa: E402

from ._meta import VERSION as __version__  # noqa: E402  (one version source: _meta.py)

__all__ = [
    "ModeError",
    "__version__",
    "banner",
    "benchmark",
    "device_name",
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
