"""``numba.cuda.random``'s generator on the host: the same numbers, silent and fast, in both modes.

numba-cuda's generator (xoroshiro128+, one 16-byte state per thread) is written as CPU ``@jit`` functions that a
GPU kernel compiles as device functions. In the simulator they fall back to Numba's object mode: creating the
states prints several NumbaWarnings and NumPy's "overflow encountered" RuntimeWarnings (uint64 arithmetic wraps
on purpose), and is slow, each state being a jump of 2**64 steps done one Python call at a time (4.2 s for 1024
states on 2 cores). :func:`gpulab.simulator.xoroshiro.install` (called by :func:`gpulab.simulator.harden` in
simulator mode) replaces the module's functions with these, which give bit-identical states and draws
(tests/test_dropout.py compares them with numba-cuda's own):

* :func:`init_states_cpu` is numba's ``init_xoroshiro128p_states_cpu`` done as linear algebra: a jump is a
  fixed 128 x 128 matrix over GF(2) acting on the state's bits (xoroshiro's step is shifts, rotations and XORs),
  so state ``i`` is ``J**(subsequence_start + i)`` times the SplitMix64 seed state, and every state is reached
  at once, NumPy-vectorised, with the powers ``J**(2**k)`` (computed once);
* :func:`next_u64` and the uniform draws use Python integers masked to 64 bits: no warnings, no object mode;
  the Gaussian draws and the single jump are numba's own Python code calling them.

:func:`uniform_float32_streams` draws every state's next numbers at once (vectorised): the exact host replay
that a check compares a kernel with. :func:`keep_mask` is the replay the CNN engine's NumPy backend trains with
(dropout): the same draws, compared with ``p`` as integers, in place, with each stream advanced exactly as a
grid-stride kernel leaves it.
"""

from __future__ import annotations

from functools import cache
from typing import Any

import numpy as np

__all__ = [
    "DTYPE",
    "init_state",
    "init_states_cpu",
    "jump",
    "keep_mask",
    "keep_threshold",
    "next_u64",
    "uniform_float32",
    "uniform_float32_streams",
    "uniform_float64",
]

_M64 = (1 << 64) - 1
_JUMP = (0xBEAC0467EBA5FACB, 0xD86B048B86AA9922)  # xoroshiro128+'s jump polynomial (2**64 steps)
_F53 = 1.0 / (1 << 53)
DTYPE = np.dtype([("s0", np.uint64), ("s1", np.uint64)], align=True)  # numba.cuda.random.xoroshiro128p_dtype


def _step(s0: int, s1: int) -> tuple[int, int, int]:
    """(result, s0', s1'): one xoroshiro128+ step on Python ints."""
    result = (s0 + s1) & _M64
    s1 ^= s0
    s0 = (((s0 << 55) | (s0 >> 9)) & _M64) ^ s1 ^ ((s1 << 14) & _M64)
    s1 = ((s1 << 36) | (s1 >> 28)) & _M64
    return result, s0, s1


def _splitmix(seed: int) -> int:
    """numba's ``init_xoroshiro128p_state``: both halves of a state are SplitMix64(seed)."""
    z = (seed + 0x9E3779B97F4A7C15) & _M64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _M64
    return z ^ (z >> 31)


def _jump_ints(s0: int, s1: int) -> tuple[int, int]:
    """numba's ``xoroshiro128p_jump`` on Python ints: the state 2**64 steps ahead."""
    j0 = j1 = 0
    for word in _JUMP:
        for b in range(64):
            if word >> b & 1:
                j0 ^= s0
                j1 ^= s1
            _, s0, s1 = _step(s0, s1)
    return j0, j1


def _bits(v: np.ndarray) -> np.ndarray:
    """(m, 2) uint64 states -> (m, 128) bits, bit b of s0 at b, of s1 at 64 + b."""
    return np.unpackbits(np.ascontiguousarray(v, dtype="<u8").view(np.uint8), axis=1, bitorder="little")


def _words(bits: np.ndarray) -> np.ndarray:
    """(m, 128) bits -> (m, 2) uint64 (the inverse of :func:`_bits`)."""
    return np.packbits(bits.astype(np.uint8), axis=1, bitorder="little").view("<u8").astype(np.uint64)


