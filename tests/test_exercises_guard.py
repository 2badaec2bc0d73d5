"""Gpu mode's guard zones are as long as a kernel without a bounds guard can write past an array.

On a GPU nothing checks an index: a kernel that forgets ``if i < out.shape[0]:`` writes past its output, and the
check sees it only if the write lands in the zone it put after the array (:class:`OutOfBounds`). A write past the
zone lands in another array of CuPy's pool or off the allocation (an illegal address: every later launch of the
notebook fails). So the zone must cover every element such a kernel reaches with the launches the checks make: a
grid of whole blocks (up to 1024 threads along x or y) covering the array, in both orientations.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

import gpulab  # noqa: F401  (picks the mode before numba loads)
from gpulab.exercises.run import GUARD, GUARD_MAX, grid_for, guard_elements, swap

BLOCKS_1D = [(1,), (32,), (128,), (256,), (1000,), (1024,)]
BLOCKS_2D = [(16, 16), (32, 32), (32, 8), (8, 32), (1024, 1), (1, 1024), (64, 16)]
SHAPES_1D = [(0,), (1,), (7,), (255,), (1000,), (1025,), (4096,)]
SHAPES_2D = [(1, 1), (5, 7), (7, 5), (1, 300), (300, 1), (33, 65), (128, 10), (10, 128), (512, 512)]


def _last_reached(shape: tuple[int, ...], grid: tuple[int, ...], block: tuple[int, ...]) -> int:
    """The largest flat index an unguarded ``out[i, j]`` (``j, i = cuda.grid(2)``) or ``out[i]`` reaches."""
    extent = [g * b for g, b in zip(grid, block)]
    if len(shape) == 1:
        return extent[0] - 1
    cols = shape[1]
    return (extent[1] - 1) * cols + (extent[0] - 1)


@pytest.mark.parametrize("shape", SHAPES_1D)
def test_a_1d_zone_covers_every_thread_of_the_last_block(shape):
    size = int(np.prod(shape))
    for block in BLOCKS_1D:
        grid, _ = grid_for(shape, block)
        assert _last_reached(shape, grid, block) < size + guard_elements(shape), (shape, block)


@pytest.mark.parametrize("shape", SHAPES_2D)
def test_a_2d_zone_covers_both_orientations(shape):
    size = int(np.prod(shape))
    guard = guard_elements(shape)
    for block, swapped in itertools.product(BLOCKS_2D, (False, True)):
        grid, blk = grid_for(shape, block)
        if swapped:
            grid, blk = swap(grid, blk)
        reached = _last_reached(shape, grid, blk)
        assert reached < size + guard or guard == GUARD_MAX, (shape, block, swapped, reached, size, guard)


def test_the_zone_is_the_old_64_elements_at_least_and_bounded():
    assert guard_elements((1,)) >= GUARD and guard_elements((1,)) >= 1023  # a 1024-thread block on one element
    assert guard_elements((4096, 4096)) <= GUARD_MAX
    assert guard_elements((128, 8, 28, 28)) == GUARD_MAX  # a 4-D activation: the cap, 16 MB of float32
    # the old fixed zone was too short for a 256-thread block on 7 elements (lab 01's add at gpu sizes)
    grid, block = grid_for((7,), (256,))
    assert _last_reached((7,), grid, block) >= 7 + 64


def test_the_zone_is_checked_where_it_lies():
    """The zone is compared with its fill by its own array module (on a GPU one value comes back, not 16 MB)."""
    from gpulab.exercises.run import _guard_untouched

    nan_zone = np.full(2048, np.nan, np.float32)
    assert _guard_untouched(nan_zone, float("nan"))
    nan_zone[1500] = 0.0  # a thread past the end wrote a 0
    assert not _guard_untouched(nan_zone, float("nan"))
    ints = np.full(1023, -7, np.int32)
    assert _guard_untouched(ints, -7)
    ints[-1] = 3
    assert not _guard_untouched(ints, -7)
    assert not _guard_untouched(np.zeros(4, np.int32), float("nan"))  # an int zone cannot hold NaN: written
