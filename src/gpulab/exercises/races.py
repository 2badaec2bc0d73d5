"""Races and barriers, seen directly in one instrumented simulator run.

Every shared-memory access and output write is logged with its thread and *barrier epoch* (how many
``cuda.syncthreads()`` the thread has passed). Two threads of a block touching one shared element
in the same epoch, one of them writing, is a race; whether the writer had already read that array
in the epoch tells which barrier is missing (after the load, or before the next overwrite). Two
threads writing one output element without ``cuda.atomic`` is a race too, unless elements were
also left unwritten (then two threads computed the same index). A plain read of a shared element that
another thread of the block updates with ``cuda.atomic`` in the same epoch is one too (a histogram's bins merged
before every thread has added to them). Threads of one block that passed
different numbers of barriers called ``cuda.syncthreads()`` inside a branch.

:func:`race_stage` is the pipeline's race step after every case passed: a re-run with another
thread schedule and block shape, then :func:`race_verdict` on the largest case. For a wrong result,
race_verdict also looks for memory nobody set (:mod:`.unset`).
"""

from __future__ import annotations

import linecache
from typing import Any

import numpy as np

from .. import runtime, simulator
from ..errors import one_line
from .cases import State, largest, run_case, size_hint
from .compare import fills, unwritten
from .problem import Case, Problem
from .result import RACES_NOT_CHECKED, Check
from . import run as runs
from .run import Hang, Launch, Runner, extra_run_limit, run_with_deadline
from .unset import subscript, unset_verdict

__all__ = [
    "GPU_NOT_CHECKED",
    "RACES_NOT_CHECKED",
    "SCHEDULES",
    "race_stage",
    "race_verdict",
    "readvise",
    "stopped_advice",
    "stopped_limit",
]

# Thread schedules for re-runs in the simulator: how often Python may switch between CUDA threads
# (gpulab runs at 1 ms; 10 us interleaves the threads of a block much more finely); blocks whose
# threads run in turn (gpulab.simulator.blocks) take them in reverse order in those re-runs.
SCHEDULES = (1e-5,)
# The races line of a kernel's passing verdict in gpu mode: a race that leaves the values right on this run passes.
GPU_NOT_CHECKED = (
    "; not checked on a GPU: unsynchronised accesses to shared memory or outputs, and whether every thread "
    "reaches every barrier (only the simulator can log every access; to check them, run this check in simulator "
    "mode: set GPULAB_DEVICE=simulator, then restart the notebook's kernel)"
)
# How the races line of a passing verdict starts when the run that logs every access gave no verdict (stopped at its
# limit, or failed): RACES_NOT_CHECKED (in .result, for CheckResult.races_not_checked); the points stay.
LOGGED_RUN_STOPPED = "the run that logs every access (many times slower than a plain run) did not finish within {s:g} s"


def stopped_limit(p: Problem) -> str:
    """The limit the logged run was stopped at, and why it was that one (:func:`.run.extra_run_limit`)."""
    s = extra_run_limit(p)
    if s < p.timeout:  # runs.EXTRA_RUN_S
        return LOGGED_RUN_STOPPED.format(s=s) + ", the most the check gives that run, whatever its timeout"
    return LOGGED_RUN_STOPPED.format(s=s) + ", the check's limit per run (its timeout)"


def stopped_advice(p: Problem) -> str:
    """What lengthens or shortens the logged run where the check is called as ``check_kernel(...)`` or
    ``Problem.check(...)`` (a learner's own call, a lab's check cell); :func:`gpulab.lessons.check` and the grader
    say their own (:func:`readvise`)."""
    most = runs.EXTRA_RUN_S
    if p.timeout < most:
        return (
            f"A larger timeout= on this check_kernel or Problem.check call gives it longer (that run gets the "
            f"timeout, {most:g} s at most); a smaller size (sizes=) makes it shorter."
        )
    return (
        f"A smaller size (sizes= on this check_kernel or Problem.check call) makes it shorter: that run gets "
        f"{most:g} s at most, whatever the timeout."
    )


