"""The simulator refuses a launch that a GPU refuses: more than 1024 threads in a block, more than CUDA's
threads or blocks along one axis, or none.

numba-cuda's simulator runs ``kernel[1, 2048](...)`` happily, one Python call per thread, where every GPU
refuses the launch (``CUDA_ERROR_INVALID_VALUE``): a learner's code that passed in simulator mode then failed on
the first GPU they tried. :func:`install` (called by :func:`gpulab.simulator.harden`) makes the simulator's
``kernel[grid, block]`` check the configuration with :func:`gpulab.kernels._launch.check_launch`, the check
gpulab's own launchers make, and raise its :class:`~gpulab.kernels._launch.LaunchError` (a ``ValueError``) with
the limits and what to do.
"""

from __future__ import annotations

from typing import Any

__all__ = ["install"]


def install() -> None:
    """Check every simulated launch configuration against CUDA's limits (idempotent)."""
    from numba.cuda.simulator.kernel import FakeCUDAKernel

    if getattr(FakeCUDAKernel.__getitem__, "_gpulab_limits", False):
        return
    original = FakeCUDAKernel.__getitem__

    def configure(self: Any, configuration: Any) -> Any:
        from ..kernels._launch import check_launch

        out = original(self, configuration)
        check_launch(tuple(self.grid_dim), tuple(self.block_dim))
        return out

    configure._gpulab_limits = True  # type: ignore[attr-defined]
    FakeCUDAKernel.__getitem__ = configure  # type: ignore[method-assign]
