"""Lesson 05's last scan exercise: ``add_offsets_kernel(out, scanned_sums)``, the third launch of a whole-array
scan, collected with the other exercises. Reference answer: :func:`gpulab.kernels.scan.add_offsets_kernel`.

``out`` holds the block scans (each block of ``TPB`` = 128 elements scanned on its own) and ``scanned_sums`` the
inclusive scan of the block totals; the kernel adds, in place, to every element of block ``b > 0`` the total of
the blocks before it, ``scanned_sums[b - 1]``. It is launched with one thread per element of ``out``. The check
copies the input into the output first (``args=``, as lab 10's in-place kernels), so the learner's kernel
updates ``out`` as the lesson's scan does. The known mistakes get named hints: adding ``scanned_sums[b]`` (one
block too far), block 0 adding ``scanned_sums[-1]`` (Python's last element, the total of every block), and
storing the offset instead of adding it.
"""

from __future__ import annotations

import numpy as np

from ..exercises import Problem
from ..kernels import blocks_for
from ..kernels import scan as _scan
from ..problems import launch_1d
from .exercise import Exercise

__all__ = ["EXERCISES_LIST", "add_offsets_inputs", "add_offsets_spec"]

TPB = _scan.TPB  # 128: the block size of the lesson's scan_block_kernel


def _before(scanned_sums: np.ndarray, n: int) -> np.ndarray:
    """Per element of an ``n``-element array, the total of the blocks before its block (0 in block 0)."""
    return np.concatenate([[0], scanned_sums[:-1]]).astype(np.float32).repeat(TPB)[:n]


def add_offsets_spec(out: np.ndarray, scanned_sums: np.ndarray) -> np.ndarray:
    """``out`` with ``scanned_sums[b - 1]`` added to every element of block ``b > 0``."""
    return (out + _before(scanned_sums, out.size)).astype(np.float32)


def add_offsets_inputs(n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Block scans of ``n`` random values in [0, 1) and the inclusive scan of their block totals: what the first
    two launches of the lesson's scan hand the third."""
    x = rng.random(n, dtype=np.float32)
    blocks = blocks_for(n, TPB)
    padded = np.zeros(blocks * TPB, np.float32)
    padded[:n] = x
    per_block = padded.reshape(blocks, TPB).cumsum(axis=1, dtype=np.float32)
    return per_block.reshape(-1)[:n].copy(), per_block[:, -1].cumsum(dtype=np.float32)


def _in_place(ins: tuple, outs: tuple) -> tuple:
    outs[0][...] = ins[0]  # the kernel adds into the block scans in place: the output starts as them
    return outs[0], ins[1]


def _one_block_too_far(out: np.ndarray, scanned_sums: np.ndarray) -> np.ndarray:
    return (out + scanned_sums.astype(np.float32).repeat(TPB)[: out.size]).astype(np.float32)


def _block_0_adds_the_last(out: np.ndarray, scanned_sums: np.ndarray) -> np.ndarray:
    made = add_offsets_spec(out, scanned_sums)
    made[: min(TPB, out.size)] += scanned_sums[-1]
    return made


def _stored_not_added(out: np.ndarray, scanned_sums: np.ndarray) -> np.ndarray:
    made = _before(scanned_sums, out.size).copy()
    made[: min(TPB, out.size)] = out[: min(TPB, out.size)]
    return made


ADD_OFFSETS_MISTAKES = {
    "every block added one block too much: block b added scanned_sums[b], the total up to and including itself. "
    "Its elements already hold their own block's part (the block scan): add the total of the blocks before it, "
    "scanned_sums[b - 1].": _one_block_too_far,
    "block 0 was changed: it added scanned_sums[-1], which Python (and Numba) read as the last element, the total "
    "of every block. No block comes before block 0, so it adds nothing: guard with `if b > 0`.": (
        _block_0_adds_the_last
    ),
    "the elements of blocks 1 and up hold only the offset: `out[i] = ...` replaced the block scan. Add the offset "
    "to what the block scan left, with `+=`.": _stored_not_added,
}

EXERCISES_LIST = [
    Exercise(
        "05",
        "add_offsets",
        Problem(
            "add_offsets_kernel",
            add_offsets_spec,
            add_offsets_inputs,
            # 300 first: at 1 or 100 (block 0 only, one block total) scanned_sums[b] and scanned_sums[-1] are the
            # same element, and the two mistakes could not be told apart; 700: six blocks, the last one partial
            sizes=[300, 1, 100, 700],
            launch=launch_1d(TPB, arg=0),
            args=_in_place,
            ptx="auto",
            out_names=["out"],
            rtol=0,
            atol=0,  # one float32 addition per element, the same in any order
            mistakes=ADD_OFFSETS_MISTAKES,
        ),
        _scan.add_offsets_kernel,
    )
]
