"""Warp-level functions (shuffles, votes, ``syncwarp``) for the simulator's threads, with CUDA's rules.

numba-cuda's simulator has none of them: ``cuda.shfl_down_sync`` raised ``AttributeError`` there, so a warp
reduction, the way GPU reductions and softmax kernels are written today, could not run without a GPU.
:func:`install` (called by :func:`gpulab.simulator.harden`) adds them to the simulator's ``cuda``:
``shfl_sync``, ``shfl_up_sync``, ``shfl_down_sync``, ``shfl_xor_sync``, ``all_sync``, ``any_sync``, ``eq_sync``,
``ballot_sync``, ``match_any_sync``, ``match_all_sync``, ``syncwarp``, ``activemask`` and ``lanemask_lt``.

A warp is 32 consecutive threads of a block by linear thread id (``cuda.laneid`` is the id mod 32). A call
waits until every lane named in ``mask`` that has not returned has made the same call with the same mask (as
``shfl.sync``, ``vote.sync`` and ``match.sync`` do since Volta; ``syncwarp`` may be met at any line), then each
lane gets its result:

* ``shfl_down_sync`` past lane 31 and ``shfl_up_sync`` below lane 0 return the caller's own value (CUDA's
  rule); ``shfl_xor_sync`` and ``shfl_sync`` read lane ``lane ^ m`` and ``src % 32``; offsets and lanes count
  by their low 5 bits, as PTX reads them;
* a lane that takes no part (returned, outside the mask, or past the end of a partial last warp) has no
  defined value: reading it gives the simulator's filler (NaN, ``0xBAADF00D``), so the bug shows in the
  result, and :func:`undefined_reads` (used by the exercise harness) says which lane read which;
* results have numba's types: ``ballot_sync`` and ``match_*_sync`` masks int32, ``activemask`` and
  ``lanemask_lt`` uint32, votes bool; ``popc`` counts the bits of a negative int32 as a GPU does;
* where a GPU could hang or CUDA leaves the result undefined, the kernel stops with a message that names the
  lanes and the lines: a mask without the calling lane, and threads that wait for each other where none can
  go on (some lanes at a shuffle, the others at ``cuda.syncthreads()`` or at another warp call).

Blocks whose threads run in turn (:mod:`gpulab.simulator.in_turn`: warp calls written ``cuda.NAME(...)`` in the
kernel's body or in device functions it calls) answer the calls with :class:`InTurn`, round by round; other blocks
run a Python thread per CUDA thread, and the state lives in the block's :class:`~.blocks.Block`, under its lock.
``ON_CALL`` (set by :func:`gpulab.simulator.harden`) is told the name of each call (the instruments count them).
"""

from __future__ import annotations

import contextlib
import sys
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from . import recordings
from .memory import filler
from .warps_text import WARP, lanes_text, line_text, stuck_text, user_line

__all__ = [
    "FULL",
    "NAMES",
    "ON_CALL",
    "install",
    "lane_exited",
    "mask_error",
    "lanes_text",
    "settle",
    "stuck_text",
    "undefined_reads",
]

FULL = 0xFFFFFFFF
ON_CALL: list[Callable[[str], None]] = []


@dataclass
class _Arrival:
    """One lane's call, waiting for the rest of its group."""

    name: str
    mask: int
    value: Any
    arg: Any
    where: tuple[str, int]
    done: bool = False
    result: Any = None

    @property
    def key(self) -> tuple:
        """Which lanes meet: the same function with the same mask at the same call (``syncwarp``: anywhere, as on
        sm_70 and later)."""
        return (self.name, self.mask, None if self.name == "syncwarp" else self.where)


