"""Lesson 10 (scaling up): reference answer. Mixed-precision training divides the scaled gradients
by the loss scale before the update, and skips the step when any of them overflowed."""

from __future__ import annotations

import math

from numba import cuda

__all__ = ["unscale_kernel"]


@cuda.jit
def unscale_kernel(grads, inv_scale, out, found_inf):
    i = cuda.grid(1)
    if i < out.size:
        g = grads[i] * inv_scale
        out[i] = g
        if math.isinf(g) or math.isnan(g):
            cuda.atomic.add(found_inf, 0, 1)  # many threads may find one: count them atomically