@cache
def _jump_power(k: int) -> np.ndarray:
    """``J**(2**k)`` as a (128, 128) 0/1 matrix over GF(2), in float32 (BLAS; sums of 128 bits are exact): column c
    is the jump of the state with only bit c set."""
    if k == 0:
        units = [(1 << c, 0) if c < 64 else (0, 1 << (c - 64)) for c in range(128)]
        cols = np.array([_jump_ints(*u) for u in units], dtype=np.uint64)
        return _bits(cols).T.astype(np.float32)
    half = _jump_power(k - 1)
    return ((half @ half).astype(np.int32) & 1).astype(np.float32)


def _apply(k: int, v: np.ndarray) -> np.ndarray:
    """Jump each (s0, s1) row of ``v`` by 2**64 * 2**k steps."""
    return _words((_bits(v).astype(np.float32) @ _jump_power(k).T).astype(np.int32) & 1)


@cache
def _jump_matrix(count: int) -> np.ndarray:
    """``J**count`` as a (128, 128) 0/1 float32 matrix over GF(2): the product of the powers ``J**(2**k)`` of the
    set bits of ``count`` (powers of one matrix commute)."""
    m = np.eye(128, dtype=np.float32)
    for k in range(count.bit_length()):
        if count >> k & 1:
            m = ((_jump_power(k) @ m).astype(np.int32) & 1).astype(np.float32)
    return m


def jump(states: np.ndarray, count: int) -> np.ndarray:
    """A copy of ``states`` (``DTYPE``, NumPy) with every state jumped ``count`` times by 2**64 steps (numba's
    ``xoroshiro128p_jump`` applied ``count`` times): a state made by :func:`init_states_cpu` with subsequence ``s``
    becomes the one it makes with ``s + count``, and a state that has drawn ``d`` numbers becomes that one after
    ``d`` draws. One (m, 128) x (128, 128) product over GF(2), the matrix cached per ``count``."""
    v = np.stack([states["s0"], states["s1"]], axis=1).astype(np.uint64)  # (m, 2)
    out = np.empty(states.shape[0], DTYPE)
    if v.shape[0]:
        w = _words((_bits(v).astype(np.float32) @ _jump_matrix(int(count) & _M64).T).astype(np.int32) & 1)
        out["s0"], out["s1"] = w[:, 0], w[:, 1]
    return out


def init_states_cpu(states: Any, seed: Any, subsequence_start: Any = 0) -> None:
    """Fill ``states`` (a NumPy array of ``xoroshiro128p_dtype``) as numba's ``init_xoroshiro128p_states_cpu``:
    state ``i`` is the SplitMix64 state of ``seed`` jumped ``subsequence_start + i`` times by 2**64 steps."""
    n = states.shape[0]
    if n < 1:
        return
    z = _splitmix(int(seed) & _M64)
    v = np.array([[z, z]], dtype=np.uint64)
    start = int(subsequence_start) & _M64
    for k in range(start.bit_length()):
        if start >> k & 1:
            v = _apply(k, v)
    out = np.repeat(v, n, axis=0)
    index = np.arange(n)
    for k in range(int(n - 1).bit_length()):
        rows = (index >> k & 1).astype(bool)
        out[rows] = _apply(k, out[rows])
    states["s0"] = out[:, 0]
    states["s1"] = out[:, 1]


def init_state(states: Any, index: Any, seed: Any) -> None:
    """numba's ``init_xoroshiro128p_state``: ``states[index]`` from SplitMix64(seed)."""
    z = _splitmix(int(seed) & _M64)
    rec = states[int(index)]
    rec["s0"] = z
    rec["s1"] = z


def next_u64(states: Any, index: Any) -> int:
    """numba's ``xoroshiro128p_next``: the next 64-bit number of ``states[index]``, advancing it."""
    rec = states[int(index)]
    result, s0, s1 = _step(int(rec["s0"]), int(rec["s1"]))
    rec["s0"] = s0
    rec["s1"] = s1
    return result


def uniform_float64(states: Any, index: Any) -> np.float64:
    """numba's ``xoroshiro128p_uniform_float64``: a float64 in [0, 1) (the top 53 bits of the next number)."""
    return np.float64((next_u64(states, index) >> 11) * _F53)


def uniform_float32(states: Any, index: Any) -> np.float32:
    """numba's ``xoroshiro128p_uniform_float32``: :func:`uniform_float64` rounded to float32 (so 1.0 is possible,
    with probability 2**-25, where the float64 is within half a float32 step of 1)."""
    return np.float32((next_u64(states, index) >> 11) * _F53)


