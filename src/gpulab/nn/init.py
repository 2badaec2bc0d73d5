"""Weight initialisation: He (Kaiming) normal for layers followed by ReLU."""

from __future__ import annotations

import numpy as np

__all__ = ["he_normal"]


def he_normal(rng: np.random.Generator, shape: tuple[int, ...], fan_in: int) -> np.ndarray:
    """Normal(0, sqrt(2 / fan_in)) in float32: keeps the activations' variance steady through ReLUs."""
    return (rng.standard_normal(shape) * np.sqrt(2.0 / fan_in)).astype(np.float32)