def readvise(result: Any, advice: str) -> None:
    """Put ``advice`` in place of the second line (what to do) of ``result``'s races line when its logged run was
    stopped at its limit (a caller that knows where the check runs: a lesson, the grader)."""
    for c in result.checks:
        if c.name == "races" and c.message.startswith(RACES_NOT_CHECKED) and "\n" in c.message:
            c.message = c.message.split("\n")[0] + "\n" + advice


SCHEDULE_HINT = (
    "the result changes from run to run (a race): a thread reads shared memory before the others "
    "wrote it (missing cuda.syncthreads()?) or several threads update one element without "
    "cuda.atomic.add."
)

RAW_HINT = (
    "The missing barrier is the one AFTER the load: put cuda.syncthreads() after the threads write shared "
    "memory and before any thread reads what another thread wrote."
)
WAR_HINT = (
    "The missing barrier is the one BEFORE the next overwrite: a thread overwrote shared data that other "
    "threads were still reading. Put cuda.syncthreads() after the last read and before the data is written "
    "again (in a loop: at the end of each iteration, e.g. after each step of a tree reduction)."
)
WRITE_RACE_HINT = (
    "A race: on a GPU these writes happen in any order and updates get lost. Use cuda.atomic.add "
    "for a value many threads update, or give each thread its own element (and reduce in shared "
    "memory with cuda.syncthreads() between steps)."
)
DUPLICATE_STORE_HINT = (
    "Each output element needs exactly one owner: two threads stored into the same element, so the index (or a "
    "grid-stride loop's start or step) is wrong even where the values come out right. Build the index from "
    "cuda.grid() and step a grid-stride loop by cuda.gridsize()."
)
FLAG_STORE_HINT = (
    "Many threads store into one element with plain stores: a data race in CUDA's memory model, and the last "
    "store wins. If one thread holds the answer (lane 0 after a warp sum, thread 0 after a tree), let only that "
    "one write: `if cuda.threadIdx.x == 0:`. For a flag or a counter: when every thread writes the same value it "
    "works in practice on today's GPUs (PyTorch's unscale kernel relies on it), but the check counts it as a race: "
    "set a flag with an atomic, e.g. cuda.atomic.max(flag, 0, 1), and count with cuda.atomic.add (plain stores "
    "lose counts)."
)
ONE_STORE_PER_BLOCK_HINT = (
    "The index is right (each element belongs to one block, or to one row of a block's threads), but many of those "
    "threads store the result into it, where only one should: put the store under `if cuda.threadIdx.x == 0:` (the "
    "first thread of the block, or of the row), after the last cuda.syncthreads() that completes the result. With "
    "every thread storing, the stores race (the last one wins), and a thread that stores before the reduction has "
    "finished stores a partial value."
)
SAME_INDEX_HINT = (
    "Two threads computed the same output index while other elements were never written: the "
    "index is wrong. Each thread needs its own element: check how the "
    "index is built from cuda.grid() / blockIdx / blockDim / threadIdx."
)
ZERO_BEFORE_ATOMICS_HINT = (
    "The missing barrier is the one between setting the shared elements and the atomics: a thread stored into an "
    "element (zeroing a histogram's bins, say) while another thread was already adding to it with cuda.atomic.add, "
    "so that addition was wiped out. Put cuda.syncthreads() after the loop that zeroes the bins and before the "
    "first cuda.atomic.add."
)
READ_DURING_ATOMICS_HINT = (
    "The missing barrier is the one after the atomics: a thread read a shared element (to merge a block's bins "
    "into global memory, say) while other threads of its block were still adding to it with cuda.atomic.add, so "
    "their additions came too late to be read. Put cuda.syncthreads() after the loop of atomics and before any "
    "thread reads the bins."
)
BRANCH_HINT = (
    "Every thread of a block must reach every cuda.syncthreads(): move it out of the `if` (and do not "
    "`return` before a barrier); guard only the loads and stores with the condition."
)


