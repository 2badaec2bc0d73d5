"""The pipeline behind :func:`check_kernel`: cases -> run (both orientations) -> compare -> diagnose ->
races -> budgets (with one writer per element, :mod:`.writers`) -> PTX, and the notes that change no score: an
input the kernel changed (:class:`.run.Runner` compares them after each case's first run), float64 arithmetic in
a float32 kernel (:mod:`.precision`)."""

from __future__ import annotations

import os
import types
import warnings
from contextlib import contextmanager
from typing import Any
from collections.abc import Callable, Iterator, Sequence

import numpy as np

from .. import runtime
from ..errors import UsageError
from ..source import code_names, py_func
from .budgets import budget_checks
from .cases import State, build_cases, largest, param_names, run_cases
from .diagnose import Judge
from .explain import explain, orientation_check
from .problem import Budget, Problem, Size
from ..ptx import prestart
from .output import captured
from .own_code import own_code_check
from .misuse import not_a_kernel
from .precision import FLOAT64_NOTE, float32_arrays, float64_literal_accumulators
from .ptxcheck import ptx_check, signature_for
from .races import race_stage
from .static import static_check
from .result import Check, CheckResult, log_result
from .run import Launch, Runner, SetupError
from .writers import gpu_writer_checks

__all__ = ["check_kernel", "is_placeholder", "run_problem"]


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
    reduction: int | tuple[int, ...] | Callable[..., Any] | None = None,
    out_init: Any = None,
    out_names: Sequence[str] | None = None,
    mistakes: dict[str, Callable[..., Any]] | None = None,
    budget: Budget | None = None,
    ptx: str | None = None,
    race_check: bool = True,
    timeout: float = 30.0,
    given: Sequence[Any] = (),
    updated_inputs: Sequence[int] = (),
    trusted: bool = False,
) -> CheckResult:
    """Run ``kernel`` on ``inputs(size, rng)`` for every size and compare with ``spec(*inputs)``.

    See :mod:`gpulab.exercises` for the launch options, the checks and the scoring. Never raises for
    a learner's mistake: the verdict is in the returned :class:`CheckResult`.

    ``reduction=n`` (or ``fn(*inputs) -> n``, or a tuple of counts, one per output): each output element is a
    float32 sum of ``n`` terms (a dot product of length n, a convolution window, a batch sum). The expected values
    are then computed in float64 and the allowed error is :func:`.compare.probable_bound` times the sum of the
    terms' magnitudes: ``min(gamma_n, 10 * sqrt(n) * u)``, the worst case :func:`rounding_bound` for n <= 100 and
    the probabilistic bound of Higham & Mary beyond, which every order of summation (loop, tree, atomics, FMA)
    meets at the course's sizes and a lost update or a dropped term does not. The spec must be a sum of products of
    its inputs (matmul, convolution, their gradients, optionally followed by ReLU).

    ``given=[fn, ...]``: gpulab kernels or functions the learner's code may call (:mod:`.own_code`: code that is,
    or calls, any other of gpulab's reference implementations gets 0 points and says so).

    ``updated_inputs=[k, ...]``: the positions of inputs the kernel updates in place by design (an RNG's states);
    any other input the kernel changes gets a note on the verdict (the score stays).

    ``trusted=True``: ``kernel`` is gpulab's own (a test of the check itself, on the reference it compares
    against): the own-code stage is skipped. See :func:`run_problem`.
    """
    problem = Problem(
        name or "",
        spec,
        inputs,
        sizes,
        threads=threads,
        launch=launch,
        host=host,
        args=args,
        points=points,
        seed=seed,
        rtol=rtol,
        atol=atol,
        reduction=reduction,
        out_init=out_init,
        out_names=out_names,
        mistakes=mistakes,
        budget=budget,
        ptx=ptx,
        race_check=race_check,
        timeout=timeout,
        given=given,
        updated_inputs=updated_inputs,
    )
    return run_problem(problem, kernel, name, trusted=trusted)


def is_placeholder(fn: Any) -> bool:
    """The learner's cell still says ``raise NotImplementedError``."""
    code = getattr(py_func(fn), "__code__", None)
    return code is not None and "NotImplementedError" in code_names(code)


def run_problem(p: Problem, kernel: Any, name: str | None = None, *, trusted: bool = False) -> CheckResult:
    """Check ``kernel`` against ``p``: the pipeline behind :func:`check_kernel` and ``Problem.check``. What the
    kernel prints meanwhile is kept aside: the verdict shows its first lines and how many more there were.

    ``trusted=True`` skips the own-code stage (:mod:`.own_code`) for this one call: it is how gpulab's tests run
    gpulab's references through the learners' checks. It is an argument, not a setting, so an answer cell cannot
    switch it on for a later check. In a graded lab the check calls are the test cells of the lab's source (the
    grader takes only the answer cells' code from a submission) and never pass it; a learner who passes it in an
    ungraded lesson gets no more than :func:`gpulab.lessons.reveal` shows. A trusted verdict carries
    ``details["trusted"]``, and :func:`gpulab.grading.report` scores it 0."""
    with captured() as printed, float_warnings() as warned:
        res = _run_problem(p, kernel, name, trusted)
    res.printed = printed.note("the kernel" if p.host is None else "your code")
    if warned and not res.passed:
        shown = "; ".join(warned[:3]) + (f" (and {len(warned) - 3} more)" if len(warned) > 3 else "")
        res.message += f"\nNumPy warned while it ran: {shown} (a GPU gives the inf or nan without a word)."
    return res


