"""The capstone's backend (lab 09): the ``kernels`` ops with the learner's kernels swapped in, guarded.

:class:`LearnerOps` stops training at the first learner op whose output holds NaN or inf, naming the op; with
``verify`` it also runs each learner op again as its check does (into outputs pre-filled with NaN) and compares
it with the course kernel, so a kernel that passed its check but is wrong at training's shapes is named. In
simulator mode each learner op runs under a deadline (:mod:`gpulab.capstone_deadline`), so a kernel that hangs
or crawls at training's sizes stops training with a message instead of stalling it. What an output is held to
(and the messages) is :mod:`gpulab.capstone_guard`; this module runs the ops and the course kernels it compares
them with. :class:`gpulab.capstone.Capstone` builds it (``cap.ops()``).

On a GPU, reading a check's answer makes the host wait for the GPU: one wait per learner op (about 35 a step)
would cost a large share of a step. So there each output's check is computed on the GPU where the op left it (a
0-d flag) and the flags are read together, once when the step turns from computing gradients to updating weights
(before any weight changes: a NaN gradient never reaches them) and once when it turns back (the update's own
outputs), plus at the end of each epoch and after ``predict`` (:meth:`LearnerOps.finish`; a loop of your own that
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
from .capstone_guard import CapstoneError as CapstoneError, shape as _shape
from .capstone_hosts import HOSTS
from .capstone_problems import PROBLEMS
from .exercises.output import Printed, captured
from .exercises.raised import DEVICE_FAULT_RE
from .nn.kernel_ops import KernelOps

__all__ = ["CapstoneError", "LearnerOps"]


F = TypeVar("F", bound=Callable[..., Any])


# The ops that update weights in place: the checks of the step so far are read before the first of them runs.
UPDATES = ("adam_update", "sgd_update")


def _quiet(op: str) -> Callable[[F], F]:
    """A :class:`LearnerOps` method for ``op`` whose learner kernel's ``print`` output is kept aside: training
    launches it every step, so only the first step that prints shows a few of its lines (``LearnerOps.printed``).
    In simulator mode it runs under a deadline (:meth:`LearnerOps._deadline`). Every op, yours or the course's,
    first reads the flags of the checks that wait on a GPU when the step turns to or from updating weights."""

    def wrap(method: F) -> F:
        @functools.wraps(method)
        def run(self: LearnerOps, *args: Any, **kw: Any) -> Any:
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


class LearnerOps(KernelOps):
    """The ``kernels`` backend with the learner's kernels in ``kernels`` (op -> kernel); every output of
    a learner op is checked for NaN/inf (``guard``), so a wrong kernel stops training at that op. With
    ``verify`` every learner op's result is also compared with the course kernel's on the same inputs (twice
    the work: for a small step), so a kernel that passed its check but is wrong at training's shapes is named.
    With ``deadline`` (simulator mode only) a learner op that runs far longer than the course's kernel on the same
    inputs stops training, naming the op, its launch and sizes (:mod:`gpulab.capstone_deadline`)."""

    name = "learner"

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

    @_quiet("matmul")
    def matmul(self, a: Any, b: Any) -> Any:
        c = super().matmul(a, b)
        self._finite("matmul", c)
        self._same(
            "matmul",
            f"A {_shape(a)} @ B {_shape(b)}",
            (_contig(a), _contig(b)),
            ((c.shape, c.dtype),),
            lambda: self.course().matmul(a, b),
        )
        return c

    @_quiet("im2col")
    def im2col(self, x: Any, kh: int, kw: int, stride: int, pad: int) -> tuple[Any, int, int]:
        cols, ho, wo = super().im2col(x, kh, kw, stride, pad)
        self._finite("im2col", cols)
        if kh == kw:  # the course's CNN: square kernels, as the check has
            self._same(
                "im2col",
                f"x {_shape(x)}, {kh}x{kw}, stride {stride}, pad {pad}",
                (_contig(x), kh, stride, pad),
                ((cols.shape, cols.dtype),),
                lambda: self.course().im2col(x, kh, kw, stride, pad)[0],
            )
        return cols, ho, wo

    @_quiet("col2im")
    def col2im(self, dcols: Any, x_shape: tuple[int, ...], kh: int, kw: int, stride: int, pad: int) -> Any:
        dx = super().col2im(dcols, x_shape, kh, kw, stride, pad)
        self._finite("col2im", dx)
        if kh == kw:
            self._same(
                "col2im",
                f"dcols {_shape(dcols)} -> x {tuple(x_shape)}",
                (_contig(dcols), tuple(x_shape), kh, stride, pad),
                ((dx.shape, dx.dtype),),
                lambda: self.course().col2im(dcols, x_shape, kh, kw, stride, pad),
            )
        return dx

    @_quiet("relu")
    def relu(self, x: Any) -> Any:
        y = super().relu(x)
        self._finite("relu", y)
        self._same("relu", f"x {_shape(x)}", (_contig(x),), ((y.shape, y.dtype),), lambda: self.course().relu(x))
        return y

    @_quiet("relu_backward")
    def relu_backward(self, dout: Any, y: Any) -> Any:
        dx = super().relu_backward(dout, y)
        self._finite("relu_backward", dx)
        self._same(
            "relu_backward",
            f"dout {_shape(dout)}",
            (_contig(dout), _contig(y)),
            ((dx.shape, dx.dtype),),
            lambda: self.course().relu_backward(dout, y),
        )
        return dx

    @_quiet("maxpool")
    def maxpool(self, x: Any, k: int, stride: int) -> tuple[Any, Any]:
        out, cache = super().maxpool(x, k, stride)
        self._finite("maxpool", out)
        self._same(
            "maxpool",
            f"x {_shape(x)}, k {k}, stride {stride}",
            (_contig(x), k, stride),
            ((out.shape, out.dtype), (cache[0].shape, cache[0].dtype)),
            lambda: self._course_maxpool(x, k, stride),
        )
        return out, cache

    @_quiet("maxpool_backward")
    def maxpool_backward(self, dout: Any, cache: Any, x_shape: tuple[int, ...], k: int, stride: int) -> Any:
        dx = super().maxpool_backward(dout, cache, x_shape, k, stride)
        self._finite("maxpool_backward", dx)
        self._same(
            "maxpool_backward",
            f"dout {_shape(dout)} -> x {tuple(x_shape)}",
            (_contig(dout), _contig(cache[0]), tuple(x_shape), k, stride),
            ((dx.shape, dx.dtype),),
            lambda: self.course().maxpool_backward(dout, cache, x_shape, k, stride),
        )
        return dx

    @_quiet("softmax_xent")
    def softmax_xent(self, logits: Any, labels: Any) -> tuple[Any, Any]:
        loss, grad = super().softmax_xent(logits, labels)
        self._finite("softmax_xent", grad, runtime.array_module(grad).asarray(loss))  # the 0-d loss where it is
        n = logits.shape[0]
        self._same(
            "softmax_xent",
            f"logits {_shape(logits)}",
            (_contig(logits), labels),
            ((grad.shape, grad.dtype), ((n,), np.float32)),
            lambda: self._course_xent(logits, labels),
        )
        return loss, grad

    def _course_maxpool(self, x: Any, k: int, stride: int) -> tuple[Any, Any]:
        out, (arg,) = self.course().maxpool(x, k, stride)
        return out, arg

    def _course_xent(self, logits: Any, labels: Any) -> tuple[Any, Any]:
        """The course kernel's gradient and per-row losses (its launcher returns their mean only)."""
        xp = runtime.array_module(logits)
        k = self.course().k
        grad, losses = xp.empty(logits.shape, dtype=np.float32), xp.empty(logits.shape[0], dtype=np.float32)
        k.launch_1d(
            k.softmax_xent_kernel,
            logits.shape[0],
            _contig(logits),
            xp.ascontiguousarray(labels.astype(np.int64)),
            grad,
            losses,
        )
        return grad, losses

    @_quiet("adam_update")
    def adam_update(self, p: Any, g: Any, m: Any, v: Any, lr_t: float, b1: float, b2: float, eps_t: float) -> None:
        before = (p.copy(), m.copy(), v.copy()) if self.verify and "adam_update" in self.kernels else None
        super().adam_update(p, g, m, v, lr_t, b1, b2, eps_t)
        self._finite("adam_update", p)
        if before is not None:

            def course() -> tuple:
                ref = tuple(a.copy() for a in before)
                self.course().adam_update(ref[0], g, ref[1], ref[2], lr_t, b1, b2, eps_t)
                return ref

            p0, m0, v0 = before
            args = (p0, g, m0, v0, np.float32(lr_t), np.float32(b1), np.float32(b2), np.float32(eps_t))
            self._same("adam_update", f"p {_shape(p)}", args, tuple((a.shape, a.dtype) for a in before), course)

    @_quiet("sgd_update")
    def sgd_update(self, p: Any, g: Any, v: Any, lr: float, momentum: float, weight_decay: float) -> None:
        super().sgd_update(p, g, v, lr, momentum, weight_decay)  # no learner kernel: only the turn to updating

    @_quiet("dropout_forward")
    def dropout_forward(self, x: Any, p: float, states: Any) -> Any:
        return self._dropout("dropout_forward", "y", "x", x, p, states, super().dropout_forward)

    @_quiet("dropout_backward")
    def dropout_backward(self, dout: Any, p: float, states: Any) -> Any:
        return self._dropout("dropout_backward", "dx", "dout", dout, p, states, super().dropout_backward)

    def _dropout(self, op: str, out: str, inp: str, x: Any, p: float, states: Any, run: Callable[..., Any]) -> Any:
        """A dropout op, checked against the draws of the states it was given (the training check: the mask is a
        function of the states, ``p`` and ``x.size`` only, so a swapped keep/drop, a missing 1 / (1 - p), NaN or an
        unwritten element is caught at once); with ``verify`` also run again as its check does."""
        mine = op in self.kernels
        before = states.copy() if mine and (self.guard or self.verify) else None
        y = run(x, p, states)
        if self.guard and before is not None:
            self._dropout_check(op, out, inp, x, p, before, y)
        if self.verify and before is not None:
            self._same(
                op,
                f"{inp} {_shape(x)}, p {float(p):g}, {int(states.shape[0]) // 2} streams",
                (_contig(x), before, np.float32(p)),
                ((y.shape, y.dtype),),
                lambda: getattr(self.course(), op)(x, p, before.copy()),
            )
        return y

    def _dropout_check(self, op: str, out: str, inp: str, x: Any, p: float, before: Any, y: Any) -> None:
        """Raise naming ``op`` unless ``y`` is the inverted dropout of ``x`` with the mask of the states ``before``
        (the host replay on NumPy arrays, at once; the course kernel on CuPy ones, held with the step's checks)."""
        if isinstance(y, np.ndarray):
            from .nn.dropout import host_dropout

            ref = host_dropout(np.asarray(x), p, before.copy())
            capstone_guard.dropout_draws(op, out, inp, x, p, y, ref)
            return
        ref = getattr(self.course(), op)(x, p, before.copy())

        def fail() -> None:
            capstone_guard.dropout_draws(op, out, inp, x, p, y, ref)  # raises, naming the first wrong element
            raise capstone_guard.dropout_failed(op, out, inp)  # its arrays changed since: no element to show

        self._defer(op, capstone_guard.draws_match(y, ref), fail)


def _contig(a: Any) -> Any:
    return runtime.array_module(a).ascontiguousarray(a)
