"""The simulator refuses the calls of device functions and kernels that a GPU refuses.

numba-cuda's simulator (0.22 to 0.30) wraps every ``@cuda.jit`` function in one class, ``FakeCUDAKernel``, and
calls the Python function whenever it is called inside a kernel, whatever it is. So it runs three things that
numba-cuda refuses on a GPU (checked against numba-cuda 0.22.2 and 0.30.4, whose code paths are the same):

* **launching a device function**, ``dev[blocks, threads](...)``: the simulator calls ``dev`` once, in no
  thread, and returns its value; numba-cuda raises ``RuntimeError: Cannot compile a device function as a
  kernel`` (``_Kernel.__init__``), or an ``AttributeError`` if ``dev`` was already compiled for those types;
* **launching a kernel inside a kernel**, ``other[blocks, threads](...)`` in a kernel's body: the simulator
  runs ``other`` once in the calling thread (and leaves ``other``'s launch configuration changed); numba-cuda
  cannot compile the outer kernel (``TypingError: No implementation of function Function(<built-in function
  getitem>) found for signature: getitem(type(CUDADispatcher(...)), ...)``): it has no dynamic parallelism;
* **calling a device function from the host**, ``dev(x)`` outside any kernel: the simulator returns its
  value; numba-cuda raises ``ValueError: Kernel launch configuration was not specified`` (its message for an
  unconfigured launch, although ``dev`` is no kernel).

:func:`install` (called by :func:`gpulab.simulator.harden`) raises the GPU's exception type in all three, with
the GPU's words and what to do instead. Left as they are, because a GPU does the same: a device function called
in a kernel or device function, and a kernel called like a function *inside* a kernel, ``other(x)``, which
numba-cuda compiles as a call of a device function (no launch, no new threads). And ``kernel[grid, block]``
configures a copy of the kernel, as numba-cuda returns a launch object: the simulator stored the configuration on
the kernel itself, so a later ``kernel(x)`` without brackets ran with the last launch's configuration where a GPU
raises ``ValueError: Kernel launch configuration was not specified`` (``CUDADispatcher.__call__``, numba-cuda 0.22
and 0.30). The copy is shallow (2 us, against 0.3 ms and more for a launch of one thread, measured on 2 cores):
what gpulab keeps about a kernel lives on its Python function, its code or its device functions, which the copy
shares; and ``k = kernel[grid, block]`` launches as often as it is called, each configuration on its own. A kernel
called without brackets on the host is refused with the GPU's words, its name and the brackets it needs (a
:class:`~gpulab.kernels._launch.LaunchError`, a ``ValueError`` as on a GPU), before anything else looks at the
launch (the harness's :func:`~gpulab.simulator.launches.intercepted` reads its configuration).

"Inside a kernel" is :func:`gpulab.simulator.stopping.in_kernel`: this thread runs the kernel (one of its blocks'
threads, or a cooperative launch's caller), not merely a thread that sees the simulator's one kernel context while
another thread holds it (a check left running at its deadline): that launch is the host's, and it first waits for
the other kernel to end (:mod:`gpulab.simulator.stopping`).
"""

from __future__ import annotations

import copy
from typing import Any

from .stopping import before_launch, in_kernel

__all__ = ["HOST_CALL", "LAUNCHED_DEVICE_FUNCTION", "LAUNCH_IN_KERNEL", "install"]

LAUNCHED_DEVICE_FUNCTION = "Cannot compile a device function as a kernel"
"""numba-cuda's own words (a ``RuntimeError``) when a device function is launched."""
LAUNCH_IN_KERNEL = "No implementation of function Function(<built-in function getitem>)"
"""The start of numba-cuda's ``TypingError`` for ``kernel[...]`` inside a kernel."""
HOST_CALL = "Kernel launch configuration was not specified"
"""The start of numba-cuda's ``ValueError`` for a device function called from the host."""


def _name(kernel: Any) -> str:
    return getattr(kernel.fn, "__name__", "the function")


