"""The pipeline behind :func:`check_kernel`: cases -> run (both orientations) -> compare -> diagnose ->
races -> budgets -> PTX."""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np

from .. import runtime
from ..source import code_names, py_func
from .budgets import budget_checks
from .compare import fills, float64_reference, reduction_len, same, unwritten
from .diagnose import SPECIFIC, Judge, diagnose, diagnose_kind, exception_verdict, thread_inside
from .problem import Budget, Case, Problem, Size
from .ptxcheck import ptx_check
from .races import race_verdict
from .result import Check, CheckResult, log_result
from .run import Hang, Launch, OutOfBounds, Runner, SetupError

__all__ = ["check_kernel", "run_problem"]

# Thread schedules for re-runs in the simulator: how often Python may switch between CUDA threads
# (gpulab runs at 1 ms; 10 us interleaves the threads of a block much more finely).
SCHEDULES = (1e-5,)
SCHEDULE_HINT = ("the result changes from run to run (a race): a thread reads shared memory before the others "
                 "wrote it (missing cuda.syncthreads()?) or several threads update one element without "
                 "cuda.atomic.add.")


def check_kernel(
    kernel: Any,
    spec: Callable[..., Any],
    *,
    inputs: Callable[[Size, np.random.Generator], tuple],
    sizes: Sequence[Size],
    threads: Any = None,
    launch: Callable[..., tuple[Any, Any]] | None = None,
    host: Callable[..., Any] | None = None,
    args: Callable[[tuple, tuple], tuple] | None = None,
    name: str | None = None,
    points: float = 1,
    seed: int = 0,
    rtol: float = 1e-5,
    atol: float = 1e-6,
    reduction: int | Callable[..., int] | None = None,
    out_init: Any = None,
    out_names: Sequence[str] | None = None,
    mistakes: dict[str, Callable[..., Any]] | None = None,
    budget: Budget | None = None,
    ptx: str | None = None,
    race_check: bool = True,
    timeout: float = 30.0,
) -> CheckResult:
    """Run ``kernel`` on ``inputs(size, rng)`` for every size and compare with ``spec(*inputs)``.

    See :mod:`gpulab.exercises` for the launch options, the checks and the scoring. Never raises for
    a learner's mistake: the verdict is in the returned :class:`CheckResult`.

    ``reduction=n`` (or ``fn(*inputs) -> n``): each output element is a float32 sum of ``n`` terms
    (a dot product of length n, a convolution window, a batch sum). The expected values are then
    computed in float64 and the allowed error is :func:`rounding_bound`, the proven bound for a
    sum of n products in float32, instead of a constant tolerance a correct kernel can miss at
    large n. The spec must be a sum of products of its inputs (matmul, convolution, their
    gradients, optionally followed by ReLU).
    """
    problem = Problem(name or "", spec, inputs, sizes, threads=threads, launch=launch, host=host, args=args,
                      points=points, seed=seed, rtol=rtol, atol=atol, reduction=reduction, out_init=out_init,
                      out_names=out_names, mistakes=mistakes, budget=budget, ptx=ptx, race_check=race_check,
                      timeout=timeout)
    return run_problem(problem, kernel, name)


def is_placeholder(fn: Any) -> bool:
    """The learner's cell still says ``raise NotImplementedError``."""
    code = getattr(py_func(fn), "__code__", None)
    return code is not None and "NotImplementedError" in code_names(code)


@dataclass
class _Fail:
    """A case that went wrong, before it is explained."""

    status: str
    case: int
    launch: Launch
    message: str = ""
    hint: str = ""
    swappable: bool = False
    output: int = -1  # wrong values: which output
    got: tuple = ()  # the outputs of the run that was wrong
    desc: str = ""
    runs: tuple = ()  # every run's outputs, in fill order


@dataclass
class _State:
    p: Problem
    runner: Runner
    cases: list[Case]
    judge: Judge
    checks: list[Check] = field(default_factory=list)


