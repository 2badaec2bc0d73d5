"""The checks :func:`gpulab.train.fit`, ``evaluate`` and ``predict`` make on what a learner passes them, before any
work: the model, the dataset, the optimizer (made for this model?), and images of the size the model was built for.

Each raises :class:`gpulab.errors.UsageError` saying what was expected, what was given and what to do.
"""

from __future__ import annotations

from typing import Any

from .errors import UsageError

__all__ = ["check_dataset", "check_image_shape", "check_model", "check_optimizer", "describe"]


def describe(value: Any) -> str:
    """What ``value`` is, for a message: "a tuple", "the text 'adam'", "the class nn.Adam", "None"."""
    if value is None:
        return "None"
    if isinstance(value, str):
        return f"the text {value!r}"
    if isinstance(value, type):
        module = value.__module__
        prefix = "nn." if module.startswith("gpulab.nn") else ""
        return f"the class {prefix}{value.__name__}"
    if hasattr(value, "shape") and hasattr(value, "dtype"):
        return f"an array of shape {tuple(value.shape)}"
    kind = type(value).__name__
    return f"{'an' if kind[:1].lower() in 'aeiou' else 'a'} {kind}"


def _is_dataset(value: Any) -> bool:
    return all(hasattr(value, k) for k in ("x_train", "y_train", "x_test", "y_test"))


def check_model(model: Any, call: str) -> None:
    """``model`` must be a model (something with ``forward``): a Dataset or arrays there mean swapped arguments."""
    if callable(getattr(model, "forward", None)):
        return
    swapped = " The arguments look swapped: the model comes first." if _is_dataset(model) else ""
    raise UsageError(
        f"{call}: the first argument is the model, e.g. model = nn.mnist_cnn(image_size=8); it was given "
        f"{describe(model)}.{swapped}"
    )


def check_dataset(dataset: Any, *, evaluate: bool = True) -> None:
    """``fit``'s dataset must be a gpulab Dataset (x_train, y_train, x_test, y_test) with a training image, and
    a test image when fit ``evaluate``s each epoch."""
    if not _is_dataset(dataset):
        swapped = (
            " The arguments look swapped: train.fit(model, dataset)."
            if callable(getattr(dataset, "forward", None))
            else ""
        )
        raise UsageError(
            f"fit(model, dataset): dataset is a gpulab Dataset such as data.load('digits', size=8) or "
            f"ds.subset(n_train, n_test); it was given {describe(dataset)}.{swapped} For arrays of your own, make "
            "one: data.Dataset('mine', x_train, y_train, x_test, y_test, classes=tuple('0123456789'), "
            "source='mine')."
        )
    n = getattr(dataset.x_train, "shape", (None,))[0]
    if n == 0:
        raise UsageError(
            "fit: the training set is empty (dataset.x_train has 0 images, e.g. from ds.subset(0, ...)), so there "
            "is nothing to learn from. Keep at least one batch, e.g. ds.subset(256, 64)."
        )
    if evaluate and getattr(dataset.x_test, "shape", (None,))[0] == 0:
        raise UsageError(
            "fit: the test set is empty (dataset.x_test has 0 images), and fit evaluates on it after every epoch. "
            "Keep some test images, e.g. ds.subset(256, 64), or pass evaluate_each_epoch=False."
        )


