"""Where a warp call or a barrier waits, in words: the lines and lanes the simulator's warp messages name."""

from __future__ import annotations

import linecache
import os
import sys
import threading
from typing import Any

__all__ = ["WARP", "describe_waits", "lanes_text", "line_text", "stuck_message", "stuck_text", "user_line"]

WARP = 32
_HERE = os.path.dirname(os.path.abspath(__file__))


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


def line_text(where: tuple[str, int]) -> str:
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
            waits[t.thread_id] = f"in cuda.{a.name} (mask {a.mask:#010x}) at {line_text(a.where)}"
        elif t.thread_id in block.at_barrier and (frame := frames.get(t.ident)) is not None:
            waits[t.thread_id] = f"at cuda.syncthreads() at {line_text(user_line(frame))}"
    return waits


def stuck_message(waits: dict[int, str]) -> str:
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


def stuck_text(block: Any) -> str:
    return stuck_message(describe_waits(block))
