"""Explaining a failure: the diagnosis of the wrong output, a race seen directly or through a
second schedule, "correct on square inputs", and the verdict for a kernel right only in the other orientation."""

from __future__ import annotations

import ast
import inspect
import re
from typing import Any

import numpy as np

from .. import runtime
from ..source import py_func
from .cases import Failure, State, build_cases, run_case, tol_for
from .compare import fills, reduction_len, same, unwritten
from .diagnose import SPECIFIC, diagnose, diagnose_kind
from .result import Check
from .races import SCHEDULES, SCHEDULE_HINT, race_verdict
from .run import Launch, SetupError, extra_run_limit, run_with_deadline
from .static import parse_kernel

__all__ = ["ORIENTATION_HINT", "explain", "orientation_check"]

# A result that changes between runs without a race in the access log: often an array read before it was written
UNINITIALISED_NOTE = (
    " Or a value is read before anything was written to it: cuda.local.array and cuda.shared.array start with "
    "whatever was in memory (on a GPU; in the simulator, float arrays start as nan, integer ones as 0xBAADF00D), so "
    "set every element you read (e.g. `acc[t] = 0.0` before the loop, or 0.0 into a tile where it hangs over the "
    "edge of the matrix)."
)

INPUT_WRITE_HINT = (
    "the kernel writes into its input {name}, which the neighbouring threads read too: on a GPU (and here, from "
    "run to run) a thread may read a value another thread has already overwritten. Read only the inputs and store "
    "only into the output(s)."
)


SHARED_STATE_HINT = (
    "the result changes from run to run (a race), and the kernel draws random numbers: several threads drew from "
    "the same generator state (each draw reads and advances its state, so threads sharing one take each other's "
    "numbers, in whatever order they run). Each thread of the grid owns one state: "
    "`xoroshiro128p_uniform_float32(states, tid)` with `tid = cuda.grid(1)`, and no other thread uses states[tid]."
)


def _generator_states(a: object) -> bool:
    """``a`` is an array of numba.cuda.random's xoroshiro128+ states (fields s0, s1), or its uint64 words."""
    names = getattr(getattr(a, "dtype", None), "names", None)
    return bool(names) and set(names) == {"s0", "s1"}


def _draws_random(st: State) -> bool:
    """The kernel's source calls numba.cuda.random's draws (its states may arrive as uint64 words)."""
    try:
        return "xoroshiro128p_" in inspect.getsource(py_func(st.runner.kernel))
    except (OSError, TypeError):
        return False


def input_written(st: State, fail: Failure) -> str | None:
    """The name of an input array the kernel wrote into (simulator, kernels only: one more run on copies of the
    failing case's arguments), or None."""
    if st.p.host is not None or not runtime.is_simulator():
        return None
    case = st.cases[fail.case]
    try:
        outs, call = st.runner.host_call(case)
        out_ids = {id(o) for o in outs}
        # numbers only: a structured input (numba.cuda.random's generator states) is written by design
        before = [
            np.array(a, copy=True)
            if isinstance(a, np.ndarray) and id(a) not in out_ids and a.dtype.kind in "biufc"
            else None
            for a in call
        ]
        griddim, blockdim = st.runner.config(case, call, fail.launch)
        run_with_deadline(lambda: st.runner.kernel[griddim, blockdim](*call), extra_run_limit(st.p))
        params = list(inspect.signature(py_func(st.runner.kernel)).parameters)
        for k, (old, arg) in enumerate(zip(before, call)):
            if old is not None and not np.array_equal(np.asarray(arg), old, equal_nan=old.dtype.kind in "fc"):
                return params[k] if k < len(params) else f"argument {k + 1}"
    except Exception:  # noqa: BLE001 - no verdict from this run: the others stand
        return None
    return None


def never_written(st: State, fail: Failure) -> np.ndarray | None:
    """Elements of the failing output that the kernel did not write: still equal to the fill in two
    runs with different fills (None when ``out_init`` hides it)."""
    case, o = st.cases[fail.case], fail.output
    options = fills(case.expected[o], st.p.out_init)
    if len(options) < 2:
        return None
    first = fail.runs[0][o]
    if len(fail.runs) > 1:
        again = fail.runs[1]
    else:
        try:
            again, _ = st.runner.run(case, fail.launch, fill_run=1)
        except Exception:  # noqa: BLE001 - the first run's verdict stands
            return unwritten(first, options[0])
    return unwritten(first, options[0]) & unwritten(again[o], options[1])


