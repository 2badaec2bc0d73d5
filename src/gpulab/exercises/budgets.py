"""Efficiency budgets (:class:`Budget`) checked on one traced simulator run: global reads per
element and per thread, coalescing (32-byte sectors per warp request vs the ideal), shared memory
per block, barriers per thread, atomics, and the parallel algorithm an exercise is about: shared reads
per thread (a tree's log2 steps, not one thread's loop) and a minimum of warp shuffles."""

from __future__ import annotations

import dataclasses
import inspect
from collections import Counter
from typing import Any

import numpy as np

from .. import simulator
from ..source import py_func
from .problem import Budget, Case, Size, Tree
from .run import Launch, Runner, SetupError
from .writers import WRITERS, writer_checks

__all__ = ["budget_checks"]

COALESCE_HINT = (
    "neighbouring threads (threadIdx.x) should touch neighbouring elements of the last axis: write "
    "`j, i = cuda.grid(2)` (j the column, from threadIdx.x; `i, j = cuda.grid(2)` takes the row from it) and read "
    "A[i, j], not A[j, i]; stage a transposed access through shared memory."
)


def _layout_hint(arr: str, shape: tuple[int, ...], strides: tuple[int, ...], itemsize: int) -> str:
    """The coalescing hint for a strided view (a transpose handed over by another library): which axis is
    contiguous, from its strides, instead of the last axis of a C-ordered array."""
    fast = [d for d, s in enumerate(strides) if abs(s) == itemsize]
    where = f"axis {fast[0]} is the contiguous one" if fast else "no axis is contiguous"
    last = ", not along the last axis" if fast and fast[0] != len(shape) - 1 else ""
    return (
        f"{arr} is a view with strides {tuple(strides)} bytes for shape {tuple(shape)} ({itemsize}-byte elements), "
        f"so {where}: neighbouring threads (consecutive threadIdx.x) must step along the axis whose stride is "
        f"{itemsize} bytes{last}. Read the layout from {arr}'s strides (`__cuda_array_interface__['strides']`)."
    )


def _limit(value: Any, size: Size) -> float:
    return float(value(size) if callable(value) else value)


def budget_checks(runner: Runner, budget: Budget, cases: list[Case], largest: int, launch: Launch) -> list[Any]:
    """One :class:`Check` per limit of ``budget`` (traced on ``budget.size`` or the largest case)."""
    from ..trace import trace
    from .result import Check

    case = cases[largest]
    if budget.size is not None:
        case = next((c for c in cases if c.size == budget.size), case)
    _, call = runner.host_call(case)
    arg_names = list(inspect.signature(py_func(runner.kernel)).parameters)
    if budget.names:  # the limits name the arguments by position: say them with the kernel's own names
        budget = _renamed(budget, dict(zip(budget.names, arg_names)))
    shared = budget.shared_reads_per_thread is not None  # logging every shared access is slower: only if asked
    with simulator.instrument() as ins:
        if (host := runner.p.host) is not None:
            log = _trace_host(runner, host, budget, call, arg_names, shared, launch.swapped)
            griddim, blockdim = log.grid, log.block
        else:
            griddim, blockdim = runner.config(case, call, launch)
            log = trace(runner.kernel, griddim, blockdim, *call, names=arg_names, shared=shared)
    where = f"traced at size {case.size!r}, launch [{griddim}, {blockdim}]"
    # first: a kernel that repeats its work is a bigger mistake than any budget (its verdict names it)
    checks = writer_checks(log, budget.writers_per_element, case.size, where)
    for arr, lim in budget.reads_per_element.items():
        limit = _limit(lim, case.size)
        worst = int(log.per_element(arr, "r").max()) if log.shapes.get(arr) and np.prod(log.shapes[arr]) else 0
        ok = worst <= limit
        checks.append(
            Check(
                f"budget: reads of {arr}",
                ok,
                f"each element of {arr} read from global memory at most {worst} times (limit {limit:g}; {where})"
                if ok
                else f"an element of {arr} was read from global memory {worst} times (limit {limit:g}; {where})",
                "" if ok else _rereads_hint(log, arr, limit),
            )
        )
    for kind, lim, label in (("r", budget.reads_per_thread, "reads"), ("w", budget.writes_per_thread, "writes")):
        if lim is None:
            continue
        limit = _limit(lim, case.size)
        worst = log.max_per_thread(kind)
        checks.append(
            Check(
                f"budget: global {label} per thread",
                worst <= limit,
                f"the busiest thread made {worst} global {label} (limit {limit:g}; {where})",
                "" if worst <= limit else PER_THREAD_HINT.format(label=label),
            )
        )
    sectors = budget.sectors
    if not isinstance(sectors, dict):
        sectors = {name: sectors for name in log.shapes} if sectors is not None else {}
    for arr, lim in sectors.items():
        checks.append(_coalescing(log, arr, _limit(lim, case.size), where))
    if budget.shared_bytes is not None:
        limit = _limit(budget.shared_bytes, case.size)
        used = ins.shared_bytes_per_block()
        checks.append(
            Check(
                "budget: shared memory",
                used <= limit,
                f"{used} bytes of shared memory per block (limit {limit:g})",
                ""
                if used <= limit
                else f"allocate only the shared memory you need ({limit:g} bytes here, {int(limit) // 4} float32 "
                "values per block): one value per thread for a block reduction (reuse that array rather than "
                "declaring another), one TILE x TILE tile per input for tiling (padded to TILE x (TILE + 1) at most).",
            )
        )
    if budget.barriers_per_thread is not None:
        checks.append(_barriers(log.max_barriers(), _limit(budget.barriers_per_thread, case.size), where))
    checks += _atomics(log, budget, case.size, where)
    threads = int(np.prod(log.block))  # threads per block of the traced launch: a Tree limit grows with it
    checks += _parallel(log, budget, case.size, threads, where)
    if budget.hint:  # the exercise's own advice for a kernel over a limit (the writers' is their own)
        own = budget.hint if isinstance(budget.hint, dict) else {c.name: budget.hint for c in checks}  # dict: per check
        checks = [
            c if c.passed or c.name == WRITERS or c.name not in own else dataclasses.replace(c, hint=own[c.name])
            for c in checks
        ]
    return checks


