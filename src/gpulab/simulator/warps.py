"""Warp-level functions (shuffles, votes, ``syncwarp``) for the simulator's threads, with CUDA's rules.

numba-cuda's simulator has none of them: ``cuda.shfl_down_sync`` raised ``AttributeError`` there, so a warp
reduction, the way GPU reductions and softmax kernels are written today, could not run without a GPU.
:func:`install` (called by :func:`gpulab.simulator.harden`) adds them to the simulator's ``cuda``:
``shfl_sync``, ``shfl_up_sync``, ``shfl_down_sync``, ``shfl_xor_sync``, ``all_sync``, ``any_sync``, ``eq_sync``,
``ballot_sync``, ``match_any_sync``, ``match_all_sync``, ``syncwarp``, ``activemask`` and ``lanemask_lt``.

A warp is 32 consecutive threads of a block by linear thread id (``cuda.laneid`` is the id mod 32). A call
waits until every lane named in ``mask`` has made the same call, as ``__shfl_sync`` does on a GPU since
Volta, then each lane gets its result:

* ``shfl_down_sync`` past lane 31 and ``shfl_up_sync`` below lane 0 return the caller's own value (CUDA's
  rule); ``shfl_xor_sync`` and ``shfl_sync`` read lane ``lane ^ m`` and ``src % 32``;
* a lane that takes no part (outside the mask, or past the end of a partial last warp) has no defined
  value: reading it gives the simulator's filler (NaN, ``0xBAADF00D``), so the bug shows in the result;
* what CUDA leaves undefined, and a GPU may hang on, stops the kernel with a message that names the lanes
  and the lines: a lane named in the mask that has returned (an ``if i < n:`` guard around a shuffle),
  a mask without the calling lane, lanes of one warp at different calls or with different masks, and
  threads that wait for each other where none can go on (some lanes at a shuffle, the others at
  ``cuda.syncthreads()``).

Only blocks whose threads run as Python threads can do this (:mod:`gpulab.simulator.in_turn` keeps every
kernel that names a warp function there). The state lives in the block's :class:`~.blocks.Block`, under
its lock; ``ON_CALL`` (set by :func:`gpulab.simulator.harden`) is told the name of each call (the
instruments count them).
"""

from __future__ import annotations

import linecache
import os
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .memory import filler

__all__ = [
    "FULL",
    "InTurn",
    "LaneError",
    "NAMES",
    "ON_CALL",
    "describe_waits",
    "install",
    "lane_exited",
    "lanes_text",
    "settle",
    "stuck_text",
    "waits_for_exited",
]

FULL = 0xFFFFFFFF
WARP = 32
ON_CALL: list[Callable[[str], None]] = []
_HERE = os.path.dirname(os.path.abspath(__file__))


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


@dataclass
class _Warp:
    pending: dict[int, _Arrival] = field(default_factory=dict)  # lane -> its call, not answered yet
    exited: set[int] = field(default_factory=set)
    calls: dict[tuple, int] = field(default_factory=dict)  # (name, mask, where) -> lanes pending there (no activemask)

    def add(self, lane: int, a: _Arrival) -> None:
        self.pending[lane] = a
        if a.name != "activemask":
            key = (a.name, a.mask, a.where)
            self.calls[key] = self.calls.get(key, 0) + 1

    def take(self, lane: int) -> _Arrival:
        a = self.pending.pop(lane)
        if a.name != "activemask":
            key = (a.name, a.mask, a.where)
            self.calls[key] -= 1
            if not self.calls[key]:
                del self.calls[key]
        return a


_EXPECTED: dict[tuple[int, int], list[int]] = {}


def _expected(mask: int, lanes_here: int) -> list[int]:
    """The lanes of ``mask`` that exist in a warp of ``lanes_here`` lanes."""
    got = _EXPECTED.get((mask, lanes_here))
    if got is None:
        got = _EXPECTED[(mask, lanes_here)] = [m for m in range(lanes_here) if mask >> m & 1]
    return got


def _skip_dirs() -> tuple[str, ...]:
    from numba.cuda import simulator as sim

    return (_HERE, os.path.dirname(os.path.abspath(sim.__file__)), os.path.abspath(threading.__file__))


def user_line(frame: Any) -> tuple[str, int]:
    """(file, line) of the first frame from ``frame`` outwards that is not the simulator's own code."""
    skip = _skip_dirs()
    f = frame
    while f is not None and os.path.abspath(f.f_code.co_filename).startswith(skip):
        f = f.f_back
    return (f.f_code.co_filename, f.f_lineno) if f is not None else ("?", 0)


