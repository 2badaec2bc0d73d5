"""Memory nobody set, seen in the access log of :func:`.races.race_verdict`'s run. Asked for a wrong result only (a
correct kernel may read elements it then ignores), before race_verdict reads two writers of one element as two
threads that computed the same index:

* a read of a shared-array element that no thread of its block wrote (:func:`read_never_written`);
* an output element changed only by ``cuda.atomic.*`` while outputs are not zeroed for the kernel: the atomics added
  to whatever the element held (:func:`atomic_into_unset`);
* a scatter with ``+=``: several threads adding into one output element (a read, then a write, no atomics) while the
  outputs are not zeroed (:func:`scatter_into_unset`).
"""

from __future__ import annotations

import linecache
from typing import Any

import numpy as np

from .problem import Case

__all__ = [
    "ATOMIC_UNSET_HINT",
    "SCATTER_HINT",
    "UNSET_SHARED_HINT",
    "atomic_into_unset",
    "read_never_written",
    "scatter_into_unset",
    "subscript",
    "unset_verdict",
]


def subscript(index: int, shape: tuple) -> str:
    """The flat ``index`` of an array of ``shape`` as its subscript: ``"2, 3"``."""
    return ", ".join(str(int(v)) for v in np.unravel_index(index, shape))


def unset_verdict(ins: Any, out_log: list, runner: Any, case: Case, launch_s: str) -> tuple[str, str] | None:
    """(message, hint) for the first of this module's findings in a watched run (``ins``: its
    :class:`gpulab.simulator.Instruments`, ``out_log``: its output accesses), or None."""

    def shape_of(name: str, index: int) -> str:
        return subscript(index, case.expected[runner.names.index(name)].shape)

    return (
        read_never_written(ins, launch_s)
        or atomic_into_unset(out_log, runner, case, launch_s)
        or scatter_into_unset(out_log, runner, shape_of, launch_s)
    )


UNSET_SHARED_HINT = (
    "Shared memory starts as whatever was in it (on a GPU; in the simulator floats start as nan, integers as "
    "0xBAADF00D, which is what your result shows): write every element before any thread reads it, e.g. 0 into "
    "the slots past the end of the data (`buf[tx] = x[i] if i < n else float32(0)`) or into a histogram's bins, "
    "or read only the elements that were written (`warp_sums[lane] if lane < TPB // 32 else float32(0.0)`)."
)


def read_never_written(ins: Any, launch_s: str) -> tuple[str, str] | None:
    """The first read of a shared-array element that no thread of its block wrote during the launch."""
    for (path, _), (label, log, shape) in ins.shared_logs.items():
        written = {(a.block, a.index) for a in log if a.kind == "w"}
        read = next((a for a in log if a.kind == "r" and (a.block, a.index) not in written), None)
        if read is not None:
            code = linecache.getline(path, read.line).strip() if read.line else ""
            at = f" at line {read.line}" + (f" (`{code}`)" if code else "") if read.line else ""
            return (
                f"thread {read.thread} of block {read.block} read {label}[{subscript(read.index, shape)}]{at}, which "
                f"no thread of its block wrote ({launch_s})",
                UNSET_SHARED_HINT,
            )
    return None


ATOMIC_UNSET_HINT = (
    "cuda.atomic.add adds to what the element already holds, and nothing set it first: a kernel's output is not "
    "zeroed for you (the check fills outputs with NaN or a huge value to show this; on a GPU they hold whatever "
    "was left in that memory). Set the element with `=` from one thread once its value is complete (e.g. lane 0 "
    "of warp 0 after the block's last step), or, where the caller may prepare the output, zero it before the "
    "launch (`cuda.to_device(np.zeros(n, np.float32))`)."
)


def atomic_into_unset(out_log: list, runner: Any, case: Case, launch_s: str) -> tuple[str, str] | None:
    """An output element changed only by atomics while outputs are not zeroed for the kernel: the atomics added
    to the fill (a wrong result only; ``out_init`` would have zeroed it)."""
    if runner.p.out_init is not None:
        return None
    stored = {(a.array, a.index) for a in out_log if a.kind == "w" and not a.atomic}
    atomics: dict[tuple[str, int], set[tuple[Any, Any]]] = {}
    for a in out_log:
        if a.kind == "w" and a.atomic and (a.array, a.index) not in stored:
            atomics.setdefault((a.array, a.index), set()).add((a.thread, a.block))
    if not atomics:
        return None
    (name, index), threads = next(iter(atomics.items()))
    k = runner.names.index(name)
    n = len(threads)
    more = f" (and {len(atomics) - 1} more elements like it)" if len(atomics) > 1 else ""
    return (
        f"{name}[{subscript(index, case.expected[k].shape)}] was only changed by cuda.atomic.* ({n} thread"
        f"{'s' if n != 1 else ''}), never set with `=`{more}, and {name} is not zeroed before the launch "
        f"({launch_s})",
        ATOMIC_UNSET_HINT,
    )


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
