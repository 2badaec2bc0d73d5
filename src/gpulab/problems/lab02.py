"""Lab 02 · memory: a coalesced copy, a naive transpose, a transpose through a shared-memory tile, and a host
function that feeds the GPU on streams (``PIPELINED_ADD``, in :mod:`gpulab.problems.lab02_streams`).

Every kernel check here carries a coalescing budget: 32-byte sectors per warp access of an array at most
twice the ideal. A correct kernel whose neighbouring threads touch addresses a row apart gets half
the points and says which array is uncoalesced.
"""

from __future__ import annotations

import numpy as np

from ..exercises import Budget, Problem, random_arrays
from ._common import launch_2d
from .lab02_streams import PIPELINED_ADD

__all__ = ["COPY2D", "COPY_BLOCK", "PIPELINED_ADD", "TILE", "TILE_PAD", "TRANSPOSE", "TRANSPOSE_TILED"]

COPY_BLOCK = (32, 8)  # a warp is one run of 32 neighbouring elements of a row
TILE = 16
TILE_PAD = TILE + 1  # padded row length of the shared tile

COPY2D = Problem(
    "lab02.copy2d",
    spec=lambda a: a.copy(),
    inputs=lambda shape, rng: random_arrays(rng, shape),
    sizes=[(1, 1), (5, 40), (33, 70)],
    gpu_sizes=[(1, 1), (33, 70), (4096, 4100)],
    launch=launch_2d(COPY_BLOCK, arg=0),  # over a: x along its columns, y along its rows
    budget=Budget(sectors={"a": 2.0, "out": 2.0}),
    points=2,
)

TRANSPOSE = Problem(
    "lab02.transpose",
    spec=lambda a: np.ascontiguousarray(a.T),
    inputs=lambda shape, rng: random_arrays(rng, shape),
    sizes=[(1, 1), (4, 4), (7, 12), (33, 20)],
    gpu_sizes=[(1, 1), (4, 4), (7, 12), (4096, 4100)],
    launch=launch_2d(COPY_BLOCK, arg=0),
    mistakes={"out equals a: the kernel copied instead of transposing (write out[j, i], not out[i, j]).": lambda a: a},
    budget=Budget(sectors={"a": 2.0}),  # reads coalesced; the writes cannot be too (the challenge fixes that)
    points=2,
)

TRANSPOSE_TILED = Problem(
    "lab02.transpose_tiled",
    spec=lambda a: np.ascontiguousarray(a.T),
    inputs=lambda shape, rng: random_arrays(rng, shape),
    sizes=[(1, 1), (16, 16), (20, 37)],
    gpu_sizes=[(1, 1), (16, 16), (20, 37), (4096, 4100)],
    launch=launch_2d((TILE, TILE), arg=0),
    budget=Budget(sectors={"a": 2.0, "out": 2.0}, shared_bytes=TILE * TILE_PAD * 4),
    ptx="void(float32[:, :], float32[:, :])",
    points=4,
)