def _line_text(where: tuple[str, int]) -> str:
    code = linecache.getline(where[0], where[1]).strip()
    return f"line {where[1]}" + (f" `{code}`" if code else "")


def lanes_text(lanes: Any) -> str:
    """``[0, 1, 2, 5]`` -> ``"lanes 0-2, 5"``."""
    lanes = sorted(lanes)
    runs: list[str] = []
    i = 0
    while i < len(lanes):
        j = i
        while j + 1 < len(lanes) and lanes[j + 1] == lanes[j] + 1:
            j += 1
        runs.append(str(lanes[i]) if i == j else f"{lanes[i]}-{lanes[j]}")
        i = j + 1
    return ("lane " if len(lanes) == 1 else "lanes ") + ", ".join(runs)


def _undefined(value: Any) -> Any:
    """What a lane reads from a lane that took no part: the simulator's filler of ``value``'s type."""
    dt = np.asarray(value).dtype
    fill = filler(dt)
    return np.asarray(fill if fill is not None else 0).astype(dt)[()]


def _results(group: dict[int, _Arrival], lanes_here: int) -> dict[int, Any]:
    """Each lane's result once every lane of ``group`` (lane -> its call) has arrived."""
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
        return dict.fromkeys(group, sum(1 << lane for lane, p in preds.items() if p))
    if name == "match_any_sync":
        keys = {lane: _key(a.value) for lane, a in group.items()}
        return {lane: sum(1 << m for m, k in keys.items() if k == keys[lane]) for lane in group}
    if name == "match_all_sync":
        same = len({_key(a.value) for a in group.values()}) == 1
        return dict.fromkeys(group, (bits if same else 0, same))
    return dict.fromkeys(group)  # syncwarp


def _key(v: Any) -> Any:
    """What match.sync compares: the bits (NaN matches NaN, 0.0 does not match -0.0), as numba passes them."""
    a = np.asarray(v)
    if a.dtype.kind not in "fiub":
        return v
    return np.asarray(v, np.float64 if a.dtype.kind == "f" else np.int64).tobytes()  # numba unifies the lanes' types


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
            f"gpulab could not run cuda.{name} at {_line_text(where)}: it ran this block's threads in turn, having "
            "found no warp function in the kernel's code (reached through getattr or the like?). Call cuda."
            f"{name} by name in the kernel or in a device function it calls."
        )
    mask = int(mask) & FULL
    with block.cv:
        warp, w, lane, lanes_here = _warp_of(block, th)
        if not mask >> lane & 1 and name != "activemask":
            raise RuntimeError(
                f"cuda.{name} at {_line_text(where)}: the mask {mask:#010x} does not name the calling lane {lane} "
                f"(thread {tuple(th.threadIdx)}). On a GPU the result is undefined. The mask lists the lanes that "
                "take part, the caller among them: 0xffffffff for the whole warp."
            )
        me = _Arrival(name, mask, value, arg, where)
        expected = _expected(mask, lanes_here) if name != "activemask" else []
        _refuse_mismatch(block, w, warp, lane, me, expected)
        warp.add(lane, me)
        if expected and all(m in warp.pending and _same(warp.pending[m], me) for m in expected):
            group = {m: warp.take(m) for m in expected}
            for m, res in _results(group, lanes_here).items():
                group[m].result, group[m].done = res, True
            block.warp_waiting -= len(group) - 1
            block.cv.notify_all()
            return me.result
        block.warp_waiting += 1
        block.check_stuck()
        while not me.done:
            gone = [m for m in expected if m in warp.exited]
            if gone:
                raise RuntimeError(_exited_text(name, mask, where, w, gone, th))
            block.raise_if_stopped(th)
            block.cv.wait()
        return me.result


def _same(a: _Arrival, b: _Arrival) -> bool:
    return (a.name, a.mask, a.where) == (b.name, b.mask, b.where)


def _refuse_mismatch(block: Any, w: int, warp: _Warp, lane: int, me: _Arrival, expected: list[int]) -> None:
    if warp.exited:
        gone = [m for m in expected if m in warp.exited]
        if gone:
            raise RuntimeError(_exited_text(me.name, me.mask, me.where, w, gone, threading.current_thread()))
    # Lanes at another call are not refused here: on a GPU (sm_70+) a lane waits at its call while the lanes it
    # names finish other warp calls among themselves (a reduction over a sub-mask, then a whole-warp shuffle). Calls
    # that can never meet leave every thread waiting: the block's wait-none-can-leave check names them.