def _launch_in_kernel_error(kernel: Any, configuration: Any) -> Exception:
    from numba.core.errors import TypingError

    name = _name(kernel)
    what = "device function" if kernel._device else "kernel"
    return TypingError(
        f"{LAUNCH_IN_KERNEL} found for signature: getitem(type(CUDADispatcher({name})), {configuration!r}). "
        f"That is numba-cuda's error on a GPU for `{name}[...]` inside a kernel: a kernel cannot launch a {what} "
        "(numba-cuda has no dynamic parallelism), so the outer kernel does not compile. "
        + (
            f"Call the device function instead, `{name}(...)`, for this thread's element."
            if kernel._device
            else f"Launch `{name}` from the host after this kernel, or turn the work into a device function "
            "(@cuda.jit(device=True)) that this kernel calls for its own element."
        )
    )


def _unconfigured_error(kernel: Any) -> Exception:
    from ..kernels._launch import LaunchError

    name = _name(kernel)
    return LaunchError(
        f"{HOST_CALL} (numba-cuda's error on a GPU): {name}(...) needs its launch configuration: "
        f"{name}[blocks, threads](...), e.g. {name}[(n + 255) // 256, 256](...) for n elements; it was called "
        f"without the brackets. Each launch names its configuration (or keep one: launch = {name}[blocks, threads], "
        "then launch(...) as often as you like)."
    )


class _RefusedLaunch:
    """``dev[blocks, threads]`` for a device function ``dev``: configuring works on a GPU too; calling raises."""

    def __init__(self, kernel: Any) -> None:
        self.kernel = kernel

    def __call__(self, *args: Any) -> Any:
        name = _name(self.kernel)
        raise RuntimeError(
            f"{LAUNCHED_DEVICE_FUNCTION} (numba-cuda's error on a GPU): `{name}` is a device function "
            "(@cuda.jit(device=True)), which kernels call, and cannot be launched with [blocks, threads]. Launch a "
            f"kernel (@cuda.jit) that calls `{name}(...)` for its element, or drop device=True if `{name}` is "
            "meant to be a kernel (a kernel returns nothing: it writes its results into arrays)."
        )


def install() -> None:
    """Refuse, in the simulator, the launches and calls a GPU refuses (idempotent; see the module docstring)."""
    from numba.cuda.simulator.kernel import FakeCUDAKernel

    cls: Any = FakeCUDAKernel  # gpulab's mark goes on the class (other wrappers may go on top of ours)
    if getattr(cls, "_gpulab_device_calls", False):
        return
    configure, launch = FakeCUDAKernel.__getitem__, FakeCUDAKernel.__call__

    def __getitem__(self: Any, configuration: Any) -> Any:  # a launch's name, as exercises.frames knows it
        if in_kernel():  # before the configuration is stored: `other` keeps its own
            raise _launch_in_kernel_error(self, configuration)
        if self._device:
            return _RefusedLaunch(self)
        # configure a copy, as numba-cuda's kernel[...] makes a launch object and leaves the kernel unconfigured:
        # the simulator stored the configuration on the kernel, so a later plain `kernel(x)` ran where a GPU raises
        return configure(copy.copy(self), configuration)

    def call(self: Any, *args: Any) -> Any:  # named like streams' wrapper: exercises.frames knows it
        if in_kernel():
            return launch(self, *args)
        if self._device:
            name = _name(self)
            raise ValueError(
                f"{HOST_CALL} (numba-cuda's error on a GPU): `{name}` is a device function "
                "(@cuda.jit(device=True)), which only kernels and other device functions can call. Call it from a "
                f"kernel; to try its Python code on the host, call `{name}.py_func(...)`."
            )
        if getattr(self, "grid_dim", None) is None:  # kernel(x) on the host: a GPU refuses it
            raise _unconfigured_error(self)
        # a launch from the host: while another thread's kernel context is pushed, numba-cuda would run the kernel
        # as a function in this thread; a check left running is stopped and waited for first
        before_launch()
        return launch(self, *args)

    FakeCUDAKernel.__getitem__ = __getitem__  # type: ignore[method-assign]
    FakeCUDAKernel.__call__ = call  # type: ignore[method-assign]
    cls._gpulab_device_calls = True
