"""Optimisers that update a :class:`Sequential`'s parameters in place from its gradients."""

from __future__ import annotations

from typing import Any

from ..runtime import array_module

__all__ = ["Adam", "SGD"]


class _Optimizer:
    def __init__(self, model: Any, lr: float) -> None:
        if lr <= 0:
            raise ValueError(f"the learning rate must be positive, got {lr}.")
        self.model, self.lr = model, lr

    def zero_grad(self) -> None:
        for _, _, g in self.model.parameters():
            g[...] = 0


class SGD(_Optimizer):
    """``v = momentum * v + g (+ weight_decay * p);  p -= lr * v`` (PyTorch's convention)."""

    def __init__(self, model: Any, lr: float = 0.01, momentum: float = 0.0, weight_decay: float = 0.0) -> None:
        super().__init__(model, lr)
        self.momentum, self.weight_decay = momentum, weight_decay
        self.v: dict[str, Any] = {}

    def step(self) -> None:
        for name, p, g in self.model.parameters():
            if self.weight_decay:
                g = g + self.weight_decay * p
            if self.momentum:
                v = self.v.get(name)
                if v is None:
                    v = self.v[name] = g.copy()
                else:
                    v *= self.momentum
                    v += g
                g = v
            p -= self.lr * g


class Adam(_Optimizer):
    """Adam (Kingma & Ba): per-parameter step sizes from running means of g and g**2."""

    def __init__(self, model: Any, lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8) -> None:
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
        step = self.lr * (c2**0.5) / c1
        for name, p, g in self.model.parameters():
            xp = array_module(p)
            if name not in self.m:
                self.m[name], self.v[name] = xp.zeros_like(p), xp.zeros_like(p)
            m, v = self.m[name], self.v[name]
            m *= self.b1
            m += (1.0 - self.b1) * g  # m = b1 m + (1 - b1) g
            u = xp.multiply(g, g)  # one scratch array, reused in place below (fewer passes over memory)
            u *= 1.0 - self.b2
            v *= self.b2
            v += u  # v = b2 v + (1 - b2) g^2
            xp.sqrt(v, out=u)
            u += self.eps * c2**0.5
            xp.divide(m, u, out=u)
            u *= step
            p -= u  # p -= step * m / (sqrt(v) + eps * sqrt(c2))
