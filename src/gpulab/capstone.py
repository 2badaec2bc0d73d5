"""The capstone (lab 09): train the CNN on the learner's own kernels, op by op.

Each op of the engine's contract that a learner writes in labs 03-08 has a :class:`Problem` here
(:data:`PROBLEMS`): the kernel signature is the library's (:mod:`gpulab.kernels.nn_ops`), and the
check runs the kernel through the same launcher training uses, with a few-thread launch in the
simulator, so a kernel must be a grid-stride loop; except the matmul, which may be lab 03's or lab 04's
one-thread-per-output kernel registered with its block shape (``block=(TILE, TILE)``): its check runs
on Numba's simulator, and training runs its threads through :mod:`gpulab.kernels.cooperative`.
:class:`Capstone` registers a kernel only once it passes; :meth:`Capstone.ops` is the ``kernels``
backend with every registered op swapped for the learner's, and :meth:`Capstone.report` says which
ops ran on whose kernels::

    cap = Capstone()
    cap.register("relu", relu_kernel)          # runs the check; registers only if it passes
    cap.register("matmul", matmul_tiled_kernel, block=(TILE, TILE))  # lab 04's tiled matmul
    model.use_ops(cap.ops())                   # every other op: the course's kernels
    cap.report()                               # op -> yours / course kernel, and the verdicts

Training with a learner op whose output turns NaN or inf stops at once with
:class:`CapstoneError` naming the op, never a silent NaN.

The ops' checks (:data:`PROBLEMS`: specs, inputs, mistakes) live in :mod:`gpulab.capstone_problems`, the host
functions that launch a learner's kernel as training does (:data:`HOSTS`) in :mod:`gpulab.capstone_hosts`;
the guarded backend (:class:`LearnerOps`) in :mod:`gpulab.capstone_ops`, what it holds each output to in
:mod:`gpulab.capstone_guard`; the compile of the registered kernels for a real GPU (:meth:`Capstone.check_ptx`) in
:mod:`gpulab.capstone_ptx`; this module holds the registry (:class:`Capstone`) and the report.
"""

from __future__ import annotations

import dataclasses
import html
from typing import Any

from . import capstone_ptx, runtime
from .capstone_ops import CapstoneError as CapstoneError, LearnerOps as LearnerOps
from .capstone_hosts import HOSTS as HOSTS, gemm_block_launch
from .capstone_problems import BLOCK_TIMEOUT, PROBLEMS as PROBLEMS
from .capstone_signatures import (
    COURSE_KERNELS as COURSE_KERNELS,
    DROPOUT_OPS as DROPOUT_OPS,
    LAUNCHERS as LAUNCHERS,
    LEARNER_OPS as LEARNER_OPS,
    not_grid_stride as not_grid_stride,
    signature_mismatch as signature_mismatch,
)
from .exercises import CheckResult
from .exercises.result import PTX_NOT_RUN, Check

__all__ = [
    "LEARNER_OPS",
    "PROBLEMS",
    "Capstone",
    "CapstoneError",
    "DROPOUT_OPS",
    "KernelRefused",
    "LearnerOps",
    "NotReadyToTrain",
    "not_grid_stride",
    "signature_mismatch",
]


class KernelRefused(CapstoneError):
    """The capstone's check refusing a kernel before it runs (a parameter list the launcher cannot call, a kernel
    that is not a grid-stride loop): its message is the verdict, shown as it is."""


class NotReadyToTrain(NotImplementedError):
    """Training waits for ops that are not the learner's yet. Nothing the learner wrote is wrong, so a notebook
    shows the message alone, with no traceback (IPython's ``_render_traceback_``); the cell still fails, so the
    graders score it "not implemented"."""

    def _render_traceback_(self) -> list[str]:
        return [f"{type(self).__name__}: {str(self).splitlines()[0]}", *str(self).splitlines()[1:]]


