"""The course's CNN for 28x28 grey images (MNIST, Fashion-MNIST) and 8x8 digits."""

from __future__ import annotations

import numpy as np

from .conv import Conv2d
from .layers import Dropout, Flatten, Linear, MaxPool2d, ReLU
from .sequential import Sequential

__all__ = ["mnist_cnn"]


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

    (N, 1, S, S) -> (N, classes); every random number comes from ``seed``.
    """
    if image_size % 4:
        raise ValueError(f"image_size must be a multiple of 4 (two 2x2 poolings), got {image_size}.")
    rng = np.random.default_rng(seed)
    c1, c2 = channels
    s = image_size // 4
    return Sequential(
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
