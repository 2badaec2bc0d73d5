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
:mod:`gpulab.capstone_guard`; this module holds the registry (:class:`Capstone`) and the report.
"""

from __future__ import annotations

import dataclasses
import html
from typing import Any


from . import runtime
from .capstone_ops import CapstoneError as CapstoneError, LearnerOps as LearnerOps
from .capstone_hosts import HOSTS as HOSTS, gemm_block_launch
from .capstone_problems import BLOCK_TIMEOUT, PROBLEMS as PROBLEMS
from .errors import UsageError
from .exercises import CheckResult

__all__ = [
    "LEARNER_OPS",
    "PROBLEMS",
    "Capstone",
    "CapstoneError",
    "DROPOUT_OPS",
    "LearnerOps",
    "NotReadyToTrain",
    "not_grid_stride",
    "signature_mismatch",
]

# The ops a learner writes in labs 03-08, in the order a training step meets them.
LEARNER_OPS = (
    "matmul",
    "im2col",
    "col2im",
    "relu",
    "relu_backward",
    "maxpool",
    "maxpool_backward",
    "dropout_forward",
    "dropout_backward",
    "softmax_xent",
    "adam_update",
)


def not_grid_stride(op: str, kernel: Any) -> str:
    """Why ``kernel`` cannot be ``op``'s grid-stride kernel ("" when it may be): training launches it with fewer
    threads than elements, so its code must read ``cuda.gridsize`` (or ``cuda.gridDim``) to step over the rest.
    A kernel that calls device functions, or whose code cannot be read, is left to its check."""
    from .source import code_names, py_func

    fn = py_func(kernel)
    code = getattr(fn, "__code__", None)
    if code is None:
        return ""
    names = code_names(code)
    if {"gridsize", "gridDim"} & names:
        return ""
    if any(hasattr(getattr(fn, "__globals__", {}).get(n), "py_func") for n in names):
        return ""  # a device function may hold the loop
    loop = (
        "`q0, r0 = cuda.grid(2)` and `sq, sr = cuda.gridsize(2)`, then loops from r0 in steps of sr and "
        "from q0 in steps of sq"
        if op in ("im2col", "col2im")  # the 2-D launches
        else "`for i in range(cuda.grid(1), n, cuda.gridsize(1)):`"
    )
    launch = (
        "exactly one thread per generator state, whatever the number of elements"
        if op in ("dropout_forward", "dropout_backward")  # lab 08's fixed grid
        else "one block of 8 threads in the simulator; on a GPU the grid is capped at CUDA's limits for big batches"
    )
    return (
        f"{op}'s kernel must be a grid-stride loop: training launches it with fewer threads than elements ({launch}), "
        f"so each thread must step over the elements: {loop}. Without the loop only the first threads' elements are "
        "computed."
    )


# Lab 08's dropout kernel serves both dropout ops (its exercise 4 wrote the backward, lesson 08's exercise 5 the
# forward): both launch it, one thread per generator state, the backward on the states as they were before the forward.
DROPOUT_OPS = ("dropout_forward", "dropout_backward")
# The launcher of gpulab.kernels.nn_ops that training calls for each op (the checks launch as it does).
LAUNCHERS = {op: {"matmul": "gemm"}.get(op, "dropout" if op in DROPOUT_OPS else op) for op in LEARNER_OPS}
# The course's kernel for each op, whose parameters training's launcher passes (gpulab.kernels.nn_ops).
COURSE_KERNELS = {
    op: {"matmul": "gemm_kernel", "adam_update": "adam_kernel"}.get(
        op, "dropout_kernel" if op in DROPOUT_OPS else f"{op}_kernel"
    )
    for op in LEARNER_OPS
}


def signature_mismatch(op: str, kernel: Any) -> str:
    """Why ``kernel`` cannot be launched as ``op``'s kernel ("" when it can, or when its parameters cannot be
    read): training's launcher passes the course kernel's parameters, so the number must match."""
    import inspect

    from .kernels import nn_ops
    from .source import py_func

    try:
        mine = inspect.signature(py_func(kernel)).parameters
        course = inspect.signature(py_func(getattr(nn_ops, COURSE_KERNELS[op]))).parameters
    except (TypeError, ValueError, AttributeError):
        return ""
    if any(p.kind not in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) for p in mine.values()):
        return ""  # *args: left to the launch
    if len(mine) == len(course):
        return ""
    name = getattr(py_func(kernel), "__name__", "your kernel")
    return (
        f"{op}'s kernel {name}({', '.join(mine)}) takes {len(mine)} parameter{'s' if len(mine) != 1 else ''}, but "
        f"training's launcher nn_ops.{LAUNCHERS[op]} passes {len(course)}: those of the course's kernel, "
        f"{COURSE_KERNELS[op]}({', '.join(course)}), in this order. Change your kernel's `def` line to take these "
        f"{len(course)} parameters, rerun that cell, then this check."
    )


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
                    raise UsageError(why)
                host(kernel, *a)

        else:

            def run(*a: Any, swapped: bool = False) -> None:
                if wrong_params:
                    raise UsageError(wrong_params)
                host(kernel, *a, block=block, swapped=swapped)

            # the check may launch it with x and y exchanged (run(..., swapped=True)): a kernel right only that way
            # (`i, j = cuda.grid(2)`) gets the orientation verdict, as labs 03 and 04 give it
            run.launch_config = lambda a, b, c: gemm_block_launch(c, block)  # type: ignore[attr-defined]

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
        """Register ``kernel`` for ``op`` if ``result`` (its check, with the same ``block``) passed; otherwise
        make sure it is not."""
        self.results[op] = result
        self.kernels.pop(op, None)
        self.blocks.pop(op, None)
        if result.passed:
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
        errors = _ptx_errors(self.kernels)
        if errors is None:
            print("PTX not checked: the PTX compiler (NVVM, from numba-cuda[cu12]) could not run here.")
            return
        if errors:
            lines = "\n".join(f"- {op}: {err}" for op, err in errors.items())
            raise CapstoneError(
                "the simulator ran these kernels, but a GPU would refuse them (NVVM could not compile them to "
                f"PTX):\n{lines}\nInside a kernel use arrays, numbers, math and cuda.* only: a GPU has no Python "
                "lists, dicts, strings or objects (`t = [x[i], 0.0]` does not compile: use separate variables, or "
                "cuda.local.array for a fixed-size array). Fix the kernel and re-run its check cell."
            )

    @property
    def full_marks(self) -> bool:
        return not self.missing()

    def rows(self) -> list[tuple[str, str, str]]:
        """(op, whose kernel, verdict) for every op of a training step."""
        from .nn.ops import OP_NAMES

        out = []
        for op in OP_NAMES:
            if op in self.kernels:
                out.append((op, "yours", "passed"))
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
                out.append((op, f"{'yours' if mine else 'course'} ({uses})", "composite"))
            else:
                out.append((op, "course kernel", "not a lab exercise"))
        return out

    def report(self) -> _Report:
        """A table of which op ran on whose kernel (HTML in Jupyter, text in a terminal)."""
        return _Report(self.rows(), len(set(self.kernels) & set(LEARNER_OPS)), len(LEARNER_OPS))


def _check_ended(status: str) -> str:
    """How a check that did not pass ended, as a phrase ("its check failed", "its check timed out")."""
    return {
        "failed": "its check failed",
        "error": "its check stopped because the kernel raised an error",
        "timeout": "its check timed out",
        "over budget": "its check found it correct but over budget",
        "setup error": "its check could not run (a setup error)",
    }.get(status, f"its check ended {status!r}")


def _ptx_errors(kernels: dict[str, Any]) -> dict[str, str] | None:
    """op -> NVVM's error for each kernel that does not compile to PTX with its op's signature (the library
    kernel's, :data:`gpulab.kernels.nn_kernels.PTX_SIGNATURES`); None when the compiler cannot run here."""
    from . import ptx
    from .kernels import nn_kernels
    from .source import NotADeviceFunction, NotOnAGpu, py_func, standalone_source

    library = COURSE_KERNELS
    signatures = {py_func(k).__name__: sig for k, sig in nn_kernels.PTX_SIGNATURES}
    items = {}
    for op, kern in kernels.items():
        try:
            source = standalone_source(kern)
        except (NotADeviceFunction, NotOnAGpu) as exc:  # a GPU refuses it: the simulator ran Python
            return {op: str(exc)}
        except (OSError, TypeError, ValueError, RecursionError) as exc:  # the check's limit, not the learner's
            print(f"PTX not checked for {op}: its kernel's source could not be rebuilt for the compiler ({exc}).")
            continue
        items[op] = {
            "source": source,
            "name": py_func(kern).__name__,
            "signature": signatures[library[op]],
        }
    if not items:
        return {}
    try:
        res = ptx.compile_sources(items)  # one process for all: about 4 s of CPU
    except Exception:  # noqa: BLE001 - NVVM missing or the child failed: not the learner's fault
        return None
    return {op: _gist(err) for op, err in res.items() if err != "ok"}


def _gist(err: str) -> str:
    """The lines of a Numba error that say what is wrong (not its pipeline's step names, nor its boilerplate)."""
    keep = [
        ln.strip()
        for ln in err.splitlines()
        if ln.strip()
        and not ln.startswith(("TypingError: Failed in", "During:", "File ", "Failed in"))
        and "pipeline" not in ln
    ]
    gist = " ".join(keep[:3])[:400] or err[:400]
    if "NRT required" in err:  # Numba's runtime: what allocates memory (lists, new arrays) inside the kernel
        gist += " (the kernel creates a list, array or other object: a GPU kernel cannot allocate memory)"
    return gist


class _Report:
    def __init__(self, rows: list[tuple[str, str, str]], mine: int, total: int) -> None:
        self.rows, self.mine, self.total = rows, mine, total

    def __str__(self) -> str:
        width = max([32] + [len(who) for _, who, _ in self.rows])
        lines = [f"{op:<18} {who:<{width}} {verdict}" for op, who, verdict in self.rows]
        return "\n".join(lines + [f"your kernels: {self.mine} of {self.total} learner ops"])

    def _repr_html_(self) -> str:
        cells = "".join(
            f"<tr><td><code>{html.escape(op)}</code></td><td>{html.escape(who)}</td><td>{html.escape(v)}</td></tr>"
            for op, who, v in self.rows
        )
        return (
            f"<table><tr><th>op</th><th>kernel</th><th>check</th></tr>{cells}</table>"
            f"<p>your kernels: {self.mine} of {self.total} learner ops</p>"
        )
