"""Optimisers that update a :class:`Sequential`'s parameters in place from its gradients.

The arithmetic is an op of the engine's contract (``ops.adam_update``, ``ops.sgd_update``), so the
update runs where the model computes: NumPy, CuPy, or the course's (or a learner's) CUDA kernels.
"""

from __future__ import annotations

import math
from typing import Any

from ..runtime import array_module

__all__ = ["Adam", "SGD"]


class _Optimizer:
    def __init__(self, model: Any, lr: float) -> None:
        if not isinstance(lr, (int, float)) or not math.isfinite(lr) or lr <= 0:
            raise ValueError(f"the learning rate must be a finite number > 0, got {lr}.")
        self.model, self.lr = model, float(lr)

    @property
    def ops(self) -> Any:
        ops = getattr(self.model, "ops", None)
        if ops is None:
            from .ops import get

            ops = get("numpy")
        return ops

    def zero_grad(self) -> None:
        for _, _, g in self.model.parameters():
            g[...] = 0


class SGD(_Optimizer):
    """``v = momentum * v + g + weight_decay * p;  p -= lr * v`` (PyTorch's convention, v starts at 0)."""

    def __init__(self, model: Any, lr: float = 0.01, momentum: float = 0.0, weight_decay: float = 0.0) -> None:
        super().__init__(model, lr)
        self.momentum, self.weight_decay = float(momentum), float(weight_decay)
        self.v: dict[str, Any] = {}

    def step(self) -> None:
        ops = self.ops
        for name, p, g in self.model.parameters():
            if name not in self.v:
                self.v[name] = array_module(p).zeros_like(p)
            ops.sgd_update(p, g, self.v[name], self.lr, self.momentum, self.weight_decay)


class Adam(_Optimizer):
    """Adam (Kingma & Ba): per-parameter step sizes from running means of g and g**2."""

    def __init__(
        self, model: Any, lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8
    ) -> None:
        super().__init__(model, lr)
        self.b1, self.b2 = betas
        self.eps = eps
        self.t = 0
        self.m: dict[str, Any] = {}
        self.v: dict[str, Any] = {}

    def step(self) -> None:
        self.t += 1
        c1 = 1.0 - self.b1**self.t  # bias corrections: m and v start at 0
        c2 = 1.0 - self.b2**self.t
        lr_t = self.lr * (c2**0.5) / c1  # p -= lr_t * m / (sqrt(v) + eps * sqrt(c2)) is Adam's update
        eps_t = self.eps * c2**0.5
        ops = self.ops
        for name, p, g in self.model.parameters():
            if name not in self.m:
                xp = array_module(p)
                self.m[name], self.v[name] = xp.zeros_like(p), xp.zeros_like(p)
            ops.adam_update(p, g, self.m[name], self.v[name], lr_t, self.b1, self.b2, eps_t)