ACCUMULATED_HINT = (
    "{name} looks unwritten, but the kernel adds into it (`{target} += ...`): an output starts with whatever "
    "its memory held, not 0 (the check fills it with values a sum cannot move, nan or the float limits, and "
    "they stayed; started at 0 it changes). Sum in a local variable (`acc = float32(0.0)`, `acc += ...`) and write "
    "`{target} = acc` once, after the loop."
)


# A GPU has no race check (the simulator names the threads that both wrote first): a constant index says it.
SAME_ELEMENT_HINT = (
    "Every thread adds into the same element, `{target}`, while {name} has an element for each thread: give each "
    "thread its own (`{name}[i]` with `i = cuda.grid(1)`) and write it with `=`, not `+=` (an output starts with "
    "whatever its memory held, not 0)."
)


def added_into(kernel: Any, name: str, outputs: int) -> str | None:
    """The element the kernel adds into, as its source writes it (``out[t]`` for ``out[t] += a[t]``): the first
    ``+=`` into an element of its parameter ``name`` or, for a kernel with one output, of the one parameter it adds
    into (the output under the kernel's own name). None when the source cannot be read or shows no such ``+=``."""
    parsed = parse_kernel(kernel)
    if parsed is None:
        return None
    tree = parsed[2]
    params = {a.arg for a in tree.args.posonlyargs + tree.args.args}
    adds = [n for n in ast.walk(tree) if isinstance(n, ast.AugAssign) and isinstance(n.op, ast.Add)]
    targets: dict[str, str] = {}
    for node in sorted(adds, key=lambda n: (n.lineno, n.col_offset)):
        base = node.target
        while isinstance(base, ast.Subscript):  # out[j][i]: the array is the innermost name
            base = base.value
        if base is not node.target and isinstance(base, ast.Name) and base.id in params:
            targets.setdefault(base.id, ast.unparse(node.target))
    if name in targets:
        return targets[name]
    return next(iter(targets.values())) if outputs == 1 and len(targets) == 1 else None


def adds_into_output(st: State, fail: Failure) -> bool:
    """Whether the failing output, which looked unwritten in runs filled with nan and the most negative float,
    changes when it starts at 0: the kernel reads it and adds into it (``y[i] += ...``) instead of writing it."""
    case, o = st.cases[fail.case], fail.output
    exp = case.expected[o]
    if st.p.out_init is not None or not np.issubdtype(exp.dtype, np.floating):
        return False
    if exp.size == 1 and max((np.size(x) for x in case.inputs if isinstance(x, np.ndarray)), default=0) > 1:
        return False  # many inputs, one result: the untouched hint's own (a reduction's write, "not zeroed for you")
    try:
        again, _ = st.runner.run(case, fail.launch, fill=0)
    except Exception:  # noqa: BLE001 - no verdict from this run: the diagnosis stands
        return False
    return bool(np.any(again[o] != 0))


FEWER_THREADS_HINT = (
    "the launch has {threads} threads for the {n} elements of {name}, and the elements from {name}[{threads}] on "
    "were never written: the grid is fixed (not sized to the data), so each thread must handle several elements. "
    "Loop with a grid stride: `for i in range(cuda.grid(1), {name}.size, cuda.gridsize(1)):`, so that thread t "
    "writes elements t, t + {threads}, t + {threads2}, ..."
)


def fewer_threads_hint(st: State, fail: Failure, missing: np.ndarray) -> str:
    """The grid-stride hint when the exercise's own launch (a kernel check: the harness picks it) has fewer threads
    than the 1-D output has elements and exactly the elements past the last thread were never written; "" else."""
    case, o = st.cases[fail.case], fail.output
    if st.p.host is not None or missing.ndim != 1:
        return ""
    try:
        _, call = st.runner.host_call(case)
        grid, block = st.runner.config(case, call, fail.launch)
    except Exception:  # noqa: BLE001 - no launch to compare with: the diagnosis stands
        return ""
    threads = int(np.prod(grid)) * int(np.prod(block))
    n = missing.size
    if not 0 < threads < n or not (missing[threads:].all() and not missing[:threads].any()):
        return ""
    return FEWER_THREADS_HINT.format(threads=threads, threads2=2 * threads, n=n, name=st.runner.names[o])


