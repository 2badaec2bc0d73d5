"""Warp functions for blocks whose threads run in turn (:func:`gpulab.simulator.blocks.in_turn`).

A kernel whose warp calls are written ``cuda.NAME(...)`` in its body or in the device functions it calls is
recompiled as a generator (:mod:`gpulab.simulator.in_turn_source`): each call yields ``(name, mask, value, arg)``,
from the device function's generator through the kernel's (``yield from``). The block runs every thread to
its next barrier or warp call, then :meth:`InTurn.resolve` answers every group whose lanes are all there, with
the rules and results of :mod:`gpulab.simulator.warps` (which runs the same calls on Python threads).
"""

from __future__ import annotations

from typing import Any


from .warps import FULL, ON_CALL, _Arrival, _Warp, mask_error
from .warps_text import WARP, line_text, stuck_message

__all__ = ["InTurn", "LaneError"]


class LaneError(RuntimeError):
    """An error of thread ``lane`` (linear id in the block) found while its block runs in turn: raised inside
    that thread's code, at its warp call, so that the traceback and the harness show the kernel's line."""

    def __init__(self, message: str, lane: int) -> None:
        super().__init__(message)
        self.lane = lane


class InTurn:
    """Warp functions for a block whose threads run in turn (:func:`gpulab.simulator.blocks.in_turn`): each
    thread runs to its next barrier or warp call, then :meth:`resolve` answers every group whose lanes have all
    made the same call. Same rules and messages as the threads' version above."""

    def __init__(self, n_threads: int) -> None:
        self.n_threads = n_threads
        self.warps: dict[int, _Warp] = {}

    def _warp(self, lin: int) -> tuple[_Warp, int, int, int]:
        w, lane = divmod(lin, WARP)
        warp = self.warps.get(w)
        if warp is None:
            warp = self.warps[w] = _Warp()
        return warp, w, lane, min(WARP, self.n_threads - w * WARP)

    def arrive(self, lin: int, op: tuple, where: tuple[str, int], th: Any) -> None:
        """Thread ``lin`` yielded ``op`` = (name, mask[, value[, arg]]) at ``where``."""
        for hook in ON_CALL:
            hook(op[0])
        name, mask = op[0], int(op[1]) & FULL
        warp, w, lane, lanes_here = self._warp(lin)
        if not mask >> lane & 1 and name != "activemask":
            raise mask_error(name, mask, where, lane, th)
        warp.add(lane, _Arrival(name, mask, op[2] if len(op) > 2 else None, op[3] if len(op) > 3 else None, where))

    def exited(self, lin: int) -> None:
        warp, _, lane, _ = self._warp(lin)
        warp.exited.add(lane)

    def waiting(self, lin: int) -> bool:
        warp = self.warps.get(lin // WARP)
        return warp is not None and lin % WARP in warp.pending

    def resolve(self, th: Any) -> dict[int, Any]:
        """Linear thread id -> result for every group that can be answered now (module docstring's rules), when
        every thread waits or has returned."""
        out: dict[int, Any] = {}
        for w, warp in self.warps.items():
            before = len(out)
            lanes_here = min(WARP, self.n_threads - w * WARP)
            for key in list(warp.calls):
                ready = warp.ready(key, lanes_here)
                if ready:
                    out.update((w * WARP + m, r) for m, r in warp.answer(ready, lanes_here, w, th.blockIdx).items())
            if len(out) == before:  # the warp's lanes all wait or have returned: answer its activemask calls
                out.update((w * WARP + m, r) for m, r in warp.answer_activemask().items())
        return out

    def stuck_text(self, at_barrier: dict[int, tuple[str, int]]) -> str:
        """No group can be answered and not every thread waits at the barrier (``at_barrier``: id -> where)."""
        waits = {lin: f"at cuda.syncthreads() at {line_text(where)}" for lin, where in at_barrier.items()}
        for w, warp in self.warps.items():
            for lane, a in warp.pending.items():
                waits[w * WARP + lane] = f"in cuda.{a.name} (mask {a.mask:#010x}) at {line_text(a.where)}"
        return stuck_message(waits)
