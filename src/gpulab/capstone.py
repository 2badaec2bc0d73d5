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

The ops' checks (:data:`PROBLEMS`: specs, inputs, launchers) live in :mod:`gpulab.capstone_problems`;
this module holds the registry (:class:`Capstone`), the guarded backend and the report.
"""

from __future__ import annotations

import html
from typing import Any

import numpy as np

from . import runtime
from .capstone_problems import HOSTS as HOSTS, PROBLEMS as PROBLEMS
from .errors import GpulabError, UsageError
from .exercises import CheckResult
from .nn.kernel_ops import KernelOps

__all__ = ["LEARNER_OPS", "PROBLEMS", "Capstone", "CapstoneError", "LearnerOps", "not_grid_stride"]

# The ops a learner writes in labs 03-08, in the order a training step meets them.
LEARNER_OPS = (
    "matmul",
    "im2col",
    "col2im",
    "relu",
    "relu_backward",
    "maxpool",
    "maxpool_backward",
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
    return (
        f"{op}'s kernel must be a grid-stride loop: training launches it with fewer threads than elements (one "
        "block of 8 threads in the simulator; on a GPU the grid is capped at CUDA's limits for big batches), so each "
        f"thread must step over the elements: {loop}. Without the loop only the first threads' elements are computed."
    )


class CapstoneError(GpulabError):
    """A learner op is missing, failed its check, or produced NaN/inf during training."""


# ---------------------------------------------------------------------------------------- registry


class LearnerOps(KernelOps):
    """The ``kernels`` backend with the learner's kernels in ``kernels`` (op -> kernel); every output of
    a learner op is checked for NaN/inf (``guard``), so a wrong kernel stops training at that op."""

    name = "learner"

    def __init__(
        self, kernels: dict[str, Any], guard: bool = True, blocks: dict[str, tuple[int, int]] | None = None
    ) -> None:
        super().__init__(kernels, blocks)
        self.guard = guard
        self.calls: dict[str, int] = {}

    def _kernel(self, op: str) -> Any:
        kern = super()._kernel(op)
        if kern is not None:
            self.calls[op] = self.calls.get(op, 0) + 1
        return kern

    def _finite(self, op: str, *arrays: Any) -> None:
        if not self.guard or op not in self.kernels:
            return
        for a in arrays:
            if not bool(runtime.array_module(a).isfinite(a).all()):
                raise CapstoneError(
                    f"op {op!r}: your kernel produced NaN or inf during training (its check passed on small "
                    "random inputs). Look for a read past the end of an array, a missing bounds check in the "
                    f"grid-stride loop, or an accumulator that is not reset; re-run Capstone.register({op!r}, ...)."
                )

    def matmul(self, a: Any, b: Any) -> Any:
        c = super().matmul(a, b)
        self._finite("matmul", c)
        return c

    def im2col(self, x: Any, kh: int, kw: int, stride: int, pad: int) -> tuple[Any, int, int]:
        cols, ho, wo = super().im2col(x, kh, kw, stride, pad)
        self._finite("im2col", cols)
        return cols, ho, wo

    def col2im(self, dcols: Any, x_shape: tuple[int, ...], kh: int, kw: int, stride: int, pad: int) -> Any:
        dx = super().col2im(dcols, x_shape, kh, kw, stride, pad)
        self._finite("col2im", dx)
        return dx

    def relu(self, x: Any) -> Any:
        y = super().relu(x)
        self._finite("relu", y)
        return y

    def relu_backward(self, dout: Any, y: Any) -> Any:
        dx = super().relu_backward(dout, y)
        self._finite("relu_backward", dx)
        return dx

    def maxpool(self, x: Any, k: int, stride: int) -> tuple[Any, Any]:
        out, cache = super().maxpool(x, k, stride)
        self._finite("maxpool", out)
        return out, cache

    def maxpool_backward(self, dout: Any, cache: Any, x_shape: tuple[int, ...], k: int, stride: int) -> Any:
        dx = super().maxpool_backward(dout, cache, x_shape, k, stride)
        self._finite("maxpool_backward", dx)
        return dx

    def softmax_xent(self, logits: Any, labels: Any) -> tuple[float, Any]:
        loss, grad = super().softmax_xent(logits, labels)
        self._finite("softmax_xent", grad, np.asarray(loss))
        return loss, grad

    def adam_update(self, p: Any, g: Any, m: Any, v: Any, lr_t: float, b1: float, b2: float, eps_t: float) -> None:
        super().adam_update(p, g, m, v, lr_t, b1, b2, eps_t)
        self._finite("adam_update", p)


class Capstone:
    """Which op runs on whose kernel: register a learner kernel per op once its check passes."""

    def __init__(self) -> None:
        self.kernels: dict[str, Any] = {}
        self.blocks: dict[str, tuple[int, int]] = {}  # op -> block of a one-thread-per-output kernel
        self.results: dict[str, CheckResult] = {}

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
        if block is None:
            why = not_grid_stride(op, kernel)

            def run(*a: Any) -> None:
                if why:  # without it the verdict would blame a race: the unwritten elements hold whatever was there
                    raise UsageError(why)
                host(kernel, *a)

        else:
            run = lambda *a: host(kernel, *a, block=block)  # noqa: E731
        return dict(
            spec=pr.spec,
            inputs=pr.inputs,
            sizes=pr.sizes_for(scale),
            host=run,
            out_names=pr.out_names,
            reduction=pr.reduction,
            rtol=pr.rtol,
            atol=pr.atol,
            timeout=pr.timeout,
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
        self, op: str, kernel: Any, *, scale: str | None = None, points: float = 1, block: tuple[int, int] | None = None
    ) -> CheckResult:
        """Check ``kernel`` for ``op`` (:data:`PROBLEMS`) and register it only if the check passes."""
        from .exercises import check_kernel

        problem = self.problem(op, kernel, scale=scale, block=block)
        return self.accept(op, kernel, check_kernel(kernel, points=points, **problem), block=block)

    def missing(self) -> list[str]:
        """Learner ops not (or not yet correctly) registered."""
        return [op for op in LEARNER_OPS if op not in self.kernels]

    def ops(self, *, require_all: bool = True, guard: bool = True) -> LearnerOps:
        """The engine ops with every registered kernel; with ``require_all`` every learner op must be there."""
        if require_all and self.missing():
            details = "; ".join(f"{op}: {self._why(op)}" for op in self.missing())
            raise CapstoneError(f"not every op is yours yet, so training does not start. {details}")
        return LearnerOps(self.kernels, guard=guard, blocks=self.blocks)

    def _why(self, op: str) -> str:
        res = self.results.get(op)
        if res is None:
            return "not registered (call Capstone.register)"
        return f"check {res.name!r} {res.status}: {res.message}"

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
                res = self.results.get(op)
                out.append((op, "course kernel (yours missing)", res.status if res else "not registered"))
            elif op in ("conv_input_grad", "conv_weight_grad"):
                uses = "matmul + col2im" if op == "conv_input_grad" else "matmul"
                mine = all(o in self.kernels for o in uses.split(" + "))
                out.append((op, f"{'yours' if mine else 'course'} ({uses})", "composite"))
            else:
                out.append((op, "course kernel", "not a lab exercise"))
        return out

    def report(self) -> _Report:
        """A table of which op ran on whose kernel (HTML in Jupyter, text in a terminal)."""
        return _Report(self.rows(), len(self.kernels), len(LEARNER_OPS))


class _Report:
    def __init__(self, rows: list[tuple[str, str, str]], mine: int, total: int) -> None:
        self.rows, self.mine, self.total = rows, mine, total

    def __str__(self) -> str:
        lines = [f"{op:<18} {who:<32} {verdict}" for op, who, verdict in self.rows]
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