def _first_conflict(log: list, same_block_only: bool, writes_only: bool) -> tuple[int, Any] | None:
    """(position of a non-atomic write in ``log``, the other access) for two accesses to one element
    by different threads with no barrier between them (same block and epoch, or different blocks)."""
    by_elem: dict[tuple, list] = {}
    for pos, a in enumerate(log):
        if writes_only and a.kind != "w":
            continue
        by_elem.setdefault((a.array, a.index, a.block) if same_block_only else (a.array, a.index), []).append((pos, a))
    for accesses in by_elem.values():
        for pos, w in accesses:
            if w.kind != "w" or w.atomic:
                continue
            for _, o in accesses:
                if o.thread == w.thread and o.block == w.block:
                    continue
                if o.kind == "w" and o.atomic:
                    continue
                if o.block != w.block or o.epoch == w.epoch:
                    return pos, o
    return None


def _same_step(log: list, pos: int, o: Any) -> bool:
    """Whether the write ``log[pos]`` and the other thread's read ``o`` belong to the same step of the loop: the read
    is on the write's line or above it, and each thread had written the array as often in that barrier epoch
    before it (in a step with a missing barrier at its end, the read comes from a later step)."""
    w = log[pos]
    if o.kind != "r" or not w.line or not o.line or o.line > w.line:
        return False
    at = next(k for k, a in enumerate(log) if a is o)

    def writes_before(a: Any, end: int) -> int:
        return sum(
            1 for b in log[:end] if b.kind == "w" and b.thread == a.thread and b.block == a.block and b.epoch == a.epoch
        )

    return writes_before(w, pos) == writes_before(o, at)


def same_step_hint(label: str, w_line: int, r_line: int, code: str) -> str:
    """The hint for a step of a loop that reads elements of ``label`` that other threads overwrite in the same step
    (a scan in one buffer): a barrier at the end of each step is not enough."""
    if w_line == r_line:
        statement = f"`{code}` on line {w_line}" if code else f"line {w_line}"
        where = f"{statement} reads {label} and writes it in one statement"
    else:
        where = f"line {r_line} reads {label} and line {w_line} overwrites it with no cuda.syncthreads() in between"
    return (
        f"A barrier at the end of each step is not enough here: in one step a thread overwrites an element of {label} "
        f"that another thread reads in that same step ({where}), so what the reader gets depends on which thread "
        "runs first. Every read of a step must finish before any thread of the step writes: either use two buffers "
        "(read from one, write into the other, cuda.syncthreads(), then swap their roles), or keep one buffer and "
        f"read into a local variable first: `v = {label}[tx]`, `if tx >= off: v += {label}[tx - off]`, "
        f"`cuda.syncthreads()`, `{label}[tx] = v`, `cuda.syncthreads()`."
    )


def _read_during_atomics(log: list) -> tuple[Any, Any] | None:
    """(a plain read of a shared element, an atomic update of it by another thread of the block in the same
    barrier epoch): the read may come before or after that update, so what it gets depends on the schedule."""
    updated: dict[tuple, Any] = {}
    for a in log:
        if a.kind == "w" and a.atomic:
            updated.setdefault((a.index, a.block, a.epoch), []).append(a)
    for r in log:
        if r.kind != "r" or r.atomic:
            continue
        for o in updated.get((r.index, r.block, r.epoch), ()):
            if o.thread != r.thread:
                return r, o
    return None


