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

__all__ = [
    "FORALL_THREADS",
    "REFUSE_THREADS",
    "SlowLaunchWarning",
    "WARN_THREADS",
    "brackets",
    "install",
    "slow_launch",
]

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

        blocks, threads = (_padded(d) for d in brackets(self, configuration))
        check_launch(blocks, threads)  # before numba's check: its error names neither the fix nor `//`
        slow_launch(self, blocks, threads)  # before numba's configures the kernel (the simulator's changes it)
        out = original(self, configuration)
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


def brackets(kernel: Any, configuration: Any) -> tuple[Any, Any]:
    """The (blocks, threads) of ``kernel[configuration]``; a launch with one value in the brackets (``kernel[4]``),
    or more than numba-cuda takes, is refused with the form it needs (numba's simulator fails on it with
    "'int' object is not subscriptable")."""
    from ..kernels._launch import LaunchError

    if isinstance(configuration, tuple) and 2 <= len(configuration) <= 4:
        return configuration[0], configuration[1]
    name = getattr(getattr(kernel, "fn", None), "__name__", "kernel")
    inside = ", ".join(map(repr, configuration)) if isinstance(configuration, tuple) else repr(configuration)
    raise LaunchError(
        f"a launch needs [blocks, threads_per_block] (then optionally a stream and the dynamic shared memory), e.g. "
        f"{name}[4, 256](...) or {name}[(n + 255) // 256, 256](...); got {name}[{inside}]."
    )


SIM_THREADS_PER_S = 200_000  # about what the simulator runs of a short kernel (one add per thread) on one core
WARN_THREADS = 1 << 20  # 1,048,576 threads: seconds at best; a kernel with a loop per thread takes minutes
REFUSE_THREADS = 1 << 26  # 67,108,864 threads: several minutes at best, hours for a kernel with a loop


class SlowLaunchWarning(UserWarning):
    """A simulated launch of so many threads that it runs for a long while on the CPU (see :func:`slow_launch`)."""


def _duration(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 120 else f"{seconds / 60:.0f} minutes"


def slow_launch(kernel: Any, grid: tuple, block: tuple) -> None:
    """Say so when a simulated launch runs millions of threads: the simulator runs each CUDA thread as Python code
    on the CPU, about ``SIM_THREADS_PER_S`` a second for a short kernel, so ``n = 10_000_000`` (a GPU size) runs for
    minutes with no word. From ``WARN_THREADS`` threads a :class:`SlowLaunchWarning` with an estimate (not inside a
    check, whose timeout verdict says it); from ``REFUSE_THREADS`` a :class:`~gpulab.kernels._launch.LaunchError`:
    hours on the CPU is never what the learner meant. Either names ``gpulab.sizes``, the course's size per mode."""
    import math
    import threading
    import warnings

    from ..kernels._launch import LaunchError

    threads = math.prod(grid) * math.prod(block)
    if threads < WARN_THREADS:
        return
    name = getattr(getattr(kernel, "fn", None), "__name__", "kernel")
    head = f"{name}[{_dims(grid)}, {_dims(block)}] runs {threads:,} threads in the CUDA simulator"
    why = (
        f"it runs each as Python on the CPU (about {SIM_THREADS_PER_S:,} a second for a short kernel): at least "
        f"{_duration(threads / SIM_THREADS_PER_S)}, longer for a kernel with a loop"
    )
    fix = "In simulator mode pick a small size, as the lessons do: n = gpulab.sizes(gpu=10_000_000, simulator=1000)."
    if threads >= REFUSE_THREADS:
        raise LaunchError(f"{head}, more than the {REFUSE_THREADS:,} it takes: {why}. {fix}")
    if threading.current_thread().name != "gpulab-check":  # a check's own verdict speaks of the size
        warnings.warn(SlowLaunchWarning(f"{head}: {why}. {fix}"), stacklevel=_caller_level())


def _padded(d: Any) -> Any:
    """A launch dimension as numba-cuda normalises it, ``(x, y, z)`` (``4`` is ``(4, 1, 1)``), so that the limits'
    messages read as before; a tuple of more than 3 is left for :func:`check_launch` to refuse."""
    dims = tuple(d) if isinstance(d, (tuple, list)) else (d,)
    return dims + (1,) * (3 - len(dims)) if 1 <= len(dims) <= 3 else dims


def _dims(d: tuple) -> str:
    """A launch dimension as the learner wrote it: ``4`` for ``(4, 1, 1)``, ``(4, 2)`` for ``(4, 2, 1)``."""
    kept = list(d)
    while len(kept) > 1 and kept[-1] == 1:
        kept.pop()
    return str(kept[0]) if len(kept) == 1 else str(tuple(kept))


def _caller_level() -> int:
    """The ``stacklevel`` of the first frame outside gpulab and numba (the learner's ``kernel[grid, block]``), so
    that the warning names that line, and Python's filter shows it once per line."""
    import os
    import sys

    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # gpulab's package folder
    frame: Any = sys._getframe(1)
    level = 1
    while frame is not None:
        path = os.path.abspath(frame.f_code.co_filename)
        if not path.startswith(here + os.sep) and f"{os.sep}numba" not in path:
            return level
        frame, level = frame.f_back, level + 1
    return 2
