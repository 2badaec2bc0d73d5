"""Lab 04 · shared memory: block reverse, a tiled matmul, a stencil with a halo.

The tiled matmul's budget: no element of A read from global memory more than ``ceil(N / TILE)`` times
(B: ``ceil(M / TILE)``), shared memory for two tiles, padded ones included (``TILE x (TILE + 1)``),
and coalesced loads: ``threadIdx.x`` walks the contiguous axis of both A's and B's tile.
"""

from __future__ import annotations

import numpy as np

from ..exercises import Budget, Problem, random_arrays
from ..kernels._launch import ceil_div
from ._common import launch_2d
from .lab01 import STENCIL_WRAP_HINT, stencil3_spec, stencil3_wraps
from .lab03 import matmul_inputs

__all__ = ["BLOCK_REVERSE", "HALO_LEN", "MATMUL_TILED", "STENCIL_SHARED", "TILE", "TPB", "block_reverse_spec"]

TPB = 32  # threads per block for the 1-D exercises
TILE = 16  # tile width for matmul: a warp is two rows of 16 neighbouring threads (32 or 16 on a GPU)
HALO_LEN = TPB + 2  # a block's elements plus one halo element on each side


def block_reverse_spec(x: np.ndarray) -> np.ndarray:
    """Each chunk of TPB elements reversed in place (the last chunk may be shorter)."""
    chunks = [x[s : s + TPB][::-1] for s in range(0, x.size, TPB)]
    return np.concatenate(chunks) if chunks else x.copy()


def stencil_no_halo(x: np.ndarray, *, keep_left: bool = False, keep_right: bool = False) -> np.ndarray:
    """The stencil with the halo of every block of TPB threads left at 0 (on the sides not kept): what a kernel
    computes that never loads the neighbours from the next block into shared memory."""
    left = np.concatenate([[0], x[:-1]]).astype(np.float32)
    right = np.concatenate([x[1:], [0]]).astype(np.float32)
    pos = np.arange(x.size) % TPB
    if not keep_left:
        left[pos == 0] = 0
    if not keep_right:
        right[(pos == TPB - 1) | (np.arange(x.size) == x.size - 1)] = 0
    return (left + x + right).astype(np.float32)


BLOCK_REVERSE = Problem(
    "lab04.block_reverse",
    ptx="auto",  # a GPU must accept it: compiled for the types of the first case's arguments
    spec=block_reverse_spec,
    inputs=lambda n, rng: random_arrays(rng, n),
    sizes=[1, 32, 45, 100],
    gpu_sizes=[1, 32, 45, 100, 1 << 20],
    threads=TPB,
    mistakes={
        "out is x reversed as a whole: reverse each block's chunk of TPB = 32 elements in place, out[i] = the "
        "element at the mirrored position within the same block.": lambda x: x[::-1].copy(),
    },
    budget=Budget(reads_per_element={"x": 1}, shared_bytes=TPB * 4, sectors={"x": 2.0, "out": 2.0}),
    points=2,
)

MATMUL_TILED = Problem(
    "lab04.matmul_tiled",
    spec=lambda A, B: A @ B,
    inputs=matmul_inputs,
    sizes=[(1, 1, 1), (8, 8, 8), (13, 10, 7), (16, 20, 24)],
    gpu_sizes=[(1, 1, 1), (8, 8, 8), (13, 10, 7), (2048, 1024, 1536)],
    launch=launch_2d((TILE, TILE)),  # grid (ceil(N / TILE), ceil(M / TILE)) over C
    reduction=lambda A, B: A.shape[1],
    budget=Budget(
        reads_per_element={"A": lambda s: ceil_div(s[2], TILE), "B": lambda s: ceil_div(s[0], TILE)},
        shared_bytes=2 * TILE * (TILE + 1) * 4,  # two tiles, padded or not
        sectors={"A": 2.0, "B": 2.0, "C": 2.0},
    ),
    ptx="void(float32[:, :], float32[:, :], float32[:, :])",
    points=4,
)

STENCIL_SHARED = Problem(
    "lab04.stencil_shared",
    spec=stencil3_spec,
    inputs=lambda n, rng: random_arrays(rng, n),
    sizes=[1, 2, 31, 70],
    gpu_sizes=[1, 2, 31, 70, 1 << 20],
    threads=TPB,
    mistakes={
        STENCIL_WRAP_HINT: stencil3_wraps,
        "wrong only where a block of 32 threads begins and ends: the halo is missing. Thread 0 must also load "
        "x[i - 1] into the shared array's first slot, and the block's last thread x[i + 1] into the slot after "
        "its own (0.0 outside the array).": stencil_no_halo,
        "wrong only at the last element of a block of 32 threads: the right halo is missing (the block's last "
        "thread must also load x[i + 1], 0.0 past the end).": lambda x: stencil_no_halo(x, keep_left=True),
        "wrong only at the first element of a block of 32 threads: the left halo is missing (thread 0 must also "
        "load x[i - 1], 0.0 before the start).": lambda x: stencil_no_halo(x, keep_right=True),
    },
    budget=Budget(reads_per_element={"x": 2}),
    ptx="void(float32[:], float32[:])",
    points=3,
)