def run_problem(p: Problem, kernel: Any, name: str | None = None) -> CheckResult:
    """Check ``kernel`` against ``p``: the pipeline behind :func:`check_kernel` and ``Problem.check``."""
    fn_name = name or getattr(py_func(kernel), "__name__", None) or getattr(p.host, "__name__", "kernel")
    n_modes = sum(x is not None for x in (p.threads, p.launch, p.host))
    if n_modes != 1:
        raise ValueError(
            f"check_kernel({fn_name}) needs exactly one of threads=, launch= or host= (got {n_modes}): "
            "threads=256 for one thread per output element, launch=lambda *args: (blocks, threads) for "
            "another grid, host=fn for a host function that launches the kernel itself."
        )
    if not p.sizes:
        raise ValueError(f"check_kernel({fn_name}) needs at least one input size in sizes=[...].")

    def finish(status: str, message: str, hint: str = "", checks: Sequence[Check] = (), score: float = 0.0) -> CheckResult:
        res = CheckResult(fn_name, status, score, float(p.points), message, hint, list(checks))
        log_result(res)
        return res

    if is_placeholder(kernel) or (p.host is not None and is_placeholder(p.host)):
        return finish("not implemented", "not implemented yet: replace `raise NotImplementedError` with your code.")
    try:
        cases = build_cases(p)
        out_names, in_names = param_names(p, kernel, cases[0])
        st = _State(p, Runner(p, kernel, fn_name, out_names), cases,
                    Judge(p.spec, p.rtol, in_names, dict(p.mistakes or {})))
        fail = run_cases(st, Launch())
        note = ""
        if fail is not None and fail.swappable and st.runner.can_swap:
            other = run_cases(_State(p, st.runner, cases, st.judge), Launch(swapped=True), quick=True)
            if other is None:
                fail, note = None, orientation_note(st, cases[-1])
                st.checks = [Check(f"size {c.size!r}", True, "correct (x and y exchanged)") for c in cases]
        if fail is not None:
            status, message, hint = explain(st, fail)
            return finish(status, message, hint, st.checks)
        launch = Launch(swapped=bool(note))
        race = race_stage(st, launch)
        if race is not None:
            return finish("failed", race[0], race[1], st.checks)
        penalties = []
        if p.budget is not None and p.host is None and runtime.is_simulator():
            penalties += budget_checks(st.runner, p.budget, cases, largest(cases), launch)
        elif p.budget is not None:
            st.checks.append(Check("budget", True, "not checked: access counts come from the simulator "
                                   "(run with GPULAB_DEVICE=simulator to check them)"))
        if p.ptx is not None:
            penalties.append(ptx_check(kernel, p.ptx))
    except SetupError as exc:
        return finish("setup error", f"setup error in this exercise, not in your code: {exc}",
                      "for the exercise's author: fix the Problem / check_kernel arguments named above.")
    st.checks += penalties
    n = f"{len(cases)} input{'s' if len(cases) != 1 else ''}"
    failed = [c for c in penalties if not c.passed]
    if failed:
        c = failed[0]
        status = "over budget" if c.name.startswith("budget") else "failed"
        return finish(status, f"correct on all {n}, but {c.name}: {c.message}" + note, c.hint, st.checks,
                      score=float(p.points) / 2)
    tol_note = (" Tolerance: the float32 rounding bound for sums of n terms, expected values in float64."
                if p.reduction is not None else "")
    return finish("passed", f"correct on all {n} ({', '.join(repr(c.size) for c in cases)})." + tol_note + note,
                  "", st.checks, score=float(p.points))


def largest(cases: list[Case]) -> int:
    return max(range(len(cases)), key=lambda k: sum(np.size(x) for x in cases[k].inputs))


def build_cases(p: Problem, sizes: Sequence[Size] | None = None) -> list[Case]:
    """Inputs and expected outputs for every size; anything wrong here is the exercise's SetupError."""
    cases = []
    for k, size in enumerate(p.sizes if sizes is None else sizes):
        rng = np.random.default_rng(p.seed + k)
        try:
            ins = p.inputs(size, rng)
        except Exception as exc:  # noqa: BLE001
            raise SetupError(f"inputs({size!r}, rng) raised {type(exc).__name__}: {exc}") from exc
        if isinstance(ins, np.ndarray):
            ins = (ins,)
        if not isinstance(ins, (tuple, list)):
            raise SetupError(f"inputs({size!r}, rng) returned a {type(ins).__name__}; it must return a NumPy "
                             "array or a tuple of the kernel's input arguments (arrays and numbers).")
        ins = tuple(ins)
        for j, x in enumerate(ins):
            if not isinstance(x, (np.ndarray, np.generic, int, float, bool)):
                raise SetupError(f"inputs({size!r}, rng) returned a {type(x).__name__} as argument {j}; "
                                 "kernel arguments are NumPy arrays or numbers (np.asarray(...) the lists).")
        try:
            exp = p.spec(*ins)
        except Exception as exc:  # noqa: BLE001
            raise SetupError(f"the spec raised {type(exc).__name__} on size {size!r}: {exc}") from exc
        exp = exp if isinstance(exp, tuple) else (exp,)
        for e in exp:
            if not isinstance(e, np.ndarray) or e.ndim == 0:
                raise SetupError(f"the spec returned {type(e).__name__} {e!r:.60} for size {size!r}; it must return "
                                 "NumPy arrays with at least one dimension, one per output the kernel writes "
                                 "(e.g. np.array([total], dtype=np.float32) for a single number).")
        tol = None
        if p.reduction is not None:
            exp, tol = float64_reference(p.spec, ins, exp, reduction_len(p.reduction, ins), p.atol)
        cases.append(Case(size, p.seed + k, ins, tuple(exp), tol))
    return cases


