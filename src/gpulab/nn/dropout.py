"""Dropout in the CNN engine: generator states, one mask on every backend, and the NumPy backend's replay.

Lab 08's scheme, as the engine runs it. A :class:`~gpulab.nn.layers.Dropout` layer owns ``T`` xoroshiro128+
generator states (``numba.cuda.random``'s, created from its seed on the host once: :func:`new_states`), kept as
``2 * T`` uint64 words (``s0, s1`` per state; CuPy has no structured dtypes) where the backend computes. A dropout
op draws with ``T`` threads, one state each, in a grid-stride loop: element ``i`` of ``x`` (C order) gets draw
``i // T`` of stream ``i % T``, is kept where that draw ``u >= p`` and scaled by ``1 / (1 - p)``; the draws
advance the states in place (stream ``t`` by the number of elements its thread took).

**The same mask on every backend.** The mask is a function of the states, ``p`` and ``x.size`` only:

* ``kernels`` and ``cupy`` launch :func:`gpulab.kernels.nn_ops.dropout` (lab 08's kernel, in blocks of
  :data:`TPB`, exactly ``T`` threads: on a GPU for real, on CuPy arrays through ``__cuda_array_interface__``; in the
  simulator in turn, :mod:`gpulab.kernels.cooperative`);
* ``numpy`` replays those draws on the host (:func:`host_dropout`, :func:`gpulab.xoroshiro.keep_mask`:
  vectorised over the ``T`` streams, bit-identical to numba-cuda's draws, the states advanced alike).

``T`` is the launch shape, so it is fixed when the states are made (:data:`STREAMS` by default), never taken
from the batch or the device: a launch with another number of threads would give every element another draw (a
mask just as random, but a different one). A smaller last batch keeps the first elements' draws (element ``i``'s
draw does not depend on how many follow it); the mask changes with the batch only through ``x.size``.

**Why regenerate rather than keep a mask.** The op contract's backward takes the states *as they were before the
forward* (the layer keeps a copy: 16 bytes per stream, lab 08's lesson) and draws the same numbers again, which is
what a GPU does best: no mask is written or read, one byte per element. On the host the replay costs ``ceil(n / T)``
rounds of NumPy calls, about 0.12 ms for a 128 x 128 step with 2048 streams, so the ``numpy`` backend replays in the
backward too.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .. import xoroshiro
from ..errors import UsageError

__all__ = ["STREAMS", "TPB", "check_dropout", "host_dropout", "new_states"]

TPB = 32  # threads per block of a dropout launch (lab 08's DROPOUT_TPB); T is a multiple of it
# The default number of generator states (threads) of a Dropout layer: 64 blocks of 32. A (batch x hidden) step of
# 128 x 128 then draws 8 numbers per stream, on a GPU one per loop step of each thread, and on the host in 8
# vectorised rounds of 12 NumPy calls over 2048 streams, about 0.12 ms (1024 streams: 0.18 ms, 4096: 0.09 ms, lab
# 08's 96: 1.5 ms; 2-core machine, 2026-12); in the simulator a launch of 2048 threads in turn costs ~5 ms.
STREAMS = 2048


def new_states(streams: int, seed: int, subsequence_start: int = 0) -> np.ndarray:
    """``2 * streams`` uint64 words: the states ``numba.cuda.random.create_xoroshiro128p_states(streams, seed,
    subsequence_start)`` makes (state ``i`` is the seed's jumped ``subsequence_start + i`` times by 2**64 draws),
    made on the host, in milliseconds."""
    if isinstance(streams, bool) or not isinstance(streams, (int, np.integer)) or streams < TPB or streams % TPB:
        raise UsageError(
            f"streams must be a positive multiple of {TPB} (the dropout launch's block size), got {streams!r}."
        )
    st = np.empty(int(streams), xoroshiro.DTYPE)
    xoroshiro.init_states_cpu(st, int(seed), int(subsequence_start))
    return st.view(np.uint64).copy()


def check_dropout(p: Any, states: Any) -> None:
    """The arguments every backend's dropout op checks: ``p`` in [0, 1) and ``states`` uint64 words, 2 per state,
    a whole number of :data:`TPB`-thread blocks, C-contiguous (they are advanced in place)."""
    if isinstance(p, bool) or not isinstance(p, (float, int, np.floating, np.integer)) or not 0.0 <= float(p) < 1.0:
        raise UsageError(f"dropout: p must be a number in [0, 1), got {p!r}.")
    if float(np.float32(p)) >= 1.0:
        raise UsageError(f"dropout: p = {p!r} rounds to 1 in float32, which would drop everything; use p < 0.9999999.")
    shape, dtype = getattr(states, "shape", None), getattr(states, "dtype", None)
    if shape is None or dtype is None or np.dtype(dtype) != np.uint64 or len(shape) != 1:
        raise UsageError(
            f"dropout: states must be a 1-D uint64 array of generator words (nn.dropout.new_states), got "
            f"{type(states).__name__} {getattr(states, 'dtype', '')} {tuple(shape) if shape is not None else ''}."
        )
    if shape[0] % (2 * TPB) or shape[0] == 0:
        raise UsageError(
            f"dropout: states holds {shape[0]} uint64 words; it needs 2 per generator and a multiple of {TPB} "
            "generators (one thread each, in whole blocks). Make them with nn.dropout.new_states(streams, seed)."
        )
    if not states.flags.c_contiguous:
        raise UsageError("dropout: states must be C-contiguous (the draws advance them in place).")


def host_dropout(x: np.ndarray, p: Any, states: np.ndarray) -> np.ndarray:
    """The ``numpy`` backend's dropout: ``x / (1 - p)`` where the replayed draw ``u >= p``, else 0, in ``x``'s
    dtype (float32: the kernel's arithmetic, bit for bit; float16: that, rounded to float16, as
    :func:`gpulab.kernels.nn_ops.dropout` does); ``states`` advanced as the kernel advances them."""
    check_dropout(p, states)
    xc = np.ascontiguousarray(x)
    if xc.size == 0:
        return xc.copy()
    if xc.dtype == np.float16:  # as the GPU backends do (MixedPrecision): float32 arithmetic, then float16
        return host_dropout(xc.astype(np.float32), p, states).astype(np.float16)
    keep = xoroshiro.keep_mask(states.view(xoroshiro.DTYPE), xc.size, p).reshape(xc.shape)  # advances states
    one = xc.dtype.type(1)
    kept = xc / (one - xc.dtype.type(np.float32(p)))  # float32: float32(1.0) - p, then the division, as the kernel
    return np.where(keep, kept, xc.dtype.type(0))  # +0 where dropped, as the kernel writes
