"""Building the cases (inputs, expected outputs, names) and running them: one launch per case,
cycling through the block shapes, in one orientation."""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from typing import Any
from collections.abc import Sequence

import numpy as np

from .. import runtime
from ..simulator import in_turn, warps
from ..source import code_names, py_func
from .compare import float64_reference, reduction_len, same
from .diagnose import Judge
from .raised import exception_verdict, thread_inside
from .problem import Case, Problem, Size
from .result import Check
from .run import Hang, Launch, OutOfBounds, Runner, SetupError, as_dim

__all__ = ["Failure", "State", "build_cases", "largest", "param_names", "run_case", "run_cases", "size_hint"]


@dataclass
class Failure:
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
    undefined: tuple = ()  # simulator: shuffles that read a lane taking no part (gpulab.simulator.warps)


@dataclass
class State:
    p: Problem
    runner: Runner
    cases: list[Case]
    judge: Judge
    checks: list[Check] = field(default_factory=list)


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
            raise SetupError(
                f"inputs({size!r}, rng) returned a {type(ins).__name__}; it must return a NumPy "
                "array or a tuple of the kernel's input arguments (arrays and numbers)."
            )
        ins = tuple(ins)
        # Kernel arguments must be arrays or numbers; a host= function or an args= adapter may take anything.
        for j, x in enumerate(ins if p.host is None and p.args is None else ()):
            if not isinstance(x, (np.ndarray, np.generic, int, float, bool)):
                raise SetupError(
                    f"inputs({size!r}, rng) returned a {type(x).__name__} as argument {j}; "
                    "kernel arguments are NumPy arrays or numbers (np.asarray(...) the lists)."
                )
        try:
            exp = p.spec(*ins)
        except Exception as exc:  # noqa: BLE001
            raise SetupError(f"the spec raised {type(exc).__name__} on size {size!r}: {exc}") from exc
        exp = exp if isinstance(exp, tuple) else (exp,)
        for e in exp:
            if not isinstance(e, np.ndarray) or e.ndim == 0:
                raise SetupError(
                    f"the spec returned {type(e).__name__} {e!r:.60} for size {size!r}; it must return "
                    "NumPy arrays with at least one dimension, one per output the kernel writes "
                    "(e.g. np.array([total], dtype=np.float32) for a single number)."
                )
        tol = None
        if p.reduction is not None:
            try:
                counts = tuple(reduction_len(p.reduction, ins, o) for o in range(len(exp)))
                exp, tol = float64_reference(p.spec, ins, exp, counts, p.atol, p.reduction_lambda)
            except Exception as exc:  # noqa: BLE001
                raise SetupError(
                    f"reduction=: the float64 reference failed on size {size!r}: {type(exc).__name__}: {exc}"
                ) from exc
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


def tol_for(case: Case, o: int, atol: float) -> Any:
    return case.atol[o] if case.atol is not None else atol


def covered_shape(st: State, case: Case) -> tuple[int, ...] | None:
    """The shape whose elements get one thread each, when known: the output's for ``threads=`` or a launch over
    the output (problems' ``launch_1d``/``launch_2d`` with ``arg=-1``), an input's for a launch over that input
    (``arg=0``: lab 02's rotation and copy, launched over ``a``). None otherwise."""
    of = getattr(st.p.launch, "one_thread_per_element_of", None)
    if st.runner.thread_options or (of == -1 and len(case.expected) == 1):
        return case.expected[0].shape
    if isinstance(of, int) and 0 <= of < len(case.inputs) and st.p.args is None:
        x = case.inputs[of]
        return x.shape if isinstance(x, np.ndarray) else None
    return None


