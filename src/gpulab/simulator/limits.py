"""The simulator refuses a launch that a GPU refuses: more than 1024 threads in a block, more than CUDA's
threads or blocks along one axis, or none.

numba-cuda's simulator runs ``kernel[1, 2048](...)`` happily, one Python call per thread, where every GPU
refuses the launch (``CUDA_ERROR_INVALID_VALUE``): a learner's code that passed in simulator mode then failed on
the first GPU they tried. :func:`install` (called by :func:`gpulab.simulator.harden`) makes the simulator's
``kernel[grid, block]`` check the configuration with :func:`gpulab.kernels._launch.check_launch`, the check
gpulab's own launchers make, and raise its :class:`~gpulab.kernels._launch.LaunchError` (a ``ValueError``) with
the limits and what to do. ``kernel.forall(n)`` launches blocks of threads, as numba-cuda's ``ForAll`` does (the
simulator's launched ``n`` blocks of one thread; GPU ufuncs launch this way). The same wrapper keeps the launch's
stream (``kernel[grid, block, stream]``), which numba's simulator drops, for :mod:`gpulab.simulator.streams`: one
wrapper of the launch configuration.
"""

from __future__ import annotations

from typing import Any

__all__ = ["FORALL_THREADS", "install"]

FORALL_THREADS = 1024  # threads per block of kernel.forall(n) without tpb (a GPU's usual pick for a light kernel)


def install() -> None:
    """Check every simulated launch configuration against CUDA's limits (idempotent)."""
    from numba.cuda.simulator.kernel import FakeCUDAKernel

    cls: Any = FakeCUDAKernel  # gpulab's mark goes on the class (other wrappers may go on top of ours)
    if getattr(cls, "_gpulab_limits", False):
        return
    original, original_forall = FakeCUDAKernel.__getitem__, FakeCUDAKernel.forall

    def configure(self: Any, configuration: Any) -> Any:
        from ..kernels._launch import check_launch

        out = original(self, configuration)
        check_launch(tuple(self.grid_dim), tuple(self.block_dim))
        # numba's simulator drops the stream; gpulab.simulator.streams records the launch on it
        self._gpulab_stream = configuration[2] if len(configuration) > 2 else 0
        return out

    def forall(self: Any, ntasks: int, tpb: int = 0, stream: Any = 0, sharedmem: int = 0) -> Any:
        if ntasks == 0:  # numba's ForAll launches nothing for no tasks (a grid of 0 blocks would be refused)
            return lambda *args: None
        if ntasks < 0:  # numba's error
            return original_forall(self, ntasks, tpb, stream, sharedmem)
        # numba's ForAll on a GPU: blocks of tpb threads (given, or the occupancy API's pick: 1024 for a light
        # kernel), ceil(ntasks / tpb) of them. The simulator's ran ntasks blocks of one thread, 200 us each.
        tpb = tpb or FORALL_THREADS
        return self[(ntasks + tpb - 1) // tpb, tpb, stream, sharedmem]

    FakeCUDAKernel.__getitem__ = configure  # type: ignore[method-assign]
    FakeCUDAKernel.forall = forall  # type: ignore[method-assign]
    cls._gpulab_limits = True
