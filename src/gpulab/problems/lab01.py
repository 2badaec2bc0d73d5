"""Lab 01 · threads, blocks and grids: vector add, a 2-D map, a grid-stride loop, a 3-point stencil, and a 3 x 3
blur through a device function (:mod:`.lab01_blur`, re-exported here)."""

from __future__ import annotations

import numpy as np

from ..exercises import Problem, random_arrays
from ._common import launch_2d
from .lab01_blur import BLUR3, BLUR_BLOCK, BLUR_HINTS, blur3_spec, diagnose_at_clamped

__all__ = [
    "ADD",
    "AFFINE",
    "AFFINE_BLOCK",
    "BLUR3",
    "BLUR_BLOCK",
    "BLUR_HINTS",
    "SAXPY",
    "STENCIL3",
    "STENCIL_WRAP_HINT",
    "blur3_spec",
    "diagnose_at_clamped",
    "stencil3_spec",
    "stencil3_wraps",
]

AFFINE_BLOCK = (16, 8)  # x: columns, y: rows


def stencil3_spec(x: np.ndarray) -> np.ndarray:
    """``out[i] = x[i-1] + x[i] + x[i+1]`` with 0 outside the array."""
    padded = np.concatenate([[0], x, [0]]).astype(np.float32)
    return (padded[:-2] + padded[1:-1] + padded[2:]).astype(np.float32)


def stencil3_wraps(x: np.ndarray) -> np.ndarray:
    """The stencil with ``x[i - 1]`` unguarded at i = 0: Python, the simulator and numba on a GPU all read
    ``x[-1]``, the last element (numba wraps a negative index as Python does)."""
    right = np.concatenate([x[1:], [0]]).astype(np.float32)
    return (np.roll(x, 1) + x + right).astype(np.float32)


STENCIL_WRAP_HINT = (
    "out[0] used the LAST element of x as its left neighbour: at i = 0, x[i - 1] is x[-1], which counts from "
    "the end of the array, in Python and in numba on a GPU alike (numba wraps a negative index). Take "
    "0 there: `x[i - 1] if i > 0 else 0.0`."
)


ADD = Problem(
    "lab01.add",
    ptx="auto",  # a GPU must accept it: compiled for the types of the first case's arguments
    spec=lambda a, b: a + b,
    inputs=lambda n, rng: random_arrays(rng, n, n),
    sizes=[0, 1, 7, 100, 300],
    gpu_sizes=[0, 1, 7, 1000, 1 << 20],
    threads=[128, 32, 256],  # any block size must work
    points=2,
)

AFFINE = Problem(
    "lab01.affine",
    ptx="auto",  # a GPU must accept it: compiled for the types of the first case's arguments
    spec=lambda A, alpha, beta: (alpha * A + beta).astype(np.float32),
    inputs=lambda shape, rng: (random_arrays(rng, shape)[0], np.float32(2.5), np.float32(-1.0)),
    sizes=[(1, 1), (5, 5), (17, 9), (9, 33)],
    gpu_sizes=[(1, 1), (17, 9), (2000, 3000)],
    launch=launch_2d(AFFINE_BLOCK),  # grid (ceil(cols / 16), ceil(rows / 8)): x along the columns
    points=2,
)

SAXPY = Problem(
    "lab01.saxpy",
    ptx="auto",  # a GPU must accept it: compiled for the types of the first case's arguments
    spec=lambda alpha, x, y: (alpha * x + y).astype(np.float32),
    inputs=lambda n, rng: (np.float32(3.0), *random_arrays(rng, n, n)),
    sizes=[0, 1, 50, 64, 200, 1000],
    gpu_sizes=[0, 1, 50, 64, 200, 1000, 1 << 20],
    launch=lambda alpha, x, y, out: (2, 32),  # a fixed grid: 64 threads for any n
    points=2,
)

STENCIL3 = Problem(
    "lab01.stencil3",
    spec=stencil3_spec,
    inputs=lambda n, rng: random_arrays(rng, n),
    sizes=[1, 2, 7, 130],
    gpu_sizes=[1, 2, 7, 130, 1 << 20],
    threads=[64, 32],
    mistakes={STENCIL_WRAP_HINT: stencil3_wraps},
    ptx="void(float32[:], float32[:])",  # a GPU must accept it, not only the simulator
    points=3,
)