def race_verdict(runner: Runner, case: Case, launch: Launch, unset: bool = False) -> tuple[str, str] | None:
    """Run ``case`` once with every shared access and output write logged; ``(message, hint)`` for
    the first race or barrier inside a branch, None when there is none. ``unset`` (for a wrong result only: a
    correct kernel may read elements it then ignores): also memory nobody set (:mod:`.unset`). The run gets
    :func:`.run.extra_run_limit` seconds; past them it is stopped and :class:`.run.Hang` raised. A run cut short by
    an ArithmeticError or ValueError (exp overflowing on a value read too early) is searched up to the error for
    races, which count; when none is found there the error is raised again: nothing was checked past it."""
    from numba.cuda.simulator.cudadrv.devicearray import FakeCUDAArray

    outs, call = runner.host_call(case)
    griddim, blockdim = runner.config(case, call, launch)
    out_ids = {id(o): k for k, o in enumerate(outs)}
    out_log: list = []
    watched = []
    for arg in call:
        if isinstance(arg, np.ndarray) and id(arg) in out_ids and arg.ndim > 0:
            name = runner.names[out_ids[id(arg)]]
            watched.append(FakeCUDAArray(simulator.watch(arg, name, out_log)))  # reads too: `+=` vs `=`
        else:
            watched.append(arg)
    cut: Exception | None = None  # the error that cut the run short: only races in the log up to it count
    with simulator.instrument(watch_shared=True) as ins:
        try:
            run_with_deadline(lambda: runner.kernel[griddim, blockdim](*watched), extra_run_limit(runner.p))
        except (ArithmeticError, ValueError) as exc:  # e.g. exp overflowing on a value read too early
            cut = exc
    launch_s = f"launch {runner.fn_name}[{griddim}, {blockdim}]"

    diverged = None if cut else ins.unequal_barriers()  # threads the error stopped passed fewer barriers
    if diverged:
        block, (t_hi, n_hi), (t_lo, n_lo) = diverged
        return (
            f"cuda.syncthreads() inside a branch that not all threads of block {block} take: thread {t_hi} "
            f"passed {n_hi} barrier{'s' if n_hi != 1 else ''}, thread {t_lo} passed {n_lo} ({launch_s}). On a "
            "GPU this deadlocks or is undefined behaviour (the simulator lets it pass).",
            BRANCH_HINT,
        )

    for (path, _), (label, log, shape) in ins.shared_logs.items():
        hit = _first_conflict(log, same_block_only=True, writes_only=False)
        if not hit:
            continue
        pos, o = hit
        w = log[pos]
        war = any(
            a.kind == "r" and a.thread == w.thread and a.block == w.block and a.epoch == w.epoch for a in log[:pos]
        )
        if war and not o.atomic and _same_step(log, pos, o):
            war_hint = same_step_hint(label, w.line, o.line, linecache.getline(path, w.line).strip())
        else:
            war_hint = WAR_HINT
        verb = "added to" if o.atomic else "read" if o.kind == "r" else "wrote"
        msg = (
            f"shared memory race in block {w.block}: thread {w.thread} wrote {label}[{subscript(w.index, shape)}] and "
            f"thread {o.thread} {verb} it{' with cuda.atomic.add' if o.atomic else ''} with no cuda.syncthreads() "
            f"in between (lines {w.line} and {o.line}; {launch_s})"
        )
        return msg, (ZERO_BEFORE_ATOMICS_HINT if o.atomic else war_hint if war else RAW_HINT)

    for label, log, shape in ins.shared_logs.values():
        pair = _read_during_atomics(log)
        if pair:
            r, o = pair
            return (
                f"shared memory race in block {r.block}: thread {r.thread} read {label}[{subscript(r.index, shape)}] "
                f"while thread {o.thread} was adding to it with cuda.atomic.add, with no cuda.syncthreads() in "
                f"between (lines {r.line} and {o.line}; {launch_s})",
                READ_DURING_ATOMICS_HINT,
            )

    found = unset_verdict(ins, out_log, runner, case, launch_s) if unset else None
    if found:
        return found

    hit = _first_conflict(out_log, same_block_only=False, writes_only=True)
    if hit:
        pos, o = hit
        w = out_log[pos]
        k = runner.names.index(w.array)
        both = (
            f"thread {w.thread} of block {w.block} and thread {o.thread} of block {o.block} both wrote "
            f"{w.array}[{subscript(w.index, case.expected[k].shape)}]"
        )
        missing = 0
        if runner.p.out_init is None and cut is None:  # a run cut short left elements unwritten
            missing = sum(
                int(unwritten(got, fills(e, None)[0]).sum())
                for got, e in zip(outs, case.expected)
                if e.dtype != np.bool_
            )
        if missing:
            return f"{both}, and {missing} output elements were never written ({launch_s})", SAME_INDEX_HINT
        owners = {(w.thread, w.block), (o.thread, o.block)}
        updated = any(
            a.kind == "r" and a.array == w.array and a.index == w.index and (a.thread, a.block) in owners
            for a in out_log
        )
        writers = {
            (a.thread, a.block)
            for a in out_log
            if a.kind == "w" and not a.atomic and a.array == w.array and a.index == w.index
        }
        if not updated and case.expected[k].size > 1 and len(writers) > 2 and len({b for _, b in writers}) == 1:
            n = len(writers)  # one element per block (or per row of its threads), stored by many of them
            return f"{both}: {n} threads of block {w.block} stored into it ({launch_s})", ONE_STORE_PER_BLOCK_HINT
        if not updated and case.expected[k].size == 1:  # a flag set by plain stores: no index to get wrong
            return f"{both} ({launch_s})", FLAG_STORE_HINT
        if not updated:  # both stored (`=`) without reading: one element with two owners, not lost updates
            return f"{both} ({launch_s})", DUPLICATE_STORE_HINT
        return f"{both} without cuda.atomic and without a cuda.syncthreads() between them ({launch_s})", WRITE_RACE_HINT
    if cut is not None:
        raise cut
    return None