REREAD_HINT = (
    "one thread read the same element of {arr} {again} times ({who} read {arr}[{index}] {again} times): read it "
    "from global memory once into a local variable and reuse that (`v = {arr}[i]`, then v wherever {arr}[i] "
    "appeared; a repeated expression likewise: compute it once into a local variable, then use the variable)."
)
REREAD_LOOP_HINT = (
    "one thread read the same {count} elements of {arr} {again} times each ({who} read {arr}[{index}] {again} "
    "times): it reads them again in a loop (e.g. a window once per filter). Load them into a local array once, "
    "before that loop (for a K x K window: `win = cuda.local.array((K, K), float32)`, filled from {arr}), then read "
    "the local array inside the loop."
)
SHARED_HINT = (
    "neighbouring threads read the same elements of {arr} (up to {readers} threads read {arr}[{index}]): stage {arr} "
    "in shared memory so that a block loads each element once and its threads reuse it."
)


def _rereads_hint(log: Any, arr: str, limit: float) -> str:
    """The hint for reads of ``arr`` over ``limit`` per element, after who read the element again: the same thread
    (keep the value in a register: a local variable or array) or several threads (share it: shared memory)."""
    per: Counter = Counter((a.block, a.thread, a.index) for a in log.accesses if a.array == arr and a.kind == "r")
    readers: Counter = Counter(index for (_, _, index) in per)
    shape = log.shapes[arr]

    def at(flat: int) -> str:
        return ", ".join(str(int(v)) for v in np.unravel_index(flat, shape))

    hints = []
    (block, thread, flat), again = max(per.items(), key=lambda kv: kv[1])
    if again > 1:
        who = f"thread {thread} of block {block}"
        count = sum(1 for (b, t, _), n in per.items() if (b, t) == (block, thread) and n == again)
        text = REREAD_LOOP_HINT if count > 1 else REREAD_HINT
        hints.append(text.format(arr=arr, again=again, who=who, index=at(flat), count=count))
    busiest, most = max(readers.items(), key=lambda kv: kv[1])
    if most > limit or not hints:
        hints.append(SHARED_HINT.format(arr=arr, readers=most, index=at(busiest)))
    return " ".join(hints) if len(hints) == 1 else f"{hints[0]} And {hints[1][0].lower()}{hints[1][1:]}"


