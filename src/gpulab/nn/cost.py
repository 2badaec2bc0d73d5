"""How much work each op of a training step is, counted on the host: the basis of time estimates.

:class:`WorkMeter` computes with NumPy (it is a measuring tool, not a backend) and adds up, per op,
the inner-loop iterations a grid-stride CUDA kernel of :mod:`gpulab.kernels.nn_ops` runs for the
same call: ``M*N*K`` multiply-adds for a GEMM, one per element for ReLU, ``k*k`` per pooled output,
and so on. Multiplied by a measured cost per iteration in the simulator it estimates how long the
``kernels`` backend would take (:func:`gpulab.train.estimate_kernel_seconds`).
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np

from .array_ops import NumpyOps

__all__ = ["WorkMeter", "cnn_forward_macs"]


class WorkMeter(NumpyOps):
    """NumPy ops that also count kernel loop iterations per op in ``self.work`` (a Counter)."""

    name = "numpy"

    def __init__(self) -> None:
        self.work: Counter = Counter()

    def matmul(self, a: Any, b: Any) -> Any:
        self.work["matmul"] += a.shape[0] * a.shape[1] * b.shape[1]
        return super().matmul(a, b)

    def im2col(self, x: Any, kh: int, kw: int, stride: int, pad: int) -> tuple[Any, int, int]:
        cols, ho, wo = super().im2col(x, kh, kw, stride, pad)
        self.work["im2col"] += cols.size
        return cols, ho, wo

    def col2im(self, dcols: Any, x_shape: tuple[int, ...], kh: int, kw: int, stride: int, pad: int) -> Any:
        self.work["col2im"] += int(np.prod(x_shape)) * kh * kw
        return super().col2im(dcols, x_shape, kh, kw, stride, pad)

    def conv_input_grad(self, d: Any, w: Any, x_shape: tuple[int, ...], stride: int, pad: int) -> Any:
        f, c, k, _ = w.shape
        self.work["matmul"] += d.shape[0] * f * c * k * k
        self.work["col2im"] += int(np.prod(x_shape)) * k * k
        return super().conv_input_grad(d, w, x_shape, stride, pad)

    def conv_weight_grad(self, d: Any, cols: Any) -> Any:
        self.work["matmul"] += d.shape[1] * d.shape[0] * cols.shape[1]
        return super().conv_weight_grad(d, cols)

    def add_bias(self, y: Any, b: Any) -> Any:
        self.work["add_bias"] += y.size
        return super().add_bias(y, b)

    def sum_rows(self, d: Any) -> Any:
        self.work["sum_rows"] += d.size
        return super().sum_rows(d)

    def relu(self, x: Any) -> Any:
        self.work["relu"] += x.size
        return super().relu(x)

    def relu_backward(self, dout: Any, y: Any) -> Any:
        self.work["relu_backward"] += dout.size
        return super().relu_backward(dout, y)

    def maxpool(self, x: Any, k: int, stride: int) -> tuple[Any, Any]:
        out, cache = super().maxpool(x, k, stride)
        self.work["maxpool"] += out.size * k * k
        return out, cache

    def maxpool_backward(self, dout: Any, cache: Any, x_shape: tuple[int, ...], k: int, stride: int) -> Any:
        self.work["maxpool_backward"] += int(np.prod(x_shape)) * k * k
        return super().maxpool_backward(dout, cache, x_shape, k, stride)

    def softmax_xent(self, logits: Any, labels: Any) -> tuple[Any, Any]:
        self.work["softmax_xent"] += 3 * logits.size
        return super().softmax_xent(logits, labels)

    def adam_update(self, p: Any, g: Any, m: Any, v: Any, lr_t: float, b1: float, b2: float, eps_t: float) -> None:
        self.work["adam_update"] += p.size
        super().adam_update(p, g, m, v, lr_t, b1, b2, eps_t)

    def sgd_update(self, p: Any, g: Any, v: Any, lr: float, momentum: float, weight_decay: float) -> None:
        self.work["sgd_update"] += p.size
        super().sgd_update(p, g, v, lr, momentum, weight_decay)

    @property
    def total(self) -> int:
        return int(sum(self.work.values()))


def cnn_forward_macs(image_size: int, channels: tuple[int, int], hidden: int, classes: int = 10) -> int:
    """Multiply-adds of one image's forward pass through :func:`gpulab.nn.mnist_cnn`: its convolutions and linear
    layers (ReLU, pooling and the rest add 1% of the FLOPs at full width, a few % when narrow). Lesson 09's
    exercise; equal to what :class:`WorkMeter` counts for ``matmul`` (tests/test_lessons_ex.py)."""
    c1, c2 = channels
    s = image_size
    conv1 = (s * s * c1) * (1 * 3 * 3)  # padding 1: s x s outputs per filter, each over a 3x3 window of 1 channel
    conv2 = ((s // 2) * (s // 2) * c2) * (c1 * 3 * 3)  # after the first 2x2 pool; every input channel counts
    fc1 = (c2 * (s // 4) * (s // 4)) * hidden  # after the second pool, flattened
    fc2 = hidden * classes
    return conv1 + conv2 + fc1 + fc2