def param_names(p: Problem, kernel: Any, case: Case) -> tuple[list[str], list[str]]:
    """(output names, input names): the kernel's own parameter names where they can be matched."""
    n_in, n_out = len(case.inputs), len(case.expected)
    default_out = ["out"] if n_out == 1 else [f"out{k}" for k in range(n_out)]
    params: list[str] = []
    if p.args is None:
        try:
            sig = inspect.signature(py_func(p.host if p.host is not None else kernel))
            if all(q.kind in (q.POSITIONAL_ONLY, q.POSITIONAL_OR_KEYWORD) for q in sig.parameters.values()):
                params = list(sig.parameters)
        except (TypeError, ValueError):
            params = []
    ok = len(params) == n_in + n_out
    out = list(p.out_names) if p.out_names else (params[n_in:] if ok else default_out)
    return out, (params[:n_in] if ok else [f"input {k}" for k in range(n_in)])


def _tol(case: Case, o: int, atol: float) -> Any:
    return case.atol[o] if case.atol is not None else atol


def run_case(st: _State, k: int, launch: Launch, interval: float | None = None) -> _Fail | None:
    """Run case ``k`` once (twice for bool outputs); None when every output is right."""
    case, runner = st.cases[k], st.runner
    try:
        got, desc = runner.run(case, launch, interval)
        runs = [got]
        if st.p.out_init is None and any(e.dtype == np.bool_ for e in case.expected):
            runs.append(runner.run(case, launch, interval, fill_run=1)[0])
    except (Hang, SetupError):
        raise
    except OutOfBounds as oob:
        return _Fail("failed", k, launch, f"the kernel wrote past the end of {oob.args[0]} (input: {case.describe()}, "
                     f"launch: {oob.args[1]}).", "missing bounds guard: threads with i >= n must not write.", True)
    except Exception as exc:  # noqa: BLE001 - the learner's code failed: explain, don't crash
        inside = None
        if runner.thread_options and isinstance(exc, IndexError):
            inside = thread_inside(exc, case.expected[0].shape, launch.swapped)
        status, msg, hint = exception_verdict(exc, getattr(exc, "gpulab_launch", ""), case, inside)
        return _Fail(status, k, launch, msg, hint, swappable=isinstance(exc, IndexError))
    for o, exp in enumerate(case.expected):
        if not all(same(r[o], exp, st.p.rtol, _tol(case, o, st.p.atol)) for r in runs):
            bad = next(r for r in runs if not same(r[o], exp, st.p.rtol, _tol(case, o, st.p.atol)))
            return _Fail("failed", k, launch, swappable=True, output=o, got=bad, desc=desc, runs=tuple(runs))
    st.checks.append(Check(f"size {case.size!r}", True, f"correct ({desc})"))
    return None


def run_cases(st: _State, launch: Launch, quick: bool = False) -> _Fail | None:
    """Every case in turn (cycling through the block shapes); the first failure, or None."""
    for k in range(len(st.cases)):
        try:
            fail = run_case(st, k, Launch(k, launch.swapped))
        except Hang as hang:
            if quick:
                return _Fail("timeout", k, launch)
            stuck = hang.args[0]
            who = (f" ({len(stuck)} CUDA thread{'s' if len(stuck) != 1 else ''} still running, e.g. {stuck[0]})"
                   if stuck else "")
            hint = ("an infinite loop? Check that every loop variable advances (a grid-stride loop adds "
                    "cuda.gridsize(1); a tree reduction halves the stride) and that the loop ends for every thread.")
            if runtime.is_gpu():
                hint += " On the GPU a stuck kernel cannot be stopped: restart the Jupyter kernel."
            return _Fail("timeout", k, launch, f"the kernel did not finish within {st.p.timeout:g} s{who}.\n"
                         f"input: {st.cases[k].describe()}", hint)
        if fail is not None:
            return fail
    return None


def never_written(st: _State, fail: _Fail) -> np.ndarray | None:
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


def explain(st: _State, fail: _Fail) -> tuple[str, str, str]:
    """(status, message, hint) for a failure: diagnosis, races, square-only."""
    case = st.cases[fail.case]
    kind = ""
    if fail.output < 0:
        msg, hint = fail.message, fail.hint
    else:
        o = fail.output
        exp, tol = case.expected[o], _tol(case, o, st.p.atol)
        missing = never_written(st, fail)
        msg, hint, kind = diagnose_kind(fail.got[o], exp, tol, case, st.judge, st.runner.names[o], missing)
        if case.atol is not None:
            msg += (f"\n(allowed error: the float32 rounding bound for sums of "
                    f"{reduction_len(st.p.reduction, case.inputs):,} terms, up to {float(np.max(tol)):.3g} here)")
        msg += f"\ninput: {case.describe()}\nlaunch: {fail.desc}"
        hint = race_hint(st, fail, hint, missing)
    if fail.status == "failed" and fail.swappable and kind not in SPECIFIC:
        square = square_only(st, fail)
        if square:  # after an exception, the generic index hint adds nothing to this one
            hint = square if fail.output < 0 else square + (" " + hint if hint else "")
    return fail.status, msg, hint