def explain(st: State, fail: Failure) -> tuple[str, str, str]:
    """(status, message, hint) for a failure: diagnosis, races, square-only."""
    case = st.cases[fail.case]
    kind = ""
    if fail.output < 0:
        msg, hint = fail.message, fail.hint
        if fail.message.startswith(("OverflowError", "FloatingPointError")):  # a value read too early can overflow
            race = _race_in_log(st, fail)
            if race is not None:
                msg, hint, kind = f"{msg}\n{race[0]}", race[1], "race"
    else:
        o = fail.output
        exp, tol = case.expected[o], tol_for(case, o, st.p.atol)
        missing = never_written(st, fail)
        msg, hint, kind = diagnose_kind(fail.got[o], exp, tol, case, st.judge, st.runner.names[o], missing)
        if kind == "_never_written" and missing is not None:
            few = fewer_threads_hint(st, fail, missing)
            if few:
                hint, kind = few, "fewer threads"
        if kind == "_untouched" and adds_into_output(st, fail):
            name = st.runner.names[o]
            target = added_into(st.runner.kernel, name, len(case.expected)) or f"{name}[...]"
            hint, kind = ACCUMULATED_HINT.format(name=name, target=target), "accumulated"
            if case.expected[o].size > 1 and re.fullmatch(r"\w+\[\s*\d+\s*\]", target):
                hint = SAME_ELEMENT_HINT.format(target=target, name=name)  # the index first, then the write
        if fail.undefined and kind != "_named_mistake":  # seen, not guessed: the kernel read an undefined value
            hint, kind = undefined_hint(fail.undefined), "undefined"
        if case.atol is not None and st.p.reduction is not None:
            # the bound is inf where the expected value is inf or -inf (a causal mask's -inf): say the finite ones'
            bounds = np.asarray(tol, dtype=np.float64)
            bounds = bounds[np.isfinite(bounds)]
            if bounds.size:
                msg += (
                    f"\n(allowed error: the float32 rounding bound for sums of "
                    f"{reduction_len(st.p.reduction, case.inputs, o):,} terms, up to {float(bounds.max()):.3g} here)"
                )
        msg += f"\ninput: {case.describe()}\nlaunch: {fail.desc}"
        if kind != "undefined":  # a shuffle's undefined read was seen: it explains the values
            # a shared element nobody wrote is named, unless the diagnosis already named the filler in the result or
            # the exercise's own named mistake explains it (a histogram's bins never zeroed, or only bins[tx])
            hint, raced = race_hint(st, fail, hint, missing, unset=kind not in ("_unset_memory", "_named_mistake"))
            kind = kind or ("race" if raced else "")
    # a race seen in the access log explains the values; "correct on square inputs" would only be a guess then
    # (a square probe small enough for one tile never reaches the barrier that is missing)
    if fail.status == "failed" and fail.swappable and kind not in SPECIFIC and kind not in ("race", "accumulated"):
        square = square_only(st, fail)
        if square:  # after an exception, the generic index hint adds nothing to this one
            hint = square if fail.output < 0 else square + (" " + hint if hint else "")
    return fail.status, msg, hint


def undefined_hint(notes: tuple[str, ...]) -> str:
    """The hint for shuffles that read lanes taking no part (``notes``: the simulator's descriptions)."""
    more = f" (and {len(notes) - 1} more such reads)" if len(notes) > 1 else ""
    return (
        f"a shuffle read a lane that took no part, whose value is undefined on a GPU (the simulator gives NaN or "
        f"0xBAADF00D): {notes[0]}{more}. Every lane that a warp function's mask names must make that call: keep a "
        "bounds guard (`if i < n:`, `if col < cols:`) around the loads and stores, not around the shuffles, and do "
        "not return before them. A lane with nothing to contribute takes part with a neutral value: 0 for a sum "
        "(`v = x[i] if i < n else float32(0)`), -inf for a maximum (`float32(-math.inf)`; 0 would be wrong for rows "
        "of negative values). A lane whose stride loop runs zero times keeps exactly those."
    )


def _race_in_log(st: State, fail: Failure, unset: bool = False) -> tuple[str, str] | None:
    """A race or a barrier in a branch seen in the access log of the failing case (simulator, kernels only)."""
    if not st.p.race_check or st.p.host is not None or not runtime.is_simulator():
        return None
    try:
        return race_verdict(st.runner, st.cases[fail.case], fail.launch, unset=unset)
    except Exception:  # noqa: BLE001 - the watched run failed as well: the first verdict stands
        return None


