"""Softmax + cross-entropy in one layer (the combined gradient is simply ``softmax - onehot``)."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..runtime import array_module
from .module import Module

__all__ = ["SoftmaxCrossEntropy"]


class SoftmaxCrossEntropy(Module):
    """``loss = mean_n(-log softmax(logits)[n, y_n])``; ``backward()`` returns dloss/dlogits (N, K)."""

    def forward(self, logits: Any, labels: Any) -> float:  # type: ignore[override]
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
        # the op checks the labels' range (every backend: nn.ops.check_labels, one read from the device)
        loss, self.grad = self.ops.softmax_xent(logits, xp.asarray(labels).astype(np.int64, copy=False))
        if not np.isfinite(loss):
            self.ops.finish()  # a check a backend held back names the op that made it (the capstone's, on a GPU)
            raise FloatingPointError(
                f"the loss is {loss}: the logits contain NaN or inf. Check the input data for NaNs and "
                "lower the learning rate."
            )
        return loss

    def __call__(self, logits: Any, labels: Any) -> float:  # type: ignore[override]
        return self.forward(logits, labels)

    def backward(self, dout: Any = None) -> Any:
        return self.grad  # (N, K)
