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
from .lab01 import stencil3_spec
from .lab03 import matmul_inputs

__all__ = ["BLOCK_REVERSE", "HALO_LEN", "MATMUL_TILED", "STENCIL_SHARED", "TILE", "TPB", "block_reverse_spec"]

TPB = 32  # threads per block for the 1-D exercises
TILE = 16  # tile width for matmul: a warp is two rows of 16 neighbouring threads (32 or 16 on a GPU)
HALO_LEN = TPB + 2  # a block's elements plus one halo element on each side


def block_reverse_spec(x: np.ndarray) -> np.ndarray:
    """Each chunk of TPB elements reversed in place (the last chunk may be shorter)."""
    chunks = [x[s : s + TPB][::-1] for s in range(0, x.size, TPB)]
    return np.concatenate(chunks) if chunks else x.copy()


BLOCK_REVERSE = Problem(
    "lab04.block_reverse",
    spec=block_reverse_spec,
    inputs=lambda n, rng: random_arrays(rng, n),
    sizes=[1, 32, 45, 100],
    gpu_sizes=[1, 32, 45, 100, 1 << 20],
    threads=TPB,
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
    budget=Budget(reads_per_element={"x": 2}),
    ptx="void(float32[:], float32[:])",
    points=3,
)