@dataclass
class _Warp:
    pending: dict[int, _Arrival] = field(default_factory=dict)  # lane -> its call, not answered yet
    exited: set[int] = field(default_factory=set)
    calls: dict[tuple, int] = field(default_factory=dict)  # (name, mask, where) -> lanes pending there (no activemask)

    def add(self, lane: int, a: _Arrival) -> None:
        self.pending[lane] = a
        if a.name != "activemask":
            self.calls[a.key] = self.calls.get(a.key, 0) + 1

    def take(self, lane: int) -> _Arrival:
        a = self.pending.pop(lane)
        if a.name != "activemask":
            self.calls[a.key] -= 1
            if not self.calls[a.key]:
                del self.calls[a.key]
        return a

    def ready(self, key: tuple, lanes_here: int) -> list[int]:
        """The lanes of the call ``key`` when every lane its mask names that has not returned is there, else []:
        shfl.sync, vote.sync and match.sync wait for the named lanes that have not exited (PTX)."""
        lanes = [m for m in _expected(key[1], lanes_here) if m not in self.exited]
        pending = self.pending
        if lanes and all(m in pending and pending[m].key == key for m in lanes):
            return lanes
        return []

    def answer_activemask(self) -> dict[int, Any]:
        """Answer every lane waiting at ``cuda.activemask()`` (when each lane of the warp waits or has returned):
        the lanes at the same call are the ones a GPU would run there together. Lane -> its mask (uint32, as numba
        types it)."""
        by_call: dict[tuple[str, int], list[int]] = {}
        for m, a in self.pending.items():
            if a.name == "activemask":
                by_call.setdefault(a.where, []).append(m)
        out: dict[int, Any] = {}
        for lanes in by_call.values():
            bits = np.uint32(sum(1 << m for m in lanes))
            for m in lanes:
                a = self.take(m)
                a.result, a.done = bits, True
                out[m] = bits
        return out

    def answer(self, lanes: list[int], lanes_here: int, w: int, block: Any) -> dict[int, Any]:
        """Take the lanes of one call out of ``pending`` and give each its result (lane -> result)."""
        group = {m: self.take(m) for m in lanes}
        out = _results(group, lanes_here, self.exited, w, block)
        for m, res in out.items():
            group[m].result, group[m].done = res, True
        return out


_EXPECTED: dict[tuple[int, int], list[int]] = {}


def _expected(mask: int, lanes_here: int) -> list[int]:
    """The lanes of ``mask`` that exist in a warp of ``lanes_here`` lanes."""
    got = _EXPECTED.get((mask, lanes_here))
    if got is None:
        got = _EXPECTED[(mask, lanes_here)] = [m for m in range(lanes_here) if mask >> m & 1]
    return got


def _undefined(value: Any) -> Any:
    """What a lane reads from a lane that took no part: the simulator's filler of ``value``'s type."""
    dt = np.asarray(value).dtype
    fill = filler(dt)
    return np.asarray(fill if fill is not None else 0).astype(dt)[()]


def _i32(bits: int) -> Any:
    """A lane mask as numba types ballot_sync and match_*_sync: int32 (lane 31's bit makes it negative)."""
    return np.array(bits, np.uint32).view(np.int32)[()]


# Open recordings of reads from lanes that took no part (:func:`undefined_reads`): (its number, its descriptions).
_READS: list[tuple[int, list[str]]] = []
_READS_LOCK = threading.Lock()
_MAX_NOTES = 8


@contextlib.contextmanager
def undefined_reads() -> Iterator[list[str]]:
    """``with undefined_reads() as notes:`` collects a description of each shuffle that read a lane taking no part
    (returned, outside the mask, missing from a partial warp): on a GPU that value is undefined, here the filler.
    Only blocks started after it began count (:mod:`gpulab.simulator.recordings`)."""
    notes: list[str] = []
    with _READS_LOCK:
        entry = (recordings.number(), notes)
        _READS.append(entry)
    try:
        yield notes
    finally:
        with _READS_LOCK:
            _READS.remove(entry)


def _note_read(a: _Arrival, lane: int, src: int, why: str, w: int, block: Any) -> None:
    th = threading.current_thread()  # a lane of ``block``: the one whose call or return answered the group
    with _READS_LOCK:
        for mark, notes in _READS:
            if len(notes) < _MAX_NOTES and recordings.belongs(mark, th):
                where = f" of block {tuple(block)}" if block is not None else ""
                notes.append(
                    f"cuda.{a.name} at {line_text(a.where)}: lane {lane} of warp {w}{where} read lane {src}, {why}"
                )