def uniform_float32_streams(states: np.ndarray, draws: int) -> np.ndarray:
    """``(draws, len(states))`` float32: row k holds every state's k-th uniform draw, as
    ``xoroshiro128p_uniform_float32(states, t)`` gives them; ``states`` is advanced as the draws would."""
    s0 = np.array(states["s0"], dtype=np.uint64)
    s1 = np.array(states["s1"], dtype=np.uint64)
    out = np.empty((draws, s0.size), np.float32)
    w, r11 = np.empty_like(s0), np.uint64(11)
    for k in range(draws):  # NumPy arrays of uint64 wrap silently (only NumPy scalars warn)
        np.add(s0, s1, out=w)  # the 64-bit output of this draw
        out[k] = (w >> r11).astype(np.float64) * _F53
        _advance(s0, s1, w)
    states["s0"], states["s1"] = s0, s1
    return out


_R55, _R9, _R14, _R36, _R28 = (np.uint64(v) for v in (55, 9, 14, 36, 28))


def _advance(s0: np.ndarray, s1: np.ndarray, tmp: np.ndarray) -> None:
    """xoroshiro128+'s step (numba.cuda.random's ``xoroshiro128p_next``) of every stream, in place on uint64 arrays
    (which wrap silently); ``tmp``, of their shape, is overwritten."""
    s1 ^= s0
    np.left_shift(s0, _R55, out=tmp)
    s0 >>= _R9
    s0 |= tmp  # rotl(s0, 55)
    s0 ^= s1
    np.left_shift(s1, _R14, out=tmp)
    s0 ^= tmp
    np.left_shift(s1, _R36, out=tmp)
    s1 >>= _R28
    s1 |= tmp  # rotl(s1, 36)


@cache
def keep_threshold(p: float) -> int:
    """The smallest 64-bit output ``r`` whose uniform float32 draw ``float32((r >> 11) * 2**-53)`` is ``>= p``
    (``p`` as float32, which is what a kernel compares with). Rounding to float32 never decreases, so a draw
    is ``>= p`` exactly when its ``r`` is ``>=`` this: a dropout mask needs no floats. ``p`` in [0, 1)."""
    p32 = np.float32(p)
    lo, hi = 0, 1 << 53  # the smallest m = r >> 11 in [0, 2**53) with float32(m * 2**-53) >= p32
    while lo < hi:
        mid = (lo + hi) // 2
        if np.float32(mid * _F53) >= p32:
            hi = mid
        else:
            lo = mid + 1
    if lo >= 1 << 53:
        raise ValueError(f"keep_threshold: p must be below 1 as float32, got {p!r}")
    return lo << 11


def keep_mask(states: np.ndarray, n: int, p: float) -> np.ndarray:
    """bool (n,): element ``i`` is kept where its draw ``u >= p``, drawn as a dropout kernel with one thread per
    state draws it (``T = len(states)`` threads, a grid-stride loop: element ``i`` gets draw ``i // T`` of stream
    ``i % T``). ``states`` (``DTYPE``, NumPy) is advanced in place as the kernel leaves it: stream ``t`` by the
    ``ceil((n - t) / T)`` draws its thread made. Vectorised over the streams, in place, on uint64 (which wraps
    silently): 12 NumPy calls per round of ``T`` draws, ``ceil(n / T)`` rounds."""
    t = states.shape[0]
    rounds = -(-n // t)
    s0, s1 = states["s0"].astype(np.uint64), states["s1"].astype(np.uint64)  # copies, written back at the end
    keep = np.empty((rounds, t), dtype=bool)
    k, tmp = np.uint64(keep_threshold(p)), np.empty_like(s0)
    for r in range(rounds):
        m = min(t, n - r * t)  # the last round: only the first n - r*T threads still have an element
        a, b, w = (s0, s1, tmp) if m == t else (s0[:m], s1[:m], tmp[:m])  # views: updated in place
        np.add(a, b, out=w)  # the 64-bit output of this draw (the state before the step)
        np.greater_equal(w, k, out=keep[r, :m])
        _advance(a, b, w)
    states["s0"], states["s1"] = s0, s1
    return keep.reshape(-1)[:n]
