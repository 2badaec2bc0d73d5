"""Dropout with ``numba.cuda.random`` states, replayed on the host: lesson 08's exercise (the forward) and lab 08's
(the backward that regenerates the mask) share it.

A dropout kernel here runs a fixed grid of :data:`THREADS` threads, one xoroshiro128+ generator state per thread, in
a grid-stride loop: thread ``t`` takes elements ``t, t + T, t + 2T, ...`` (``T = cuda.gridsize(1)``) and draws
``u = xoroshiro128p_uniform_float32(states, t)`` for each, so element ``i`` gets draw number ``i // T`` of stream
``i % T``. :func:`draws` replays exactly that on the host (:func:`gpulab.xoroshiro.uniform_float32_streams`,
bit-identical to numba-cuda's draws), and the known mistakes the same way (:func:`named_mistakes`), so a check
compares masks exactly, in both modes. The element is kept where ``u >= p``, and a kept value is scaled by
``1 / (1 - p)`` (inverted dropout); the backward applies the same mask and scale to ``dy``, so the forward's ``y``
from ``x`` and the backward's ``dx`` from ``dy`` are one function (:func:`apply`) of different arrays.

The states travel as a uint64 array of ``2 * THREADS`` words (``s0, s1`` per state; CuPy has no structured dtypes)
and are viewed as numba's ``xoroshiro128p_dtype`` for the launch (:func:`as_states`).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from .. import xoroshiro

__all__ = [
    "BLOCKS",
    "THREADS",
    "TPB",
    "apply",
    "as_states",
    "draws",
    "launch",
    "named_mistakes",
    "new_states",
    "outputs",
]

TPB = 32  # threads per block
BLOCKS = 3  # a fixed grid: 96 threads, so 96 generator states, whatever the number of elements
THREADS = TPB * BLOCKS


def new_states(n: int, seed: int, subsequence_start: int = 0) -> np.ndarray:
    """``n`` generator states as numba's ``create_xoroshiro128p_states(n, seed)`` makes them, on the host, as
    ``2 * n`` uint64 words."""
    st = np.empty(n, xoroshiro.DTYPE)
    xoroshiro.init_states_cpu(st, seed, subsequence_start)
    return st.view(np.uint64).copy()


def as_states(words: Any) -> Any:
    """uint64 words (NumPy or CuPy) viewed as an array of ``xoroshiro128p_dtype`` states (no copy), the kernel's
    ``states`` argument. Neither view has ``.copy()`` (numba's device array has none; the NumPy one,
    :class:`._stand_ins.HostStates`, refuses it likewise): copy the words."""
    if isinstance(words, np.ndarray):
        from ._stand_ins import HostStates

        return words.view(xoroshiro.DTYPE).view(HostStates)
    from numba import cuda

    return cuda.as_cuda_array(words).view(xoroshiro.DTYPE)


def launch(*call: Any) -> tuple[int, int]:
    """The exercises' fixed grid: (BLOCKS, TPB), one thread per state."""
    return BLOCKS, TPB