def _exited_text(name: str, mask: int, where: tuple[str, int], w: int, gone: list[int], th: Any) -> str:
    return (
        f"cuda.{name} at {_line_text(where)} waits for {lanes_text(gone)} of warp {w} (block "
        f"{tuple(th.blockIdx)}), which the mask {mask:#010x} names but which returned before the call. On a GPU "
        "the result is undefined (it can hang). Every lane in the mask must reach the call: instead of returning "
        "early (`if i < n:` around the shuffle), let every lane take part with a neutral value, e.g. "
        "`v = x[i] if i < n else float32(0)`."
    )


def describe_waits(block: Any) -> dict[int, str]:
    """Linear thread id -> where it waits, for every thread of ``block`` still running (lock held)."""
    frames = sys._current_frames()
    waits: dict[int, str] = {}
    pending = {
        (w * WARP + lane): a for w, warp in block.__dict__.get("warps", {}).items() for lane, a in warp.pending.items()
    }
    for t in block.threads:
        if not t.is_alive() or t.ident is None:
            continue
        a = pending.get(t.thread_id)
        if a is not None:
            waits[t.thread_id] = f"in cuda.{a.name} (mask {a.mask:#010x}) at {_line_text(a.where)}"
        elif (frame := frames.get(t.ident)) is not None:
            waits[t.thread_id] = f"at cuda.syncthreads() at {_line_text(user_line(frame))}"
    return waits


