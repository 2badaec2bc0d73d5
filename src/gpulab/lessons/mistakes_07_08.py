"""Known mistakes of lessons 07-08's exercises (:mod:`.conv_backprop`) shared by several of them, as functions of
an exercise's spec: what a kernel with the mistake computes (a ``Problem.mistakes`` entry compares the kernel's
output with it; nan marks elements the kernel never wrote, the fill the check gives outputs first)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

__all__ = ["bias_row_sums", "last_row_and_column_unwritten"]


def last_row_and_column_unwritten(spec: Callable[..., np.ndarray]) -> Callable[..., np.ndarray]:
    """The output of a kernel whose guard stops one short of the output size (``i < H - K`` where ``H - K + 1``
    rows are meant): ``spec``'s result with its last row and column (the last two axes) never written."""

    def wrong(*inputs: Any) -> np.ndarray:
        out = np.array(spec(*inputs), dtype=np.float64)
        out[..., -1, :] = np.nan
        out[..., :, -1] = np.nan
        return out

    return wrong


def bias_row_sums(dout: np.ndarray) -> np.ndarray:
    """A bias gradient whose thread o summed row o of dout (``dout[o, n]`` over n) instead of its column."""
    if dout.shape[0] < dout.shape[1]:
        raise ValueError("fewer rows than features: that kernel reads past the end of dout instead")
    return dout.sum(axis=1)[: dout.shape[1]]
