"""The course's CNN for 28x28 grey images (MNIST, Fashion-MNIST) and 8x8 digits."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..errors import UsageError, whole_number
from .conv import Conv2d
from .layers import Dropout, Flatten, Linear, MaxPool2d, ReLU
from .sequential import Sequential

__all__ = ["check_cnn_arguments", "mnist_cnn"]


def check_cnn_arguments(
    image_size: Any, channels: Any, hidden: Any, classes: Any, *, who: str = "nn.mnist_cnn"
) -> tuple[int, tuple[int, int], int, int]:
    """``(image_size, (c1, c2), hidden, classes)`` as whole numbers, or :class:`UsageError` saying which is wrong
    (:func:`mnist_cnn` and :func:`gpulab.scaling.cnn_footprint` take the same arguments). A whole float such as
    ``8.0`` is taken as ``8``; ``2.5``, text and booleans are refused, never rounded."""
    example = f"e.g. {who}(image_size=28, channels=(32, 64), hidden=128)."
    size = whole_number(
        "image_size", image_size, low=4, example=f"It is the side of the square images in pixels, {example}"
    )
    if size % 4:
        raise UsageError(
            f"image_size must be a multiple of 4 (two 2x2 poolings halve it twice), got {size}. The course's "
            "images are 28x28 (MNIST, Fashion-MNIST, data.load('digits', size=28)) or 8x8 (data.load('digits', "
            "size=8)): pass the side of yours, image_size=ds.x_train.shape[-1]."
        )
    if isinstance(channels, (str, bytes)) or not hasattr(channels, "__len__") or len(channels) != 2:
        raise UsageError(
            f"channels must be two whole numbers (c1, c2), the output channels of the two convolutions, e.g. "
            f"channels=(32, 64); got {channels!r}."
        )
    pair = tuple(
        whole_number(f"channels[{i}]", c, example=f"channels is (c1, c2), {example}") for i, c in enumerate(channels)
    )
    width = whole_number("hidden", hidden, example=f"It is the width of the hidden linear layer, {example}")
    n_classes = whole_number(
        "classes", classes, low=2, example="A classifier needs at least 2 classes; the course's datasets have 10."
    )
    return size, (pair[0], pair[1]), width, n_classes


def mnist_cnn(
    *,
    seed: int = 0,
    image_size: int = 28,
    channels: tuple[int, int] = (32, 64),
    hidden: int = 128,
    classes: int = 10,
    dropout: float = 0.25,
    backend: str = "numpy",
) -> Sequential:
    """conv3x3(1->c1)-relu-pool-conv3x3(c1->c2)-relu-pool-linear(hidden)-relu-dropout-linear(classes).

    (N, 1, S, S) -> (N, classes); every random number comes from ``seed``. The model's ``input_shape`` is
    ``(1, S, S)``: ``train.fit``, ``evaluate`` and ``predict`` compare it with the images they are given.
    """
    image_size, (c1, c2), hidden, classes = check_cnn_arguments(image_size, channels, hidden, classes)
    seed = whole_number(
        "seed", seed, low=0, example="Pass e.g. seed=0 (every random number of the model comes from it)."
    )
    rng = np.random.default_rng(seed)
    s = image_size // 4
    model = Sequential(
        Conv2d(1, c1, 3, padding=1, rng=rng),  # (N, 1, S, S) -> (N, c1, S, S)
        ReLU(),
        MaxPool2d(2),  # -> (N, c1, S/2, S/2)
        Conv2d(c1, c2, 3, padding=1, rng=rng),  # -> (N, c2, S/2, S/2)
        ReLU(),
        MaxPool2d(2),  # -> (N, c2, S/4, S/4)
        Flatten(),  # -> (N, c2*S*S/16)
        Linear(c2 * s * s, hidden, rng=rng),  # -> (N, hidden)
        ReLU(),
        Dropout(dropout, seed=seed),  # its own generator states (drawing nothing from rng)
        Linear(hidden, classes, rng=rng),  # -> (N, classes)
        backend=backend,
    )
    model.input_shape = (1, image_size, image_size)
    return model
