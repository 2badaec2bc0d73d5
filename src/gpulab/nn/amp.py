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

The master weights, the loss scale and its step counts are where training goes next, as an optimizer's state is:
:meth:`MixedPrecision.state_dict` holds them with the optimizer's, ``nn.save(model, path, optimizer=amp)`` /
``nn.load(model, path, optimizer=amp)`` write and read them with the model, and ``Sequential.to`` moves the master
weights (and the optimizer's state) with the model's parameters.
"""

from __future__ import annotations

import math
from typing import Any
from collections.abc import Callable

import numpy as np

from .. import runtime
from ..errors import UsageError
from ..runtime import array_module
from .loss import SoftmaxCrossEntropy
from .sequential import Sequential, _host_copy

__all__ = ["MixedPrecision"]


_OPT = "optimizer."  # the inner optimizer's keys in a MixedPrecision state: "optimizer.<its state_dict key>"
_MASTER = "master."  # a master weight's key: "master.<parameter name>"


class _Masters:
    """What an optimizer sees: the FP32 master weights and their FP32 gradients (of ``owner.model``'s parameters)."""

    def __init__(self, owner: MixedPrecision) -> None:
        self.owner = owner
        self._items: list[tuple[str, Any, Any]] = []
        self.copy_from_model()

    @property
    def ops(self) -> Any:
        return self.owner.model.ops  # the update runs where the model computes (after a `to` too)

    def parameters(self) -> list[tuple[str, Any, Any]]:
        return self._items

    def copy_from_model(self) -> None:
        """FP32 copies of the model's parameters (the masters a run starts from), zero gradients."""
        self._items = [
            (name, p.astype(np.float32), array_module(p).zeros(p.shape, dtype=np.float32))
            for name, p, _ in self.owner.model.parameters()
        ]

    def move(self, move: Callable[[Any], Any]) -> None:
        self._items = [(name, move(p), move(g)) for name, p, g in self._items]


def _whole_number_at_least_1(value: Any, name: str) -> int:
    """``value`` as an ``int`` if it is a whole number from 1 to 2**63 - 1 (``2000.0`` is ``2000``: the state saved
    and the one checked on load compare equal); else :class:`UsageError`."""
    ok = not isinstance(value, (bool, np.bool_)) and isinstance(value, (int, float, np.integer, np.floating))
    if ok and math.isfinite(value) and value == int(value) and 1 <= value < 2**63:
        return int(value)
    raise UsageError(
        f"MixedPrecision: {name} must be a whole number of steps from 1 to 2**63 - 1 (the loss scale doubles after "
        f"that many steps without overflow; nn.save keeps it as a 64-bit integer), got {value!r}. Pass e.g. "
        f"{name}=2000."
    )


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
        growth_interval: int | float = 2000,
        dtype: Any = np.float16,
    ) -> None:
        growth_interval = _whole_number_at_least_1(growth_interval, "growth_interval")
        if model.backend == "kernels":
            raise ValueError(
                "mixed precision works with the numpy and cupy backends; the lab's kernels are float32-only."
            )
        self.model, self.dtype = model, np.dtype(dtype)
        self.init_scale = float(init_scale)
        self.scale, self.growth_interval, self.good_steps = self.init_scale, growth_interval, 0
        self.skipped = 0
        self.masters = _Masters(self)  # FP32 master copies, before the model turns FP16
        for layer in model:
            for d in (layer.params, layer.grads):
                for k in d:
                    d[k] = d[k].astype(self.dtype)  # the model itself computes in FP16
        self.optimizer = make_optimizer(self.masters)
        self.loss_fn = SoftmaxCrossEntropy()
        model.optimizers.add(self)  # Sequential.to moves the masters with the parameters

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

    # -- state: what a resumed run needs to continue as the uninterrupted one (nn.save / nn.load, Sequential.to) --

    def hyperparameters(self) -> dict[str, Any]:
        """The settings a state must have been saved with (checked on load)."""
        return {"dtype": self.dtype.name, "growth_interval": self.growth_interval}

    def _scalars(self) -> dict[str, Any]:
        return {"scale": self.scale, "good_steps": self.good_steps, "skipped": self.skipped}

    def move_state(self, move: Callable[[Any], Any]) -> None:
        """Replace the master weights, their gradients and the optimizer's state ``a`` by ``move(a)``."""
        self.masters.move(move)
        self.optimizer.move_state(move)

    def state_dict(self) -> dict[str, np.ndarray]:
        """Host NumPy copies, flat: ``"type"``, the :meth:`hyperparameters`, ``"scale"``, ``"good_steps"``,
        ``"skipped"``, ``"master.<parameter name>"`` (FP32) and ``"optimizer.<key>"`` (the optimizer's state_dict)."""
        state: dict[str, np.ndarray] = {"type": np.array(type(self).__name__), "dtype": np.array(self.dtype.name)}
        state["growth_interval"] = np.array(self.growth_interval, np.int64)
        state["scale"] = np.array(self.scale, np.float64)
        state.update({k: np.array(getattr(self, k), np.int64) for k in ("good_steps", "skipped")})
        state.update({_MASTER + name: _host_copy(p) for name, p, _ in self.masters.parameters()})
        state.update({_OPT + k: v for k, v in self.optimizer.state_dict().items()})
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Load a :meth:`state_dict` (copies, where the masters live); all checked first: a misfit changes nothing."""
        self._apply_state(self._check_state(state))

    def _check_state(self, state: dict[str, Any]) -> dict[str, Any]:
        mine = type(self).__name__
        theirs = str(np.asarray(state["type"])) if "type" in state else "an unknown optimizer's (no 'type')"
        if theirs != mine:
            raise UsageError(
                f"this state is {theirs}'s, not a {mine}'s (no master weights or loss scale): it was saved from a run "
                "without mixed precision. Load it with that optimizer (nn.load(model, path, optimizer=opt)), or load "
                "the model only (nn.load(model, path)) and build the MixedPrecision after it to start mixed precision "
                "from those weights."
            )
        want = {k: str(v) for k, v in self.hyperparameters().items()}
        got = {k: str(np.asarray(state[k]).tolist()) if k in state else "missing" for k in want}
        if got != want:
            raise UsageError(
                f"the {mine} state was saved with {', '.join(f'{k}={got[k]}' for k in want)}; this one has "
                f"{', '.join(f'{k}={want[k]}' for k in want)}. Build nn.MixedPrecision(model, ..., dtype=..., "
                "growth_interval=...) as the saved run did to continue it."
            )
        names = [name for name, _, _ in self.masters.parameters()]
        keys = {"type", *want, *self._scalars()} | {_MASTER + n for n in names}
        mine_keys = {k for k in state if not k.startswith(_OPT)}
        missing, extra = sorted(keys - mine_keys), sorted(mine_keys - keys)
        if missing or extra:
            raise UsageError(
                f"the {mine} state does not match this model: missing {missing}, unexpected {extra}. Load a state "
                "saved with a model built the same way (same layers, same arguments)."
            )
        scale = np.asarray(state["scale"])
        if scale.shape != () or not np.issubdtype(scale.dtype, np.floating) or not math.isfinite(scale) or scale <= 0:
            raise UsageError(f"{mine} state 'scale': expected a finite loss scale > 0, got {scale!r}.")
        checked: dict[str, Any] = {"scale": float(scale)}
        for k in ("good_steps", "skipped"):
            t = np.asarray(state[k])
            if t.shape != () or not np.issubdtype(t.dtype, np.integer) or int(t) < 0:
                raise UsageError(f"{mine} state {k!r}: expected a count >= 0, got {t!r}.")
            checked[k] = int(t)
        for name, p, _ in self.masters.parameters():
            v = np.asarray(runtime.to_host(state[_MASTER + name]))
            if v.shape != tuple(p.shape) or v.dtype != np.float32:
                raise UsageError(
                    f"{mine} state {_MASTER + name}: the master weight of {name} is float32 of shape {tuple(p.shape)}, "
                    f"the state has {v.dtype.name} of shape {v.shape}. Load a state saved with a model built the same "
                    "way (same layers, same arguments)."
                )
            checked[_MASTER + name] = v
        checked[_OPT] = self.optimizer._check_state({k[len(_OPT) :]: v for k, v in state.items() if k.startswith(_OPT)})
        return checked

    def _apply_state(self, checked: dict[str, Any]) -> None:
        for k in self._scalars():
            setattr(self, k, checked[k])
        for name, p, _ in self.masters.parameters():  # in place, where the masters live (NumPy or CuPy)
            p[...] = array_module(p).asarray(checked[_MASTER + name])
        self.optimizer._apply_state(checked[_OPT])

    def reset(self) -> None:
        """Start afresh from the model's weights: masters copied from them, the initial scale, a fresh optimizer."""
        self.masters.copy_from_model()
        self.scale, self.good_steps, self.skipped = self.init_scale, 0, 0
        self.optimizer.reset()

    def weights_loaded(self) -> None:
        """The model's weights were replaced (``Sequential.load_state_dict``, so ``nn.load`` too, calls this): take
        them as the masters (as a new MixedPrecision would), so the next step updates the loaded weights, not the
        old ones."""
        for (_, p32, _), (_, p16, _) in zip(self.masters.parameters(), self.model.parameters()):
            p32[...] = p16.astype(np.float32)
