"""Where a training step's time goes, op by op: :class:`OpTimes` wraps a backend's ops and times every call.

For ops on the GPU (``cupy``, and ``kernels`` in gpu mode) each call is bracketed by two CUDA events on the
default stream, where the course's launchers (and so a learner's kernels in the capstone) and CuPy's null stream
queue their work; the events are read only when the table is asked for, so timing adds no wait for the GPU between
ops. Ops on the host are timed by the wall clock: NumPy's on the CPU, or the ``kernels`` in simulator mode (the
simulator runs a kernel to its end before the launch returns), whose seconds are Python running each CUDA thread in
turn and say nothing about a GPU; the report says which clock it was.

Calls are grouped by op and by the shapes of their array arguments, so the same op on different layers shows
separately: the GEMM of a convolution's weight gradient, ``(32, 100352) @ (100352, 9)`` for the first layer of the
course CNN on a batch of 128, is not the GEMM of the classifier.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from .. import runtime
from ..timing import _elapsed_s, _events
from .ops import Ops, device_for

__all__ = ["OpTimes"]


def _shapes(args: tuple) -> str:
    """The shapes of the array arguments, ``(32, 100352), (100352, 9)``; scalars and tuples are left out."""
    return ", ".join(str(tuple(int(s) for s in a.shape)) for a in args if hasattr(a, "shape") and a.ndim > 0)


class OpTimes(Ops):
    """``inner``'s ops, each call timed (see the module docstring). Use it in place of the ops it wraps
    (``model.use_ops(OpTimes(ops))``), run a few training steps, then read :meth:`table` or :meth:`report`;
    :meth:`reset` starts again. Results are the inner ops' own: nothing else changes."""

    def __init__(self, inner: Ops) -> None:
        if not isinstance(inner, Ops):
            raise TypeError(f"OpTimes wraps an implementation of gpulab.nn.ops.Ops, got {type(inner).__name__}.")
        self.inner = inner
        self.name = inner.name
        from .kernel_ops import KernelOps  # imported where used: `import gpulab.nn` stays without the kernels

        backend = "kernels" if isinstance(inner, KernelOps) else inner.name  # the capstone's LearnerOps too
        self.gpu = device_for(backend) == "gpu"  # CUDA events; else the wall clock (the CPU, or the simulator)
        self.simulated = not self.gpu and backend == "kernels"
        self._calls: list[tuple[str, str, Any, Any]] = []  # (op, shapes, start, end): events, or perf_counter values

    def _timed(self, op: str, fn: Callable[..., Any], *args: Any) -> Any:
        if self.gpu:
            start, end = _events()
            start.record()
            out = fn(*args)
            end.record()
        else:
            start = time.perf_counter()
            out = fn(*args)
            end = time.perf_counter()
        self._calls.append((op, _shapes(args), start, end))
        return out

    def reset(self) -> None:
        """Forget every call timed so far."""
        self._calls.clear()

    def table(self) -> list[dict[str, Any]]:
        """One row per (op, shapes), most time first: ``op``, ``shapes``, ``calls``, ``seconds`` (all calls),
        ``ms_per_call`` and ``share`` of the time of every call timed. In gpu mode it waits for the GPU first."""
        if self.gpu and self._calls:
            runtime.synchronize()
        rows: dict[tuple[str, str], dict[str, Any]] = {}
        for op, shapes, start, end in self._calls:
            seconds = _elapsed_s(start, end) if self.gpu else end - start
            row = rows.setdefault((op, shapes), {"op": op, "shapes": shapes, "calls": 0, "seconds": 0.0})
            row["calls"] += 1
            row["seconds"] += seconds
        total = sum(r["seconds"] for r in rows.values()) or 1.0
        for r in rows.values():
            r["ms_per_call"] = r["seconds"] / r["calls"] * 1e3
            r["share"] = r["seconds"] / total
        return sorted(rows.values(), key=lambda r: -r["seconds"])

    def report(self, top: int = 8) -> str:
        """The ``top`` rows of :meth:`table` as text, with what the clock was."""
        rows = self.table()
        if not rows:
            return "no op was called since the last reset: run a training step with these ops first"
        if self.gpu:
            clock = "CUDA events on the GPU, measured in this run"
        elif self.simulated:
            clock = "simulator seconds (Python runs each CUDA thread: says nothing about a GPU)"
        else:
            clock = "wall clock on the CPU, measured in this run"
        lines = [f"time per op ({clock}):"]
        for r in rows[:top]:
            lines.append(
                f"  {r['share']:6.1%}  {r['op']:<17} {r['calls']:>4} calls x {r['ms_per_call']:9.3f} ms  {r['shapes']}"
            )
        if len(rows) > top:
            rest = sum(r["share"] for r in rows[top:])
            lines.append(f"  {rest:6.1%}  ({len(rows) - top} more op and shape pairs)")
        return "\n".join(lines)

    def finish(self) -> None:
        self.inner.finish()

    # The contract, op by op: each call goes to the inner ops, timed.
    def matmul(self, a: Any, b: Any) -> Any:
        return self._timed("matmul", self.inner.matmul, a, b)

    def im2col(self, x: Any, kh: int, kw: int, stride: int, pad: int) -> tuple[Any, int, int]:
        return self._timed("im2col", self.inner.im2col, x, kh, kw, stride, pad)

    def col2im(self, dcols: Any, x_shape: tuple[int, ...], kh: int, kw: int, stride: int, pad: int) -> Any:
        return self._timed("col2im", self.inner.col2im, dcols, x_shape, kh, kw, stride, pad)

    def conv_input_grad(self, d: Any, w: Any, x_shape: tuple[int, ...], stride: int, pad: int) -> Any:
        return self._timed("conv_input_grad", self.inner.conv_input_grad, d, w, x_shape, stride, pad)

    def conv_weight_grad(self, d: Any, cols: Any) -> Any:
        return self._timed("conv_weight_grad", self.inner.conv_weight_grad, d, cols)

    def add_bias(self, y: Any, b: Any) -> Any:
        return self._timed("add_bias", self.inner.add_bias, y, b)

    def sum_rows(self, d: Any) -> Any:
        return self._timed("sum_rows", self.inner.sum_rows, d)

    def relu(self, x: Any) -> Any:
        return self._timed("relu", self.inner.relu, x)

    def relu_backward(self, dout: Any, y: Any) -> Any:
        return self._timed("relu_backward", self.inner.relu_backward, dout, y)

    def maxpool(self, x: Any, k: int, stride: int) -> tuple[Any, Any]:
        return self._timed("maxpool", self.inner.maxpool, x, k, stride)

    def maxpool_backward(self, dout: Any, cache: Any, x_shape: tuple[int, ...], k: int, stride: int) -> Any:
        return self._timed("maxpool_backward", self.inner.maxpool_backward, dout, cache, x_shape, k, stride)

    def softmax_xent(self, logits: Any, labels: Any) -> tuple[Any, Any]:
        return self._timed("softmax_xent", self.inner.softmax_xent, logits, labels)

    def adam_update(self, p: Any, g: Any, m: Any, v: Any, lr_t: float, b1: float, b2: float, eps_t: float) -> None:
        self._timed("adam_update", self.inner.adam_update, p, g, m, v, lr_t, b1, b2, eps_t)

    def sgd_update(self, p: Any, g: Any, v: Any, lr: float, momentum: float, weight_decay: float) -> None:
        self._timed("sgd_update", self.inner.sgd_update, p, g, v, lr, momentum, weight_decay)

    def dropout_forward(self, x: Any, p: float, states: Any) -> Any:
        return self._timed("dropout_forward", self.inner.dropout_forward, x, p, states)

    def dropout_backward(self, dout: Any, p: float, states: Any) -> Any:
        return self._timed("dropout_backward", self.inner.dropout_backward, dout, p, states)