def run_case(st: State, k: int, launch: Launch, interval: float | None = None) -> Failure | None:
    """Run case ``k`` once (twice for bool outputs); None when every output is right."""
    case, runner = st.cases[k], st.runner
    try:
        with warps.undefined_reads() as undefined:
            got, desc = runner.run(case, launch, interval)
            runs = [got]
            if st.p.out_init is None and any(e.dtype == np.bool_ for e in case.expected):
                runs.append(runner.run(case, launch, interval, fill_run=1)[0])
    except (Hang, SetupError):
        raise
    except OutOfBounds as oob:
        return Failure(
            "failed",
            k,
            launch,
            f"the kernel wrote past the end of {oob.args[0]} (input: {case.describe()}, launch: {oob.args[1]}).",
            "missing bounds guard: threads with i >= n must not write.",
            True,
        )
    except Exception as exc:  # noqa: BLE001 - the learner's code failed: explain, don't crash
        inside = None
        covered = covered_shape(st, case)
        if covered is not None and isinstance(exc, IndexError):
            inside = thread_inside(exc, covered, launch.swapped)
        code = getattr(py_func(runner.kernel), "__code__", None) if st.p.host is None else None
        shuffles = code is not None and any(n.startswith("shfl_") for n in code_names(code))
        names = (st.judge.in_names, runner.names)
        launched = getattr(exc, "gpulab_launch", "")
        status, msg, hint = exception_verdict(exc, launched, case, inside, shuffles, names, st.judge.mistakes)
        return Failure(status, k, launch, msg, hint, swappable=isinstance(exc, IndexError))
    for o, exp in enumerate(case.expected):
        if not all(same(r[o], exp, st.p.rtol, tol_for(case, o, st.p.atol)) for r in runs):
            bad = next(r for r in runs if not same(r[o], exp, st.p.rtol, tol_for(case, o, st.p.atol)))
            return Failure(
                "failed",
                k,
                launch,
                swappable=True,
                output=o,
                got=bad,
                desc=desc,
                runs=tuple(runs),
                undefined=tuple(undefined),
            )
    st.checks.append(Check(f"size {case.size!r}", True, f"correct ({desc})"))
    return None


def size_hint(st: State, k: int, launch: Launch) -> str | None:
    """Why case ``k`` may have run out of time in the simulator by its size alone (a launch of millions of threads,
    each run as Python on the CPU), or None: gpu mode, a launch of fewer than ``WARN_THREADS`` threads, or one the
    check cannot tell (a host function that does not say how it launches)."""
    from ..simulator.limits import SIM_THREADS_PER_S, WARN_THREADS

    if not runtime.is_simulator():
        return None
    try:
        grid, block = st.runner.config(st.cases[k], st.runner.host_call(st.cases[k])[1], Launch(k, launch.swapped))
    except Exception:  # noqa: BLE001 - no launch the check can name
        return None
    threads = int(np.prod(as_dim(grid))) * int(np.prod(as_dim(block)))
    if threads < WARN_THREADS:
        return None
    return (
        f"this input is large for the simulator: the launch runs {threads:,} threads, each as Python on the CPU "
        f"(about {SIM_THREADS_PER_S:,} a second for a short kernel, so at least {threads / SIM_THREADS_PER_S:.0f} s "
        f"before any loop), which is likely why it did not finish within {st.p.timeout:g} s. Check with smaller "
        "sizes (sizes=[7, 1000]); gpu-sized inputs belong to gpu mode."
    )


def run_cases(st: State, launch: Launch, quick: bool = False) -> Failure | None:
    """Every case in turn (cycling through the block shapes); the first failure, or None."""
    for k in range(len(st.cases)):
        try:
            fail = run_case(st, k, Launch(k, launch.swapped))
        except Hang as hang:
            if quick:
                return Failure("timeout", k, launch)
            stuck = hang.args[0]
            who = (
                f" ({len(stuck)} CUDA thread{'s' if len(stuck) != 1 else ''} still running, e.g. {stuck[0]})"
                if stuck
                else ""
            )
            loops = (
                "every loop variable advances (a grid-stride loop adds cuda.gridsize(1); a tree reduction halves the "
                "stride) and that the loop ends for every thread."
            )
            hint = f"an infinite loop? Check that {loops}"
            big = size_hint(st, k, launch)
            if big is not None:
                hint = f"{big} If smaller sizes time out too, look for an infinite loop: check that {loops}"
            elif runtime.is_gpu():
                hint += " On the GPU a stuck kernel cannot be stopped: restart the Jupyter kernel."
            elif st.p.host is None and in_turn.plan(py_func(st.runner.kernel)) is not None:
                hint += (
                    " Or a thread waits in a loop for another thread to write something: the simulator runs a "
                    "block's threads one after another (each up to its next cuda.syncthreads()), so such a wait "
                    "never ends here, and on a GPU it can hang too. Wait for other threads with cuda.syncthreads()."
                )
            return Failure(
                "timeout",
                k,
                launch,
                f"the kernel did not finish within {st.p.timeout:g} s{who}.\ninput: {st.cases[k].describe()}",
                hint,
            )
        if fail is not None:
            return fail
    return None
