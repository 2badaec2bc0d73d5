"""A chain of layers: forward in order, backward in reverse order."""

from __future__ import annotations

import warnings
import weakref
from typing import Any
from collections.abc import Iterator

import numpy as np

from .. import runtime
from ..errors import UsageError
from . import ops as _ops
from .fit_state import FitState
from .layers import MaxPool2d, ReLU
from .module import Module

__all__ = ["BUFFER_PREFIX", "Sequential"]

# A buffer's key in a state dict: ``"buffers.<layer index>.<name>"``. A parameter's key starts with its layer
# index (a digit), so no parameter key can be a buffer key, whatever the parameters and buffers are called.
BUFFER_PREFIX = "buffers."


def _host_copy(a: Any) -> np.ndarray:
    """``a`` as a host NumPy array that later in-place updates of ``a`` do not change (one copy either way)."""
    h = runtime.to_host(a)
    return h.copy() if h is a else h


class Sequential(Module):
    """``Sequential(Conv2d(...), ReLU(), ...)``; ``backend`` picks who does the array work."""

    # The shape (C, H, W) of the images the model was built for, when its builder knows it (nn.mnist_cnn sets it):
    # train.fit, evaluate and predict compare it with the data's. None: not known, nothing is compared.
    input_shape: tuple[int, ...] | None = None

    def __init__(self, *layers: Module, backend: str = "numpy") -> None:
        super().__init__()
        for i, layer in enumerate(layers):
            if not isinstance(layer, Module):
                raise TypeError(f"Sequential takes layers (gpulab.nn modules); argument {i} is {type(layer).__name__}.")
        self.layers = list(layers)
        if self.layers:
            self.layers[0].needs_input_grad = False  # nobody needs d(loss)/d(images)
        self.backend = "numpy"
        self._forward_backend: str | None = None  # where the pending forward ran: backward checks it (to)
        self.optimizers: weakref.WeakSet = weakref.WeakSet()  # those built over this model: `to` moves their state
        self.fit_state = FitState()  # where train.fit left off: its next call continues the data order
        self.to(backend)

    def __getstate__(self) -> dict[str, Any]:
        """What a copy or a pickle of the model holds: everything but :attr:`optimizers` (each updates this model's
        parameters, not the copy's, so the copy's ``to`` must not move their state; a WeakSet cannot be pickled)."""
        state = self.__dict__.copy()
        state.pop("optimizers", None)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self.optimizers = weakref.WeakSet()  # no optimizer is built over the copy yet, but the Adam fit made
        self.__dict__.setdefault("fit_state", FitState())  # (a pickle from before fit states)
        made = self.fit_state.optimizer  # copied with the model (its .model is the copy): `to` moves its state
        if made is not None and getattr(made, "model", None) is self:
            self.optimizers.add(made)

    def use_ops(self, ops: _ops.Ops) -> Sequential:
        """Route every layer's work through ``ops`` (an :class:`gpulab.nn.ops.Ops`) without moving arrays."""
        if not isinstance(ops, _ops.Ops):
            raise TypeError(f"use_ops expects an implementation of gpulab.nn.ops.Ops, got {type(ops).__name__}.")
        for layer in self.layers:
            layer.ops = ops
        self.ops = ops
        return self

    def to(self, backend: str) -> Sequential:
        """Move the parameters (and buffers) to where ``backend`` computes and route the layers' ops through it.

        ``numpy`` keeps them on the host; ``cupy`` and ``kernels`` in gpu mode put them on the device as
        CuPy arrays (in simulator mode ``kernels`` works on NumPy arrays). The state of every optimizer built over
        this model (Adam's moments, SGD's momentum buffers; a MixedPrecision's master weights) moves with the
        parameters it belongs to.

        Move between training steps, not between a forward and its backward: what each layer keeps for its
        backward (its input or output, the im2col columns, Dropout's states before the draws) stays where the
        forward ran, in the form that backend made it (the kernels' max-pool keeps argmax positions, NumPy's fast
        path another cache), and so does the gradient the loss hands to ``backward``. Moving those too would need
        every layer to list and convert its caches, and would copy the step's largest arrays across the bus to
        save one forward, so :meth:`backward` refuses to run after a move instead, with a message (in simulator
        mode too, where no array is copied, so that code which passes there does not break on a GPU).
        """
        if backend not in _ops.BACKENDS:
            raise ValueError(f"unknown backend {backend!r}; choose one of: {', '.join(_ops.BACKENDS)}.")
        if backend == "cupy" and not runtime.is_gpu():
            raise RuntimeError(
                "backend='cupy' needs a CUDA GPU (gpulab is in simulator mode). Use backend='numpy' on the "
                "CPU, or backend='kernels' to run the lab's CUDA kernels in the simulator (tiny batches)."
            )
        ops = _ops.get(backend)
        move = runtime.to_device if _ops.device_for(backend) == "gpu" else runtime.to_host
        for layer in self.layers:
            layer.ops = ops
            for d in (layer.params, layer.grads, layer.buffers):
                for k, v in d.items():
                    d[k] = move(v)
        for optimizer in list(self.optimizers):
            optimizer.move_state(move)
        self.ops, self.backend = ops, backend
        return self

    def __iter__(self) -> Iterator[Module]:
        return iter(self.layers)

    def __len__(self) -> int:
        return len(self.layers)

    def __getitem__(self, i: int) -> Module:
        return self.layers[i]

    def run_order(self) -> list[Module]:
        """The layers in the order forward runs them: a ReLU just before a MaxPool2d runs after it.

        Max and ReLU commute (``max_i relu(x_i) == relu(max_i x_i)``) and the gradient reaches the same
        input either way (a window whose maximum is <= 0 passes none), so outputs and gradients are the
        same, and ReLU, forward and backward, touches the pooled map: a quarter of the elements for 2x2.
        """
        order = list(self.layers)
        for i in range(len(order) - 1):
            if type(order[i]) is ReLU and type(order[i + 1]) is MaxPool2d:
                order[i], order[i + 1] = order[i + 1], order[i]
        return order

    def forward(self, x: Any) -> Any:
        _ops.check_where("x", x, self.backend)
        self._forward_backend = self.backend
        for layer in self.run_order():
            x = layer.forward(x)
        return x

    def backward(self, dout: Any) -> Any:
        """The gradient through every layer in reverse; refused after a :meth:`to` since the forward."""
        ran = self._forward_backend
        if ran is not None and ran != self.backend:
            raise UsageError(
                f"backward after a move: the forward ran on backend {ran!r}, then Sequential.to moved the model "
                f"to {self.backend!r}. What the forward kept for the backward (each layer's activations, Dropout's "
                f"generator states before its draws) and the gradient from the loss are still where the forward "
                f"ran. Move the model between steps: after .to({self.backend!r}) run forward again, then backward."
            )
        self._forward_backend = None
        for layer in reversed(self.run_order()):
            dout = layer.backward(dout)
        return dout

    def train(self, mode: bool = True) -> Sequential:
        self.training = mode
        for layer in self.layers:
            layer.train(mode)
        return self

    def parameters(self) -> list[tuple[str, Any, Any]]:
        """``(name, param, grad)`` for every parameter, named ``"<layer index>.<name>"``."""
        return [
            (f"{i}.{k}", layer.params[k], layer.grads[k]) for i, layer in enumerate(self.layers) for k in layer.params
        ]

    def num_parameters(self) -> int:
        return int(sum(np.prod(p.shape) for _, p, _ in self.parameters()))

    def named_buffers(self) -> list[tuple[str, Any]]:
        """``(name, buffer)`` for every buffer (arrays that are not trained, such as Dropout's generator states),
        named ``"<layer index>.<name>"`` like the parameters."""
        return [(f"{i}.{k}", b) for i, layer in enumerate(self.layers) for k, b in layer.buffers.items()]

    def state_dict(self) -> dict[str, np.ndarray]:
        """Everything that makes the model continue as it would: host NumPy copies (a snapshot that later steps
        do not change) of every parameter, keyed ``"<layer index>.<name>"``, and of every buffer, keyed
        ``"buffers.<layer index>.<name>"`` (:data:`BUFFER_PREFIX`), in their own dtypes (Dropout's states:
        uint64 generator words, which ``np.savez`` and ``np.load`` keep bit for bit)."""
        state = {name: _host_copy(p) for name, p, _ in self.parameters()}
        state.update({BUFFER_PREFIX + name: _host_copy(b) for name, b in self.named_buffers()})
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Copy a :meth:`state_dict` into the parameters and buffers, where they are now (host or device).

        Names, shapes and dtypes are checked for every array before any is copied, so a state that does not fit
        leaves the model as it was. A state without any buffers (saved before buffers were saved) loads with
        one warning, and the model keeps its own buffers. A :class:`MixedPrecision` over the model takes the loaded
        weights as its master weights.
        """
        params = {name: p for name, p, _ in self.parameters()}
        buffers = {BUFFER_PREFIX + name: b for name, b in self.named_buffers()}
        keys = set(state)
        old_format = not any(k.startswith(BUFFER_PREFIX) for k in keys)  # parameters only: an older save
        missing = sorted(set(params) - keys) + ([] if old_format else sorted(set(buffers) - keys))
        extra = sorted(keys - set(params) - set(buffers))
        if missing or extra:
            raise UsageError(
                f"state does not match the model: missing {missing}, unexpected {extra}. Load a state saved from "
                "a model built the same way (same layers, same arguments)."
            )
        copies = []
        for name, p in params.items():
            v = np.asarray(runtime.to_host(state[name]))
            if tuple(v.shape) != tuple(p.shape):
                raise UsageError(
                    f"parameter {name}: the model has shape {tuple(p.shape)}, the state has {tuple(v.shape)}."
                )
            if not np.issubdtype(v.dtype, np.floating):
                raise UsageError(
                    f"parameter {name}: the model holds floating-point numbers ({np.dtype(p.dtype).name}), the "
                    f"state has dtype {v.dtype.name}."
                )
            copies.append((p, v.astype(np.float32)))
        for key, b in buffers.items():
            if key not in state:
                continue
            v = np.asarray(runtime.to_host(state[key]))
            want, got = (np.dtype(b.dtype), tuple(b.shape)), (v.dtype, tuple(v.shape))
            if want != got:
                raise UsageError(
                    f"buffer {key[len(BUFFER_PREFIX) :]} (key {key!r}): the model has {want[0].name} of shape "
                    f"{want[1]}, the state has {got[0].name} of shape {got[1]}. Buffers are copied exactly (a "
                    "Dropout's generator states: 2 uint64 words per stream), so load a state saved from a model "
                    "built the same way (same streams)."
                )
            copies.append((b, v))
        if old_format and buffers:
            warnings.warn(
                f"the state has parameters but no buffers (saved before gpulab saved them): missing "
                f"{sorted(buffers)}. The model keeps its own buffers, so its Dropout layers do not continue the "
                "saving run's random streams (other masks from here on). Save the model again to keep them.",
                UserWarning,
                stacklevel=2,
            )
        for dst, v in copies:  # every check passed: copy, in place, where each array lives (NumPy or CuPy)
            dst[...] = runtime.array_module(dst).asarray(v)
        for optimizer in list(self.optimizers):  # a MixedPrecision's FP32 masters: the weights just loaded, not
            hook = getattr(optimizer, "weights_loaded", None)  # stale ones its next step would copy back over them
            if hook is not None:
                hook()

    def __repr__(self) -> str:
        inner = "\n".join(f"  ({i}) {layer!r}" for i, layer in enumerate(self.layers))
        return f"Sequential(backend={self.backend!r}\n{inner}\n)"
