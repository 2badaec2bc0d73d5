"""Mixed precision: FP16 compute, FP32 master weights, dynamic loss scaling (for the GPU backends).

The recipe of Micikevicius et al. (2018), as in ``torch.cuda.amp``:

1. The model computes in float16 (half the memory traffic; tensor cores on a GPU).
2. An FP32 "master" copy of every weight receives the updates: tiny updates would round to zero
   if added to an FP16 weight directly.
3. The loss is multiplied by a scale S before backward, so small gradients do not underflow
   FP16's range; gradients are divided by S again in FP32. If any gradient overflowed (inf/NaN)
   the step is skipped and S is halved; after ``growth_interval`` good steps S is doubled.

On NumPy there is no FP16 BLAS, so this is slow on the CPU: it is here for CuPy on a GPU, and the
tests check the logic on tiny models.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..runtime import array_module
from .loss import SoftmaxCrossEntropy
from .sequential import Sequential

__all__ = ["MixedPrecision"]


class _Masters:
    """What an optimizer sees: the FP32 master weights and their FP32 gradients."""

    def __init__(self, names: list[str], params: list[Any], grads: list[Any], ops: Any) -> None:
        self._items = list(zip(names, params, grads))
        self.ops = ops  # the model's ops: the update runs where the model computes

    def parameters(self) -> list[tuple[str, Any, Any]]:
        return self._items


class MixedPrecision:
    """Train ``model`` in FP16 with FP32 master weights: ``loss = amp.step(x, y)`` does one update.

    ``make_optimizer`` builds the optimizer for the master weights, e.g. ``lambda m: nn.Adam(m, lr=1e-3)``.
    """

    def __init__(
        self,
        model: Sequential,
        make_optimizer: Any,
        *,
        init_scale: float = 2.0**15,
        growth_interval: int = 2000,
        dtype: Any = np.float16,
    ) -> None:
        if model.backend == "kernels":
            raise ValueError(
                "mixed precision works with the numpy and cupy backends; the lab's kernels are float32-only."
            )
        self.model, self.dtype = model, np.dtype(dtype)
        self.scale, self.growth_interval, self.good_steps = float(init_scale), growth_interval, 0
        self.skipped = 0
        names, masters, mgrads = [], [], []
        for name, p, _ in model.parameters():
            names.append(name)
            masters.append(p.astype(np.float32))  # FP32 master copy
            mgrads.append(array_module(p).zeros(p.shape, dtype=np.float32))
        for layer in model:
            for d in (layer.params, layer.grads):
                for k in d:
                    d[k] = d[k].astype(self.dtype)  # the model itself computes in FP16
        self.masters = _Masters(names, masters, mgrads, model.ops)
        self.optimizer = make_optimizer(self.masters)
        self.loss_fn = SoftmaxCrossEntropy()

    def step(self, x: Any, y: Any) -> float:
        """Forward in FP16, scaled backward, unscale + overflow check in FP32, master update, copy back."""
        logits = self.model.forward(x.astype(self.dtype))  # (N, classes) float16
        loss = self.loss_fn(logits.astype(np.float32), y)  # the softmax and the loss in FP32
        with np.errstate(over="ignore", invalid="ignore"):  # overflow is expected now and then: it is handled below
            dlogits = (self.loss_fn.backward() * self.scale).astype(self.dtype)  # scaled so small grads survive FP16
            self.model.backward(dlogits)
            finite = True
            for (_, _, g16), (_, _, g32) in zip(self.model.parameters(), self.masters.parameters()):
                g32[...] = g16.astype(np.float32) / self.scale  # unscale in FP32
                finite = finite and bool(array_module(g32).isfinite(g32).all())
        if not finite:  # an FP16 overflow: skip this update, try a smaller scale
            self.scale /= 2.0
            self.good_steps = 0
            self.skipped += 1
            return loss
        self.optimizer.step()
        for (_, p16, _), (_, p32, _) in zip(self.model.parameters(), self.masters.parameters()):
            p16[...] = p32.astype(self.dtype)
        self.good_steps += 1
        if self.good_steps >= self.growth_interval:
            self.scale *= 2.0
            self.good_steps = 0
        return loss
