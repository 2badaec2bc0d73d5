"""How a learner op runs in the capstone's training (lab 09): the machinery of :class:`gpulab.capstone_ops.LearnerOps`.

:class:`GuardedOps` is the ``kernels`` backend with the learner's kernels swapped in; an op method wrapped with
:func:`learner_op` keeps its learner kernel's ``print`` output aside, runs under a deadline in simulator mode
(:mod:`gpulab.capstone_deadline`), has its outputs checked (:meth:`GuardedOps._finite`, what they are held to:
:mod:`gpulab.capstone_guard`) and, with ``verify``, runs again as its check does and is compared with the course
kernel (:meth:`GuardedOps._same`). Which op's outputs are checked and compared how is
:class:`gpulab.capstone_ops.LearnerOps`, one method per op of the contract.

On a GPU, reading a check's answer makes the host wait for the GPU: one wait per learner op (about 35 a step)
would cost a large share of a step. So there each output's check is computed on the GPU where the op left it (a
0-d flag) and the flags are read together, once when the step turns from computing gradients to updating weights
(before any weight changes: a NaN gradient never reaches them) and once when it turns back (the update's own
outputs), plus at the end of each epoch and after ``predict`` (:meth:`GuardedOps.finish`; a loop of your own that
calls ``nn.train_step`` calls ``model.ops.finish()`` after its last step). The first op in launch order whose flag is
down is the one named, as with checks read at once; NumPy outputs (simulator mode) are still checked at once.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from typing import Any, TypeVar

import numpy as np

from . import capstone_deadline, capstone_guard, runtime
from .capstone_deadline import WORK, Recorder, copies, hang_message
from .capstone_guard import CapstoneError
from .capstone_hosts import HOSTS
from .capstone_problems import PROBLEMS
from .exercises.output import Printed, captured
from .exercises.raised_elsewhere import DEVICE_FAULT_RE
from .nn.kernel_ops import KernelOps

__all__ = ["UPDATES", "GuardedOps", "learner_op"]


F = TypeVar("F", bound=Callable[..., Any])


# The ops that update weights in place: the checks of the step so far are read before the first of them runs.
UPDATES = ("adam_update", "sgd_update")


def learner_op(op: str) -> Callable[[F], F]:
    """A :class:`GuardedOps` method for ``op`` whose learner kernel's ``print`` output is kept aside: training
    launches it every step, so only the first step that prints shows a few of its lines (``GuardedOps.printed``).
    In simulator mode it runs under a deadline (:meth:`GuardedOps._deadline`). Every op, yours or the course's,
    first reads the flags of the checks that wait on a GPU when the step turns to or from updating weights."""

    def wrap(method: F) -> F:
        @functools.wraps(method)
        def run(self: GuardedOps, *args: Any, **kw: Any) -> Any:
            try:
                self._turn(op in UPDATES)
                if op not in self.kernels:
                    return method(self, *args, **kw)
                out = None
                try:
                    # fd=False: on a GPU, keeping CUDA printf aside means synchronising after every op of every step
                    # (~0.3 ms each, measured with a no-op sync); training stays asynchronous, so a printing
                    # kernel's lines reach the notebook as usual there (its check, before training, kept them aside).
                    with captured(fd=False) as out:
                        return self._deadline(op, method, args, kw)
                finally:
                    self._printed(op, out)
            except BaseException as exc:
                self._unread(exc)
                raise

        return run  # type: ignore[return-value]

    return wrap


class GuardedOps(KernelOps):
    """The ``kernels`` backend with the learner's kernels in ``kernels`` (op -> kernel), and what each learner op
    runs through (module docstring): :class:`gpulab.capstone_ops.LearnerOps` defines the ops on it."""

    def __init__(
        self,
        kernels: dict[str, Any],
        guard: bool = True,
        blocks: dict[str, tuple[int, int]] | None = None,
        verify: bool = False,
        deadline: bool = True,
        course_seconds: dict[tuple, tuple[float, int]] | None = None,
    ) -> None:
        super().__init__(kernels, blocks)
        self.guard = guard
        self.verify = verify
        self.deadline = deadline
        # (op, block) -> (the course kernel's seconds, at this WORK); Capstone.ops shares one across its backends
        self.course_seconds: dict[tuple, tuple[float, int]] = {} if course_seconds is None else course_seconds
        self._recorders: dict[str, Recorder] = {}
        self.calls: dict[str, int] = {}
        self.printed: dict[str, int] = {}  # op -> lines its kernel printed (kept aside) during training
        self._course: KernelOps | None = None
        self._held = capstone_guard.Held()  # gpu mode: the checks computed on the GPU, not read yet
        self._updating = False

    def _kernel(self, op: str) -> Any:
        kern = super()._kernel(op)
        if kern is not None:
            self.calls[op] = self.calls.get(op, 0) + 1
            if op in self._recorders:  # under a deadline: note the launch shape for the message
                return self._recorders[op]
        return kern

    def _deadline(self, op: str, method: Callable[..., Any], args: tuple, kw: dict) -> Any:
        """``method(self, *args, **kw)`` for learner op ``op``, in simulator mode under a deadline: FACTOR times
        the course kernel's time at these sizes (measured once per op, scaled by WORK) plus SLACK seconds."""
        if not self.deadline or not runtime.is_simulator():
            return method(self, *args, **kw)  # gpu mode: no sync per launch (module docstring of capstone_deadline)
        from .exercises.run import Hang, run_with_deadline

        work = max(1, WORK[op](*args))
        key = (op, self.blocks.get(op))
        if key not in self.course_seconds:
            ref = KernelOps({}, self.blocks)  # the course's kernels, launched as yours are (matmul: your blocks)
            start = time.perf_counter()
            getattr(ref, op)(*copies(args), **kw)
            self.course_seconds[key] = (time.perf_counter() - start, work)
        seconds, at = self.course_seconds[key]
        took = seconds * work / at
        limit = capstone_deadline.FACTOR * took + capstone_deadline.SLACK
        rec = self._recorders[op] = Recorder(self.kernels[op])
        try:
            return run_with_deadline(lambda: method(self, *args, **kw), limit)
        except Hang:
            raise CapstoneError(
                hang_message(op, self.kernels[op], args, self._launch(op, rec, args), limit, took, self.blocks.get(op))
            ) from None
        finally:
            del self._recorders[op]

    def _launch(self, op: str, rec: Recorder, args: tuple) -> str:
        """The launch that ran past its deadline: ``name[grid, block]`` as the launcher started it."""
        from .kernels._launch import ceil_div
        from .source import py_func

        name = getattr(py_func(rec.kernel), "__name__", "kernel")
        block = self.blocks.get(op)
        if op == "matmul" and block is not None:  # run in turn by gpulab.kernels.cooperative: not through [ ]
            grid = (ceil_div(int(args[1].shape[1]), block[0]), ceil_div(int(args[0].shape[0]), block[1]))
            return f"{name}[{grid}, {block}] (one thread per element of C, run in turn)"
        if rec.last is None:
            return f"{name} (launch shape not recorded)"
        grid, blk = rec.last
        return f"{name}[{grid}, {blk}] (grid, block; a grid-stride loop covers the rest)"

    def _printed(self, op: str, out: Printed | None) -> None:
        """Count what ``op``'s kernel printed; the first time it prints, show a few of its lines."""
        n = out.total() if out is not None else 0
        if not n:
            return
        first = op not in self.printed
        self.printed[op] = self.printed.get(op, 0) + n
        if first and out is not None:
            print(f"op {op!r}: " + out.note(f"your {op} kernel", "one op of a training step"))
            print(f"(op {op!r}: what it prints in later steps is hidden too; LearnerOps.printed counts the lines.)")

    def course(self) -> KernelOps:
        """The course's kernels (the reference of ``verify``)."""
        if self._course is None:
            self._course = KernelOps()
        return self._course

    def _finite(self, op: str, *arrays: Any) -> None:
        if not self.guard or op not in self.kernels:
            return
        try:  # outputs on the host are checked at once: nothing to wait for
            capstone_guard.finite(op, *(a for a in arrays if isinstance(a, np.ndarray)), launch=self.calls.get(op))
        except CapstoneError:
            self.finish()  # an op held before this one may have made the NaN: it is named first
            raise

        def fail() -> None:
            raise capstone_guard.not_finite(op)

        for flag in capstone_guard.all_finite(*(a for a in arrays if not isinstance(a, np.ndarray))):
            self._defer(op, flag, fail)

    def _defer(self, op: str, flag: Any, fail: Callable[[], None]) -> None:
        """Hold ``op``'s check (``flag``: a 0-d device array, True when the output passed) until the next read."""
        if self._held.add(op, flag, fail):
            self.finish()

    def _turn(self, updating: bool) -> None:
        """Read the held checks when the step turns from computing to updating weights, or back."""
        if updating != self._updating:
            self._updating = updating
            self.finish()

    def _unread(self, exc: BaseException) -> None:
        """A step stopped by ``exc``: forget its held checks (they would name a step nobody finishes). A GPU reports
        a kernel's fault (an illegal address) at the next wait, which may come ops later, so when checks were held
        the error says which of your ops ran since the last wait."""
        held = self._held.drop()
        if held and DEVICE_FAULT_RE.search(str(exc)) and hasattr(exc, "add_note"):
            exc.add_note(
                f"gpulab: your ops {', '.join(held)} ran on the GPU since it was last waited for; a kernel's fault is "
                "reported at the next wait, not in the op that made it, so it may be one of them. Restart the "
                "notebook's kernel (the CUDA context is broken after a fault), then train one step with "
                "cap.ops(verify=True): it waits after each op, so the fault is reported by the op that made it."
            )

    def finish(self) -> None:
        """Read every check still held on the GPU, in one transfer, and raise for the first op (in launch order)
        whose output failed; nothing to do where outputs are checked at once (NumPy). The training loop calls it
        at the end of each epoch (:meth:`gpulab.nn.ops.Ops.finish`)."""
        self._held.read()

    def _same(self, op: str, inputs: str, args: tuple, mine: tuple, course: Any) -> None:
        """With ``verify``: run your ``op`` kernel again, as its check does, into outputs pre-filled with NaN
        (``mine``: their (shape, dtype)), so an element it never writes cannot pass for one that memory happened
        to hold; raise naming ``op`` where an output differs from the course kernel's (``course()``)."""
        if not self.verify or op not in self.kernels:
            return
        self.finish()  # a held NaN (this op's too) is named as such, not as "never written" below (verify waits anyway)
        xp = runtime.array_module(args[0])
        outs = tuple(xp.full(shape, np.nan if np.dtype(dt).kind == "f" else -1, dtype=dt) for shape, dt in mine)
        extra = {"block": self.blocks.get(op), "cooperative": True} if op == "matmul" else {}
        HOSTS[op](self.kernels[op], *args, *outs, **extra)
        ref = course()
        ref = ref if isinstance(ref, tuple) else (ref,)
        capstone_guard.same_as_course(op, inputs, PROBLEMS[op].out_names or ["out"], outs, ref)
