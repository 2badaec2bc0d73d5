"""What a check puts in place of the learner's code or of a GPU's objects; an error raised here belongs to the
learner's line that called it (:mod:`gpulab.exercises.frames` counts this file as not gpulab's).

- :func:`dropout_kernel`: inverted dropout of ``x`` into ``y`` with one draw per element from the thread's own state
  (a fixed grid, a grid-stride loop), lab 08's given forward. Given ``dy`` and ``dx`` it is the backward too
  (``dx = dy / (1 - p)`` where kept, else 0: the same function of the same draws), so the step's check
  (:data:`gpulab.problems.lab08.DROPOUT_STEP`) runs the learner's ``dropout_step`` with it as the backward and
  judges only which states the step hands over.
- :func:`gelu_scalar`, :func:`gelu_grad_scalar`: lab 06's GELU and its derivative as scalar functions (float32,
  the cube taken of x clamped to [-10, 10]); the layer's check (:data:`gpulab.problems.lab06.GELU_LAYER`) runs the
  learner's ``gelu_layer`` with them as GPU ufuncs in place of the learner's, and judges only its copies.
- :class:`HostStates`: the states view of NumPy words (:func:`gpulab.problems._dropout.as_states`, simulator mode),
  which refuses ``.copy()`` as numba's device array (the view on a GPU) has none.
"""

from __future__ import annotations

from typing import Any

import math

import numpy as np
from numba import cuda, float32
from numba.cuda.random import xoroshiro128p_uniform_float32

__all__ = ["DROPOUT_PTX", "STATES_COPY_MESSAGE", "HostStates", "dropout_kernel", "gelu_grad_scalar", "gelu_scalar"]

DROPOUT_PTX = "void(float32[:], Record.make_c_struct([('s0', uint64), ('s1', uint64)])[:], float32, float32[:])"


@cuda.jit
def dropout_kernel(x, states, p, y):
    tid = cuda.grid(1)  # this thread's generator is states[tid]
    for i in range(tid, x.size, cuda.gridsize(1)):  # grid-stride loop: every gridsize-th element
        u = xoroshiro128p_uniform_float32(states, tid)  # the next number of this thread's stream (advances it)
        if u >= p:
            y[i] = x[i] / (float32(1.0) - p)  # kept, scaled by 1 / (1 - p)
        else:
            y[i] = float32(0.0)


def gelu_scalar(x):
    xc = min(max(x, float32(-10.0)), float32(10.0))  # past |x| = 10, tanh is +-1 in float32: the cube stays finite
    t = math.tanh(float32(0.7978845608) * (xc + float32(0.044715) * xc * xc * xc))
    return float32(0.5) * x * (float32(1.0) + t)


def gelu_grad_scalar(x):
    xc = min(max(x, float32(-10.0)), float32(10.0))
    t = math.tanh(float32(0.7978845608) * (xc + float32(0.044715) * xc * xc * xc))
    du = float32(0.7978845608) * (float32(1.0) + float32(0.134145) * xc * xc)
    return float32(0.5) * (float32(1.0) + t) + float32(0.5) * xc * (float32(1.0) - t * t) * du


STATES_COPY_MESSAGE = (
    "as_states(...) has no .copy(): on a GPU it is numba's device array, which has none. Copy the uint64 words "
    "instead, `saved = words.copy()` (a NumPy or CuPy array), and view the copy for the launch: as_states(saved)."
)


class HostStates(np.ndarray):
    """The states view of NumPy words: a NumPy array that refuses ``.copy()`` as numba's device array does on a
    GPU, so code that copies ``as_states(words)`` fails in the simulator too, with what to do instead."""

    def copy(self, *args: Any, **kwargs: Any) -> Any:
        raise AttributeError(STATES_COPY_MESSAGE)