@contextmanager
def float_warnings() -> Iterator[list[str]]:
    """While the block runs, NumPy's floating-point warnings ("overflow encountered in multiply"), from the
    simulator's threads too, go to the list it yields instead of stderr: a GPU computes inf and nan silently, and
    nbgrader scores a graded cell that wrote to stderr 0, so a kernel's overflow must not cost a partly right answer
    its points. The list holds each text once, from the learner's code only (gpulab's own are dropped). Every other
    warning goes through the filters and the display it had before, unchanged."""
    found: list[str] = []
    shown = warnings.showwarning
    ours = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # gpulab's package folder

    def divert(message: Any, category: Any, filename: str, lineno: int, file: Any = None, line: Any = None) -> None:
        text = str(message)
        if not (issubclass(category, RuntimeWarning) and "encountered in" in text):
            shown(message, category, filename, lineno, file, line)
        elif text not in found and not os.path.abspath(filename).startswith(ours + os.sep):
            found.append(text)

    with warnings.catch_warnings():  # the filters and showwarning are the process's: every thread's warnings
        warnings.filterwarnings("always", message=".*encountered in", category=RuntimeWarning)
        warnings.showwarning = divert
        yield found


def _run_problem(p: Problem, kernel: Any, name: str | None, trusted: bool) -> CheckResult:
    fn_name = str(name or getattr(py_func(kernel), "__name__", None) or getattr(p.host, "__name__", "kernel"))
    n_modes = sum(x is not None for x in (p.threads, p.launch, p.host))
    if n_modes != 1:
        raise UsageError(
            f"check_kernel({fn_name}) needs exactly one of threads=, launch= or host= (got {n_modes}): "
            "threads=256 for one thread per output element, launch=lambda *args: (blocks, threads) for "
            "another grid, host=fn for a host function that launches the kernel itself."
        )
    if not p.sizes:
        raise UsageError(f"check_kernel({fn_name}) needs at least one input size in sizes=[...].")
    st: State | None = None
    notes: list[str] = []  # float64 accumulators found in the source

    def finish(
        status: str, message: str, hint: str = "", checks: Sequence[Check] = (), score: float = 0.0
    ) -> CheckResult:
        res = CheckResult(fn_name, status, score, float(p.points), message, hint, list(checks))
        if st is not None:
            res.notes = changed_input_notes(st, p.host is not None) + notes
        if trusted:
            res.details["trusted"] = True
        log_result(res)
        return res

    if p.host is None and (why := not_a_kernel(kernel, _example(p))) is not None:
        return finish("error", why)
    if is_placeholder(kernel) or (p.host is not None and is_placeholder(p.host)):
        return finish("not implemented", "not implemented yet: replace `raise NotImplementedError` with your code.")
    refused = None
    if not trusted:
        # the name the exercise asks for: the Problem's (lesson 08's "dropout_forward_kernel", the capstone's op
        # "relu", check_kernel's name=); a lab's "lab05.histogram" names the exercise, not a function, and an
        # unnamed check_kernel none, so their verdicts name the function by its own name (fn_name)
        expected = p.name if p.name.isidentifier() else None
        refused = own_code_check(fn_name, (kernel, p.host), given=p.given, spec=p.spec, expected=expected)
    if refused is not None:
        res = finish("failed", *refused, checks=[Check("own code", False, refused[0], refused[1])])
        res.details["own_code"] = False
        return res
    # the kernel's source is read for what a GPU cannot compile (Python lists, shapes known only at launch) when
    # it is a kernel: launched by the check, or by a host function (the capstone's launchers, lab 09) that
    # launches the @cuda.jit function given; a plain function given with host= is host code, free to use lists
    read_source = p.host is None or _is_cuda_kernel(kernel)
    if p.ptx is not None:
        prestart()  # the PTX compiler starts on another core while the cases run
    try:
        cases = build_cases(p)
        out_names, in_names = param_names(p, kernel, cases[0])
        judge = Judge(p.spec, p.rtol, in_names, dict(p.mistakes or {}), _fan_in(cases, out_names))
        st = State(p, Runner(p, kernel, fn_name, out_names), cases, judge)
        fail = run_cases(st, Launch())
        exchanged = None  # the course's launch failed and the one with x and y exchanged is right: its failure
        if fail is not None and fail.swappable and st.runner.can_swap(cases[fail.case]):
            try:
                other = run_cases(State(p, st.runner, cases, st.judge), Launch(swapped=True), quick=True)
            except SetupError:  # the exchanged launch is not a valid one (e.g. too many blocks along y)
                other = fail
            if other is None:
                fail, exchanged = None, fail
                st.checks = [Check(f"size {c.size!r}", True, "correct launched with x and y exchanged") for c in cases]
        if fail is not None:
            status, message, hint = explain(st, fail)
            if read_source and (shape := static_check(kernel)) is not None:
                message += f" Also, {shape.message}"  # e.g. buf = cuda.shared.array(x.size, ...) too small
            return finish(status, message, hint, st.checks)
        launch = Launch(swapped=exchanged is not None)
        race = race_stage(st, launch)
        if race is not None:
            return finish("failed", race[0], race[1], st.checks)
        # right only launched the other way: not a pass (every later launch puts x along the columns), half points
        penalties = [] if exchanged is None else [orientation_check(st, exchanged)]
        if read_source and (shape := static_check(kernel)) is not None:
            penalties.append(shape)
        if p.budget is not None and (p.host is None or p.budget.host_launch) and runtime.is_simulator():
            penalties += budget_checks(st.runner, p.budget, cases, largest(cases), launch)
        elif p.budget is not None:
            st.checks.append(
                Check(
                    "budget",
                    True,
                    "not checked: access counts come from the simulator "
                    "(run with GPULAB_DEVICE=simulator to check them)",
                )
            )
            if p.budget.writers_per_element:  # a kernel that repeats its work: traced in the simulator all the same
                penalties += gpu_writer_checks(st.runner, p.budget, cases, launch)
        if p.ptx is not None:
            sig = signature_for(st.runner.host_call(cases[0])[1]) if p.ptx == "auto" else p.ptx
            if sig is None:
                st.checks.append(Check("PTX", True, "not checked: an argument's type has no signature of its own"))
            else:
                penalties.append(ptx_check(kernel, sig, st.runner.most_threads(st.cases, launch)))
        if p.host is None and float32_arrays(cases[0].inputs + cases[0].expected):
            if names := float64_literal_accumulators(kernel):
                notes.append(
                    FLOAT64_NOTE.format(where=f" ({names[0]} starts as a float literal and is updated in a loop)")
                )
    except SetupError as exc:
        return finish(
            "setup error",
            f"setup error in this exercise, not in your code: {exc}",
            "for the exercise's author: fix the Problem / check_kernel arguments named above.",
        )
    st.checks += penalties
    n = f"{len(cases)} input{'s' if len(cases) != 1 else ''}"
    failed = [c for c in penalties if not c.passed]
    if failed:
        c = failed[0]
        status = "over budget" if c.name.startswith("budget") else "failed"
        res = finish(status, f"correct on all {n}, but {c.name}: {c.message}", c.hint, st.checks, float(p.points) / 2)
        if exchanged is not None:
            res.details["orientation"] = "exchanged"  # or_reference says why it hands back the reference
        return res
    tol_note = (
        " Tolerance: the float32 rounding bound for sums of n terms, expected values in float64."
        if p.reduction is not None
        else ""
    )
    return finish(
        "passed",
        f"correct on all {n} ({', '.join(repr(c.size) for c in cases)})." + tol_note,
        "",
        st.checks,
        score=float(p.points),
    )


