"""Optimisers that update a :class:`Sequential`'s parameters in place from its gradients.

The arithmetic is an op of the engine's contract (``ops.adam_update``, ``ops.sgd_update``), so the
update runs where the model computes: NumPy, CuPy, or the course's (or a learner's) CUDA kernels.

An optimizer's state (Adam's moments ``m``, ``v`` and step count ``t``; SGD's momentum buffers ``v``) is part of
where training goes next. As in PyTorch it is kept apart from the model's: :meth:`state_dict` and
:meth:`load_state_dict`, and ``nn.save(model, path, optimizer=opt)`` / ``nn.load(model, path, optimizer=opt)``
write and read both in one file. ``Sequential.to`` moves the state of every optimizer built over the model with
its parameters (host or device).
"""

from __future__ import annotations

import math
import numbers
from typing import Any
from collections.abc import Callable

import numpy as np

from .. import runtime
from ..errors import UsageError
from ..runtime import array_module
from .sequential import _host_copy

__all__ = ["Adam", "SGD"]


def _a(value: Any) -> str:
    """What ``value`` is, for a message: "a list", "a generator", "None"."""
    if value is None:
        return "None"
    kind = type(value).__name__
    return f"{'an' if kind[:1].lower() in 'aeiou' else 'a'} {kind}"


class _Optimizer:
    """What every optimizer shares: the learning rate, per-parameter state arrays (``slots``, dicts keyed by the
    parameter's name, made on the first step where the parameter lives) and their state dict."""

    slots: tuple[str, ...] = ()  # the names of the per-parameter state dicts, e.g. ("m", "v")

    def __init__(self, model: Any, lr: float) -> None:
        name = type(self).__name__
        if not callable(getattr(model, "parameters", None)):
            torch_habit = isinstance(model, (list, tuple)) or hasattr(model, "__next__")
            raise UsageError(
                f"nn.{name} takes the model itself, nn.{name}(model, lr=...)"
                + (" (not model.parameters() as in PyTorch)" if torch_habit else "")
                + f"; it was given {_a(model)}. It reads the model's parameters and gradients at every step."
            )
        if isinstance(lr, str):
            try:
                fix = f"write lr={float(lr)!r} without quotes"
            except ValueError:
                fix = "pass e.g. lr=1e-3"
            raise UsageError(f"the learning rate must be a number, got the text {lr!r}: {fix}.")
        if isinstance(lr, bool) or not isinstance(lr, numbers.Real) or not math.isfinite(lr) or lr <= 0:
            raise UsageError(f"the learning rate must be a finite number > 0, e.g. lr=1e-3; got {lr!r}.")
        self.model: Any = model
        self.lr: float = float(lr)
        followers = getattr(model, "optimizers", None)  # Sequential.to moves our state with the parameters
        if followers is not None:
            followers.add(self)

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

    def hyperparameters(self) -> dict[str, Any]:  # pragma: no cover - every optimizer overrides it
        """The settings that decide what the state means and how it evolves (checked on load)."""
        raise NotImplementedError

    def _scalars(self) -> dict[str, Any]:
        """State that is not per parameter (Adam's step count)."""
        return {}

    def move_state(self, move: Callable[[Any], Any]) -> None:
        """Replace every state array ``a`` by ``move(a)`` (``runtime.to_device`` or ``runtime.to_host``: what
        ``Sequential.to`` does to the parameters)."""
        for slot in self.slots:
            d = getattr(self, slot)
            for k in d:
                d[k] = move(d[k])

    def state_dict(self) -> dict[str, np.ndarray]:
        """Host NumPy copies of the whole state, flat (an ``.npz`` holds it): ``"type"`` (the class name), the
        :meth:`hyperparameters`, the scalars, and ``"<slot>.<parameter name>"`` for every parameter (zeros, the
        state a first step starts from, for a parameter no step has touched yet)."""
        state: dict[str, np.ndarray] = {"type": np.array(type(self).__name__)}
        state.update({k: np.array(v, dtype=np.float64) for k, v in self.hyperparameters().items()})
        state.update({k: np.array(v, dtype=np.int64) for k, v in self._scalars().items()})
        for name, p, _ in self.model.parameters():
            for slot in self.slots:
                a = getattr(self, slot).get(name)  # a snapshot that later steps do not change:
                state[f"{slot}.{name}"] = _host_copy(a) if a is not None else np.zeros(p.shape, np.dtype(p.dtype))
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Load a :meth:`state_dict` (a copy of it, put where each parameter lives). Everything is checked first: a
        state of another optimizer, other settings or another model raises :class:`UsageError` and changes nothing."""
        self._apply_state(self._check_state(state))

    def _check_state(self, state: dict[str, Any]) -> dict[str, Any]:
        """The checked state: scalars as ints, arrays as host copies in each parameter's dtype."""
        mine = type(self).__name__
        theirs = str(np.asarray(state["type"])) if "type" in state else "an unknown optimizer (no 'type')"
        if theirs != mine:
            raise UsageError(
                f"this optimizer state is {theirs}'s, the optimizer loading it is {mine}: their states mean different "
                f"things. Build nn.{theirs}(model, ...) with the saved run's settings to continue it, or leave the "
                f"state out to start {mine} fresh."
            )
        want = self.hyperparameters()
        got = {k: np.asarray(state[k]).tolist() if k in state else "missing" for k in want}
        differ = [k for k in want if got[k] != np.asarray(want[k], dtype=np.float64).tolist()]
        if differ:
            saved = ", ".join(f"{k}={got[k]}" for k in differ)
            built = ", ".join(f"{k}={want[k]}" for k in differ)
            raise UsageError(
                f"the {mine} state was saved with {saved}; this optimizer has {built}. Build it as the saved run did "
                f"(nn.{mine}(model, {saved})) to continue that run, and change a setting after loading if you mean to "
                "(e.g. optimizer.lr = 1e-4)."
            )
        params = {name: p for name, p, _ in self.model.parameters()}
        names = {f"{slot}.{name}" for slot in self.slots for name in params}
        known = {"type", *want, *self._scalars()}
        missing, extra = sorted(names - set(state)), sorted(set(state) - names - known)
        missing += sorted(k for k in self._scalars() if k not in state)
        if missing or extra:
            raise UsageError(
                f"the {mine} state does not match this optimizer's model: missing {missing}, unexpected {extra}. Load "
                "a state saved with a model built the same way (same layers, same arguments)."
            )
        checked: dict[str, Any] = {}
        for k in self._scalars():
            t = np.asarray(state[k])
            if t.shape != () or not np.issubdtype(t.dtype, np.integer) or int(t) < 0:
                raise UsageError(f"{mine} state {k!r}: expected a count >= 0, got {t!r}.")
            checked[k] = int(t)
        for slot in self.slots:
            for name, p in params.items():
                v = np.asarray(runtime.to_host(state[f"{slot}.{name}"]))
                if tuple(v.shape) != tuple(p.shape) or not np.issubdtype(v.dtype, np.floating):
                    raise UsageError(
                        f"{mine} state {slot}.{name}: parameter {name} is {np.dtype(p.dtype).name} of shape "
                        f"{tuple(p.shape)}, the state has {v.dtype.name} of shape {tuple(v.shape)}. Load a state saved "
                        "with a model built the same way (same layers, same arguments)."
                    )
                checked[f"{slot}.{name}"] = v
        return checked

    def _apply_state(self, checked: dict[str, Any]) -> None:
        for k in self._scalars():
            setattr(self, k, checked[k])
        for name, p, _ in self.model.parameters():
            xp = array_module(p)
            for slot in self.slots:  # a copy where the parameter lives: the caller's arrays are never updated
                getattr(self, slot)[name] = xp.array(checked[f"{slot}.{name}"], dtype=p.dtype)

    def reset(self) -> None:
        """Forget the state: the next step is a first step (as for a new optimizer)."""
        for slot in self.slots:
            getattr(self, slot).clear()
        for k in self._scalars():
            setattr(self, k, 0)


