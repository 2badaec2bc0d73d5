"""Blocks of simulator threads that wait at ``cuda.syncthreads()`` on events, not by polling.

numba-cuda's ``BlockManager.run`` polls every thread of a block in a busy loop until all of them are
blocked in ``syncthreads`` or finished; the loop holds the GIL most of the time, so the block's own
threads crawl. :func:`run_block` (installed by :func:`gpulab.simulator.harden`) starts the same
``BlockThread`` objects; the last thread to arrive at a barrier releases the others (those waiting also look
every 0.1 s whether their launcher is gone, :meth:`Block.pause`), and the launching thread sleeps until the
block is done. Same semantics as numba-cuda: a barrier opens when every thread
still running has reached it (threads that returned early do not hold it back), and an exception in
one thread aborts the others at their next barrier. Measured on the exercise, trace and capstone tests
(134 tests, 2 cores): 64.5 s of CPU before, 51.9 s after.

Most blocks do not need a Python thread per CUDA thread (:mod:`gpulab.simulator.in_turn` reads the
kernel to decide): their CUDA threads run in turn in a single ``BlockThread`` (its ``threadIdx`` set
before each), in the order ``np.ndindex`` gives, or the reverse of it inside :func:`reversed_order`
(the exercise harness's re-run "with another thread schedule"). A kernel with ``cuda.syncthreads()``
statements (or warp calls, in its body or its device functions) advances every thread to its next barrier (or
warp call) before any goes past it. Both are schedules a
GPU may pick, the same every run; each thread's barrier count is kept for the instruments. The block
stops at the first thread that raises, as a block of Python threads reports its first failure.
"""

from __future__ import annotations

import contextlib
import threading
import time
import types
from collections.abc import Iterator
from typing import Any

import numpy as np

from . import recordings, warps
from .stopping import KernelTimeout, through_stops
from .warps_in_turn import InTurn, LaneError
from .in_turn import plan
from .swap import swapped_modules

__all__ = ["Block", "in_turn", "run_block", "reversed_order", "THREAD_DONE"]

# Called with each simulated CUDA thread (the BlockThread, its threadIdx set) when it has finished; set by
# gpulab.simulator.harden (the instruments' per-thread barrier counts).
THREAD_DONE: list[Any] = []
_REVERSED: list[bool] = []


@contextlib.contextmanager
def reversed_order() -> Iterator[None]:
    """Blocks run in turn take their threads last to first while inside (another schedule, the same every run)."""
    _REVERSED.append(True)
    try:
        yield
    finally:
        _REVERSED.pop()