def _renamed(budget: Budget, names: dict[str, str]) -> Budget:
    """``budget`` with the arrays its limits name translated by ``names`` (its ``names=`` -> the kernel's own)."""

    def keys(d: Any) -> Any:
        return {names.get(k, k): v for k, v in d.items()} if isinstance(d, dict) else d

    return dataclasses.replace(
        budget,
        reads_per_element=keys(budget.reads_per_element),
        sectors=keys(budget.sectors),
        atomics=keys(budget.atomics),
        writers_per_element=keys(budget.writers_per_element),
        names=None,
    )


def _trace_host(
    runner: Runner, host: Any, budget: Budget, call: tuple, names: list[str], shared: bool, swapped: bool
) -> Any:
    """The trace of the kernel's first launch by the ``host=`` function ``host`` on ``call`` (``swapped``: with x and y
    exchanged, see :meth:`Runner.config`), in ``budget.grid`` (default one block) of ``budget.block`` threads if
    set (a grid-stride kernel is right for any launch), else, or if the kernel fails there, as the host launched
    it."""
    from ..simulator.launches import intercepted
    from ..trace import trace

    box: list[Any] = []

    def take(grid: tuple, block: tuple, args: tuple) -> None:
        if budget.block is not None:
            wide = tuple(budget.block) if isinstance(budget.block, (tuple, list)) else (int(budget.block),)
            grid = (1,) * len(wide) if budget.grid is None else budget.grid
            try:
                box.append(trace(runner.kernel, grid, wide, *args, names=names, shared=shared))
                return
            except Exception:  # noqa: BLE001 - not right in that block (its checks ran the host's): trace the host's
                pass
        box.append(trace(runner.kernel, grid, block, *args, names=names, shared=shared))

    with intercepted(runner.kernel, take):
        if swapped:
            host(*call, swapped=True)
        else:
            host(*call)
    if not box:
        raise SetupError(
            f"the exercise's host function never launched {runner.fn_name}, so its budget has no launch to trace"
        )
    return box[0]


ATOMICS_HINT = (
    "every value went to global memory with its own cuda.atomic.add, so the atomics grow with the data and the "
    "lanes that hit one bin wait for each other. Privatize: each block counts into its own bins in shared memory "
    "(`cuda.shared.array`, zeroed first, then cuda.syncthreads()), adds there with cuda.atomic.add, and after a "
    "second cuda.syncthreads() adds each non-zero bin to global memory once."
)
ATOMICS_PER_THREAD_HINT = (
    "one thread made many of the block's global atomics: the merge is sequential (e.g. `if tx == 0:` looping over "
    "every bin) while the other threads wait. Let all threads of the block share it, each its own bins: "
    "`for b in range(tx, nbins, cuda.blockDim.x):`, one cuda.atomic.add per non-zero bin."
)


def _atomics(log: Any, budget: Budget, size: Size, where: str) -> list[Any]:
    """The checks of ``budget.atomics`` (global atomic updates per array) and ``budget.atomics_per_thread``."""
    from .result import Check

    checks = []
    for arr, lim in budget.atomics.items():
        limit, used = _limit(lim, size), log.atomics(arr)
        ok = used <= limit
        checks.append(
            Check(
                f"budget: global atomics on {arr}",
                ok,
                f"{used} cuda.atomic updates of {arr} in global memory (limit {limit:g}; {where})",
                "" if ok else ATOMICS_HINT,
            )
        )
    if budget.atomics_per_thread is not None:
        limit = _limit(budget.atomics_per_thread, size)
        worst = log.max_atomics_per_thread()
        ok = worst <= limit
        checks.append(
            Check(
                "budget: global atomics per thread",
                ok,
                f"at most {worst} global atomic updates by one thread (limit {limit:g}; {where})",
                "" if ok else ATOMICS_PER_THREAD_HINT,
            )
        )
    return checks