class SGD(_Optimizer):
    """``v = momentum * v + g + weight_decay * p;  p -= lr * v`` (PyTorch's convention, v starts at 0)."""

    slots = ("v",)

    def __init__(self, model: Any, lr: float = 0.01, momentum: float = 0.0, weight_decay: float = 0.0) -> None:
        super().__init__(model, lr)
        self.momentum, self.weight_decay = float(momentum), float(weight_decay)
        self.v: dict[str, Any] = {}

    def hyperparameters(self) -> dict[str, Any]:
        return {"lr": self.lr, "momentum": self.momentum, "weight_decay": self.weight_decay}

    def step(self) -> None:
        ops = self.ops
        ops.finish()  # checks a backend holds (the capstone's, on a GPU) before the momentum buffers are made
        for name, p, g in self.model.parameters():
            if name not in self.v:
                self.v[name] = array_module(p).zeros_like(p)
            ops.sgd_update(p, g, self.v[name], self.lr, self.momentum, self.weight_decay)


class Adam(_Optimizer):
    """Adam (Kingma & Ba): per-parameter step sizes from running means of g and g**2."""

    slots = ("m", "v")

    def __init__(
        self, model: Any, lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8
    ) -> None:
        super().__init__(model, lr)
        self.b1, self.b2 = betas
        self.eps = eps
        self.t = 0
        self.m: dict[str, Any] = {}
        self.v: dict[str, Any] = {}

    def hyperparameters(self) -> dict[str, Any]:
        return {"lr": self.lr, "betas": [float(self.b1), float(self.b2)], "eps": float(self.eps)}

    def _scalars(self) -> dict[str, Any]:
        return {"t": self.t}

    def step(self) -> None:
        self.ops.finish()  # checks a backend holds (the capstone's, on a GPU) before t and the moments move on
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
