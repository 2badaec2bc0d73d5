"""Blocks of simulator threads that wait at ``cuda.syncthreads()`` on events, not by polling.

numba-cuda's ``BlockManager.run`` polls every thread of a block in a busy loop until all of them are
blocked in ``syncthreads`` or finished; the loop holds the GIL most of the time, so the block's own
threads crawl. :func:`run_block` (installed by :func:`gpulab.simulator.harden`) starts the same
``BlockThread`` objects; the last thread to arrive at a barrier releases the others, and the launching
thread sleeps until the block is done. Same semantics as numba-cuda: a barrier opens when every thread
still running has reached it (threads that returned early do not hold it back), and an exception in
one thread aborts the others at their next barrier. Measured on the exercise, trace and capstone tests
(134 tests, 2 cores): 64.5 s of CPU before, 51.9 s after.

A block whose threads cannot wait for each other (:mod:`gpulab.simulator.independent`) runs its CUDA
threads one after another in a single ``BlockThread`` (its ``threadIdx`` set before each), in the
order ``np.ndindex`` gives: one of the schedules a GPU may pick, the same every run. It stops at the
first thread that raises, as a block of Python threads reports its first failure.
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np

from .independent import independent_threads

__all__ = ["Block", "run_block", "THREAD_DONE"]

# Called with each simulated CUDA thread (the BlockThread, its threadIdx set) when it has finished; set by
# gpulab.simulator.harden (the instruments' per-thread barrier counts).
THREAD_DONE: list[Any] = []


class Block:
    """One block's barrier, its threads and the count of those still running."""

    def __init__(self, threads: list, serial: bool = False) -> None:
        self.threads = threads
        self.serial = serial
        self.cv = threading.Condition()
        self.alive = len(threads)
        self.blocked = 0
        self.generation = 0
        self.failed: Any = None

    def _open(self) -> None:
        self.blocked = 0
        self.generation += 1
        self.cv.notify_all()

    def _stop_all(self) -> None:  # with self.cv held
        for t in self.threads:
            t.abort = True
        self._open()

    def wait(self, th: Any) -> None:
        if self.serial:  # gpulab.simulator.independent missed a barrier: never pass it alone
            raise RuntimeError(
                "gpulab ran this block's threads one after another because no cuda.syncthreads() could be found "
                "in the kernel's code, but one was called (reached in a way gpulab cannot read, e.g. through "
                "getattr). Call cuda.syncthreads() directly in the kernel or a device function it calls."
            )
        if th.abort or self.failed is not None:
            raise RuntimeError("abort flag set on syncthreads call")
        with self.cv:
            generation = self.generation
            self.blocked += 1
            if self.blocked >= self.alive:
                self._open()
            else:
                while self.generation == generation:
                    self.cv.wait()
        if th.abort or self.failed is not None:
            raise RuntimeError("abort flag set on syncthreads clear")

    def finished(self, th: Any) -> None:
        with self.cv:
            self.alive -= 1
            if th.exception is not None and self.failed is None:
                self.failed = th
                self._stop_all()  # no thread may go past a barrier the failed one will never reach
            elif self.alive and self.blocked >= self.alive:
                self._open()
            else:
                self.cv.notify_all()

    def abort(self) -> None:
        with self.cv:
            self._stop_all()


def run_block(manager: Any, grid_point: Any, *args: Any) -> None:
    """``BlockManager.run`` with :class:`Block` (see there); the threads are numba-cuda's own.

    The launching thread waits in 50 ms slices, so that an exception raised in it (Ctrl-C, or the
    harness's :class:`~gpulab.exercises.run.KernelTimeout`) arrives at once; it then aborts the block,
    releasing every thread at a barrier. A thread that ended without reporting (stopped inside gpulab's
    bookkeeping) does not keep the launcher waiting either: numba-cuda's loop checked ``is_alive``.
    """
    from numba.cuda.simulator.kernel import BlockThread
    from numba.cuda.simulator.kernelapi import Dim3

    f = manager._f
    serial = independent_threads(f)
    if serial:
        points = list(np.ndindex(*manager._block_dim))
        bx, by = manager._block_dim[0], manager._block_dim[1]

        def run_in_turn() -> None:
            th = threading.current_thread()
            for p in points:
                th.threadIdx = Dim3(*p)  # type: ignore[attr-defined]  # what cuda.threadIdx reads
                th.thread_id = p[0] + bx * (p[1] + by * p[2])  # type: ignore[attr-defined]
                f(*args)
                for done in THREAD_DONE:
                    done(th)

        threads = [BlockThread(run_in_turn, manager, grid_point, points[0], manager._debug)]
    else:

        def target() -> None:
            f(*args)

        threads = [
            BlockThread(target, manager, grid_point, point, manager._debug) for point in np.ndindex(*manager._block_dim)
        ]
    block = manager._gpulab_block = Block(threads, serial=serial)
    try:
        for t in threads:
            t.start()
        with block.cv:
            while block.alive and block.failed is None:
                if not block.cv.wait(0.05) and not any(t.is_alive() for t in threads):
                    break
    except BaseException:
        block.abort()
        raise
    if block.failed is not None:
        exc = block.failed.exception
        raise exc[0].with_traceback(exc[1])
    for t in threads:  # as numba-cuda: an exception set just before a thread ended
        if t.exception:
            raise t.exception[0].with_traceback(t.exception[1])