class Block:
    """One block's barrier, its threads and the count of those still running."""

    def __init__(self, threads: list, serial: bool = False) -> None:
        self.threads = threads
        self.serial = serial
        self.number = recordings.number()  # recordings begun before this block ignore its threads' notes
        # Held with ``with block.lock:``, never ``with block.cv:``: Condition.__enter__ is Python code, and a stop
        # (an asynchronous exception) raised in it just after the lock was taken leaves the lock held by a thread
        # that is gone, so the block's other threads and its launcher wait for ever. Entering the C lock itself
        # has no such gap (tests/test_simulator_stops.py measures both).
        self.lock = threading.RLock()
        self.cv = threading.Condition(self.lock)
        self.launcher = threading.current_thread()  # run_block makes the Block in the launching thread
        self.done: set[Any] = set()  # threads whose end was counted (finished, or reaped by the launcher)
        self.blocked = 0
        self.generation = 0
        self.failed: Any = None
        self.warp_waiting = 0  # threads waiting in a warp function for lanes of their group (warps.py)
        self.at_barrier: set[int] = set()  # linear ids of the threads waiting at cuda.syncthreads()
        self.stuck = ""  # why no thread can go on, once that is so (some at a barrier, some in a warp function)

    @property
    def alive(self) -> int:
        """Threads still running: derived, so a thread stopped half-way through :meth:`finished` cannot leave a
        count behind."""
        return len(self.threads) - len(self.done)

    def _open(self) -> None:
        self.blocked = 0
        self.at_barrier.clear()
        self.generation += 1
        self.cv.notify_all()

    def _stop_all(self) -> None:  # with self.lock held
        for t in self.threads:
            t.abort = True
        self._open()

    def wait(self, th: Any) -> None:
        if self.serial:  # gpulab.simulator.in_turn missed a barrier: never pass it alone
            raise RuntimeError(
                "gpulab ran this block's threads in turn, with the barriers it read in the kernel's code, but a "
                "cuda.syncthreads() it could not read was called (reached through getattr or the like). Write "
                "cuda.syncthreads() as a statement in the kernel or a device function it calls."
            )
        if th.abort or self.failed is not None:
            raise RuntimeError("abort flag set on syncthreads call")
        with self.lock:
            generation = self.generation
            self.blocked += 1
            self.at_barrier.add(th.thread_id)
            if self.blocked >= self.alive:
                self._open()
            else:
                self.check_stuck()
                while self.generation == generation and not self.stuck and self.failed is None:
                    self.pause()
                if self.stuck:
                    raise RuntimeError(self.stuck)
        if th.abort or self.failed is not None:
            raise RuntimeError("abort flag set on syncthreads clear")

    def pause(self) -> None:
        """With the lock held, in a waiting thread: wait to be woken, at most 0.1 s. A launcher that is gone (stopped
        before it could abort the block, or stopped again inside its abort) wakes nobody: then stop the block, so that
        its threads do not wait for ever. The slices also let a stop sent to a waiting thread land."""
        if not self.cv.wait(0.1) and not self.launcher.is_alive():
            self._stop_all()

    def check_stuck(self) -> None:
        """With the lock held: when every thread still running waits (at a barrier or in a warp function whose
        lanes wait elsewhere), none can go on; say so (``stuck``) and wake them to raise it. A GPU would hang."""
        if warps.settle(self):  # lanes waiting at cuda.activemask() were answered: they go on
            return
        if self.warp_waiting and not self.stuck and self.blocked + self.warp_waiting >= self.alive:
            self.stuck = warps.stuck_text(self)
            self.cv.notify_all()

    def raise_if_stopped(self, th: Any) -> None:
        """In a waiting thread, with the lock held: stop it when the block failed or can never go on."""
        if self.stuck:
            raise RuntimeError(self.stuck)
        if th.abort or self.failed is not None:
            raise RuntimeError("abort flag set on a warp function's wait")

    def finished(self, th: Any) -> None:
        with self.lock:
            if th in self.done:
                return
            self.done.add(th)
            warps.lane_exited(self, th)
            if th.exception is not None and self.failed is None:
                self.failed = th
                self._stop_all()  # no thread may go past a barrier the failed one will never reach
            elif self.alive and self.blocked >= self.alive and not self.warp_waiting:
                self._open()
            else:
                self.check_stuck()
                self.cv.notify_all()  # warp functions waiting for this lane see that it returned

    def reap(self) -> bool:
        """With the lock held, in the launching thread: count the threads that ended without reporting (a stop
        that landed before or inside their bookkeeping, :func:`gpulab.simulator.stopping.leaving`) as failed, and
        stop the block, so that its other threads never wait at a barrier for a thread that is gone. True if any."""
        gone = [t for t in self.threads if t not in self.done and t.ident is not None and not t.is_alive()]
        for t in gone:
            if not t.exception:
                t.exception = (KernelTimeout("a simulator thread was stopped (a deadline) before it reported"), None)
            self.done.add(t)
            if self.failed is None:
                self.failed = t
        if gone:
            self._stop_all()
        return bool(gone)

    def abort(self) -> None:
        with self.lock:
            self._stop_all()


def in_turn(fn: Any, generator: bool, points: list, block_dim: tuple, args: tuple) -> Any:
    """A function that runs every CUDA thread of a block in turn in the thread that calls it (module docstring),
    whose ``blockIdx`` is set; the one BlockThread of a block here, the caller in :mod:`gpulab.kernels.cooperative`."""
    from numba.cuda.simulator.kernelapi import Dim3

    bx, by = block_dim[0], block_dim[1]
    # per thread: its threadIdx (what cuda.threadIdx reads) and its linear id (what cuda.laneid reads)
    threads = [(Dim3(*p), p[0] + bx * (p[1] + by * p[2])) for p in points]

    def one_after_another() -> None:
        th: Any = threading.current_thread()  # a BlockThread: the simulator's per-thread state
        th._gpulab_epoch = 0  # barriers passed, for the instruments' access records
        for idx, lane in threads:
            th.threadIdx, th.thread_id = idx, lane
            fn(*args)
            for done in THREAD_DONE:
                done(th)

    def barrier_by_barrier() -> None:
        th: Any = threading.current_thread()
        alive = [(idx, lane, fn(*args)) for idx, lane in threads]  # generators: nothing runs before next()
        epoch = 0  # every thread still alive has passed this many barriers: one per round
        while alive:  # one round: every live thread up to its next barrier, or its end
            waiting = []
            th._gpulab_epoch = epoch
            for idx, lane, gen in alive:
                th.threadIdx, th.thread_id = idx, lane
                try:
                    next(gen)
                except StopIteration:
                    for done in THREAD_DONE:
                        done(th)
                    continue
                waiting.append((idx, lane, gen))
            alive = waiting
            epoch += 1

    def barriers_and_warp_calls() -> None:
        th: Any = threading.current_thread()
        alive = [(idx, lane, fn(*args)) for idx, lane in threads]  # generators: nothing runs before next()
        warp = InTurn(len(threads))  # warp calls yield (name, mask, ...): answered by groups
        sends: dict[int, Any] = {}  # linear id -> the result its warp call returns when it goes on
        at_barrier: dict[int, Any] = {}  # linear id -> its generator, waiting at cuda.syncthreads()
        epoch = 0  # every thread still alive has passed this many barriers
        while alive:  # one round: every thread that can go on runs up to its next barrier or warp call, or its end
            waiting = []
            th._gpulab_epoch = epoch
            for idx, lane, gen in alive:
                if lane in at_barrier or (lane not in sends and warp.waiting(lane)):
                    waiting.append((idx, lane, gen))
                    continue
                th.threadIdx, th.thread_id = idx, lane
                try:
                    op = gen.send(sends.pop(lane, None))
                except StopIteration:
                    warp.exited(lane)
                    for done in THREAD_DONE:
                        done(th)
                    continue
                if op is None:
                    at_barrier[lane] = gen
                else:
                    try:
                        warp.arrive(lane, op, _where(gen), th)
                    except RuntimeError as exc:
                        gen.throw(RuntimeError(str(exc)))  # raised at the thread's warp call: its line shows
                waiting.append((idx, lane, gen))
            alive = waiting
            try:
                sends = warp.resolve(th)
                if sends or not alive:
                    continue
                if len(at_barrier) < len(alive):  # some wait in warp calls that lanes at the barrier never make
                    where = {k: _where(g) for k, g in at_barrier.items()}
                    raise LaneError(warp.stuck_text(where), next(k for _, k, _ in alive if k not in at_barrier))
            except LaneError as exc:
                idx, lane, gen = next(t for t in alive if t[1] == exc.lane)
                th.threadIdx, th.thread_id = idx, lane
                gen.throw(RuntimeError(str(exc)))  # in the thread that waits: the traceback shows its warp call
            at_barrier.clear()  # every thread still alive is at the barrier: it opens
            epoch += 1

    if not generator:
        return one_after_another
    # only a kernel whose warp calls became yields needs the warp groups (in_turn.plan says; unknown: assume so)
    run = barriers_and_warp_calls if getattr(fn, "_gpulab_warp_yields", True) else barrier_by_barrier
    swaps = getattr(fn, "_gpulab_swaps", ())
    if not swaps:
        return run

    def with_swaps() -> None:  # device functions of other modules run in turn: their `cuda` is the simulator's
        from numba.cuda.simulator.kernel import _get_kernel_context

        with contextlib.ExitStack() as stack:
            for dev in swaps:
                stack.enter_context(swapped_modules(dev, _get_kernel_context()))
            run()

    return with_swaps


