"""One training step, shared by ``train.fit``, ``bench cnn``, ``scaling`` and :class:`DataParallel`, and the sums a loop
of steps reports (:class:`StepSums`).

A step reads nothing back from a GPU: the loss comes back as a 0-d array where the model computes, so the backward
and the update are queued while the forward still runs. A loop that wants numbers reads them when it shows them.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .. import runtime
from .loss import check_loss

__all__ = ["StepSums", "forward_backward", "train_step"]


def forward_backward(model: Any, loss_fn: Any, x: Any, y: Any) -> tuple[Any, Any]:
    """Forward, loss and backward of one batch with ``model``'s ops; returns (mean loss, logits).

    The loss is a 0-d value where the model computes, not read (a NumPy float32 on the host, a 0-d CuPy array on the
    GPU: ``float(loss)`` reads it, and there waits for the step). A loss without ``lazy`` (one of your own) is
    called as it is. Every layer overwrites its gradients in backward, so no ``zero_grad`` is needed.
    """
    loss_fn.ops = model.ops  # the loss runs where the model computes
    logits = model.forward(x)  # (B, classes)
    lazy = getattr(loss_fn, "lazy", None)
    loss = lazy(logits, y) if lazy is not None else loss_fn(logits, y)
    model.backward(loss_fn.backward())
    return loss, logits


def train_step(model: Any, loss_fn: Any, optimizer: Any, x: Any, y: Any, parallel: Any = None) -> tuple[Any, Any]:
    """:func:`forward_backward` (or ``parallel.step``, the batch split over threads), then one update."""
    loss, logits = parallel.step(x, y) if parallel is not None else forward_backward(model, loss_fn, x, y)
    optimizer.step()
    return loss, logits


class StepSums:
    """The summed loss (each batch's mean loss times its images) and the correct predictions of a loop of training
    steps, kept where the model computes, and the last batch's loss.

    :meth:`add` queues a few one-element operations and reads nothing; :meth:`read` brings the sums to the host in
    one transfer (on a GPU, one wait for every step queued so far) and raises FloatingPointError when the summed loss
    is NaN or inf: a NaN or inf in any step's loss stays in the sum (a cross-entropy is never negative, so no -inf can
    cancel an inf), so checking at each read misses none. The sums are float64: exact counts, and on the host the
    same numbers as summing ``float(loss) * n`` in Python."""

    def __init__(self, xp: Any) -> None:
        self.xp = xp
        self.loss = xp.zeros((), dtype=np.float64)  # sum of (mean loss x images) over the steps
        self.correct = xp.zeros((), dtype=np.int64)
        self.last: Any = xp.zeros((), dtype=np.float64)
        self.steps = 0
        self.read_at = 0  # the steps covered by the last read

    @property
    def on_host(self) -> bool:
        """Whether the sums are NumPy values: reading them costs nothing."""
        return self.xp is np

    def add(self, loss: Any, logits: Any, labels: Any) -> None:
        """Add one step: its mean ``loss`` (0-d, or a number), ``logits`` (N, classes) and ``labels`` (N,)."""
        xp = self.xp
        self.last = xp.asarray(loss, dtype=np.float64)
        self.loss = self.loss + self.last * labels.shape[0]
        self.correct = self.correct + (logits.argmax(axis=1) == labels).sum()
        self.steps += 1

    def read(self, ops: Any, where: str = "") -> tuple[float, int, float]:
        """(summed loss, correct predictions, last batch's loss) as host numbers, in one transfer; FloatingPointError
        naming the steps since the last read (after ``ops.finish()``: a held check names its op) when the summed loss
        is NaN or inf. ``where`` adds to the message (e.g. the epoch)."""
        xp = self.xp
        total, correct, last = runtime.to_host(xp.stack((self.loss, self.correct.astype(np.float64), self.last)))
        first, self.read_at = self.read_at + 1, self.steps
        steps = f"step {self.steps}" if first >= self.steps else f"one of steps {first} to {self.steps}"
        check_loss(float(total), ops, f" (summed over the batches: it became NaN or inf in {steps}{where})")
        return float(total), int(correct), float(last)
