"""Check a layer's backward pass against finite differences (lesson 08).

For a layer ``y = f(x; W)`` we pick a fixed random array ``R`` shaped like ``y`` and use the scalar
``L = sum(f(x; W) * R)``. Then ``dL/dy = R`` exactly, so ``layer.backward(R)`` must return ``dL/dx``
and fill ``layer.grads`` with ``dL/dW``. Central differences estimate the same numbers with no
calculus at all: ``dL/dx[i] ~ (L(x + h e_i) - L(x - h e_i)) / 2h``. Everything runs in float64, so
the two agree to about 1e-8 when the backward pass is right, and disagree visibly when it is not.
"""

from __future__ import annotations

from typing import Any
from collections.abc import Callable

import numpy as np

__all__ = ["check_layer", "check_loss", "numerical_gradient", "relative_error"]


def numerical_gradient(f: Callable[[], float], x: np.ndarray, h: float = 1e-6) -> np.ndarray:
    """Central-difference gradient of the scalar ``f()`` with respect to ``x`` (changed in place, restored)."""
    g = np.zeros(x.shape, dtype=np.float64)
    for idx in np.ndindex(*x.shape):
        old = x[idx]
        x[idx] = old + h
        up = f()
        x[idx] = old - h
        down = f()
        x[idx] = old
        g[idx] = (up - down) / (2 * h)
    return g


def relative_error(a: Any, b: Any) -> float:
    """``||a - b|| / (||a|| + ||b||)``: about 1e-8 or less for a correct float64 gradient."""
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    denom = np.linalg.norm(a) + np.linalg.norm(b)
    return float(np.linalg.norm(a - b) / denom) if denom > 0 else 0.0


def _to_float64(layer: Any) -> None:
    for d in (layer.params, layer.grads):
        for k, v in d.items():
            d[k] = np.asarray(v, dtype=np.float64).copy()


def check_layer(layer: Any, x: np.ndarray, *, seed: int = 0, h: float = 1e-6) -> dict[str, float]:
    """Relative error between ``layer.backward`` and finite differences, for the input (``"x"``) and
    each parameter. The layer's parameters are converted to float64 (work on a fresh layer)."""
    _to_float64(layer)
    layer.needs_input_grad = True
    x = np.array(x, dtype=np.float64, copy=True)
    r = np.random.default_rng(seed).standard_normal(layer.forward(x).shape)

    def loss() -> float:
        return float((layer.forward(x) * r).sum())

    layer.forward(x)
    dx = np.array(layer.backward(r), dtype=np.float64)
    analytic = {"x": dx, **{k: np.array(g, dtype=np.float64) for k, g in layer.grads.items()}}
    numeric = {"x": numerical_gradient(loss, x, h)}
    for k in layer.params:
        numeric[k] = numerical_gradient(loss, layer.params[k], h)
    return {k: relative_error(analytic[k], numeric[k]) for k in analytic}


def check_loss(loss_fn: Any, logits: np.ndarray, labels: np.ndarray, *, h: float = 1e-6) -> float:
    """Relative error of ``loss_fn.backward()`` (d loss / d logits) against finite differences."""
    z = np.array(logits, dtype=np.float64, copy=True)
    loss_fn(z, labels)
    analytic = np.array(loss_fn.backward(), dtype=np.float64)
    numeric = numerical_gradient(lambda: float(loss_fn(z, labels)), z, h)
    return relative_error(analytic, numeric)