class Capstone:
    """Which op runs on whose kernel: register a learner kernel per op once its check passes."""

    def __init__(self) -> None:
        self.kernels: dict[str, Any] = {}
        self.blocks: dict[str, tuple[int, int]] = {}  # op -> block of a one-thread-per-output kernel
        self.results: dict[str, CheckResult] = {}
        self.course_seconds: dict[tuple, tuple[float, int]] = {}  # the training deadline's measurements (LearnerOps)
        self.ptx_not_run = ""  # why check_ptx could not compile (no NVVM): trained() marks the grade's row with it

    def problem(
        self, op: str, kernel: Any, *, scale: str | None = None, block: tuple[int, int] | None = None
    ) -> dict[str, Any]:
        """:func:`gpulab.exercises.check_kernel`'s keywords for ``op``: ``check_kernel(kernel, **cap.problem(op,
        kernel), points=...)`` runs ``kernel`` through the launcher training uses, at this mode's sizes.

        ``block=(TILE, TILE)`` (matmul only): the kernel computes one element of c per thread, as lab 03's
        and lab 04's matmuls do, launched in blocks of that shape (a grid-stride kernel needs none)."""
        if op not in PROBLEMS:
            raise CapstoneError(f"unknown op {op!r}; the learner ops are: {', '.join(LEARNER_OPS)}.")
        if block is not None and op != "matmul":
            raise CapstoneError(
                f"block= is for the matmul op (one thread per output); {op!r} takes a grid-stride kernel and no block."
            )
        pr, host = PROBLEMS[op], HOSTS[op]
        wrong_params = signature_mismatch(op, kernel)
        if block is None:
            why = wrong_params or not_grid_stride(op, kernel)

            def run(*a: Any, swapped: bool = False) -> None:  # the other run's signature; a grid-stride op never swaps
                if why:  # without it the verdict would blame a race: the unwritten elements hold whatever was there
                    raise KernelRefused(why)
                host(kernel, *a)

        else:

            def run(*a: Any, swapped: bool = False) -> None:
                if wrong_params:
                    raise KernelRefused(wrong_params)
                host(kernel, *a, block=block, swapped=swapped)

            # the check may launch it with x and y exchanged (run(..., swapped=True)): a kernel right only that way
            # (`i, j = cuda.grid(2)`) gets the orientation verdict, as labs 03 and 04 give it
            run.launch_config = lambda a, b, c: gemm_block_launch(c, block)  # type: ignore[attr-defined]

        def on_kernel(kern: Any) -> Any:
            """The same launch of ``kern``: in gpu mode, the simulator's version of the kernel, traced on the CPU for
            the check's count of writers per element (gpulab.exercises.writers; matmul and im2col)."""

            def launch(*a: Any, swapped: bool = False) -> None:
                if block is None:
                    host(kern, *a)
                else:
                    host(kern, *a, block=block, swapped=swapped)

            return launch

        run.on_kernel = on_kernel  # type: ignore[attr-defined]
        run.__name__ = f"nn_ops.{LAUNCHERS[op]}"  # the verdict's "launch: host function nn_ops.gemm(...)"
        return dict(
            spec=pr.spec,
            inputs=pr.inputs,
            sizes=pr.sizes_for(scale),
            host=run,
            out_names=pr.out_names,
            mistakes=pr.mistakes,
            reduction=pr.reduction,
            rtol=pr.rtol,
            atol=pr.atol,
            timeout=pr.timeout if block is None else max(pr.timeout, BLOCK_TIMEOUT),  # 256-thread blocks: slower
            # coalescing (gpulab.capstone_budgets): a grid-stride kernel is traced in one wide block, a
            # one-thread-per-output matmul as the check launched it (its TILE x TILE blocks)
            budget=pr.budget if pr.budget is None or block is None else dataclasses.replace(pr.budget, block=None),
            name=op,
        )

    def accept(self, op: str, kernel: Any, result: CheckResult, *, block: tuple[int, int] | None = None) -> CheckResult:
        """Register ``kernel`` for ``op`` if ``result`` (its check, with the same ``block``) passed, or found it
        correct but over its coalescing budget (half the check's points; it trains, slower on a GPU, and the report
        says so); otherwise make sure it is not. A kernel whose threads repeat each other's work (a 1-D loop in a
        2-D launch, :mod:`gpulab.exercises.writers`) also gets half, as "failed": it is not registered, as on a GPU
        it would do that work once per row of threads, and training would crawl."""
        self.results[op] = result
        self.kernels.pop(op, None)
        self.blocks.pop(op, None)
        if result.passed or result.status == "over budget":
            self.kernels[op] = kernel
            if block is not None:
                self.blocks[op] = (int(block[0]), int(block[1]))
        return result

    def register(
        self,
        op: str,
        kernel: Any,
        *,
        scale: str | None = None,
        points: float = 1,
        block: tuple[int, int] | None = None,
        trusted: bool = False,
    ) -> CheckResult:
        """Check ``kernel`` for ``op`` (:data:`PROBLEMS`) and register it only if the check passes. ``trusted``:
        ``kernel`` is gpulab's own (its tests register the library's kernels; see
        :func:`gpulab.exercises.check.run_problem`)."""
        from .exercises import check_kernel

        problem = self.problem(op, kernel, scale=scale, block=block)
        res = check_kernel(kernel, points=points, trusted=trusted, **problem)
        return self.accept(op, kernel, res, block=block)

    def missing(self) -> list[str]:
        """Learner ops not (or not yet correctly) registered."""
        return [op for op in LEARNER_OPS if op not in self.kernels]

    def require_all(self) -> None:
        """Print the report and raise :class:`NotReadyToTrain` while any learner op is missing."""
        if self.missing():
            print(self.report())
            raise NotReadyToTrain(f"training starts once every op is yours; not yet:\n{self.missing_summary()}")

    def missing_summary(self) -> str:
        """One line per missing op saying why it is not yours yet ("" when none is missing)."""
        lines = []
        for op in self.missing():
            res = self.results.get(op)
            if res is None:
                why = "not checked yet: run its exercise's check cell"
            elif res.status == "not implemented":
                why = "not written yet (the cell still raises NotImplementedError)"
            else:
                why = f"{_check_ended(res.status)}: fix it with the verdict under its exercise's check cell"
            lines.append(f"- {op}: {why}")
        return "\n".join(lines)

    def ops(
        self, *, require_all: bool = True, guard: bool = True, verify: bool = False, deadline: bool = True
    ) -> LearnerOps:
        """The engine ops with every registered kernel; with ``require_all`` every learner op must be there.
        ``verify``: compare each of your ops with the course kernel as it runs (:class:`LearnerOps`);
        ``deadline`` (simulator mode): stop training when one of your ops runs far longer than the course's."""
        if require_all and self.missing():
            details = "; ".join(f"{op}: {self._why(op)}" for op in self.missing())
            raise CapstoneError(f"not every op is yours yet, so training does not start. {details}")
        return LearnerOps(
            self.kernels,
            guard=guard,
            blocks=self.blocks,
            verify=verify,
            deadline=deadline,
            course_seconds=self.course_seconds,  # measured once per op, whatever the number of backends
        )

    def _why(self, op: str) -> str:
        res = self.results.get(op)
        if res is None:
            return "not registered (call Capstone.register)"
        return f"check {res.name!r} {res.status}: {res.message}"

    def check_ptx(self) -> None:
        """Compile every registered kernel for a real GPU (NVVM, PTX for sm_75, in one child process: a few
        seconds) and raise :class:`CapstoneError` naming each op whose kernel a GPU would refuse: the simulator
        runs any Python (lists, strings, NumPy calls), a GPU does not. Nothing to do in gpu mode, where every
        check already compiled the kernels; skipped with a note when NVVM is not installed."""
        if runtime.is_gpu() or not self.kernels:
            return
        errors = capstone_ptx.ptx_errors(self.kernels)
        if isinstance(errors, str):
            self.ptx_not_run = errors
            print("PTX not checked: the PTX compiler (NVVM, from numba-cuda[cu12]) could not run here.")
            return
        if errors:
            raise CapstoneError(capstone_ptx.refused(errors))

    @property
    def full_marks(self) -> bool:
        return not self.missing()

    def rows(self, ran: Any = None) -> list[tuple[str, str, str]]:
        """(op, whose kernel, verdict) for every op of a training step: the learner's ops first, in the order a step
        meets them, then the engine's other ops. ``ran``: the ops that ran in a training (``LearnerOps.calls``); a
        registered kernel that did not run there says so instead of "yours"."""
        from .nn.ops import OP_NAMES

        out = []
        for op in [*LEARNER_OPS, *(o for o in OP_NAMES if o not in LEARNER_OPS)]:
            if op in self.kernels:
                res = self.results.get(op)
                slow = res is not None and res.status == "over budget"
                who = "yours (over budget: uncoalesced, slower on a GPU)" if slow else "yours"
                if ran is not None and op not in ran:
                    who = f"{who}, checked, did not run in this training"
                out.append((op, who, res.status if res is not None else "passed"))
            elif op in LEARNER_OPS:
                res = self.results.get(op)  # a failed CheckResult is falsy: compare with None
                if res is None:
                    out.append((op, "course kernel (yours missing)", "not registered"))
                else:
                    yours = "not written yet" if res.status == "not implemented" else "did not pass its check"
                    out.append((op, f"course kernel (yours {yours})", res.status))
            elif op in ("conv_input_grad", "conv_weight_grad"):
                uses = "matmul + col2im" if op == "conv_input_grad" else "matmul"
                mine = all(o in self.kernels for o in uses.split(" + "))
                if ran is not None and op == "conv_input_grad" and "col2im" not in ran:
                    out.append((op, "not needed in this training (the input's gradient)", "composite"))
                    continue
                out.append((op, f"{'yours' if mine else 'course'} ({uses})", "composite"))
            else:
                out.append((op, "course kernel", "not a lab exercise"))
        return out

    def report(self, ops: Any = None) -> _Report:
        """A table of which op runs on whose kernel (HTML in Jupyter, text in a terminal). ``ops``: the
        :class:`LearnerOps` a training ran on (``cap.ops()``): the table then says which of your kernels ran there
        and how often."""
        calls = None if ops is None else dict(getattr(ops, "calls", ops))
        return _Report(self.rows(calls), len(set(self.kernels) & set(LEARNER_OPS)), len(LEARNER_OPS), calls)

    def trained(self, result: CheckResult, *, dataset: str, accuracy: float, target: float, ops: Any) -> CheckResult:
        """``result`` (the challenge's check) with what the training reached put first in its message, for the
        grade's row: the dataset, the test accuracy against its target, and how many learner ops were yours (and
        which of them did not run in this training)."""
        mine = [op for op in LEARNER_OPS if op in self.kernels]
        idle = [op for op in mine if op not in dict(getattr(ops, "calls", ops))]
        slow = [op for op in mine if getattr(self.results.get(op), "status", "") == "over budget"]
        line = (
            f"trained on {dataset}: test accuracy {accuracy:.3f} (target {target:g}); your kernels: {len(mine)} of "
            f"{len(LEARNER_OPS)} learner ops"
        )
        if idle:
            line += f" ({', '.join(idle)}: checked, not run in this training)"
        if slow:
            line += f"; over budget (uncoalesced): {', '.join(slow)}"
        result.message = f"{line}.\n{result.message}" if result.message else f"{line}."
        if self.ptx_not_run:  # the grade table marks the row (CheckResult.ptx_not_checked)
            result.checks.append(Check("PTX", True, f"{PTX_NOT_RUN} ({self.ptx_not_run})"))
        return result


