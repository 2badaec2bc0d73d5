"""One writer per output element (:attr:`Budget.writers_per_element`): a kernel that computes each element of an
output once, but whose threads write the same elements again, repeats their work.

The usual cause is a loop that ignores an axis of the launch: ``for t in range(cuda.grid(1), n,
cuda.gridsize(1))`` in a 2-D launch. ``cuda.grid(1)`` and ``cuda.gridsize(1)`` count the threads along x only, so
every row of threads runs the whole loop. The result is right (each thread writes the same values), so neither the
comparison nor the race check sees it, and in the simulator's few threads it costs little; on a GPU the launch has
about one row of threads per row of the output, and the kernel does that many times the work (the capstone's im2col
for the first convolution at batch 128: 100,352 rows). Only a trace shows it: each element's writers are counted in
the budget's traced launch (:func:`writer_checks`); in gpu mode the kernel is traced in the simulator on a small
case (:func:`gpu_writer_checks`).
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import numpy as np

from .problem import Budget, Case, Size
from .result import Check
from .run import Launch, Runner

__all__ = ["WRITERS", "gpu_writer_checks", "writer_checks"]

WRITERS = "repeated work"  # the checks' name: not a budget ("budget: ..."), so a kernel over it is "failed"


def writer_checks(log: Any, limits: dict[str, Any], size: Size, where: str) -> list[Check]:
    """One :class:`Check` per array of ``limits`` (array -> most threads that may write one element; a number or
    ``size -> number``) on the traced launch ``log``. Atomic updates are not counted: threads that add into one
    element with ``cuda.atomic.add`` share it by design."""
    checks = []
    for arr, lim in limits.items():
        limit = float(lim(size) if callable(lim) else lim)
        writers: dict[int, set] = defaultdict(set)
        for a in log.accesses:
            if a.array == arr and a.kind == "w" and not a.atomic:
                writers[a.index].add((a.block, a.thread))
        if not writers:
            checks.append(Check(WRITERS, True, f"{arr} not written without atomics ({where})"))
            continue
        flat, who = max(writers.items(), key=lambda kv: (len(kv[1]), -kv[0]))
        if len(who) <= limit:
            one = "one thread" if limit == 1 else f"at most {limit:g} threads"
            checks.append(Check(WRITERS, True, f"each element of {arr} written by {one} ({where})"))
            continue
        shape = log.shapes.get(arr, ())
        at = ", ".join(str(int(v)) for v in np.unravel_index(flat, shape)) if shape else str(flat)
        coords = sorted(tuple(b[d] * log.block[d] + t[d] for d in range(3)) for b, t in who)
        axis = _ignored_axis(coords, who)
        dims = 2 if len(shape) > 1 or log.grid[1] * log.block[1] > 1 else 1
        shown = ", ".join(str(c[:2] if dims == 2 else c[0]) for c in coords[:4])
        shown += f" and {len(coords) - 4} more" if len(coords) > 4 else ""
        differ = {"x": ", which differ only in x", "y": ", which differ only in y"}.get(axis, "")
        differ = ", the same thread of different blocks" if axis == "blocks" else differ
        label = "(x, y)" if dims == 2 else "x"
        message = (
            f"each element of {arr} should be written by {'one thread' if limit == 1 else f'{limit:g} threads'}, "
            f"but {arr}[{at}] was written by {len(who)}: the threads {label} = {shown} of the launch (their "
            f"cuda.grid({dims})){differ} ({where})."
        )
        checks.append(Check(WRITERS, False, message, _hint(arr, axis, len(shape))))
    return checks


def _ignored_axis(coords: list[tuple[int, ...]], who: set) -> str:
    """What the writers of one element differ in: "blocks" (one threadIdx in several blocks: the loop ignores
    blockIdx), else "x" or "y" alone (the loop ignores that axis of the launch), or "" (another pattern)."""
    if len({t for _, t in who}) == 1:
        return "blocks"
    varying = [d for d in range(3) if len({c[d] for c in coords}) > 1]
    return "xy"[varying[0]] if varying in ([0], [1]) else ""


def _hint(arr: str, axis: str, ndim: int) -> str:
    loop = (
        f"`j0, i0 = cuda.grid(2)` and `sj, si = cuda.gridsize(2)`, then `for i in range(i0, {arr}.shape[0], si):` "
        f"around `for j in range(j0, {arr}.shape[1], sj):` (x, the fastest index, over the columns j)"
        if ndim > 1
        else f"`for i in range(cuda.grid(1), {arr}.size, cuda.gridsize(1)):`"
    )
    why = {
        "y": "your loop ignores y: every row of threads runs the whole loop and writes every element again "
        "(`cuda.grid(1)` and `cuda.gridsize(1)` count the threads along x only, so a loop over them does this in a "
        "2-D launch).",
        "x": "your loop ignores x: the threads along x write the same elements.",
        "blocks": "your loop ignores blockIdx (it starts from cuda.threadIdx and steps by cuda.blockDim): every block "
        "runs it over the same elements.",
    }.get(axis, "several threads computed the same element.")
    return (
        f"{why} The result is right, but on a GPU the launch has about one thread per element of {arr} (in "
        "training tens of thousands of rows of threads), so each element is written that many times and training "
        f"crawls. Give each thread its own elements, with every axis of the launch: {loop}."
    )


def gpu_writer_checks(runner: Runner, budget: Budget, cases: list[Case], launch: Launch) -> list[Check]:
    """gpu mode: :func:`writer_checks` on the kernel traced in the simulator (on the CPU) on the smallest case whose
    outputs have two rows or more, launched by the ``host=`` function's ``on_kernel(simulated kernel)``: the
    simulator's version of the host that launches the kernel it is given (the capstone's hosts have one). Without
    it, a line that says the check did not run."""
    import inspect

    from .. import simulator
    from ..source import py_func
    from .budgets import _renamed, _trace_host

    on_kernel = getattr(runner.p.host, "on_kernel", None)
    if on_kernel is None or not budget.host_launch:
        return [Check(WRITERS, True, "not checked in gpu mode (run with GPULAB_DEVICE=simulator to check it)")]
    tall = [c for c in cases if all(np.ndim(e) > 0 and np.shape(e)[0] > 1 for e in c.expected)] or cases
    case = min(tall, key=lambda c: sum(int(np.size(e)) for e in c.expected))
    _, call = runner.host_call(case)
    names = list(inspect.signature(py_func(runner.kernel)).parameters)
    if budget.names:
        budget = _renamed(budget, dict(zip(budget.names, names)))
    try:
        log = _trace_host(
            runner, on_kernel(simulator.simulated(runner.kernel)), budget, call, names, False, launch.swapped
        )
    except Exception as exc:  # noqa: BLE001 - the simulator cannot run it (a device function in gpu mode): no verdict
        why = (str(exc).splitlines() or [type(exc).__name__])[0][:200]
        return [Check(WRITERS, True, f"not checked: the simulator could not trace the kernel in gpu mode ({why})")]
    where = f"traced in the simulator at size {case.size!r}, launch [{log.grid}, {log.block}]"
    return writer_checks(log, budget.writers_per_element, case.size, where)
