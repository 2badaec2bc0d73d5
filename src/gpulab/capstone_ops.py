"""The capstone's backend (lab 09): the ``kernels`` ops with the learner's kernels swapped in, guarded.

:class:`LearnerOps` stops training at the first learner op whose output holds NaN or inf, naming the op; with
``verify`` it also runs each learner op again as its check does (into outputs pre-filled with NaN) and compares
it with the course kernel, so a kernel that passed its check but is wrong at training's shapes is named. In
simulator mode each learner op runs under a deadline (:mod:`gpulab.capstone_deadline`), so a kernel that hangs
or crawls at training's sizes stops training with a message instead of stalling it. :class:`gpulab.capstone.Capstone`
builds it (``cap.ops()``).

This module says, op by op, which outputs are checked and what ``verify`` compares them with (the course kernel's
outputs; a dropout op's mask replayed from its states). How each op runs (its kernel's printed lines kept aside, the
deadline, the checks held on a GPU and read when a step turns to or from updating weights, the re-run ``verify``
compares) is :class:`gpulab.capstone_guarded.GuardedOps`; what an output is held to, and the messages, is
:mod:`gpulab.capstone_guard`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from . import capstone_guard, runtime
from .capstone_guard import CapstoneError as CapstoneError, shape as _shape
from .capstone_guarded import GuardedOps, learner_op

__all__ = ["CapstoneError", "LearnerOps"]


class LearnerOps(GuardedOps):
    """The ``kernels`` backend with the learner's kernels in ``kernels`` (op -> kernel); every output of
    a learner op is checked for NaN/inf (``guard``), so a wrong kernel stops training at that op. With
    ``verify`` every learner op's result is also compared with the course kernel's on the same inputs (twice
    the work: for a small step), so a kernel that passed its check but is wrong at training's shapes is named.
    With ``deadline`` (simulator mode only) a learner op that runs far longer than the course's kernel on the same
    inputs stops training, naming the op, its launch and sizes (:mod:`gpulab.capstone_deadline`)."""

    name = "learner"

    @learner_op("matmul")
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

    @learner_op("im2col")
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

    @learner_op("col2im")
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

    @learner_op("relu")
    def relu(self, x: Any) -> Any:
        y = super().relu(x)
        self._finite("relu", y)
        self._same("relu", f"x {_shape(x)}", (_contig(x),), ((y.shape, y.dtype),), lambda: self.course().relu(x))
        return y

    @learner_op("relu_backward")
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

    @learner_op("maxpool")
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

    @learner_op("maxpool_backward")
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

    @learner_op("softmax_xent")
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

    @learner_op("adam_update")
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

    @learner_op("sgd_update")
    def sgd_update(self, p: Any, g: Any, v: Any, lr: float, momentum: float, weight_decay: float) -> None:
        super().sgd_update(p, g, v, lr, momentum, weight_decay)  # no learner kernel: only the turn to updating

    @learner_op("dropout_forward")
    def dropout_forward(self, x: Any, p: float, states: Any) -> Any:
        return self._dropout("dropout_forward", "y", "x", x, p, states, super().dropout_forward)

    @learner_op("dropout_backward")
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
