"""Stopping simulated kernels, and the launches that come after one that could not be stopped.

numba-cuda's simulator (0.22 to 0.30) runs one kernel at a time: ``FakeCUDAKernel.__call__`` pushes the launch's
fake ``cuda`` module as a module global, the *kernel context* (``_push_kernel_context``, which asserts
"concurrent simulated kernel not supported"), and every CUDA thread reads it. A kernel's body runs in its blocks'
``BlockThread`` objects, or, in :func:`gpulab.kernels.cooperative.launch`, in the thread that launched it.

The exercise harness runs each check in a worker thread with a deadline and stops one that runs past it
(:func:`stop_threads`, :func:`stop_thread`). A worker that did not end within the harness's tries (a loaded
machine: it may hold the kernel context for seconds more) is kept here (:func:`leave_running`). Before the next
check, and before the next launch from any thread that is not inside a kernel (a learner's own cell:
:func:`before_launch`, called by :mod:`gpulab.simulator.device_calls`), it is stopped again and waited for, up to
``SETTLE_SECONDS`` (:func:`settle`), else a ``RuntimeError`` says to restart the kernel. Without that, the context
it holds made the learner's launch from the host fail as "a kernel cannot launch a kernel"
(:mod:`gpulab.simulator.device_calls`); and past that test, numba-cuda runs a kernel called while any context is
pushed as a function in the calling thread (``FakeCUDAKernel.__call__``: ``if self._device or _kernel_context``),
which fails on the host thread's missing ``blockIdx``. A kernel that another thread runs (not one kept here) is
waited for as long, then named.

:func:`install` (called by :func:`gpulab.simulator.harden`) wraps ``_push_kernel_context`` so that each context
carries the thread that pushed it: :func:`in_kernel` tells a thread that is inside a kernel (one of the blocks'
threads, or the launching thread of a cooperative launch) from one that merely sees another thread's context.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any, ParamSpec

__all__ = [
    "KernelTimeout",
    "SETTLE_SECONDS",
    "before_launch",
    "in_kernel",
    "install",
    "leave_running",
    "settle",
    "stop_thread",
    "stop_threads",
    "through_stops",
]

SETTLE_SECONDS = 60.0
"""How long :func:`settle` stops and waits for the workers left running before it gives up."""

P = ParamSpec("P")

# Threads that the harness could not stop in time (check workers): stopped again by settle() until they end.
_LEFTOVER: list[threading.Thread] = []


class KernelTimeout(Exception):
    """Raised inside stuck simulator threads to stop a kernel that ran past its deadline."""


_SET_ASYNC_EXC = ctypes.pythonapi.PyThreadState_SetAsyncExc  # (thread id, exception type or None to withdraw)


def stop_threads(exc_type: type[BaseException]) -> list[str]:
    """Raise ``exc_type`` inside every running simulator thread; returns which ones. A thread that has begun to
    leave (:func:`leaving`) is skipped: a stop landing in its block's bookkeeping would leave the block short of a
    thread, and its other threads waiting at a barrier for ever."""
    stopped = []
    for th in threading.enumerate():
        if type(th).__name__ != "BlockThread" or not th.is_alive() or th.ident is None:
            continue
        guard = getattr(th, "_gpulab_guard", None)
        if guard is None and getattr(type(th), "_gpulab_guarded", False):
            continue  # not yet in its kernel (a stop before run's try would end it unseen): the next round's
        with guard if guard is not None else contextlib.nullcontext():
            if getattr(th, "_gpulab_leaving", False):
                continue
            _SET_ASYNC_EXC(ctypes.c_ulong(th.ident), ctypes.py_object(exc_type))
        stopped.append(f"thread {tuple(th.threadIdx)} of block {tuple(th.blockIdx)}")  # type: ignore[attr-defined]
    return stopped


def started(th: Any) -> None:
    """Called inside a simulator thread's ``run``, before its kernel: from here it may be stopped (the lock
    :func:`stop_threads` and :func:`leaving` share). Threads of a class marked ``_gpulab_guarded`` are not stopped
    before this."""
    th._gpulab_guard = threading.Lock()


def through_stops(tries: int) -> Callable[[Callable[P, None]], Callable[P, None]]:
    """A function run again, up to ``tries`` times in all, while a stop (an asynchronous exception) lands in it and
    cuts it short; what it raised is dropped: its caller goes on as if it had finished (:func:`leaving`,
    :func:`gpulab.simulator.blocks._abort`).

    The decorated function takes any lock it needs itself, with a ``with`` statement on the C lock
    (``with block.lock:``, not ``lock.acquire()`` followed by a ``try``, nor ``with condition:``), so no Python code
    runs between taking a lock and entering the region that releases it: a stop landing there would leave the lock
    held by a thread that is gone. This wrapper holds no lock, and adds no frame in front of its ``try``: it is what
    the caller calls, so a stop escapes it only where one escaped the loop it replaces (at its call, ``range``, the
    loop's jump back; ``dis`` shows the same instructions there)."""

    def wrap(action: Callable[P, None]) -> Callable[P, None]:
        @functools.wraps(action)
        def run(*args: P.args, **kwargs: P.kwargs) -> None:
            for _ in range(tries):
                try:
                    action(*args, **kwargs)
                    return
                except BaseException:  # noqa: BLE001 - a stop landed in it: run it again
                    continue

        return run

    return wrap


@through_stops(1000)
def leaving(th: Any) -> None:
    """Called by a simulator thread (``th`` is the current thread) before its block's bookkeeping: from here on
    :func:`stop_threads` leaves it alone, and a stop already sent but not yet raised is withdrawn. A stop raised
    before the guard is taken (between the kernel's end and here) is caught and the guard taken again
    (:func:`through_stops`: this thread is leaving anyway)."""
    guard = getattr(th, "_gpulab_guard", None) or threading.Lock()
    with guard:
        th._gpulab_leaving = True
        _SET_ASYNC_EXC(ctypes.c_ulong(th.ident), None)  # withdraw a pending stop (NULL clears it)


def stop_thread(thread: threading.Thread, exc_type: type[BaseException]) -> bool:
    """Raise ``exc_type`` inside ``thread`` (a Python thread stuck in a loop); True if it was running."""
    if not thread.is_alive() or thread.ident is None:
        return False
    _SET_ASYNC_EXC(ctypes.c_ulong(thread.ident), ctypes.py_object(exc_type))
    return True


def leave_running(thread: threading.Thread) -> None:
    """Keep ``thread``, which could not be stopped in time, to be stopped again before the next check or launch."""
    if thread not in _LEFTOVER:
        _LEFTOVER.append(thread)


def _running(me: threading.Thread) -> list[threading.Thread]:
    """The kept threads still running, other than ``me``; the others are forgotten."""
    _LEFTOVER[:] = [th for th in _LEFTOVER if th.is_alive()]
    return [th for th in _LEFTOVER if th is not me]


def settle(timeout: float | None = None) -> None:
    """Stop (with :class:`KernelTimeout`) and wait for the threads kept by :func:`leave_running`, up to ``timeout``
    seconds (default ``SETTLE_SECONDS``); ``RuntimeError`` saying to restart the kernel if one still runs then."""
    limit = SETTLE_SECONDS if timeout is None else timeout
    deadline = time.monotonic() + limit
    me = threading.current_thread()
    while _running(me) and time.monotonic() < deadline:
        stop_threads(KernelTimeout)  # its blocks' threads, which wait for nothing it does
        for th in _running(me):
            stop_thread(th, KernelTimeout)
            th.join(0.1)
    if _running(me):
        raise RuntimeError(
            f"a kernel that an earlier check stopped at its deadline is still running after {limit:g} more "
            "seconds, and the simulator runs one kernel at a time: restart the kernel (Kernel > Restart), then run "
            "the cells again."
        )


def _context() -> Any:
    from numba.cuda.simulator import kernel as sim_kernel

    return sim_kernel._get_kernel_context()


def in_kernel() -> bool:
    """Whether the current thread runs inside a simulated kernel: a kernel context is pushed, and this thread is
    one of its blocks' threads or the one that pushed it (a cooperative launch runs the blocks there). A context
    pushed by another thread (a check left running) is not this thread's; one pushed without :func:`install`'s
    wrapper counts as this thread's, as it did before."""
    ctx = _context()
    if ctx is None:
        return False
    th = threading.current_thread()
    if type(th).__name__ == "BlockThread":
        return True
    owner = getattr(ctx, "_gpulab_owner", None)
    return owner is None or owner is th


def _drop_orphan() -> Any:
    """The kernel context now pushed, or None; one whose thread has ended is dropped first: a stop that landed in
    numba-cuda's ``_push_kernel_context`` as it was being left (contextlib's Python code) never popped it, and no
    launch could ever run again in this process."""
    from numba.cuda.simulator import kernel as sim_kernel

    ctx = sim_kernel._get_kernel_context()
    owner = getattr(ctx, "_gpulab_owner", None)
    if owner is not None and not owner.is_alive() and sim_kernel._kernel_context is ctx:
        sim_kernel._kernel_context = None
        return None
    return ctx


def _wait_for_context(timeout: float) -> None:
    """Wait until no other thread holds the kernel context (a learner's own thread may be running a kernel)."""
    deadline = time.monotonic() + timeout
    ctx = _drop_orphan()
    while ctx is not None and time.monotonic() < deadline:
        time.sleep(0.01)
        ctx = _drop_orphan()
    if ctx is not None:
        owner = getattr(ctx, "_gpulab_owner", None)
        name = f"'{owner.name}'" if owner is not None else "another thread"
        raise RuntimeError(
            f"Python thread {name} is still running a simulated kernel after {timeout:g} more seconds, and the "
            "simulator runs one kernel at a time: wait for that thread to end (thread.join()) before launching "
            "another kernel, or restart the kernel (Kernel > Restart) if it never ends."
        )


def before_launch() -> None:
    """Make room for a launch from a thread that is not inside a kernel: the kept threads stopped and waited for
    (:func:`settle`), then any other thread's kernel waited for. A kept thread that launches again is stopped."""
    me = threading.current_thread()
    if me in _LEFTOVER:
        raise KernelTimeout("this check was stopped at its deadline: it launches no more kernels")
    if _LEFTOVER:
        settle()
    if _context() is not None:
        _wait_for_context(SETTLE_SECONDS)


def install() -> None:
    """Wrap the simulator's ``_push_kernel_context`` (idempotent; see the module docstring)."""
    from numba.cuda.simulator import kernel as sim_kernel

    original = sim_kernel._push_kernel_context
    if getattr(original, "_gpulab_owned", False):
        return

    @contextlib.contextmanager
    def push(mod: Any) -> Iterator[None]:  # looked up by name at each launch (FakeCUDAKernel.__call__, cooperative)
        if not in_kernel():  # a launch inside a kernel keeps numba-cuda's assert
            before_launch()
        mod._gpulab_owner = threading.current_thread()
        with original(mod):
            yield

    push._gpulab_owned = True  # type: ignore[attr-defined]
    sim_kernel._push_kernel_context = push