def check_optimizer(model: Any, optimizer: Any) -> None:
    """``fit``'s optimizer must be an optimizer object (a ``step()`` method), made for this ``model``.

    An optimizer made for another model (the model's cell run again after the optimizer's) would update that model's
    weights, never this one's: refused, naming both models. One without a ``model`` attribute is taken as is."""
    if optimizer is None:
        return
    example = "optimizer=nn.Adam(model, lr=1e-3)"
    leave = "or leave optimizer out to train with a fresh Adam (lr=1e-3)"
    if isinstance(optimizer, type):
        raise UsageError(
            f"fit: optimizer must be an optimizer object, made for this model: {example}; it was given "
            f"{describe(optimizer)} itself (not called). Make one for the model, {leave}."
        )
    if type(optimizer).__name__ == "MixedPrecision":
        raise UsageError(
            "fit does not run mixed precision: a MixedPrecision takes each batch itself, loss = amp.step(x, y), in a "
            f"training loop of your own. Pass fit a plain optimizer ({example}), {leave}."
        )
    if not callable(getattr(optimizer, "step", None)):
        raise UsageError(
            f"fit: optimizer must be an optimizer object such as {example} (it needs a step() method); it was given "
            f"{describe(optimizer)}. Make one for the model, {leave}."
        )
    target = getattr(optimizer, "model", model)
    if target is model:
        return
    name = type(optimizer).__name__
    if type(optimizer).__module__.startswith("gpulab.nn"):
        name = f"nn.{name}"
    owner = getattr(target, "owner", None)  # the master weights of a MixedPrecision
    if owner is not None and getattr(owner, "model", None) is model:
        raise UsageError(
            f"fit: this {name} updates the FP32 master weights of a MixedPrecision over this model, and fit does not "
            "run mixed precision (amp.step(x, y) does, in a loop of your own). Pass fit an optimizer made for the "
            f"model itself ({example}), {leave}."
        )
    raise UsageError(
        f"fit: the optimizer ({name}, lr={getattr(optimizer, 'lr', '?')}) was made for another model: "
        f"{_two_models(target, model)}. Trained with it, this model's weights would never change. This happens when "
        "the cell that builds the model is run again after the cell that makes the optimizer. Run them in their "
        f"usual order: first the model (model = nn.mnist_cnn(...)), then its optimizer (optimizer = {name}(model, "
        f"lr=...)), then fit; {leave}."
    )


def _two_models(theirs: Any, ours: Any) -> str:
    """The optimizer's model and the trained one, told apart."""
    try:
        a = [tuple(p.shape) for _, p, _ in theirs.parameters()]
        b = [tuple(p.shape) for _, p, _ in ours.parameters()]
    except Exception:  # a model of one's own: name the types only
        return f"its model is {describe(theirs)}, the model being trained is another {type(ours).__name__}"
    n_a, n_b = sum(_size(s) for s in a), sum(_size(s) for s in b)
    if a == b:
        return (
            f"its {type(theirs).__name__} is built the same way as this one ({n_b:,} parameters) but is another object"
        )
    return f"its {type(theirs).__name__} has {n_a:,} parameters, the model being trained {n_b:,}"


def _size(shape: tuple[int, ...]) -> int:
    n = 1
    for d in shape:
        n *= int(d)
    return n


def check_image_shape(model: Any, x: Any, call: str) -> None:
    """Images ``x`` (N, C, H, W) must match the ``input_shape`` (C, H, W) the model was built for, when it has one
    (:func:`gpulab.nn.mnist_cnn` records it); else a deep layer would fail with a message about features."""
    want = getattr(model, "input_shape", None)
    shape = tuple(getattr(x, "shape", ()))
    if want is None or not shape or shape[1:] == tuple(want):
        return
    want = tuple(want)
    batch = f"(N, {', '.join(map(str, want))})"
    if shape == want:
        raise UsageError(
            f"{call}: x is one image of shape {shape}, but the model takes a batch of images {batch}. Pass a batch "
            "of one: x[None], or a slice such as ds.x_test[:1]."
        )
    if len(shape) == len(want) == 3 and shape[1:] == want[1:]:
        raise UsageError(
            f"{call}: the images have no channel axis, shape {shape}; the model takes {batch}. Add it: x[:, None]."
        )
    if len(shape) == 4 and len(want) == 3 and shape[1] == want[0] and want[1] == want[2]:
        side = shape[2] if shape[2] == shape[3] else None
        rebuild = (
            f"Build the model for them, nn.mnist_cnn(image_size={side}, ...), or give it"
            if side is not None and side % 4 == 0
            else "Give it"
        )
        digits = (
            f" (data.load('digits', size={want[1]}) gives {want[1]}x{want[1]} digits)" if want[1] in (8, 28) else ""
        )
        raise UsageError(
            f"{call}: the model was built for {want[1]}x{want[2]} images (nn.mnist_cnn(image_size={want[1]})) but "
            f"these images are {shape[2]}x{shape[3]} (shape {shape}). {rebuild} {want[1]}x{want[2]} images{digits}."
        )
    raise UsageError(f"{call}: the model takes images of shape {batch}; x has shape {shape}.")
