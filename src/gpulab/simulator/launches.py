"""Take over the host's next launch of one kernel: :func:`intercepted`.

A check whose kernel is launched by a host function (``host=``, the capstone's launchers) cannot name the launch
itself: the host computes the grid and passes the arguments. To count that launch's memory accesses
(:func:`gpulab.trace.trace`, for a :class:`~gpulab.exercises.Budget`), the budget stage runs the host inside
``with intercepted(kernel, handler):``: the host's first launch of ``kernel`` is handed to
``handler(grid, block, args)`` in place of running (the handler traces it); any later launch, and every launch of
another kernel, runs as usual. :func:`install` (on the first use) wraps the simulator's launch once; with nothing
intercepted it adds one test of an empty dictionary per launch.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from ..source import py_func

__all__ = ["install", "intercepted"]

_TAKEN: dict[int, Callable[[tuple, tuple, tuple], Any]] = {}  # id(kernel) -> handler of its next launch
_LOCK = threading.Lock()


@contextmanager
def intercepted(kernel: Any, handler: Callable[[tuple, tuple, tuple], Any]) -> Iterator[None]:
    """While open, the host's next launch of ``kernel`` (a simulated ``@cuda.jit`` kernel) calls
    ``handler(grid, block, args)`` instead of running; the launch returns what the handler returns."""
    install()
    key = id(py_func(kernel))  # `kernel[grid, block]` launches a configured copy: the Python function is the same
    with _LOCK:
        _TAKEN[key] = handler
    try:
        yield
    finally:
        with _LOCK:
            _TAKEN.pop(key, None)


def install() -> None:
    """Wrap the simulator's launch so that :func:`intercepted` can take one over (idempotent)."""
    from numba.cuda.simulator.kernel import FakeCUDAKernel

    cls: Any = FakeCUDAKernel
    if getattr(cls, "_gpulab_intercept", False):
        return
    original = FakeCUDAKernel.__call__

    def call(self: Any, *args: Any) -> Any:
        if _TAKEN and not self._device:
            with _LOCK:
                handler = _TAKEN.pop(id(self.fn), None)
            if handler is not None:
                return handler(tuple(self.grid_dim), tuple(self.block_dim), args)
        return original(self, *args)

    FakeCUDAKernel.__call__ = call  # type: ignore[method-assign]
    cls._gpulab_intercept = True