def _check_ended(status: str) -> str:
    """How a check that did not pass ended, as a phrase ("its check failed", "its check timed out")."""
    return {
        "failed": "its check failed",
        "error": "its check stopped because the kernel raised an error",
        "timeout": "its check timed out",
        "over budget": "its check found it correct but over budget",
        "setup error": "its check could not run (a setup error)",
    }.get(status, f"its check ended {status!r}")


class _Report:
    """Which op runs on whose kernel: a table (HTML in Jupyter, the same as text elsewhere)."""

    def __init__(
        self, rows: list[tuple[str, str, str]], mine: int, total: int, calls: dict[str, int] | None = None
    ) -> None:
        self.rows, self.mine, self.total, self.calls = rows, mine, total, calls

    def _launches(self, op: str) -> str:
        return "" if self.calls is None or op not in LEARNER_OPS else str(self.calls.get(op, 0))

    def __str__(self) -> str:
        width = max([32] + [len(who) for _, who, _ in self.rows])
        lines = [
            f"{op:<18} {who:<{width}} {verdict}" + (f"  ({self._launches(op)} launches)" if self._launches(op) else "")
            for op, who, verdict in self.rows
        ]
        return "\n".join(lines + [f"your kernels: {self.mine} of {self.total} learner ops"])

    __repr__ = __str__  # a front end without HTML (a terminal, nbval's log) shows the table, not <_Report at 0x...>

    def _repr_html_(self) -> str:
        cells = "".join(
            f"<tr><td><code>{html.escape(op)}</code></td><td>{html.escape(who)}</td><td>{html.escape(v)}</td>"
            + (f"<td>{self._launches(op)}</td>" if self.calls is not None else "")
            + "</tr>"
            for op, who, v in self.rows
        )
        head = "<th>launches</th>" if self.calls is not None else ""
        return (
            f"<table><tr><th>op</th><th>kernel</th><th>check</th>{head}</tr>{cells}</table>"
            f"<p>your kernels: {self.mine} of {self.total} learner ops</p>"
        )
