"""Lesson 09's ``train_step`` exercise: the learner's training step (forward, loss, backward, update) run for two
steps of a tiny seeded CNN, against :func:`gpulab.nn.train_step`.

The check's model has already taken one step (:data:`WARM_UP`): its layers hold that batch's gradients and Adam
its moments, as in the middle of training. So each mistake leaves its own weights: no ``optimizer.step()`` leaves
them where the warm-up put them; an update before the backward, or no backward at all, uses the gradients of an
earlier batch; gradients zeroed between backward and update leave only Adam's momentum to move them. Every layer of
the engine overwrites its gradients in backward, so, unlike PyTorch, a step that never zeroes them accumulates
nothing: ``optimizer.zero_grad()`` before the backward is allowed, not needed.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from .. import nn
from ..errors import UsageError
from .exercise import NONE_HINT, _answer, as_host, returned_none

__all__ = ["MISTAKES", "SIZES", "run_steps", "step_inputs", "step_host", "step_spec"]

IMAGE, CHANNELS, HIDDEN, CLASSES, LR = 8, (2, 3), 8, 10, 1e-2  # a CNN of a few hundred weights: milliseconds a step
WARM_UP = 1  # the step gpulab's own train_step takes before the learner's two (batches 1 and 2 of the inputs)
SIZES = [1, 5, 16]  # images per batch

Step = Callable[..., Any]


def step_inputs(n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Three batches of ``n`` images (3, n, 1, 8, 8) and their labels (3, n): the warm-up's, then the learner's two."""
    x = rng.random((3, n, 1, IMAGE, IMAGE), dtype=np.float32)
    return x, rng.integers(0, CLASSES, (3, n)).astype(np.int64)


def _loss_of(got: Any, n: int) -> float:
    """The loss a step returned as ``(loss, logits)``, or :class:`UsageError` saying what it must return."""
    if got is None:
        raise _answer(UsageError(returned_none("train_step") + " Return `loss, logits`."), NONE_HINT)
    if not isinstance(got, tuple) or len(got) != 2:
        given = f"a {type(got).__name__}" + (f" of {len(got)}" if isinstance(got, (list, tuple)) else "")
        raise _answer(
            UsageError(
                "train_step must return a pair, the batch's loss and the logits: `return loss, logits` (train.fit "
                f"sums the losses and counts the right predictions from the logits); it returned {given}."
            )
        )
    loss, logits = got
    if not hasattr(logits, "shape") or tuple(logits.shape) != (n, CLASSES):
        shape = tuple(logits.shape) if hasattr(logits, "shape") else type(logits).__name__
        raise _answer(
            UsageError(
                f"train_step's second result must be the logits, model.forward(xb), of shape ({n}, {CLASSES}) for "
                f"a batch of {n}; it returned {shape}."
            )
        )
    try:
        return float(loss)
    except (TypeError, ValueError) as e:
        raise _answer(
            UsageError(
                f"train_step's first result must be the loss, one number (loss_fn(logits, yb)); it returned "
                f"{type(loss).__name__}: {e}"
            )
        ) from e


def run_steps(x: np.ndarray, y: np.ndarray, step: Step) -> tuple[np.ndarray, np.ndarray]:
    """(every weight after the steps, the two losses ``step`` returned): a tiny seeded CNN (no dropout) with Adam,
    one warm-up step of :func:`gpulab.nn.train_step` on batch 0, then ``step`` on batches 1 and 2."""
    model = nn.mnist_cnn(seed=0, image_size=IMAGE, channels=CHANNELS, hidden=HIDDEN, classes=CLASSES, dropout=0.0)
    optimizer, loss_fn = nn.Adam(model, lr=LR), nn.SoftmaxCrossEntropy()
    for b in range(WARM_UP):
        nn.train_step(model, loss_fn, optimizer, x[b], y[b])
    losses = [_loss_of(step(model, loss_fn, optimizer, x[b], y[b]), x.shape[1]) for b in (1, 2)]
    weights = np.concatenate([np.asarray(p, np.float64).ravel() for _, p, _ in model.parameters()])
    return weights, np.array(losses)


def step_spec(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """What two steps of gpulab's :func:`gpulab.nn.train_step` leave."""
    return run_steps(x, y, nn.train_step)


def step_host(fn: Step) -> Callable[..., None]:
    """The ``host=`` function that runs two steps of the learner's ``fn`` and writes the weights and losses."""
    return as_host(lambda x, y: run_steps(x, y, fn), 2, "train_step")


# --- the named mistakes, each a whole (wrong) step -------------------------------------------------------------


def _no_update(model: Any, loss_fn: Any, optimizer: Any, xb: Any, yb: Any) -> tuple[Any, Any]:
    logits = model.forward(xb)
    loss = loss_fn(logits, yb)
    model.backward(loss_fn.backward())
    return loss, logits


def _update_first(model: Any, loss_fn: Any, optimizer: Any, xb: Any, yb: Any) -> tuple[Any, Any]:
    logits = model.forward(xb)
    loss = loss_fn(logits, yb)
    optimizer.step()
    model.backward(loss_fn.backward())
    return loss, logits


def _no_backward(model: Any, loss_fn: Any, optimizer: Any, xb: Any, yb: Any) -> tuple[Any, Any]:
    logits = model.forward(xb)
    loss = loss_fn(logits, yb)
    optimizer.step()
    return loss, logits


def _zeroed(model: Any, loss_fn: Any, optimizer: Any, xb: Any, yb: Any) -> tuple[Any, Any]:
    logits = model.forward(xb)
    loss = loss_fn(logits, yb)
    model.backward(loss_fn.backward())
    optimizer.zero_grad()
    optimizer.step()
    return loss, logits


def _summed(model: Any, loss_fn: Any, optimizer: Any, xb: Any, yb: Any) -> tuple[Any, Any]:
    loss, logits = nn.train_step(model, loss_fn, optimizer, xb, yb)
    return loss * len(yb), logits


def _as(step: Step, output: int = 0) -> Callable[[np.ndarray, np.ndarray], np.ndarray]:
    """The one output (0: the weights, 1: the losses) that a wrong ``step`` gets wrong, as the check names it."""
    return lambda x, y: run_steps(x, y, step)[output]


MISTAKES = {
    "the weights are where the step before yours left them: nothing updated them. After "
    "model.backward(...), call optimizer.step(): it is what moves the weights along their gradients.": _as(_no_update),
    "optimizer.step() ran before model.backward(...): each update used the previous batch's gradients, still "
    "in the layers. The order is forward, loss, backward, then optimizer.step().": _as(_update_first),
    "the updates used gradients left over from an earlier batch: nothing computed this batch's. After the "
    "loss, run the backward pass: give the model's backward the gradient of the loss with respect to the logits "
    "(what the loss function's own backward returns); then step the optimizer.": _as(_no_backward),
    "the gradients were zeroed between model.backward(...) and optimizer.step(), so the update saw zeros (only "
    "Adam's momentum moved the weights). Zero them before the forward, or not at all: each layer overwrites its "
    "gradients in backward.": _as(_zeroed),
    "the loss returned is the batch's sum, (images) x the mean: return what loss_fn(logits, yb) gives, the "
    "mean over the batch (train.fit multiplies by the batch size itself when it sums an epoch).": _as(_summed, 1),
}