def race_hint(st: State, fail: Failure, hint: str, missing: np.ndarray | None, unset: bool = False) -> tuple[str, bool]:
    """A race explains wrong values best: look for one directly, then try a second schedule. Returns the hint
    and whether a race was found, in the access log or as results that change with the schedule (a finding, not a
    guess: the square-input probe is then left out)."""
    p, case = st.p, st.cases[fail.case]
    if not p.race_check:
        return hint, False
    found = _race_in_log(st, fail, unset)
    if found:
        return f"{found[0].rstrip('.')}. {found[1]}", True
    if case.expected[0].size > 1 and not (missing is not None and missing.any()):
        try:
            again, _ = st.runner.run(case, fail.launch, SCHEDULES[0])
            if not all(same(a, b, p.rtol, p.atol) for a, b in zip(again, fail.runs[0])):
                written = input_written(st, fail)
                if written is not None:
                    return INPUT_WRITE_HINT.format(name=written), True
                if any(_generator_states(a) for a in case.inputs) or _draws_random(st):
                    return SHARED_STATE_HINT, True
                return SCHEDULE_HINT + UNINITIALISED_NOTE + (" " + hint if hint else ""), True
        except Exception:  # noqa: BLE001 - the first verdict stands
            pass
    return hint, False


def square_only(st: State, fail: Failure) -> str:
    """'correct on square inputs' when the kernel fails a non-square case but passes a square one."""
    case = st.cases[fail.case]
    if case.square or not isinstance(case.size, tuple) or not all(isinstance(s, int) for s in case.size):
        return ""
    side = max(min(case.size), 2)  # small: the probe runs in the simulator
    try:
        sq = build_cases(st.p, [(side,) * len(case.size)])[0]
    except SetupError:
        return ""
    if not sq.square:
        return ""
    probe = State(st.p, st.runner, [sq], st.judge)
    try:
        other = run_case(probe, 0, fail.launch)
    except Exception:  # noqa: BLE001
        return ""
    if other is None:
        return (
            f"correct on square inputs (size {sq.size!r}), wrong on non-square (size {case.size!r}): an index "
            "uses the wrong dimension (e.g. A.shape[0] where A.shape[1] is meant, or a row index where a "
            "column index belongs)."
        )
    if other.output >= 0 and fail.output < 0:  # an exception here, wrong values on square inputs: say why
        o = other.output
        _, hint = diagnose(
            other.got[o], sq.expected[o], tol_for(sq, o, st.p.atol), sq, st.judge, st.runner.names[o], None
        )
        if hint:
            return f"On square inputs (size {sq.size!r}) the kernel runs but is wrong: {hint}"
    return ""


ORIENTATION_HINT = (
    "your kernel takes the row from x, the fastest-varying thread index (e.g. `i, j = cuda.grid(2)`). In this "
    "course x gives the column j, the last and contiguous axis, so that neighbouring threads touch neighbouring "
    "elements: write `j, i = cuda.grid(2)` (j the column, i the row), keep the guard on both and the indexing "
    "[i, j], and check again."
)


def orientation_check(st: State, fail: Failure) -> Check:
    """The verdict line for a kernel that is wrong launched the course's way (``fail``, x along the last axis) and
    correct with x and y exchanged: not a pass, since every later launch (the lesson's next cells, gpulab's
    launchers, the capstone) puts x along the columns. Half the points, like a correct kernel over its budget."""
    case = st.cases[fail.case]
    _, call = st.runner.host_call(case)
    grid, block = st.runner.config(case, call, Launch(fail.launch.option, swapped=True))
    ours, ours_block = st.runner.config(case, call, Launch(fail.launch.option))
    _, msg, _ = explain(st, fail)
    wrong = msg.splitlines()[0] if msg else fail.status
    return Check(
        "orientation",
        False,
        f"only when launched with x and y exchanged ([{grid}, {block}] for size {case.size!r}). Launched the "
        f"course's way, x along the columns ([{ours}, {ours_block}]), which is how the code after this check and "
        f"gpulab's launchers run it, it is wrong: {wrong}",
        ORIENTATION_HINT,
    )
