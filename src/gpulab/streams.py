"""A timeline model of feeding a GPU: copies in, kernels and copies out on CUDA streams.

:func:`pipeline_timeline` splits the work of one kernel into ``chunks`` and issues, chunk by chunk, a copy in
(host to device, ``"h2d"``), a kernel and a copy out (``"d2h"``), chunk ``k`` on stream ``k % streams + 1``,
then waits for all of it (``cuda.synchronize()``). :func:`recorded_timeline` draws the calls a learner's
function actually made (recorded by :mod:`gpulab.simulator.streams`) under the same rules. Both return a
:class:`Timeline`; :func:`schedule` is the model itself. The rules, which are what the model assumes:

1. Calls return at once (a launch or an asynchronous copy queues work), and the operations of one stream run
   in the order they were issued, each after the previous one ended.
2. Stream 0 is the *default stream* (legacy semantics, numba's default): its operations wait for everything
   issued before them on every stream, and everything issued after them waits for them.
3. With 2 copy engines one host-to-device and one device-to-host copy can run at a time (each engine one
   copy); with 1 copy engine, one copy of either direction at a time.
4. Kernels run on the SMs one at a time in this model (a real GPU can run small kernels side by side).
5. An engine that comes free takes, among the operations ready to run, the one issued first.
6. A copy from or to *pageable* host memory (a plain NumPy array) is synchronous: the driver stages it
   through a pinned buffer and the host waits until it is done, so nothing after it is issued before it ends.
   (CUDA's documentation says such a copy *might* be synchronous with respect to the host; the model assumes it is.)
   Copies from pinned (page-locked) memory, ``cuda.pinned_array``, are asynchronous.
7. A synchronize makes the host wait until the operations it covers (one stream's, or all) have ended.

The model has no launch overhead, no bus contention between the two directions, no kernel concurrency and no
cost for allocations (CUDA lists a device memory allocation among the calls that may keep two streams' work from
overlapping): it shows how overlap arises, not how long a real GPU takes. Only a measurement says that.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

__all__ = [
    "ALL_STREAMS",
    "KINDS",
    "Op",
    "Step",
    "Timeline",
    "compare_with_model",
    "pipeline_timeline",
    "recorded_timeline",
    "schedule",
    "stream_numbers",
]

KINDS = ("h2d", "kernel", "d2h")
ALL_STREAMS = -1  # a Step("sync") on ALL_STREAMS is cuda.synchronize(): wait for every stream


class Step(NamedTuple):
    """One call of the host program, in the order issued. ``kind`` is ``"h2d"``, ``"kernel"``, ``"d2h"`` or
    ``"sync"`` (``stream`` :data:`ALL_STREAMS` for ``cuda.synchronize()``); ``blocking``: a copy the host waits
    for (pageable memory)."""

    chunk: int
    stream: int
    kind: str
    seconds: float = 0.0
    blocking: bool = False


class Op(NamedTuple):
    """One operation on the timeline: which chunk, which stream, what, and when (seconds)."""

    chunk: int
    stream: int
    kind: str
    start: float
    end: float


class Timeline(NamedTuple):
    """The operations in the order issued, and the time until the host has all results (seconds)."""

    ops: list[Op]
    total: float

    def busy(self, kind: str) -> float:
        """Seconds during which at least one operation of ``kind`` ran."""
        spans = sorted((o.start, o.end) for o in self.ops if o.kind == kind)
        busy, reach = 0.0, -math.inf
        for a, b in spans:
            busy += max(0.0, b - max(a, reach))
            reach = max(reach, b)
        return busy


def _duration(name: str, value: Any) -> float:
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a duration in seconds (a number), got {value!r}.") from None
    if not math.isfinite(v) or v < 0:
        raise ValueError(f"{name} must be a finite duration >= 0 seconds, got {value!r}.")
    return v


def _count(name: str, value: Any, low: int, high: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < low or (high is not None and value > high):
        span = f"{low} or {high}" if high == low + 1 else (f"{low}..{high}" if high else f">= {low}")
        raise ValueError(f"{name} must be a whole number {span}, got {value!r}.")
    return value


def schedule(steps: Sequence[Step], copy_engines: int = 2) -> Timeline:
    """Run the host program ``steps`` under the model's rules (module docstring) and return its timeline.

    An event-driven simulation: the host issues calls until one makes it wait (a pageable copy, a
    synchronize); every time an operation ends, each free engine starts the first-issued operation that is
    ready. Syncs are not drawn; the total is the time the host is done (its last wait, or the last op)."""
    _count("copy_engines", copy_engines, 1, 2)
    for k, st in enumerate(steps):
        if st.kind not in (*KINDS, "sync"):
            raise ValueError(f"step {k}: kind must be one of {(*KINDS, 'sync')}, got {st.kind!r}.")
        if st.stream < 0 and not (st.kind == "sync" and st.stream == ALL_STREAMS):
            raise ValueError(f"step {k}: stream must be 0 (the default stream) or more, got {st.stream!r}.")
        _duration(f"step {k}: seconds", st.seconds)
    n = len(steps)
    deps: list[list[int]] = [[] for _ in range(n)]
    last_on: dict[int, int] = {}
    last_default: int | None = None
    for i, st in enumerate(steps):
        if st.kind == "sync":
            continue
        if st.stream == 0:  # rule 2: waits for everything before it
            deps[i] = [j for j in range(i) if steps[j].kind != "sync"]
            last_default = i
        else:
            deps[i] = [j for j in (last_on.get(st.stream), last_default) if j is not None]
        last_on[st.stream] = i

    def engine(st: Step) -> str:
        return "sm" if st.kind == "kernel" else ("copy" if copy_engines == 1 else st.kind)

    start: list[float | None] = [None] * n
    end: list[float | None] = [None] * n
    free: dict[str, float] = {}
    pending: list[int] = []
    waiting: list[int] | None = None  # what the host waits for
    t, i, host_done = 0.0, 0, 0.0

    def done(j: int) -> bool:
        e = end[j]
        return e is not None and e <= t

    while True:
        while i < n and waiting is None:  # the host issues calls until one makes it wait
            st = steps[i]
            if st.kind == "sync":
                waiting = [
                    j for j in range(i) if steps[j].kind != "sync" and st.stream in (ALL_STREAMS, steps[j].stream)
                ]
            else:
                pending.append(i)
                if st.blocking:
                    waiting = [i]
            i += 1
        started = True
        while started:  # rule 5: each free engine takes the first-issued ready operation
            started = False
            for j in list(pending):
                res = engine(steps[j])
                if free.get(res, 0.0) <= t and all(done(d) for d in deps[j]):
                    start[j], end[j] = t, t + steps[j].seconds
                    free[res] = t + steps[j].seconds
                    pending.remove(j)
                    started = True
        if waiting is not None and all(done(j) for j in waiting):
            waiting, host_done = None, t
            continue
        if i >= n and not pending and waiting is None:
            break
        later = [e for e in end if e is not None and e > t]
        if not later:  # cannot happen: an op that is not ready waits for one that runs
            raise RuntimeError("stream model stalled: no operation running and none ready")
        t = min(later)
    ops = [
        Op(st.chunk, st.stream, st.kind, float(start[j] or 0.0), float(end[j] or 0.0))
        for j, st in enumerate(steps)
        if st.kind != "sync"
    ]
    return Timeline(ops, max([host_done, *(o.end for o in ops)]))


def pipeline_timeline(
    chunks: int,
    h2d_s: float,
    kernel_s: float,
    d2h_s: float,
    streams: int = 1,
    copy_engines: int = 2,
    pinned: bool = True,
) -> Timeline:
    """The timeline of a chunked pipeline: per chunk a copy in of ``h2d_s`` seconds, a kernel of ``kernel_s``
    and a copy out of ``d2h_s``, chunk ``k`` on stream ``k % streams + 1``, issued chunk by chunk, then
    ``cuda.synchronize()``. ``pinned=False``: the host memory is pageable, so every copy is synchronous (rule 6)
    and nothing overlaps. With 4 chunks of 2, 1 and 2 ms: 20 ms on 1 stream, 11 ms on 4 streams.

    Raises ValueError for a count that is not a whole number in range or a negative or non-finite duration."""
    _count("chunks", chunks, 1)
    _count("streams", streams, 1)
    _count("copy_engines", copy_engines, 1, 2)
    h2d, kern, d2h = _duration("h2d_s", h2d_s), _duration("kernel_s", kernel_s), _duration("d2h_s", d2h_s)
    steps = []
    for k in range(chunks):
        s = k % streams + 1
        steps += [
            Step(k, s, "h2d", h2d, not pinned),
            Step(k, s, "kernel", kern),
            Step(k, s, "d2h", d2h, not pinned),
        ]
    return schedule([*steps, Step(-1, ALL_STREAMS, "sync")], copy_engines)


def recorded_timeline(
    records: Sequence[Any], *, h2d_gbps: float, d2h_gbps: float, kernel_s: float, copy_engines: int = 2
) -> Timeline:
    """The timeline of the calls a function made, as :mod:`gpulab.simulator.streams` recorded them
    (``Instruments.stream_ops``): copies take their bytes over ``h2d_gbps`` / ``d2h_gbps`` (GB/s, 10^9 bytes
    per second: an estimate you choose, nothing is timed), each kernel ``kernel_s`` seconds; a copy of pageable
    memory is synchronous. Streams are numbered in the order first used (0: the default stream); an operation's
    chunk is the kernel it belongs to (copies in: the next kernel launched, copies out: the last kernel on
    their stream)."""
    for name, v in (("h2d_gbps", h2d_gbps), ("d2h_gbps", d2h_gbps)):
        if _duration(name, v) <= 0:
            raise ValueError(f"{name} must be a bandwidth > 0 GB/s, got {v!r}.")
    kern = _duration("kernel_s", kernel_s)
    numbers = stream_numbers(records)
    steps: list[Step] = []
    launched = 0
    last_kernel: dict[int, int] = {}
    for r in records:
        s = ALL_STREAMS if r.kind == "sync" and r.stream is None else numbers[id(r.stream)]
        if r.kind == "h2d":
            steps.append(Step(launched, s, "h2d", r.nbytes / (h2d_gbps * 1e9), not r.pinned))
        elif r.kind == "d2h":
            steps.append(
                Step(last_kernel.get(s, max(launched - 1, 0)), s, "d2h", r.nbytes / (d2h_gbps * 1e9), not r.pinned)
            )
        elif r.kind == "kernel":
            steps.append(Step(launched, s, "kernel", kern))
            last_kernel[s] = launched
            launched += 1
        elif r.kind == "sync":
            steps.append(Step(-1, s, "sync"))
        else:
            raise ValueError(f"a recorded operation must be h2d, d2h, kernel or sync, got {r.kind!r}.")
    return schedule(steps, copy_engines)


def stream_numbers(records: Sequence[Any]) -> dict[int, int]:
    """``id(stream) -> number`` for the streams of ``records``, numbered from 1 in the order first used; the
    default stream (``0``, ``None`` or ``cuda.default_stream()``) is 0."""
    out: dict[int, int] = {id(0): 0, id(None): 0}
    for r in records:
        s = r.stream
        if s is None or getattr(s, "_gpulab_default", False) or (isinstance(s, int) and s == 0):
            out[id(r.stream)] = 0
        elif id(r.stream) not in out:
            out[id(r.stream)] = len({v for v in out.values() if v}) + 1
    return out


def compare_with_model(
    measured: Mapping[int, float],
    model: Mapping[int, float],
    *,
    chunk_s: tuple[float, float, float] | None = None,
    tolerance: float = 0.15,
) -> list[str]:
    """Lines that set measured pipeline times against the model's, ``{streams: seconds}`` each, for the stream
    counts both have, then one verdict comparing the fewest streams with the most: the two agree (every time
    within ``tolerance`` of the model's), the streams saved less than half of what the model predicts (the overlap
    it assumes did not happen, with what would tell why), they saved more than it predicts, or the saving agrees
    but the times do not.
    ``chunk_s``: one chunk's copy in, kernel and copy out, each timed alone (the model's inputs).

    Raises ValueError when the two share fewer than two stream counts."""
    counts = sorted(set(measured) & set(model))
    if len(counts) < 2:
        raise ValueError(
            f"compare_with_model needs times for at least two stream counts in both, got measured for "
            f"{sorted(measured)} and the model for {sorted(model)}."
        )
    lines = [
        f"{k} stream{'s' if k > 1 else ''}: measured {measured[k] * 1e3:.2f} ms, the model {model[k] * 1e3:.2f} ms "
        f"({measured[k] / model[k]:.2f}x the model)"
        for k in counts
    ]
    lo, hi = counts[0], counts[-1]
    got, want = measured[lo] / measured[hi], model[lo] / model[hi]
    if all(abs(measured[k] / model[k] - 1) <= tolerance for k in counts):
        lines.append(
            f"Measured and model agree within {tolerance:.0%}: {hi} streams took {got:.2f}x less time than {lo} "
            f"(the model: {want:.2f}x), so the copies and kernels overlapped as the model assumes."
        )
    elif got - 1 < (want - 1) / 2:
        verdict = (
            f"They disagree: the model says {hi} streams take {want:.2f}x less time than {lo}, the measurement "
            f"{got:.2f}x. The overlap the model assumes (one chunk's copy in, another's kernel and a third's copy out "
            f"at the same time) did not happen at full speed on this machine; these times do not say why."
        )
        if chunk_s is not None and chunk_s[1] < 0.25 * sum(chunk_s):
            verdict += (
                f" The kernel is {chunk_s[1] / sum(chunk_s):.0%} of a chunk's time, so most of the saving the model "
                "counts on is the copy in running at the same time as the copy out."
            )
        verdict += (
            " What would tell: time a chunk's copy in and its copy out alone, then both at once on two streams; if "
            "at once they take about the sum of the two, the two directions do not run at full speed together here "
            "(the model assumes they do)."
        )
        lines.append(verdict)
    elif got > want * (1 + tolerance):
        lines.append(
            f"{hi} streams saved more than the model predicts ({got:.2f}x less time than {lo}, the model {want:.2f}x): "
            "its inputs (each chunk's operations timed alone) or its rules do not fit this machine."
        )
    else:
        lines.append(
            f"The saving agrees with the model ({hi} streams {got:.2f}x faster than {lo}, the model {want:.2f}x), "
            f"but the times differ from it by more than {tolerance:.0%}: a chunk timed alone took a different time "
            "from a chunk inside the pipeline."
        )
    return lines