def _where(gen: Any) -> tuple[str, int]:
    """(file, line) where the generator of a thread waits: in the innermost device function it has entered (the
    line a warp call on threads names too, :func:`gpulab.simulator.warps_text.user_line`)."""
    while isinstance(gen.gi_yieldfrom, types.GeneratorType):
        gen = gen.gi_yieldfrom
    return gen.gi_code.co_filename, gen.gi_frame.f_lineno


def _join_leaving(threads: list, limit: float = 1.0) -> None:
    """After a block failed: wait (at most ``limit`` s in all) for its other threads, which the failure woke at
    their barrier or warp call, so that they seldom outlive the launch. One that does (still in a loop, or slow
    to get the CPU) notes nothing into a later recording (:mod:`gpulab.simulator.recordings`)."""
    end = time.monotonic() + limit
    for t in threads:
        t.join(max(0.0, end - time.monotonic()))


@through_stops(100)
def _abort(block: Block) -> None:
    """Abort ``block`` from its launcher, which a stop (or Ctrl-C) interrupted: again if a second stop lands inside
    the abort (:func:`~gpulab.simulator.stopping.through_stops`; the first stop is re-raised by the caller). Should
    that too be cut short, the block's waiting threads see that the launcher is gone (:meth:`Block.pause`)."""
    block.abort()


def run_block(manager: Any, grid_point: Any, *args: Any) -> None:
    """``BlockManager.run`` with :class:`Block` (see there); the threads are numba-cuda's own.

    The launching thread waits in 50 ms slices, so that an exception raised in it (Ctrl-C, or the
    harness's :class:`~gpulab.exercises.run.KernelTimeout`) arrives at once; it then aborts the block,
    releasing every thread at a barrier. A thread that ended without reporting (stopped inside gpulab's
    bookkeeping) does not keep the launcher waiting either: numba-cuda's loop checked ``is_alive``.
    """
    from numba.cuda.simulator.kernel import BlockThread

    f = manager._f
    how = plan(f)
    if how is None:

        def target() -> None:
            f(*args)

        threads = [
            BlockThread(target, manager, grid_point, point, manager._debug) for point in np.ndindex(*manager._block_dim)
        ]
    else:
        points = list(np.ndindex(*manager._block_dim))
        if _REVERSED:
            points.reverse()
        run = in_turn(how[0], how[1], points, manager._block_dim, args)
        threads = [BlockThread(run, manager, grid_point, points[0], manager._debug)]
    block = manager._gpulab_block = Block(threads, serial=how is not None)
    try:
        for t in threads:
            t.start()
        with block.lock:
            while block.alive and block.failed is None:
                if not block.cv.wait(0.05) and not block.reap() and not any(t.is_alive() for t in threads):
                    break
    except BaseException:
        _abort(block)
        raise
    if block.failed is not None:
        _join_leaving(threads)
        exc = block.failed.exception
        raise exc[0].with_traceback(exc[1])
    for t in threads:  # as numba-cuda: an exception set just before a thread ended
        if t.exception:
            raise t.exception[0].with_traceback(t.exception[1])
