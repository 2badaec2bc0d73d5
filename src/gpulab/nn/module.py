"""The base class of every layer: explicit ``forward`` and ``backward``, parameters and gradients.

A layer keeps what its backward pass needs from the forward pass (a "cache") on ``self``. There is
no autograd: ``Sequential.backward`` calls each layer's ``backward`` in reverse order, like
micrograd's engine does for one scalar, but for whole arrays.
"""

from __future__ import annotations

from typing import Any

from . import ops as _ops

__all__ = ["Module"]


_NUMPY: list = []


def _numpy_ops() -> _ops.Ops:
    """One shared NumPy ops object for every new layer (a layer gets its backend's from Sequential.to)."""
    if not _NUMPY:
        _NUMPY.append(_ops.get("numpy"))
    return _NUMPY[0]


class Module:
    """A layer. ``params[name]`` and ``grads[name]`` are arrays of the same shape (empty if none); ``buffers``
    holds other arrays that move and are saved with the layer but are not trained (Dropout's generator states)."""

    def __init__(self) -> None:
        self.params: dict[str, Any] = {}
        self.grads: dict[str, Any] = {}
        self.buffers: dict[str, Any] = {}
        self.training = True
        self.ops: _ops.Ops = _numpy_ops()
        # The first layer of a network does not need the gradient of its input (the images).
        self.needs_input_grad = True

    def forward(self, x: Any) -> Any:  # pragma: no cover - every layer overrides it
        raise NotImplementedError

    def backward(self, dout: Any) -> Any:  # pragma: no cover - every layer overrides it
        raise NotImplementedError

    def __call__(self, x: Any) -> Any:
        return self.forward(x)

    def train(self, mode: bool = True) -> Module:
        self.training = mode
        return self

    def eval(self) -> Module:
        return self.train(False)

    def zero_grad(self) -> None:
        for g in self.grads.values():
            g[...] = 0

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"
