"""A chain of layers: forward in order, backward in reverse order."""

from __future__ import annotations

from typing import Any
from collections.abc import Iterator

import numpy as np

from .. import runtime
from . import ops as _ops
from .layers import MaxPool2d, ReLU
from .module import Module

__all__ = ["Sequential"]


class Sequential(Module):
    """``Sequential(Conv2d(...), ReLU(), ...)``; ``backend`` picks who does the array work."""

    def __init__(self, *layers: Module, backend: str = "numpy") -> None:
        super().__init__()
        for i, layer in enumerate(layers):
            if not isinstance(layer, Module):
                raise TypeError(f"Sequential takes layers (gpulab.nn modules); argument {i} is {type(layer).__name__}.")
        self.layers = list(layers)
        if self.layers:
            self.layers[0].needs_input_grad = False  # nobody needs d(loss)/d(images)
        self.backend = "numpy"
        self.to(backend)

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
        CuPy arrays (in simulator mode ``kernels`` works on NumPy arrays).
        """
        if backend not in _ops.BACKENDS:
            raise ValueError(f"unknown backend {backend!r}; choose one of: {', '.join(_ops.BACKENDS)}.")
        if backend == "cupy" and not runtime.is_gpu():
            raise RuntimeError(
                "backend='cupy' needs a CUDA GPU (gpulab is in simulator mode). Use backend='numpy' on the "
                "CPU, or backend='kernels' to run the lab's CUDA kernels in the simulator (tiny batches)."
            )
        ops = _ops.get(backend)
        on_device = _ops.device_for(backend) == "gpu"
        for layer in self.layers:
            layer.ops = ops
            for d in (layer.params, layer.grads, layer.buffers):
                for k, v in d.items():
                    d[k] = runtime.to_device(v) if on_device else runtime.to_host(v)
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
        for layer in self.run_order():
            x = layer.forward(x)
        return x

    def backward(self, dout: Any) -> Any:
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

    def state_dict(self) -> dict[str, np.ndarray]:
        """Every parameter as a host NumPy array, keyed ``"<layer index>.<name>"``."""
        return {name: runtime.to_host(p) for name, p, _ in self.parameters()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Copy arrays into the parameters, checking that names and shapes match."""
        mine = {name: p for name, p, _ in self.parameters()}
        missing, extra = sorted(set(mine) - set(state)), sorted(set(state) - set(mine))
        if missing or extra:
            raise ValueError(f"state does not match the model: missing {missing}, unexpected {extra}.")
        for name, p in mine.items():
            v = np.asarray(runtime.to_host(state[name]))
            if tuple(v.shape) != tuple(p.shape):
                raise ValueError(
                    f"parameter {name}: the model has shape {tuple(p.shape)}, the state has {tuple(v.shape)}."
                )
            p[...] = runtime.array_module(p).asarray(v.astype(np.float32))

    def __repr__(self) -> str:
        inner = "\n".join(f"  ({i}) {layer!r}" for i, layer in enumerate(self.layers))
        return f"Sequential(backend={self.backend!r}\n{inner}\n)"
