"""2-D convolution as im2col + one GEMM (the way cuDNN's "implicit GEMM" and Caffe think of it)."""

from __future__ import annotations

from typing import Any

import numpy as np

from .init import he_normal
from .module import Module
from .ops import check_float_array

__all__ = ["Conv2d"]


class Conv2d(Module):
    """``out[n, f] = sum_c x[n, c] (*) W[f, c] + b[f]``; x (N, C, H, W) -> out (N, F, Ho, Wo)."""

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size: int = 3,
        *,
        stride: int = 1,
        padding: int = 0,
        rng: np.random.Generator | None = None,
    ) -> None:
        super().__init__()
        if min(in_channels, out_channels, kernel_size, stride) < 1 or padding < 0:
            raise ValueError(
                f"Conv2d needs positive channels, kernel_size and stride and padding >= 0, got "
                f"in={in_channels}, out={out_channels}, k={kernel_size}, stride={stride}, padding={padding}."
            )
        rng = rng if rng is not None else np.random.default_rng(0)
        self.c, self.f, self.k, self.stride, self.pad = in_channels, out_channels, kernel_size, stride, padding
        fan_in = in_channels * kernel_size * kernel_size
        self.params = {
            "W": he_normal(rng, (out_channels, in_channels, kernel_size, kernel_size), fan_in),  # (F, C, k, k)
            "b": np.zeros(out_channels, dtype=np.float32),  # (F,)
        }
        self.grads = {k: np.zeros_like(v) for k, v in self.params.items()}

    def forward(self, x: Any) -> Any:
        check_float_array("Conv2d", x, 4, "of images (N, C, H, W)")
        n, c, h, w = x.shape
        if c != self.c:
            raise ValueError(
                f"Conv2d expects {self.c} input channels, but x has shape {tuple(x.shape)} ({c} channels)."
            )
        if h + 2 * self.pad < self.k or w + 2 * self.pad < self.k:
            raise ValueError(
                f"Conv2d: a {self.k}x{self.k} kernel does not fit images of {h}x{w} with padding {self.pad}."
            )
        cols, ho, wo = self.ops.im2col(x, self.k, self.k, self.stride, self.pad)  # (N*Ho*Wo, k*k*C)
        wmat = self._wmat()  # (F, k*k*C)
        y = self.ops.matmul(cols, wmat.T)  # (N*Ho*Wo, F)
        y = self.ops.add_bias(y, self.params["b"])  # (N*Ho*Wo, F)
        self.cache = (x.shape, cols)
        return y.reshape(n, ho, wo, self.f).transpose(0, 3, 1, 2)  # (N, F, Ho, Wo) view of channels-last memory

    def _wmat(self) -> Any:
        """The weights as a GEMM operand: (F, C, k, k) -> (F, k*k*C), matching im2col's column order."""
        w = self.params["W"]
        return w.transpose(0, 2, 3, 1).reshape(self.f, -1)  # (F, k*k*C) small copy

    def backward(self, dout: Any) -> Any:
        x_shape, cols = self.cache
        n, f, ho, wo = dout.shape
        d = dout.transpose(0, 2, 3, 1).reshape(n * ho * wo, f)  # (N*Ho*Wo, F)
        dw = self.ops.conv_weight_grad(d, cols)  # (F, k*k*C)
        self.grads["W"][...] = dw.reshape(f, self.k, self.k, self.c).transpose(0, 3, 1, 2)  # (F, C, k, k)
        self.grads["b"][...] = self.ops.sum_rows(d)  # (F,)
        self.cache = None
        if not self.needs_input_grad:
            return None
        # dx = col2im(d @ wmat): each input pixel collects what every tap that read it sends back
        return self.ops.conv_input_grad(d, self.params["W"], x_shape, self.stride, self.pad)  # (N, C, H, W)

    def __repr__(self) -> str:
        return f"Conv2d({self.c}, {self.f}, kernel_size={self.k}, stride={self.stride}, padding={self.pad})"
