"""Lesson 08's dropout exercise: random numbers on the GPU with ``numba.cuda.random``, checked exactly.

The learner's ``dropout_forward_kernel(x, states, p, y, mask)`` runs a fixed grid of :data:`THREADS` threads, one
xoroshiro128+ generator state per thread, in a grid-stride loop: thread ``t`` takes elements ``t, t + T, t + 2T,
...`` (``T = cuda.gridsize(1)``) and draws ``u = xoroshiro128p_uniform_float32(states, t)`` for each, so element
``i`` gets draw number ``i // T`` of stream ``i % T``. :func:`dropout_reference` replays exactly that on the host
(:mod:`gpulab.problems._dropout`, which lab 08's dropout backward shares), so the check compares masks exactly, in
both modes. The known mistakes are replayed the same way (:data:`MISTAKES`).

The states travel as a uint64 array of ``2 * THREADS`` words (``s0, s1`` per state; CuPy has no structured
dtypes) and are viewed as numba's ``xoroshiro128p_dtype`` for the launch (:func:`as_states`).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..exercises import Problem
from ..problems._dropout import BLOCKS, THREADS, TPB, as_states, draws, launch, named_mistakes, new_states, outputs
from .. import xoroshiro
from . import answers_05_10 as _a
from .exercise import Exercise

__all__ = [
    "BLOCKS",
    "EXERCISES",
    "THREADS",
    "TPB",
    "as_states",
    "dropout_reference",
    "keep_bound",
    "launch",
    "new_states",
    "state_bytes",
]

STATE_BYTES = xoroshiro.DTYPE.itemsize  # 16: two uint64 per generator


def dropout_reference(x: np.ndarray, words: np.ndarray, p: Any) -> tuple[np.ndarray, np.ndarray]:
    """(y, mask) of inverted dropout as the kernel computes it: ``mask = u >= p`` (1 kept, 0 dropped) and
    ``y = x / (1 - p)`` where kept, else 0, with ``u`` replayed from ``words`` (not changed) in grid-stride order."""
    return outputs(x, p, draws(words, x.size))


def keep_bound(n: int, p: float, sigmas: float = 5.0) -> float:
    """How far the kept fraction of ``n`` independent draws may stray from ``1 - p``: ``sigmas`` standard
    deviations of a binomial fraction, sqrt(p (1 - p) / n)."""
    return sigmas * math.sqrt(p * (1 - p) / n)


MISTAKES = named_mistakes(
    "x",
    "y is x where kept, not x / (1 - p): inverted dropout scales the kept values by 1 / (1 - p), so that the "
    "expected value of y[i] is x[i] and nothing changes at test time (where dropout is off).",
)


def _inputs(size: tuple[int, float], rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, np.float32]:
    n, p = size
    x = rng.uniform(0.5, 1.5, n).astype(np.float32) * rng.choice(np.array([-1, 1], np.float32), n)  # never 0
    return x, new_states(THREADS, int(rng.integers(1 << 62))), np.float32(p)


def _args(ins: tuple, outs: tuple) -> tuple:
    x, words, p = ins
    return (x, as_states(words), p, *outs)


PROBLEM = Problem(
    "dropout_forward_kernel",
    dropout_reference,
    _inputs,
    sizes=[(1, 0.5), (50, 0.25), (250, 0.5), (1000, 0.1)],  # (elements, p): fewer, then more elements than threads
    launch=launch,
    args=_args,
    out_names=["y", "mask"],
    mistakes=MISTAKES,
    # by hand: the states are a record array, which ptx="auto" cannot name (numba's xoroshiro128p_dtype)
    ptx="void(float32[:], Record.make_c_struct([('s0', uint64), ('s1', uint64)])[:], float32, float32[:], uint8[:])",
)

EXERCISES = [Exercise("08", "dropout_forward", PROBLEM, _a.dropout_forward_kernel)]


def state_bytes(n_states: int) -> int:
    """Bytes of ``n_states`` xoroshiro128+ states (16 each)."""
    return n_states * STATE_BYTES