def draws(words: np.ndarray, n: int, order: str = "grid") -> np.ndarray:
    """The uniform number element ``i`` of ``n`` gets from a kernel with one stream per thread (``order="grid"``),
    or from the known mistakes: ``"after"`` (the draws that follow a first grid-stride pass over the ``n``
    elements: the states a forward already advanced), ``"first"`` (one draw per thread, reused),
    ``"block_turns"`` (stream ``threadIdx.x``, blocks one after another, as the simulator runs them) and
    ``"block_copies"`` (stream ``threadIdx.x``, every block reading the stream at once, as a GPU may)."""
    st = np.asarray(words, dtype=np.uint64).view(xoroshiro.DTYPE).copy()
    t_all = st.size
    rows = max(1, math.ceil(n / t_all))
    i = np.arange(n)
    t, k = i % t_all, i // t_all
    if order == "grid":
        return xoroshiro.uniform_float32_streams(st, rows).ravel()[:n]
    if order == "after":
        taken = np.maximum(0, (n - np.arange(t_all) + t_all - 1) // t_all)  # draws each thread made in the first pass
        return xoroshiro.uniform_float32_streams(st, 2 * rows)[taken[t] + k, t]
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


def outputs(x: np.ndarray, p: Any, u: np.ndarray, keep_if: str = "u >= p", scale: bool = True) -> tuple:
    """(``x / (1 - p)`` where kept, else 0; the mask as uint8) for the draws ``u``, computed as a kernel
    does in float32 (a kernel that computes the division in float64 and rounds it may differ by 1 ulp: the checks
    allow float32 rounding)."""
    keep = u >= p if keep_if == "u >= p" else u < p
    kept = x / (np.float32(1) - np.float32(p)) if scale else x
    return np.where(keep, kept, np.float32(0)).astype(np.float32), keep.astype(np.uint8)


def apply(x: np.ndarray, words: np.ndarray, p: Any, order: str = "grid") -> np.ndarray:
    """Inverted dropout of ``x`` with the mask of ``words`` (not changed), drawn in ``order`` (see :func:`draws`):
    the forward's ``y`` from ``x``, or the backward's ``dx`` from ``dy``."""
    return outputs(x, p, draws(words, x.size, order))[0]


def _no_scaling(x: np.ndarray, words: np.ndarray, p: Any) -> np.ndarray:
    return outputs(x, p, draws(words, x.size), scale=False)[0]


def _times_keep(x: np.ndarray, words: np.ndarray, p: Any) -> np.ndarray:  # x * (1 - p): scaled the wrong way
    keep = draws(words, x.size) >= p
    return np.where(keep, x * (np.float32(1) - np.float32(p)), np.float32(0)).astype(np.float32)


def _over_p(x: np.ndarray, words: np.ndarray, p: Any) -> np.ndarray:  # x / p: divided by the drop probability
    keep = draws(words, x.size) >= p
    return np.where(keep, x / np.float32(p), np.float32(0)).astype(np.float32)


def _dropped_unwritten(x: np.ndarray, words: np.ndarray, p: Any) -> np.ndarray:  # no `else`: NaN, the harness's fill
    return np.where(draws(words, x.size) >= p, apply(x, words, p), np.float32(np.nan)).astype(np.float32)


def _inverted(x: np.ndarray, words: np.ndarray, p: Any) -> np.ndarray:
    return outputs(x, p, draws(words, x.size), keep_if="u < p")[0]


def _thread_idx(x: np.ndarray, words: np.ndarray, p: Any) -> list[np.ndarray]:
    return [apply(x, words, p, order) for order in ("block_turns", "block_copies")]


def _one_draw(x: np.ndarray, words: np.ndarray, p: Any) -> np.ndarray:
    return apply(x, words, p, "first")


def _no_grid_stride(x: np.ndarray, words: np.ndarray, p: Any) -> np.ndarray:
    y = apply(x, words, p)
    return np.where(np.arange(x.size) < words.size // 2, y, np.float32(np.nan))  # NaN: the harness's fill


def named_mistakes(inp: str, scaling: str) -> dict[str, Callable[..., Any]]:
    """The known mistakes of a dropout kernel whose output is its input ``inp`` kept and scaled (``y`` from ``x``, or
    ``dx`` from ``dy``), hint -> what the mistake gives from ``(inp, words, p)``; ``scaling`` is the hint for a
    kernel that does not scale by 1 / (1 - p) (the reason differs between forward and backward)."""
    return {
        scaling: _no_scaling,
        f"the kept values are {inp} * (1 - p): inverted dropout divides by the keep probability, {inp}[i] / (1 - p), "
        "so kept values grow and their expected value stays the same.": _times_keep,
        "the dropped elements were never written (they still hold the check's fill): an output is not zeroed for "
        "you, so write 0 where the element is dropped (an `else:` branch), and the mask too.": _dropped_unwritten,
        "keep and drop are swapped: the element is kept where u < p, so a fraction p survives instead of 1 - p. Keep "
        "it where u >= p (u is uniform in [0, 1), so that happens with probability 1 - p).": _inverted,
        "threads of different blocks drew from the same stream: the state index is cuda.threadIdx.x, which repeats in "
        "every block (on a GPU the blocks' masks come out equal, or the shared state is corrupted by the race). Each "
        "thread of the grid owns one state: index it with tid = cuda.grid(1).": _thread_idx,
        "the mask repeats every cuda.gridsize(1) elements: each thread drew one number and reused it for all its "
        "elements. Draw a new u = xoroshiro128p_uniform_float32(states, tid) inside the loop, once per "
        "element.": _one_draw,
        f"the elements past the first cuda.gridsize(1) were never written: the grid is fixed (one thread per state, "
        f"fewer threads than elements), so each thread must loop: for i in range(tid, {inp}.size, "
        "cuda.gridsize(1)).": _no_grid_stride,
        f"the kept values are {inp} / p: p is the probability of dropping, so divide by the keep probability, "
        f"{inp}[i] / (1 - p).": _over_p,
    }
