"""What the typical mistakes of a privatized histogram produce, shared by lesson 05's histogram and lab 05's
confusion matrix (both count into per-block bins in shared memory and merge them into global memory).

A block's bins that are never zeroed start, in the simulator, as the integer filler ``0xBAADF00D``
(:func:`gpulab.simulator.filler`), and every block adds its copy in the merge: :func:`plus_filler` is that result,
with the int32 wrap-around a GPU's atomics have. The inputs put values on both edge bins, 0 and ``bins - 1``
(:func:`edge_values`), so a guard that drops one of them shows.
"""

from __future__ import annotations

import numpy as np

from ..simulator.memory import filler

__all__ = ["edge_values", "plus_filler", "skewed_values"]


def plus_filler(expected: np.ndarray, copies: int, where: np.ndarray | None = None) -> np.ndarray:
    """``expected`` with ``copies`` times the int32 filler added (wrapping) where ``where`` is True (default
    everywhere): the bins of ``copies`` blocks that merged a shared copy nobody zeroed."""
    add = np.int64(copies) * np.int64(filler(np.int32))
    mask = np.ones(expected.shape, bool) if where is None else where
    out = expected.astype(np.int64) + np.where(mask, add, 0)
    return (out & 0xFFFFFFFF).astype(np.uint32).view(np.int32)


def edge_values(values: np.ndarray, bins: int) -> np.ndarray:
    """``values`` (int32) with its first element set to 0 and its last to ``bins - 1`` (when it has two or more)."""
    if values.size >= 2:
        values[0], values[-1] = 0, bins - 1
    return values


def skewed_values(n: int, bins: int, rng: np.random.Generator) -> np.ndarray:
    """``n`` int32 values in ``[0, bins)``: half uniform, half in one bin (contention), shuffled, both edges present."""
    hot = int(rng.integers(0, bins))
    values = np.where(rng.random(n) < 0.5, hot, rng.integers(0, bins, n)).astype(np.int32)
    return edge_values(values, bins)