def race_hint(st: _State, fail: _Fail, hint: str, missing: np.ndarray | None) -> str:
    """A race explains wrong values best: look for one directly, then try a second schedule."""
    p, case = st.p, st.cases[fail.case]
    if not p.race_check:
        return hint
    if p.host is None and runtime.is_simulator():
        try:
            found = race_verdict(st.runner, case, fail.launch)
        except Exception:  # noqa: BLE001 - the first verdict stands
            found = None
        if found:
            return f"{found[0]}. {found[1]}"
    if case.expected[0].size > 1 and not (missing is not None and missing.any()):
        try:
            again, _ = st.runner.run(case, fail.launch, SCHEDULES[0])
            if not all(same(a, b, p.rtol, p.atol) for a, b in zip(again, fail.runs[0])):
                return SCHEDULE_HINT + (" " + hint if hint else "")
        except Exception:  # noqa: BLE001 - the first verdict stands
            pass
    return hint


def square_only(st: _State, fail: _Fail) -> str:
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
    probe = _State(st.p, st.runner, [sq], st.judge)
    try:
        other = run_case(probe, 0, fail.launch)
    except Exception:  # noqa: BLE001
        return ""
    if other is None:
        return (f"correct on square inputs (size {sq.size!r}), wrong on non-square (size {case.size!r}): an index "
                "uses the wrong dimension (e.g. A.shape[0] where A.shape[1] is meant, or a row index where a "
                "column index belongs).")
    if other.output >= 0 and fail.output < 0:  # an exception here, wrong values on square inputs: say why
        o = other.output
        _, hint = diagnose(other.got[o], sq.expected[o], _tol(sq, o, st.p.atol), sq, st.judge, st.runner.names[o], None)
        if hint:
            return f"On square inputs (size {sq.size!r}) the kernel runs but is wrong: {hint}"
    return ""


def orientation_note(st: _State, case: Case) -> str:
    _, call = st.runner.host_call(case)
    grid, block = st.runner.config(case, call, Launch(swapped=True))
    return (f"\nAccepted with x and y exchanged (e.g. [{grid}, {block}]): your kernel maps threadIdx.x to the first "
            "axis (the rows), and is correct launched that way. The course's convention is x along the columns, "
            "the last axis (`j, i = cuda.grid(2)`, grid (ceil(cols / bx), ceil(rows / by))), so that neighbouring "
            "threads touch neighbouring elements.")


def race_stage(st: _State, launch: Launch) -> tuple[str, str] | None:
    """After every case passed: re-run the largest with another schedule (and block shape), then
    look for races and barriers inside branches directly. ``(message, hint)`` or None."""
    p = st.p
    if not p.race_check or not st.cases:
        return None
    big = largest(st.cases)
    case = st.cases[big]
    for j, interval in enumerate(SCHEDULES):
        try:
            fail = run_case(_State(p, st.runner, st.cases, st.judge), big, Launch(big + 1 + j, launch.swapped), interval)
        except Hang:
            return (f"correct once, but did not finish within {p.timeout:g} s when re-run with another thread "
                    f"schedule.\ninput: {case.describe()}", "a thread waits for something only another thread's "
                    "timing provides: look for loops that spin on shared or global memory.")
        if fail is not None and fail.output < 0:
            return "on a re-run with another thread schedule: " + fail.message, fail.hint
        if fail is not None:
            msg = (f"correct once, but wrong when re-run with another thread schedule ({fail.desc}): "
                   f"{st.runner.names[fail.output]} changed.\ninput: {case.describe()}")
            return msg, ("a race: some thread reads data another thread has not written yet (missing "
                         "cuda.syncthreads() between writing and reading shared memory?) or several threads "
                         "update one element without cuda.atomic.add.")
    direct = p.host is None and runtime.is_simulator()
    if direct:
        try:
            found = race_verdict(st.runner, case, Launch(big, launch.swapped))
        except Exception:  # noqa: BLE001 - the watched run failed where the plain ones passed: no verdict
            found = None
        if found:
            return f"{found[0]}\ninput: {case.describe()}", found[1]
    n_opts = len(st.runner.thread_options)
    st.checks.append(Check("races", True, "same result with different thread schedules"
                           + (" and block shapes" if n_opts > 1 else "")
                           + (", no unsynchronised accesses to shared memory or outputs, every barrier reached "
                              "by every thread" if direct else "")))
    return None

