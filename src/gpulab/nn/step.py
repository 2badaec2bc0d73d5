"""One training step, shared by ``train.fit``, ``bench cnn``, ``scaling`` and :class:`DataParallel`."""

from __future__ import annotations

from typing import Any

__all__ = ["forward_backward", "train_step"]


def forward_backward(model: Any, loss_fn: Any, x: Any, y: Any) -> tuple[float, Any]:
    """Forward, loss and backward of one batch with ``model``'s ops; returns (mean loss, logits).

    Every layer overwrites its gradients in backward, so no ``zero_grad`` is needed.
    """
    loss_fn.ops = model.ops  # the loss runs where the model computes
    logits = model.forward(x)  # (B, classes)
    loss = loss_fn(logits, y)
    model.backward(loss_fn.backward())
    return loss, logits


def train_step(model: Any, loss_fn: Any, optimizer: Any, x: Any, y: Any, parallel: Any = None) -> tuple[float, Any]:
    """:func:`forward_backward` (or ``parallel.step``, the batch split over threads), then one update."""
    loss, logits = parallel.step(x, y) if parallel is not None else forward_backward(model, loss_fn, x, y)
    optimizer.step()
    return loss, logits
