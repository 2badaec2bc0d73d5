"""The ``kernels`` backend of the op contract: every op through Numba CUDA kernels.

Each op calls a launcher of :mod:`gpulab.kernels.nn_ops` with a kernel taken from ``self.kernels``
(op name -> kernel; empty means the library's own). ``self.blocks`` says which ops' kernels take one
thread per output and in what blocks (a tiled matmul's TILE x TILE); in the simulator those run
through :mod:`gpulab.kernels.cooperative`. :class:`gpulab.capstone.LearnerOps` fills that
mapping with a learner's checked kernels, op by op. Composite ops use the kernels of the ops they
are made of: ``conv_input_grad`` = matmul + col2im, ``conv_weight_grad`` = matmul. Both dropout ops launch lab
08's kernel (the backward on ``dout`` with the forward's saved states), each under its own op name.
"""

from __future__ import annotations

from typing import Any

from .ops import Ops

__all__ = ["KernelOps"]


class KernelOps(Ops):
    """The course's CUDA kernels (GPU, or the simulator with few-thread grid-stride launches)."""

    name = "kernels"

    def __init__(self, kernels: dict[str, Any] | None = None, blocks: dict[str, tuple[int, int]] | None = None) -> None:
        from ..kernels import (
            nn_ops,  # imports numba.cuda: only when this backend is chosen
        )

        self.k = nn_ops
        self.kernels: dict[str, Any] = dict(kernels or {})
        # op -> block shape of a one-thread-per-output kernel (only matmul: lab 03/04's matmuls)
        self.blocks: dict[str, tuple[int, int]] = dict(blocks or {})

    def _kernel(self, op: str) -> Any:
        return self.kernels.get(op)

    def matmul(self, a: Any, b: Any) -> Any:
        return self.k.gemm(a, b, kernel=self._kernel("matmul"), block=self.blocks.get("matmul"), cooperative=True)

    def im2col(self, x: Any, kh: int, kw: int, stride: int, pad: int) -> tuple[Any, int, int]:
        return self.k.im2col(x, kh, kw, stride, pad, kernel=self._kernel("im2col"))

    def col2im(self, dcols: Any, x_shape: tuple[int, ...], kh: int, kw: int, stride: int, pad: int) -> Any:
        return self.k.col2im(dcols, x_shape, kh, kw, stride, pad, kernel=self._kernel("col2im"))

    def conv_input_grad(self, d: Any, w: Any, x_shape: tuple[int, ...], stride: int, pad: int) -> Any:
        f, _, k, _ = w.shape
        dcols = self.matmul(d, w.transpose(0, 2, 3, 1).reshape(f, -1))  # (N*Ho*Wo, k*k*C) GEMM kernel
        return self.col2im(dcols, x_shape, k, k, stride, pad)  # (N, C, H, W) gather kernel

    def conv_weight_grad(self, d: Any, cols: Any) -> Any:
        return self.matmul(d.T, cols)  # (F, k*k*C) GEMM kernel

    def add_bias(self, y: Any, b: Any) -> Any:
        return self.k.add_bias(y, b, kernel=self._kernel("add_bias"))

    def sum_rows(self, d: Any) -> Any:
        return self.k.sum_rows(d, kernel=self._kernel("sum_rows"))

    def relu(self, x: Any) -> Any:
        return self.k.relu(x, kernel=self._kernel("relu"))

    def relu_backward(self, dout: Any, y: Any) -> Any:
        return self.k.relu_backward(dout, y, kernel=self._kernel("relu_backward"))

    def maxpool(self, x: Any, k: int, stride: int) -> tuple[Any, Any]:
        out, arg = self.k.maxpool(x, k, stride, kernel=self._kernel("maxpool"))
        return out, (arg,)

    def maxpool_backward(self, dout: Any, cache: Any, x_shape: tuple[int, ...], k: int, stride: int) -> Any:
        if isinstance(cache[0], str):
            raise ValueError(
                "maxpool_backward: this cache comes from the numpy/cupy backend's fast path; the "
                "kernels backend needs (arg,) from its own maxpool."
            )
        return self.k.maxpool_backward(dout, cache[0], x_shape, k, stride, kernel=self._kernel("maxpool_backward"))

    def softmax_xent(self, logits: Any, labels: Any) -> tuple[Any, Any]:
        return self.k.softmax_xent(logits, labels, kernel=self._kernel("softmax_xent"))

    def adam_update(self, p: Any, g: Any, m: Any, v: Any, lr_t: float, b1: float, b2: float, eps_t: float) -> None:
        self.k.adam_update(p, g, m, v, lr_t, b1, b2, eps_t, kernel=self._kernel("adam_update"))

    def sgd_update(self, p: Any, g: Any, v: Any, lr: float, momentum: float, weight_decay: float) -> None:
        self.k.sgd_update(p, g, v, lr, momentum, weight_decay, kernel=self._kernel("sgd_update"))

    def dropout_forward(self, x: Any, p: float, states: Any) -> Any:
        return self.k.dropout(x, p, states, kernel=self._kernel("dropout_forward"))

    def dropout_backward(self, dout: Any, p: float, states: Any) -> Any:
        return self.k.dropout(dout, p, states, kernel=self._kernel("dropout_backward"))
