"""The small layers: ReLU, MaxPool2d, Flatten, Linear, Dropout."""

from __future__ import annotations

import numbers
from typing import Any

import numpy as np

from ..errors import UsageError, whole_number

from .dropout import STREAMS, new_states
from .init import he_normal
from .module import Module
from .ops import check_float_array

__all__ = ["Dropout", "Flatten", "Linear", "MaxPool2d", "ReLU"]


class ReLU(Module):
    """``max(x, 0)`` elementwise; the gradient passes where the output is positive."""

    def forward(self, x: Any) -> Any:
        y = self.ops.relu(x)  # same shape as x
        self.y = y
        return y

    def backward(self, dout: Any) -> Any:
        dx = self.ops.relu_backward(dout, self.y)  # same shape as dout
        self.y = None
        return dx


class MaxPool2d(Module):
    """Max over k x k windows with the given stride: (N, C, H, W) -> (N, C, Ho, Wo)."""

    def __init__(self, kernel_size: int = 2, stride: int | None = None) -> None:
        super().__init__()
        example = "For example, MaxPool2d(2) takes 2x2 windows and halves the height and width."
        self.k = whole_number("MaxPool2d's kernel_size", kernel_size, example=example)
        self.stride = self.k if stride is None else whole_number("MaxPool2d's stride", stride, example=example)

    def forward(self, x: Any) -> Any:
        check_float_array("MaxPool2d", x, 4, "of feature maps (N, C, H, W)")
        if x.shape[2] < self.k or x.shape[3] < self.k:
            raise ValueError(
                f"MaxPool2d({self.k}) needs maps of at least {self.k}x{self.k}, got shape {tuple(x.shape)}."
            )
        out, self.cache = self.ops.maxpool(x, self.k, self.stride)  # (N, C, Ho, Wo)
        self.x_shape = x.shape
        return out

    def backward(self, dout: Any) -> Any:
        dx = self.ops.maxpool_backward(dout, self.cache, self.x_shape, self.k, self.stride)  # (N, C, H, W)
        self.cache = None
        return dx

    def __repr__(self) -> str:
        return f"MaxPool2d({self.k}, stride={self.stride})"


class Flatten(Module):
    """(N, C, H, W) -> (N, C*H*W), in C, H, W order (as PyTorch's ``nn.Flatten``)."""

    def forward(self, x: Any) -> Any:
        self.x_shape = x.shape
        return x.reshape(x.shape[0], -1)  # (N, C*H*W)

    def backward(self, dout: Any) -> Any:
        return dout.reshape(self.x_shape)  # (N, C, H, W)


class Linear(Module):
    """``y = x @ W.T + b``: x (N, in) -> y (N, out); W is (out, in) as in PyTorch."""

    def __init__(self, in_features: int, out_features: int, *, rng: np.random.Generator | None = None) -> None:
        super().__init__()
        example = "For example, Linear(128, 10) maps 128 features to 10."
        in_features = whole_number("Linear's in_features", in_features, example=example)
        out_features = whole_number("Linear's out_features", out_features, example=example)
        rng = rng if rng is not None else np.random.default_rng(0)
        self.n_in, self.n_out = in_features, out_features
        self.params = {
            "W": he_normal(rng, (out_features, in_features), in_features),  # (out, in)
            "b": np.zeros(out_features, dtype=np.float32),  # (out,)
        }
        self.grads = {k: np.zeros_like(v) for k, v in self.params.items()}

    def forward(self, x: Any) -> Any:
        check_float_array("Linear", x, 2, "(N, features)")
        if x.shape[1] != self.n_in:
            raise ValueError(f"Linear expects {self.n_in} input features, but x has shape {tuple(x.shape)}.")
        self.x = x
        y = self.ops.matmul(x, self.params["W"].T)  # (N, out)
        return self.ops.add_bias(y, self.params["b"])  # (N, out)

    def backward(self, dout: Any) -> Any:
        x = self.x
        self.grads["W"][...] = self.ops.matmul(dout.T, x)  # (out, in)
        self.grads["b"][...] = self.ops.sum_rows(dout)  # (out,)
        self.x = None
        if not self.needs_input_grad:
            return None
        return self.ops.matmul(dout, self.params["W"])  # (N, in)

    def __repr__(self) -> str:
        return f"Linear({self.n_in}, {self.n_out})"


class Dropout(Module):
    """Zero each activation with probability ``p`` while training and scale the rest by 1/(1-p).

    The mask comes from the layer's own generator states, ``buffers["states"]`` (``streams`` xoroshiro128+ states
    made from ``seed``, moved with the layer to where its backend computes: no host-to-device copy per step; saved
    with the model's parameters, so a loaded model draws the masks the saved one would have drawn next).
    Forward keeps a copy of the states and draws with them, advancing them for the next step; backward draws the
    same numbers again from the copy (lab 08). Every backend draws the same mask from the same states
    (:mod:`gpulab.nn.dropout`). ``eval()`` and ``p = 0`` pass the input through and draw nothing.
    """

    def __init__(self, p: float = 0.5, *, seed: int = 0, streams: int = STREAMS) -> None:
        super().__init__()
        if isinstance(p, bool) or not isinstance(p, numbers.Real) or not 0.0 <= p < 1.0:
            percent = isinstance(p, numbers.Real) and not isinstance(p, bool) and 2 <= p < 100 and float(p).is_integer()
            raise UsageError(
                f"Dropout probability must be a number in [0, 1) (the share of activations zeroed while training), "
                f"got {p!r}." + (f" For {p:g}% pass {p / 100:g}." if percent else " Pass e.g. 0.25, or 0 for none.")
            )
        self.p: float = p
        self.seed, self.streams = seed, streams
        self.buffers = {"states": new_states(streams, seed)}  # (2 * streams,) uint64
        self.saved: Any = None  # the states before the last forward: the backward regenerates its mask from them

    def forward(self, x: Any) -> Any:
        if not self.training or self.p == 0.0:
            self.saved = None
            return x
        states = self.buffers["states"]
        self.saved = states.copy()  # a copy, on the device where the states are: the forward advances `states`
        return self.ops.dropout_forward(x, self.p, states)  # same shape as x

    def backward(self, dout: Any) -> Any:
        if self.saved is None:
            return dout
        dx = self.ops.dropout_backward(dout, self.p, self.saved)  # the forward's mask, drawn again
        self.saved = None
        return dx

    def __repr__(self) -> str:
        return f"Dropout(p={self.p})"