def _stuck_message(waits: dict[int, str]) -> str:
    """The message when no thread can go on; ``waits``: linear thread id -> where it waits."""
    by_what: dict[str, dict[int, list[int]]] = {}
    for lin, what in sorted(waits.items()):
        by_what.setdefault(what, {}).setdefault(lin // WARP, []).append(lin % WARP)
    parts = []
    for what, per_warp in by_what.items():
        whole = [w for w, lanes in per_warp.items() if len(lanes) == WARP]
        who = [f"warp {w} {lanes_text(lanes)}" for w, lanes in per_warp.items() if len(lanes) < WARP]
        if whole:
            who.append(f"warp {whole[0]}" if len(whole) == 1 else f"warps {lanes_text(whole)[6:]}")
        one = len(per_warp) == 1 and sum(len(v) for v in per_warp.values()) == 1
        parts.append(f"{', '.join(who)} wait{'s' if one else ''} {what}")
    calls: dict[int, set[str]] = {}
    for lin, what in waits.items():
        if what.startswith("in cuda."):
            calls.setdefault(lin // WARP, set()).add(what)
    split = [w for w, c in sorted(calls.items()) if len(c) > 1]
    lead = (
        f"lanes of warp {split[0]} met at different warp calls (each lane named in a mask must make the same call "
        "with the same mask; take the call out of branches that lanes take differently), and "
        if split
        else ""
    )
    return (
        lead
        + "the threads of this block wait for each other and none can go on: "
        + "; ".join(parts)
        + ". On a GPU this kernel hangs or computes garbage. Every lane named in a warp function's mask must reach "
        "that same call before any thread of the block waits at cuda.syncthreads(): a guard such as `if i < n:` "
        "around the shuffles keeps lanes from them; let every lane take part with a neutral value instead, e.g. "
        "`v = x[i] if i < n else float32(0)`."
    )


def waits_for_exited(block: Any) -> bool:
    """Whether a lane waits in a warp function for a lane that returned (it raises, naming that lane)."""
    for warp in block.__dict__.get("warps", {}).values():
        for a in warp.pending.values():
            if a.name != "activemask" and any(a.mask >> m & 1 for m in warp.exited):
                return True
    return False


def stuck_text(block: Any) -> str:
    return _stuck_message(describe_waits(block))


def settle(block: Any) -> bool:
    """With the block's lock held: answer ``cuda.activemask()`` in each warp whose every lane has returned or
    waits (at a barrier, in a warp function, at an ``activemask``): the lanes waiting at the same ``activemask``
    call are the ones a GPU would run there together. True if some lanes were let go."""
    released = False
    for w, warp in block.__dict__.get("warps", {}).items():
        asking = {m: a for m, a in warp.pending.items() if a.name == "activemask"}
        if not asking:
            continue
        lanes_here = min(WARP, len(block.threads) - w * WARP)
        waiting = set(warp.pending) | warp.exited | {t % WARP for t in block.at_barrier if t // WARP == w}
        if not all(m in waiting for m in range(lanes_here)):
            continue
        by_call: dict[tuple[str, int], list[int]] = {}
        for m, a in asking.items():
            by_call.setdefault(a.where, []).append(m)
        for lanes in by_call.values():
            bits = sum(1 << m for m in lanes)
            for m in lanes:
                a = warp.take(m)
                a.result, a.done = bits, True
            block.warp_waiting -= len(lanes)
        released = True
    if released:
        block.cv.notify_all()
    return released


def lane_exited(block: Any, th: Any) -> None:
    """Note that thread ``th`` of ``block`` returned (called with the block's lock held)."""
    if block.__dict__.get("warps") is None or block.serial:
        return
    warp, _, lane, _ = _warp_of(block, th)
    warp.exited.add(lane)


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
        return self.warps.setdefault(w, _Warp()), w, lane, min(WARP, self.n_threads - w * WARP)

    def arrive(self, lin: int, op: tuple, where: tuple[str, int], th: Any) -> None:
        """Thread ``lin`` yielded ``op`` = (name, mask[, value[, arg]]) at ``where``."""
        for hook in ON_CALL:
            hook(op[0])
        name, mask = op[0], int(op[1]) & FULL
        warp, w, lane, lanes_here = self._warp(lin)
        if not mask >> lane & 1 and name != "activemask":
            raise RuntimeError(
                f"cuda.{name} at {_line_text(where)}: the mask {mask:#010x} does not name the calling lane {lane} "
                f"(thread {tuple(th.threadIdx)}). On a GPU the result is undefined. The mask lists the lanes that "
                "take part, the caller among them: 0xffffffff for the whole warp."
            )
        me = _Arrival(name, mask, op[2] if len(op) > 2 else None, op[3] if len(op) > 3 else None, where)
        expected = _expected(mask, lanes_here) if name != "activemask" else []
        _refuse_mismatch(None, w, warp, lane, me, expected)
        warp.add(lane, me)

    def exited(self, lin: int) -> None:
        warp, _, lane, _ = self._warp(lin)
        warp.exited.add(lane)

    def waiting(self, lin: int) -> bool:
        warp, _, lane, _ = self._warp(lin)
        return lane in warp.pending

    def resolve(self, th: Any) -> dict[int, Any]:
        """Linear thread id -> result for every group that can be answered now (module docstring's rules), when
        every thread waits or has returned."""
        out: dict[int, Any] = {}
        for w, warp in self.warps.items():
            before = len(out)
            lanes_here = min(WARP, self.n_threads - w * WARP)
            groups: dict[tuple, list[int]] = {}
            for lane, a in warp.pending.items():
                groups.setdefault((a.name, a.mask, a.where), []).append(lane)
            for (name, mask, where), lanes in groups.items():
                if name == "activemask":
                    continue
                expected = _expected(mask, lanes_here)
                gone = [m for m in expected if m in warp.exited]
                if gone:
                    raise LaneError(_exited_text(name, mask, where, w, gone, th), w * WARP + lanes[0])
                if all(m in lanes for m in expected):
                    group = {m: warp.take(m) for m in expected}
                    out.update((w * WARP + m, r) for m, r in _results(group, lanes_here).items())
            asking = {m: a for m, a in warp.pending.items() if a.name == "activemask"}
            if asking and len(out) == before:  # the warp's lanes all wait or have returned: answer activemask
                by_call: dict[tuple[str, int], list[int]] = {}
                for m, a in asking.items():
                    by_call.setdefault(a.where, []).append(m)
                for lanes in by_call.values():
                    for m in lanes:
                        warp.take(m)
                        out[w * WARP + m] = sum(1 << k for k in lanes)
        return out

    def stuck_text(self, at_barrier: dict[int, tuple[str, int]]) -> str:
        """No group can be answered and not every thread waits at the barrier (``at_barrier``: id -> where)."""
        waits = {lin: f"at cuda.syncthreads() at {_line_text(where)}" for lin, where in at_barrier.items()}
        for w, warp in self.warps.items():
            for lane, a in warp.pending.items():
                waits[w * WARP + lane] = f"in cuda.{a.name} (mask {a.mask:#010x}) at {_line_text(a.where)}"
        return _stuck_message(waits)


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

    def lanemask_lt(self: Any) -> int:
        return (1 << threading.current_thread().thread_id % WARP) - 1  # type: ignore[attr-defined]

    cls.syncwarp = syncwarp  # type: ignore[attr-defined]
    cls.activemask = activemask  # type: ignore[attr-defined]
    cls.lanemask_lt = lanemask_lt  # type: ignore[attr-defined]
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
