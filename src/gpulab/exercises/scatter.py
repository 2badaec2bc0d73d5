"""A scatter with ``+=``: several threads adding into one output element (a read, then a write, no atomics) while the
outputs are not zeroed for the kernel. :func:`gpulab.exercises.races.race_verdict` asks this before it reads two
writers of one element as two threads that computed the same index."""

from __future__ import annotations

from typing import Any

__all__ = ["SCATTER_HINT", "scatter_into_unset"]

SCATTER_HINT = (
    "A scatter: each thread adds its contribution into the output elements it touches. On a GPU those "
    "read-modify-writes race (two threads read the same old value and one addition is lost), and the output starts "
    "as whatever its memory held, not 0. Turn it around and gather: one thread per output element finds the values "
    "that contribute to it, sums them in a local variable and writes its element once with `=` (no race, no "
    "zeroing, the same result every run). Zeroing the output and using cuda.atomic.add also works, more slowly."
)


def scatter_into_unset(out_log: list, runner: Any, shape_of: Any, launch_s: str) -> tuple[str, str] | None:
    """(message, hint) when two or more threads each read, then wrote, one output element without atomics (``+=``)
    and outputs are not zeroed (``out_init`` None), in an exercise whose outputs are sums (``reduction``) and on more
    than one element (all threads adding into one element is a wrong index, or a reduction's own story); None
    otherwise. ``shape_of(name, index)`` formats an index."""
    if runner.p.out_init is not None or runner.p.reduction is None:
        return None
    readers: dict[tuple, set] = {}
    writers: dict[tuple, list] = {}
    for a in out_log:
        if a.atomic:
            continue
        if a.kind == "r":
            readers.setdefault((a.array, a.index), set()).add((a.thread, a.block))
        elif a.kind == "w" and (a.thread, a.block) not in writers.setdefault((a.array, a.index), []):
            writers[(a.array, a.index)].append((a.thread, a.block))
    if len(writers) < 2:
        return None
    for (name, index), who in writers.items():
        if len(who) >= 2 and set(who) <= readers.get((name, index), set()):
            (t1, b1), (t2, b2) = who[:2]
            elem = f"{name}[{shape_of(name, index)}]"
            return (
                f"thread {t1} of block {b1} and thread {t2} of block {b2} both added into {elem} with `+=` (a read, "
                f"then a write, not atomic), and {name} is not zeroed before the launch ({launch_s})",
                SCATTER_HINT,
            )
    return None
