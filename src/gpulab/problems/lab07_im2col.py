"""Lab 07's challenge (b), ``conv2d_im2col``: the named mistakes of the host function that launches im2col, multiplies
by the filters and lays the product out as ``(N, F, Ho, Wo)`` (each a function of the check's inputs giving the
output the mistake gives, or an array of the shape it stores: :mod:`gpulab.exercises.shapes`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ..kernels._launch import conv_out_size

__all__ = ["im2col_host_mistakes"]


def _product(x: np.ndarray, w: np.ndarray, b: np.ndarray, stride: int, pad: int, im2col: Callable, wmat: Any) -> Any:
    """(y, ho, wo): ``im2col(x) @ wmat + b``, the (N*Ho*Wo, F) product before its layout."""
    k = w.shape[2]
    ho, wo = conv_out_size(x.shape[2], k, stride, pad), conv_out_size(x.shape[3], k, stride, pad)
    return im2col(x, k, stride, pad).astype(np.float64) @ wmat + b, ho, wo


def im2col_host_mistakes(conv2d_spec: Callable, im2col_spec: Callable) -> dict[str, Callable[..., Any]]:
    """{hint: mistake} for ``conv2d_im2col(x, w, b, stride, pad, out)``, from the lab's two specs."""

    def reshaped_straight(x: Any, w: Any, b: Any, stride: int, pad: int) -> Any:
        f, c, k, _ = w.shape
        y, ho, wo = _product(x, w, b, stride, pad, im2col_spec, w.reshape(f, c * k * k).T)
        return y.reshape(x.shape[0], f, ho, wo)

    def wmat_unflipped(x: Any, w: Any, b: Any, stride: int, pad: int) -> Any:
        f, c, k, _ = w.shape
        y, ho, wo = _product(x, w, b, stride, pad, im2col_spec, w.reshape(c * k * k, f))
        return y.reshape(x.shape[0], ho, wo, f).transpose(0, 3, 1, 2)

    return {
        "the bias is missing: add b[f] to every output of filter f (y += b adds it to each row of the (N*Ho*Wo, F) "
        "product).": lambda x, w, b, stride, pad: conv2d_spec(x, w, np.zeros_like(b), stride, pad),
        "the product was reshaped straight to (N, F, Ho, Wo): its rows are output pixels (n, i, j) and its columns "
        "filters, so it reads as (N, Ho, Wo, F); move the filter axis second after that reshape.": reshaped_straight,
        "the product's axes came out as (N, F, Wo, Ho): after the reshape to (N, Ho, Wo, F), the filter axis moves "
        "second and Ho stays before Wo.": lambda x, w, b, stride, pad: conv2d_spec(x, w, b, stride, pad).transpose(
            0, 1, 3, 2
        ),
        "wmat is w.reshape(C*k*k, F), which has the right shape but mixes filters and taps: each filter is a row "
        "of w.reshape(F, C*k*k), so wmat is that matrix transposed.": wmat_unflipped,
    }
