"""Lesson 08's dropout exercise: random numbers on the GPU with ``numba.cuda.random``, checked exactly.

The learner's ``dropout_forward_kernel(x, states, p, y, mask)`` runs a fixed grid of :data:`THREADS` threads, one
xoroshiro128+ generator state per thread, in a grid-stride loop: thread ``t`` takes elements ``t, t + T, t + 2T,
...`` (``T = cuda.gridsize(1)``) and draws ``u = xoroshiro128p_uniform_float32(states, t)`` for each, so element
``i`` gets draw number ``i // T`` of stream ``i % T``. :func:`dropout_reference` replays exactly that on the host
(:func:`gpulab.simulator.xoroshiro.uniform_float32_streams`, bit-identical to numba-cuda's draws), so the check
compares masks exactly, in both modes. The known mistakes are replayed the same way (:data:`MISTAKES`).

The states travel as a uint64 array of ``2 * THREADS`` words (``s0, s1`` per state; CuPy has no structured
dtypes) and are viewed as numba's ``xoroshiro128p_dtype`` for the launch (:func:`as_states`).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..exercises import Problem
from ..simulator import xoroshiro
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

TPB = 32  # threads per block
BLOCKS = 3  # a fixed grid: 96 threads, so 96 generator states, whatever the number of elements
THREADS = TPB * BLOCKS
STATE_BYTES = xoroshiro.DTYPE.itemsize  # 16: two uint64 per generator


def new_states(n: int, seed: int, subsequence_start: int = 0) -> np.ndarray:
    """``n`` generator states as numba's ``create_xoroshiro128p_states(n, seed)`` makes them, on the host, as
    ``2 * n`` uint64 words."""
    st = np.empty(n, xoroshiro.DTYPE)
    xoroshiro.init_states_cpu(st, seed, subsequence_start)
    return st.view(np.uint64).copy()


def as_states(words: Any) -> Any:
    """uint64 words (NumPy or CuPy) viewed as an array of ``xoroshiro128p_dtype`` states (no copy), the kernel's
    ``states`` argument."""
    if isinstance(words, np.ndarray):
        return words.view(xoroshiro.DTYPE)
    from numba import cuda

    return cuda.as_cuda_array(words).view(xoroshiro.DTYPE)


def launch(*call: Any) -> tuple[int, int]:
    """The exercise's fixed grid: (BLOCKS, TPB), one thread per state."""
    return BLOCKS, TPB