def _results(
    group: dict[int, _Arrival], lanes_here: int, exited: Any = (), w: int = 0, block: Any = None
) -> dict[int, Any]:
    """Each lane's result once every lane of ``group`` (lane -> its call) has arrived; ``exited``: the warp's
    lanes that have returned (for the note on what a lane read from them)."""
    first = next(iter(group.values()))
    name = first.name
    if name in ("shfl_sync", "shfl_up_sync", "shfl_down_sync", "shfl_xor_sync"):
        out = {}
        for lane, a in group.items():
            d = int(a.arg) & (WARP - 1)  # PTX shfl.sync reads the lane or offset from b[4:0]
            src = {
                "shfl_sync": d % WARP,
                "shfl_up_sync": lane - d,
                "shfl_down_sync": lane + d,
                "shfl_xor_sync": lane ^ d,
            }[name]
            if not 0 <= src < WARP:
                out[lane] = a.value  # past the warp's edge: the lane keeps its own value (CUDA)
            elif src in group:
                out[lane] = group[src].value
            else:  # a lane that took no part (outside the mask, or missing from a partial warp): undefined
                out[lane] = _undefined(a.value)
                if _READS:
                    why = (
                        "which did not make the call (it had returned, or a branch kept it away)"
                        if src in exited
                        else "which does not exist (the block's last warp is partial)"
                        if src >= lanes_here
                        else "which the mask leaves out"
                    )
                    _note_read(a, lane, src, why, w, block)
        return out
    preds = {lane: bool(a.value) for lane, a in group.items()}
    bits = sum(1 << lane for lane in group)
    if name == "all_sync":
        return dict.fromkeys(group, all(preds.values()))
    if name == "any_sync":
        return dict.fromkeys(group, any(preds.values()))
    if name == "eq_sync":
        return dict.fromkeys(group, len(set(preds.values())) == 1)
    if name == "ballot_sync":
        return dict.fromkeys(group, _i32(sum(1 << lane for lane, p in preds.items() if p)))
    if name == "match_any_sync":
        keys = {lane: _key(a.value) for lane, a in group.items()}
        return {lane: _i32(sum(1 << m for m, k in keys.items() if k == keys[lane])) for lane in group}
    if name == "match_all_sync":
        same = len({_key(a.value) for a in group.values()}) == 1
        return dict.fromkeys(group, (_i32(bits if same else 0), same))
    return dict.fromkeys(group)  # syncwarp


def _key(v: Any) -> Any:
    """What match.sync compares: the bits (NaN matches NaN, 0.0 does not match -0.0), as numba passes them."""
    a = np.asarray(v)
    if a.dtype.kind not in "fiub":
        return v
    return np.asarray(v, np.float64 if a.dtype.kind == "f" else np.int64).tobytes()  # numba unifies the lanes' types


def mask_error(name: str, mask: int, where: tuple[str, int], lane: int, th: Any) -> RuntimeError:
    """The error for a warp call whose mask leaves out the calling lane (CUDA: undefined)."""
    return RuntimeError(
        f"cuda.{name} at {line_text(where)}: the mask {mask:#010x} does not name the calling lane {lane} "
        f"(thread {tuple(th.threadIdx)}). On a GPU the result is undefined. The mask lists the lanes that "
        "take part, the caller among them: 0xffffffff for the whole warp."
    )


def _warp_of(block: Any, th: Any) -> tuple[_Warp, int, int, int]:
    """(state, warp number, lane, lanes in this warp) for thread ``th`` of ``block``."""
    warps = block.__dict__.setdefault("warps", {})
    w, lane = divmod(th.thread_id, WARP)
    total = len(block.threads) if not block.serial else 0
    return warps.setdefault(w, _Warp()), w, lane, min(WARP, total - w * WARP)


def _call(name: str, mask: Any, value: Any = None, arg: Any = None) -> Any:
    """Make ``name``'s call for the current simulator thread and wait for its group (module docstring)."""
    for hook in ON_CALL:
        hook(name)
    th: Any = threading.current_thread()
    block = getattr(getattr(th, "_manager", None), "_gpulab_block", None)
    where = user_line(sys._getframe(1))
    if block is None or block.serial:
        raise RuntimeError(
            f"gpulab could not run cuda.{name} at {line_text(where)}: it ran this block's threads in turn, having "
            "found no warp function in the kernel's code (reached through getattr or the like?). Call cuda."
            f"{name} by name in the kernel or in a device function it calls."
        )
    mask = int(mask) & FULL
    with block.lock:  # not block.cv: see Block.lock
        warp, w, lane, lanes_here = _warp_of(block, th)
        if not mask >> lane & 1 and name != "activemask":
            raise mask_error(name, mask, where, lane, th)
        me = _Arrival(name, mask, value, arg, where)
        warp.add(lane, me)
        ready = warp.ready(me.key, lanes_here) if name != "activemask" else []
        if ready:
            warp.answer(ready, lanes_here, w, th.blockIdx)
            block.warp_waiting -= len(ready) - 1
            block.cv.notify_all()
            return me.result
        block.warp_waiting += 1
        block.check_stuck()
        while not me.done:
            block.raise_if_stopped(th)
            block.pause()
        return me.result


