"""The small layers: ReLU, MaxPool2d, Flatten, Linear, Dropout."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..runtime import array_module
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
        self.k = kernel_size
        self.stride = stride or kernel_size

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
    """Zero each activation with probability ``p`` while training and scale the rest by 1/(1-p)."""

    def __init__(self, p: float = 0.5, *, rng: np.random.Generator | None = None) -> None:
        super().__init__()
        if not 0.0 <= p < 1.0:
            raise ValueError(f"Dropout probability must be in [0, 1), got {p}.")
        self.p = p
        self.rng = rng if rng is not None else np.random.default_rng(0)
        self.mask = None

    def forward(self, x: Any) -> Any:
        if not self.training or self.p == 0.0:
            self.mask = None
            return x
        xp = array_module(x)
        keep = self.rng.random(x.shape, dtype=np.float32) >= self.p  # (same shape as x), seeded on the host
        self.mask = xp.asarray(keep.astype(x.dtype) / np.asarray(1.0 - self.p, dtype=x.dtype))
        return x * self.mask

    def backward(self, dout: Any) -> Any:
        return dout if self.mask is None else dout * self.mask

    def __repr__(self) -> str:
        return f"Dropout(p={self.p})"