def _draws(words: np.ndarray, n: int, order: str = "grid") -> np.ndarray:
    """The uniform number element ``i`` of ``n`` gets from a kernel with one stream per thread (``order="grid"``),
    or from the known mistakes: ``"first"`` (one draw per thread, reused), ``"block_turns"`` (stream
    ``threadIdx.x``, blocks one after another, as the simulator runs them) and ``"block_copies"`` (stream
    ``threadIdx.x``, every block reading the stream at once, as a GPU may)."""
    st = np.asarray(words, dtype=np.uint64).view(xoroshiro.DTYPE).copy()
    t_all = st.size
    rows = max(1, math.ceil(n / t_all))
    i = np.arange(n)
    t, k = i % t_all, i // t_all
    if order == "grid":
        return xoroshiro.uniform_float32_streams(st, rows).ravel()[:n]
    if order == "first":
        return xoroshiro.uniform_float32_streams(st, 1)[0][t]
    tx = t % TPB  # threadIdx.x
    if order == "block_copies":
        return xoroshiro.uniform_float32_streams(st, rows)[k, tx]
    # block_turns: stream tx serves thread tx of block 0 (all its elements), then of block 1, ...
    per_thread = np.maximum(0, (n - np.arange(t_all) + t_all - 1) // t_all).reshape(-1, TPB)  # (block, tx)
    before = (np.cumsum(per_thread, axis=0) - per_thread).ravel()  # draws taken by the blocks before, per thread
    u = xoroshiro.uniform_float32_streams(st, int(per_thread.sum(axis=0).max()))
    return u[before[t] + k, tx]


def _outputs(x: np.ndarray, p: Any, u: np.ndarray, keep_if: str = "u >= p", scale: bool = True) -> tuple:
    keep = u >= p if keep_if == "u >= p" else u < p
    kept = x / (np.float32(1) - np.float32(p)) if scale else x
    return np.where(keep, kept, np.float32(0)).astype(np.float32), keep.astype(np.uint8)


def dropout_reference(x: np.ndarray, words: np.ndarray, p: Any) -> tuple[np.ndarray, np.ndarray]:
    """(y, mask) of inverted dropout as the kernel computes it: ``mask = u >= p`` (1 kept, 0 dropped) and
    ``y = x / (1 - p)`` where kept, else 0, with ``u`` replayed from ``words`` (not changed) in grid-stride order."""
    return _outputs(x, p, _draws(words, x.size))


def keep_bound(n: int, p: float, sigmas: float = 5.0) -> float:
    """How far the kept fraction of ``n`` independent draws may stray from ``1 - p``: ``sigmas`` standard
    deviations of a binomial fraction, sqrt(p (1 - p) / n)."""
    return sigmas * math.sqrt(p * (1 - p) / n)


def _no_scaling(x: np.ndarray, words: np.ndarray, p: Any) -> np.ndarray:
    return _outputs(x, p, _draws(words, x.size), scale=False)[0]


def _inverted(x: np.ndarray, words: np.ndarray, p: Any) -> np.ndarray:
    return _outputs(x, p, _draws(words, x.size), keep_if="u < p")[0]


def _thread_idx(x: np.ndarray, words: np.ndarray, p: Any) -> list[np.ndarray]:
    return [_outputs(x, p, _draws(words, x.size, order))[0] for order in ("block_turns", "block_copies")]


def _one_draw(x: np.ndarray, words: np.ndarray, p: Any) -> np.ndarray:
    return _outputs(x, p, _draws(words, x.size, "first"))[0]


def _no_grid_stride(x: np.ndarray, words: np.ndarray, p: Any) -> np.ndarray:
    y = dropout_reference(x, words, p)[0]
    return np.where(np.arange(x.size) < words.size // 2, y, np.float32(np.nan))  # NaN: the harness's fill


MISTAKES = {
    "y is x where kept, not x / (1 - p): inverted dropout scales the kept values by 1 / (1 - p), so that the "
    "expected value of y[i] is x[i] and nothing changes at test time (where dropout is off).": _no_scaling,
    "keep and drop are swapped: the element is kept where u < p, so a fraction p survives instead of 1 - p. Keep it "
    "where u >= p (u is uniform in [0, 1), so that happens with probability 1 - p).": _inverted,
    "threads of different blocks drew from the same stream: the state index is cuda.threadIdx.x, which repeats in "
    "every block (on a GPU the blocks' masks come out equal, or the shared state is corrupted by the race). Each "
    "thread of the grid owns one state: index it with tid = cuda.grid(1).": _thread_idx,
    "the mask repeats every cuda.gridsize(1) elements: each thread drew one number and reused it for all its "
    "elements. Draw a new u = xoroshiro128p_uniform_float32(states, tid) inside the loop, once per element.": _one_draw,
    "the elements past the first cuda.gridsize(1) were never written: the grid is fixed (one thread per state, "
    "fewer threads than elements), so each thread must loop: for i in range(tid, x.size, cuda.gridsize(1)).": (
        _no_grid_stride
    ),
}


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
)

EXERCISES = [Exercise("08", "dropout_forward", PROBLEM, _a.dropout_forward_kernel)]


def state_bytes(n_states: int) -> int:
    """Bytes of ``n_states`` xoroshiro128+ states (16 each)."""
    return n_states * STATE_BYTES