def race_stage(st: State, launch: Launch) -> tuple[str, str] | None:
    """After every case passed: re-run the largest with another schedule (and block shape), then
    look for races and barriers inside branches directly. ``(message, hint)`` or None."""
    p = st.p
    if not p.race_check or not st.cases:
        return None
    big = largest(st.cases)
    case = st.cases[big]
    for j, interval in enumerate(SCHEDULES):
        try:
            fail = run_case(State(p, st.runner, st.cases, st.judge), big, Launch(big + 1 + j, launch.swapped), interval)
        except Hang:
            slow = size_hint(st, big, launch)
            return (
                f"correct once, but did not finish within {p.timeout:g} s when re-run with another thread "
                f"schedule.\ninput: {case.describe()}",
                slow
                or "a thread waits for something only another thread's "
                "timing provides: look for loops that spin on shared or global memory.",
            )
        if fail is not None and fail.output < 0:
            return "on a re-run with another thread schedule: " + fail.message, fail.hint
        if fail is not None:
            msg = (
                f"correct once, but wrong when re-run with another thread schedule ({fail.desc}): "
                f"{st.runner.names[fail.output]} changed.\ninput: {case.describe()}"
            )
            return msg, (
                "a race: some thread reads data another thread has not written yet (missing "
                "cuda.syncthreads() between writing and reading shared memory?) or several threads "
                "update one element without cuda.atomic.add."
            )
    direct = p.host is None and runtime.is_simulator()
    why, advice = "", ""  # why the run that logs every access gave no verdict, and what to do about it
    if direct:
        try:
            found = race_verdict(st.runner, case, Launch(big, launch.swapped))
        except Hang:
            found, why, advice = None, stopped_limit(p), stopped_advice(p)
        except Exception as exc:  # noqa: BLE001 - the watched run failed where the plain ones passed: no verdict
            found, why = None, f"the run that logs every access failed ({one_line(exc)})"
        if found:
            return f"{found[0]}\ninput: {case.describe()}", found[1]
    shapes = " and block shapes" if len(st.runner.thread_options) > 1 else ""
    if why:  # the points stay: the plain runs passed, and nothing was found against the kernel
        message = (
            f"{RACES_NOT_CHECKED}: {why}; the plain runs gave the same result with different thread schedules{shapes}"
        )
        message += f"\n{advice}" if advice else ""
    elif direct:
        found_none = ", no unsynchronised accesses to shared memory or outputs, every barrier reached by every thread"
        message = f"same result with different thread schedules{shapes}{found_none}"
    elif runtime.is_gpu():  # a re-run on a GPU: its schedule is the hardware's, and nothing logs the accesses
        also = " (also with other block shapes)" if shapes else ""
        message = f"same result when re-run{also}" + (GPU_NOT_CHECKED if p.host is None else "")
    else:
        message = f"same result with different thread schedules{shapes}"
    st.checks.append(Check("races", True, message))  # a note, not a score: "not checked" on a GPU costs nothing
    return None
