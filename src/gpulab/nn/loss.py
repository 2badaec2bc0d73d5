"""Softmax + cross-entropy in one layer (the combined gradient is simply ``softmax - onehot``)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..runtime import array_module
from .module import Module

__all__ = ["SoftmaxCrossEntropy", "check_loss"]


def check_loss(value: float, ops: Any, where: str = "") -> None:
    """Raise FloatingPointError when the loss ``value`` (a number read to the host) is NaN or inf. First
    ``ops.finish()``: a check a backend held back names the op that made the NaN (the capstone's, on a GPU).
    ``where`` says which steps the value covers when it was read after several (``train.fit`` on a GPU)."""
    if math.isfinite(value):
        return
    ops.finish()
    raise FloatingPointError(
        f"the loss is {value}{where}: the logits contain NaN or inf. Check the input data for NaNs and lower the "
        "learning rate."
    )


class SoftmaxCrossEntropy(Module):
    """``loss = mean_n(-log softmax(logits)[n, y_n])``; ``backward()`` returns dloss/dlogits (N, K).

    Calling it gives the loss as a Python float (read from the GPU in gpu mode: a wait for the GPU). A training
    step uses :meth:`lazy`, which leaves it where the logits are."""

    def forward(self, logits: Any, labels: Any) -> float:  # type: ignore[override]
        loss = float(self.lazy(logits, labels))  # the read: on a GPU it waits for the forward
        check_loss(loss, self.ops)  # (on the host, lazy checked it already)
        return loss

    def lazy(self, logits: Any, labels: Any) -> Any:
        """The mean loss as a 0-d value where the logits are, not read (on a GPU the step goes on to the backward
        without waiting), and the gradient kept for :meth:`backward`. On the host, where reading costs nothing, a
        NaN or inf loss raises at once; on a GPU whoever reads the loss checks it (:func:`check_loss`;
        ``train.fit`` every few steps and at the end of each epoch)."""
        if logits.ndim != 2:
            raise ValueError(f"SoftmaxCrossEntropy expects logits of shape (N, classes), got {tuple(logits.shape)}.")
        if labels.shape != (logits.shape[0],):
            raise ValueError(
                f"labels must have shape ({logits.shape[0]},) to match the logits {tuple(logits.shape)}, "
                f"got {tuple(labels.shape)}."
            )
        if not np.issubdtype(np.dtype(labels.dtype), np.integer):
            raise TypeError(f"labels must be integers (class indices), got dtype {np.dtype(labels.dtype).name}.")
        xp = array_module(logits)
        # the op checks the labels' range (every backend: nn.ops.check_labels; one read from the device, none inside
        # nn.ops.labels_within)
        loss, self.grad = self.ops.softmax_xent(logits, xp.asarray(labels).astype(np.int64, copy=False))
        if array_module(loss) is np:
            check_loss(float(loss), self.ops)
        return loss

    def __call__(self, logits: Any, labels: Any) -> float:  # type: ignore[override]
        return self.forward(logits, labels)

    def backward(self, dout: Any = None) -> Any:
        return self.grad  # (N, K)