PER_THREAD_HINT = (
    "one thread made more global {label} than its share: give each thread its own elements (`i = cuda.grid(1)`, "
    "or a stride loop over the row) and combine the threads' values in parallel (a shared-memory tree, warp "
    "shuffles), not in a loop of one thread; a value needed twice is kept in a local variable, not read again."
)
SERIAL_HINT = (
    "one thread combined the block's values in a loop while the others waited: that takes as many steps as the "
    "block has threads. Halve instead: start s at half the block (TPB // 2); while s > 0, the threads below s "
    "combine buf[tx] with buf[tx + s] (add, max, ...), then cuda.syncthreads() and `s //= 2`: log2(TPB) steps, "
    "each thread reading 2 values per step."
)
SHUFFLE_HINT = (
    "this exercise is about warp shuffles, which pass registers between the lanes of a warp: combine the lanes' "
    "values with `v += cuda.shfl_down_sync(0xFFFFFFFF, v, offset)` for offset = 16, 8, 4, 2, 1 (no shared memory, "
    "no barrier), in place of a loop or a shared-memory tree."
)


def _parallel(log: Any, budget: Budget, size: Size, threads: int, where: str) -> list[Any]:
    """The checks of ``budget.min_shuffles`` and ``budget.shared_reads_per_thread``: the exercise's parallel
    algorithm (a warp's shuffles, a tree's log2 steps) rather than a loop of one thread."""
    from .result import Check

    checks = []
    if budget.min_shuffles is not None:
        least, made = _limit(budget.min_shuffles, size), log.max_warp_calls("shfl")
        ok = made >= least
        did = f"the most by one thread was {made}" if made else "no thread called one"
        checks.append(
            Check(
                "budget: warp shuffles",
                ok,
                f"warp shuffles (cuda.shfl_*_sync): {did}; a warp combines its 32 lanes in log2(32) = 5 shuffle "
                f"steps (at least {least:g} expected; {where})",
                "" if ok else SHUFFLE_HINT,
            )
        )
    lim = budget.shared_reads_per_thread
    if lim is not None:
        tree = lim if isinstance(lim, Tree) else None
        limit = tree.limit(threads) if tree else _limit(lim, size)
        worst, who = log.max_shared_reads()
        ok = worst <= limit
        did = f"thread {who[1]} of block {who[0]} read {worst} shared-memory elements" if who else "no shared reads"
        why = tree.explain(threads) if tree else f"limit {limit:g}"
        checks.append(
            Check(
                "budget: shared reads per thread",
                ok,
                f"{did}; {why} ({where})",
                "" if ok else SERIAL_HINT,
            )
        )
    return checks


BARRIER_HINT = (
    "each cuda.syncthreads() makes every thread wait for the whole block: keep only the ones your data needs. "
    "Threads of one warp exchange values with shuffles (cuda.shfl_down_sync), which need no barrier: in a block "
    "sum, only warp 0's read of the other warps' sums waits for them, so one cuda.syncthreads() suffices."
)


def _barriers(worst: int, limit: float, where: str) -> Any:
    from .result import Check

    ok = worst <= limit
    return Check(
        "budget: barriers",
        ok,
        f"a thread passed {worst} cuda.syncthreads() (limit {limit:g}; {where})",
        "" if ok else BARRIER_HINT,
    )


def _coalescing(log: Any, arr: str, limit: float, where: str) -> Any:
    from .result import Check

    if arr not in log.itemsize:
        return Check(
            f"budget: coalescing of {arr}",
            False,
            f"no array argument named {arr!r} "
            f"(arguments: {', '.join(log.shapes)}): fix the exercise's Budget(sectors=...)",
        )
    worst = (0.0, 0.0, 0.0, "reads")
    for kind, label in (("r", "reads"), ("w", "writes")):
        actual, ideal = log.coalescing(arr, kind)
        if ideal and actual / ideal > worst[0]:
            worst = (actual / ideal, actual, ideal, label)
    ratio, actual, ideal, label = worst
    ok = ratio <= limit + 1e-9
    usage = (
        (
            f"{label} of {arr} use {actual:.1f} sectors per warp request, ideal {ideal:.1f} "
            f"({ratio:.3g}x the memory traffic); limit {limit:g}x ({where})"
        )
        if ideal
        else f"{arr} not accessed"
    )
    hint = COALESCE_HINT
    if arr in log.strides:
        hint = _layout_hint(arr, log.shapes[arr], log.strides[arr], log.itemsize[arr])
    return Check(f"budget: coalescing of {arr}", ok, ("" if ok else "uncoalesced: ") + usage, "" if ok else hint)
