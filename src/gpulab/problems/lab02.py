"""Lab 02 · memory: a coalesced copy, a quarter-turn rotation (a transpose with one index reversed: lesson 02's
naive transpose does not pass it), the same rotation through a shared-memory tile with both sides coalesced (the
challenge: lesson 02's tiled transpose, Exercise 4, is its starting point and does not pass it), and a host function
that feeds the GPU on streams (``PIPELINED_ADD``, in :mod:`gpulab.problems.lab02_streams`).

Every kernel check here carries a coalescing budget: 32-byte sectors per warp access of an array at most
twice the ideal. A correct kernel whose neighbouring threads touch addresses a row apart gets half
the points and says which array is uncoalesced.
"""

from __future__ import annotations

import numpy as np

from ..exercises import Budget, Problem, random_arrays
from ..kernels._launch import ceil_div
from ._common import launch_2d
from .lab02_streams import PIPELINED_ADD

__all__ = [
    "BLOCK_ROWS",
    "COPY2D",
    "COPY_BLOCK",
    "PIPELINED_ADD",
    "ROTATE",
    "ROTATE_TILED",
    "TILE",
    "TILE_PAD",
    "launch_tiles",
    "rotate_spec",
]

COPY_BLOCK = (32, 8)  # a warp is one run of 32 neighbouring elements of a row
TILE = 32  # the challenge: one block per TILE x TILE tile of a ...
BLOCK_ROWS = 8  # ... with TILE x BLOCK_ROWS threads, each moving TILE // BLOCK_ROWS rows of it
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


# What a learner may write in place of the rotation, each with the out it gives (the last two on a square a only);
# the transpose, which each exercise names with the lesson kernel it varies, comes first in ROTATE_MISTAKES.
_TURN_MISTAKES = {
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

ROTATE_MISTAKES = {
    "out is `a` transposed: that is lesson 02's transpose_naive, not the rotation this lab asks for. A quarter "
    "turn clockwise also reverses the order of the columns of out: row i of a becomes column M - 1 - i of out "
    "(M = a.shape[0]).": lambda a: a.T,
    **_TURN_MISTAKES,
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


def launch_tiles(a: np.ndarray, out: np.ndarray) -> tuple[tuple[int, int], tuple[int, int]]:
    """The challenge's launch: one block of ``TILE x BLOCK_ROWS`` threads per ``TILE x TILE`` tile of ``a``, x along
    its columns: ``(ceil(N / TILE), ceil(M / TILE))`` blocks for ``a`` of shape (M, N)."""
    return (ceil_div(a.shape[1], TILE), ceil_div(a.shape[0], TILE)), (TILE, BLOCK_ROWS)


def _rotate_one_row_per_thread(a: np.ndarray) -> list[np.ndarray]:
    """What a tiled rotation gives under :func:`launch_tiles` when each thread moves one element instead of
    ``TILE // BLOCK_ROWS`` rows: with ``cuda.grid(2)`` only the first ``BLOCK_ROWS`` rows per block of ``a`` are
    covered, with the tile's corner at ``TILE * blockIdx.y`` only rows 0-7 of each tile. Row i of ``a`` is column
    M - 1 - i of ``out``; unwritten: NaN (the harness's fill)."""
    rows = a.shape[0]
    grid_rows = np.arange(rows) < BLOCK_ROWS * ceil_div(rows, TILE)  # i = cuda.grid(2)[1] < 8 x the blocks along y
    tile_rows = np.arange(rows) % TILE < BLOCK_ROWS  # row0 + ty
    made = []
    for covered in (grid_rows, tile_rows):
        out = rotate_spec(a).astype(np.float32)
        out[:, ~covered[::-1]] = np.nan  # column M - 1 - i holds row i
        made.append(out)
    return made


ROTATE_TILED_MISTAKES = {
    "out is `a` transposed: that is lesson 02's transpose_tiled (its Exercise 4), where this "
    "lab's challenge starts, not the quarter turn it asks for. Follow one element: a[i, j] goes to out[j, M - 1 - i]. "
    "The tile still lands in rows TILE * bx onwards of out, but its rows of a fill the columns of out from "
    "M - 1 - TILE * by down, so lane tx, holding row TILE * by + tx of a, writes column M - 1 - (TILE * by + tx): "
    "neighbouring lanes, neighbouring addresses, backwards.": lambda a: a.T,
    **_TURN_MISTAKES,
    "columns of out were never written: each block has TILE x BLOCK_ROWS = 32 x 8 threads but moves a whole 32 x 32 "
    "tile, so each thread handles 4 rows of it, ty, ty + 8, ty + 16 and ty + 24 (`for r in range(ty, TILE, "
    "BLOCK_ROWS)`), from row cuda.blockIdx.y * TILE of a (one element per thread, with cuda.grid(2), covers a quarter "
    "of the rows).": _rotate_one_row_per_thread,
}

ROTATE_TILED = Problem(
    "lab02.rotate_tiled",
    spec=rotate_spec,
    inputs=lambda shape, rng: random_arrays(rng, shape),
    # M = 33: a last tile of one row of a, whose turn is column 0 of out; N = 37 and 40: partial tiles
    sizes=[(1, 1), (20, 37), (33, 40)],
    gpu_sizes=[(1, 1), (20, 37), (33, 40), (4096, 4100)],
    launch=launch_tiles,
    mistakes=ROTATE_TILED_MISTAKES,
    budget=Budget(sectors={"a": 2.0, "out": 2.0}, shared_bytes=TILE * TILE_PAD * 4),  # both sides coalesced, one tile
    ptx="void(float32[:, :], float32[:, :])",
    points=4,
)
