"""Take over the host's next launch of one kernel: :func:`intercepted`.

A check whose kernel is launched by a host function (``host=``, the capstone's launchers) cannot name the launch
itself: the host computes the grid and passes the arguments. To count that launch's memory accesses
(:func:`gpulab.trace.trace`, for a :class:`~gpulab.exercises.Budget`), the budget stage runs the host inside
``with intercepted(kernel, handler):``: the host's first launch of ``kernel`` is handed to
``handler(grid, block, args)`` in place of running (the handler traces it); any later launch, and every launch of
another kernel, runs as usual. :func:`install` (by :func:`gpulab.simulator.harden`) wraps the simulator's launch
once; with nothing intercepted it adds one test of an empty dictionary per launch, and :func:`check_arguments`'
test of each argument's type (a list, a string: refused as numba-cuda's typing refuses them on a GPU).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from ..source import py_func

__all__ = ["check_arguments", "install", "intercepted"]

# What a kernel argument cannot be (numba-cuda types none of them; the simulator fails on them deep in a thread):
# a Python list (of numbers), a str, a dict or a set. Tuples are kernel arguments in numba-cuda (UniTuple).
_NOT_ARGUMENTS = (list, str, bytes, dict, set)

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
        if not self._device:
            check_arguments(self.fn, args)
        if _TAKEN and not self._device:
            with _LOCK:
                handler = _TAKEN.pop(id(self.fn), None)
            if handler is not None:
                return handler(tuple(self.grid_dim), tuple(self.block_dim), args)
        return original(self, *args)

    FakeCUDAKernel.__call__ = call  # type: ignore[method-assign]
    cls._gpulab_intercept = True


def check_arguments(fn: Any, args: tuple) -> None:
    """Refuse a launch argument no GPU kernel takes: a list (``kernel[4, 256]([1.0, 2.0], ...)``), a string, a
    dict or a set, naming the parameter and the fix (numba's simulator fails on a list inside a thread:
    "'list' object has no attribute 'size'")."""
    import inspect

    from ..errors import UsageError

    for k, a in enumerate(args):
        if not isinstance(a, _NOT_ARGUMENTS):
            continue
        try:
            names = list(inspect.signature(fn).parameters)
        except (TypeError, ValueError):
            names = []
        name = names[k] if k < len(names) else f"argument {k + 1}"
        kind = type(a).__name__
        fix = (
            f"convert it first: {name} = np.asarray({name}, dtype=np.float32) (or cuda.to_device(...))"
            if isinstance(a, list)
            else "pass an array or a number"
        )
        raise UsageError(
            f"kernel arguments must be arrays (NumPy, CuPy, device arrays) or numbers; argument {k + 1} of "
            f"{getattr(fn, '__name__', 'the kernel')} ({name}) is a {kind}: {fix}."
        )