def _is_cuda_kernel(obj: Any) -> bool:
    """Whether ``obj`` is a ``@cuda.jit`` function (a gpu dispatcher or a simulator kernel), not a plain one."""
    return obj is not None and not isinstance(obj, types.FunctionType) and py_func(obj) is not obj


def _example(p: Problem) -> str:
    """A check call with the kernel's name, for a verdict on a call given something else: the name the exercise asks
    for (lessons: ``add_kernel``), else the usual one (a lab's ``lab01.add``: ``add_kernel``)."""
    name = p.name if p.name.isidentifier() else f"{p.name.rpartition('.')[2]}_kernel"
    return f"check({name})" if name.isidentifier() else "check(my_kernel)"


def changed_input_notes(st: State, host: bool) -> list[str]:
    """A note for each input array the kernel (or host function) changed during a run."""
    who = "your code" if host else "your kernel"
    outs = ", ".join(st.runner.names)
    notes = []
    for k, found in sorted(st.runner.changed.items()):
        name = st.judge.input_name(k)
        notes.append(
            f"{who} changed its input {name} ({found.where(name)}): callers expect their inputs unchanged (on a GPU "
            f"the caller's data is overwritten, and the next launch on it computes something else); read {name}, "
            f"write only to {outs}."
        )
    return notes


def _fan_in(cases: list, out_names: list[str]) -> dict[str, float]:
    """:attr:`.diagnose.Judge.fan_in`: per output, its case with the largest input's size of that input divided by
    the output's size (the largest case: a reduction's n = 0 and n = 1 edge cases say nothing about its fan-in)."""

    def largest(c: Any) -> int:
        return max((int(np.size(x)) for x in c.inputs if isinstance(x, np.ndarray)), default=0)

    fan: dict[str, float] = {}
    for k, name in enumerate(out_names):
        if not cases or any(k >= len(c.expected) for c in cases):
            continue
        big = max(cases, key=largest)
        fan[name] = largest(big) / max(1, int(np.size(big.expected[k])))
    return fan
