"""Lab 02 · memory: a coalesced copy, a quarter-turn rotation (a transpose with one index reversed: lesson 02's
naive transpose does not pass it), a transpose through a shared-memory tile, and a host function that feeds the
GPU on streams (``PIPELINED_ADD``, in :mod:`gpulab.problems.lab02_streams`).

Every kernel check here carries a coalescing budget: 32-byte sectors per warp access of an array at most
twice the ideal. A correct kernel whose neighbouring threads touch addresses a row apart gets half
the points and says which array is uncoalesced.
"""

from __future__ import annotations

import numpy as np

from ..exercises import Budget, Problem, random_arrays
from ._common import launch_2d
from .lab02_streams import PIPELINED_ADD

__all__ = ["COPY2D", "COPY_BLOCK", "PIPELINED_ADD", "ROTATE", "TILE", "TILE_PAD", "TRANSPOSE_TILED", "rotate_spec"]

COPY_BLOCK = (32, 8)  # a warp is one run of 32 neighbouring elements of a row
TILE = 16
TILE_PAD = TILE + 1  # padded row length of the shared tile

COPY2D = Problem(
    "lab02.copy2d",
    ptx="auto",  # a GPU must accept it: compiled for the types of the first case's arguments
    spec=lambda a: a.copy(),
    inputs=lambda shape, rng: random_arrays(rng, shape),
    sizes=[(1, 1), (5, 40), (33, 70)],
    gpu_sizes=[(1, 1), (33, 70), (4096, 4100)],
    launch=launch_2d(COPY_BLOCK, arg=0),  # over a: x along its columns, y along its rows
    budget=Budget(sectors={"a": 2.0, "out": 2.0}),
    points=2,
)


def rotate_spec(a: np.ndarray) -> np.ndarray:
    """``a`` turned a quarter turn clockwise, ``np.rot90(a, k=-1)``: ``out[j, M - 1 - i] = a[i, j]`` for ``a`` of
    shape (M, N) and ``out`` of shape (N, M). Row i of ``a`` becomes column M - 1 - i of ``out``."""
    return np.ascontiguousarray(np.rot90(a, k=-1))


# What a learner may write in place of the rotation, each with the out it gives (the last two on a square a only).
ROTATE_MISTAKES = {
    "out is `a` transposed: that is lesson 02's transpose_naive, not the rotation this lab asks for. A quarter "
    "turn clockwise also reverses the order of the columns of out: row i of a becomes column M - 1 - i of out "
    "(M = a.shape[0]).": lambda a: a.T,
    "out is `a` turned counterclockwise (np.rot90(a)): the lab asks for clockwise, np.rot90(a, k=-1). Reverse the "
    "column index of out, not its row index, so that a's first row becomes out's last column.": lambda a: np.rot90(a),
    "out is `a` transposed across the other diagonal: both indices of out were reversed. Reverse only its column "
    "index: row i of a becomes column M - 1 - i of out (M = a.shape[0]).": lambda a: a[::-1, ::-1].T,
    "out is `a` mirrored left to right: that flips `a`, it does not turn it. A quarter turn also exchanges rows and "
    "columns: column j of a becomes row j of out, and row i of a becomes column M - 1 - i (M = a.shape[0]).": (
        lambda a: a[:, ::-1]
    ),
    "out equals a: the kernel copied instead of rotating (write out[j, M - 1 - i], not out[i, j]).": lambda a: a,
}

ROTATE = Problem(
    "lab02.rotate",
    ptx="auto",  # a GPU must accept it: compiled for the types of the first case's arguments
    spec=rotate_spec,
    inputs=lambda shape, rng: random_arrays(rng, shape),
    sizes=[(1, 1), (4, 4), (7, 12), (33, 20)],
    gpu_sizes=[(1, 1), (4, 4), (7, 12), (4096, 4100)],
    launch=launch_2d(COPY_BLOCK, arg=0),  # over a: x along its columns, so lanes read along a row
    mistakes=ROTATE_MISTAKES,
    # reads coalesced; the writes go down a column of out, as a transpose's do (the challenge's tile fixes that)
    budget=Budget(sectors={"a": 2.0}),
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