def settle(block: Any) -> bool:
    """With the block's lock held: answer ``cuda.activemask()`` in each warp whose every lane has returned or
    waits (at a barrier, in a warp function, at an ``activemask``): the lanes waiting at the same ``activemask``
    call are the ones a GPU would run there together. True if some lanes were let go."""
    released = False
    for w, warp in block.__dict__.get("warps", {}).items():
        if not any(a.name == "activemask" for a in warp.pending.values()):
            continue
        lanes_here = min(WARP, len(block.threads) - w * WARP)
        waiting = set(warp.pending) | warp.exited | {t % WARP for t in block.at_barrier if t // WARP == w}
        if not all(m in waiting for m in range(lanes_here)):
            continue
        block.warp_waiting -= len(warp.answer_activemask())
        released = True
    if released:
        block.cv.notify_all()
    return released


def lane_exited(block: Any, th: Any) -> None:
    """Note that thread ``th`` of ``block`` returned (called with the block's lock held)."""
    if block.serial:
        return
    warp, w, lane, lanes_here = _warp_of(block, th)  # also before any warp call: later calls must not wait for it
    warp.exited.add(lane)
    for key in list(warp.calls):  # calls that waited only for this lane go on without it (PTX: exited lanes)
        ready = warp.ready(key, lanes_here)
        if ready:
            warp.answer(ready, lanes_here, w, th.blockIdx)
            block.warp_waiting -= len(ready)


def install() -> None:
    """Give the simulator's ``cuda`` module the warp functions (idempotent)."""
    from numba.cuda.simulator import kernelapi

    cls = kernelapi.FakeCUDAModule
    if getattr(cls, "_gpulab_warps", False):
        return

    def shfl(name: str) -> Any:
        def fn(self: Any, mask: Any, value: Any, arg: Any) -> Any:
            return _call(name, mask, value, arg)

        fn.__name__ = name
        return fn

    def vote(name: str) -> Any:
        def fn(self: Any, mask: Any, value: Any) -> Any:
            return _call(name, mask, value)

        fn.__name__ = name
        return fn

    for name in ("shfl_sync", "shfl_up_sync", "shfl_down_sync", "shfl_xor_sync"):
        setattr(cls, name, shfl(name))
    for name in ("all_sync", "any_sync", "eq_sync", "ballot_sync", "match_any_sync", "match_all_sync"):
        setattr(cls, name, vote(name))

    def syncwarp(self: Any, mask: Any = FULL) -> None:
        _call("syncwarp", mask)

    def activemask(self: Any) -> int:
        return _call("activemask", FULL)

    def lanemask_lt(self: Any) -> Any:
        return np.uint32((1 << threading.current_thread().thread_id % WARP) - 1)  # type: ignore[attr-defined]

    def popc(self: Any, val: Any) -> int:  # numba-cuda's counts the bits of bin(-1): 1; a GPU counts 32 for int32
        a = np.asarray(val)
        bits = int(a.view(f"u{a.itemsize}")) if a.dtype.kind == "i" else int(val) & (1 << 64) - 1
        return bin(bits).count("1")

    cls.syncwarp = syncwarp  # type: ignore[attr-defined]
    cls.activemask = activemask  # type: ignore[attr-defined]
    cls.lanemask_lt = lanemask_lt  # type: ignore[attr-defined]
    cls.popc = popc  # type: ignore[method-assign]
    cls._gpulab_warps = True  # type: ignore[attr-defined]


NAMES = (
    "shfl_sync",
    "shfl_up_sync",
    "shfl_down_sync",
    "shfl_xor_sync",
    "all_sync",
    "any_sync",
    "eq_sync",
    "ballot_sync",
    "match_any_sync",
    "match_all_sync",
    "syncwarp",
    "activemask",
    "lanemask_lt",
)
