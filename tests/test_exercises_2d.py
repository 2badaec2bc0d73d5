"""Harness on 2-D map exercises: the index convention (x along the last axis), the other orientation
recognised but not passed (half the points, the fix named), and the usual 2-D mistakes named."""

from __future__ import annotations

import numpy as np
from numba import cuda

from gpulab.exercises import Budget, check_kernel, random_arrays
from gpulab.exercises.run import grid_for

SIZES = [(1, 1), (5, 9), (17, 6), (8, 8)]


def check_scale(kernel, sizes=SIZES, **kw):
    opts = dict(
        spec=lambda a: 2 * a, inputs=lambda s, rng: random_arrays(rng, s), sizes=sizes, threads=[(4, 4), (8, 2)]
    )
    opts.update(kw)
    return check_kernel(kernel, **opts)


@cuda.jit
def scale_cols(a, out):
    j, i = cuda.grid(2)  # x -> column
    if i < out.shape[0] and j < out.shape[1]:
        out[i, j] = 2 * a[i, j]


@cuda.jit
def scale_rows(a, out):
    i, j = cuda.grid(2)  # x -> row: the other orientation, still correct when launched for it
    if i < out.shape[0] and j < out.shape[1]:
        out[i, j] = 2 * a[i, j]


@cuda.jit
def scale_swapped_guard(a, out):
    j, i = cuda.grid(2)
    if i < out.shape[1] and j < out.shape[0]:  # guards the wrong dimensions
        out[i, j] = 2 * a[i, j]


@cuda.jit
def scale_reads_transposed(a, out):
    j, i = cuda.grid(2)
    if i < out.shape[0] and j < out.shape[1]:
        out[i, j] = 2 * a[j, i]


@cuda.jit
def scale_half_guard(a, out):
    j, i = cuda.grid(2)
    if i < out.shape[0]:  # no guard on j
        out[i, j] = 2 * a[i, j]


@cuda.jit
def scale_first_row_only(a, out):
    j, i = cuda.grid(2)
    if i < 1 and j < out.shape[1]:
        out[i, j] = 2 * a[i, j]


def test_grid_maps_x_to_the_last_axis():
    assert grid_for((5, 9), (4, 4)) == ((3, 2), (4, 4))  # (ceil(cols / bx), ceil(rows / by))
    assert grid_for((17, 6), (8, 2)) == ((1, 9), (8, 2))
    assert grid_for((100,), (32,)) == ((4,), (32,))
    assert grid_for((3, 50), (64,)) == ((3,), (64,))  # a 1-D block over a 2-D output: every element


def test_course_convention_passes_without_a_note():
    res = check_scale(scale_cols)
    assert res.passed and "exchanged" not in res.message, res


def test_other_orientation_is_recognised_but_not_passed():
    """Right only launched with x and y exchanged: every later launch puts x along the columns, so it is not a
    pass (or_reference would hand it to cells where it is wrong); half the points, the verdict says why and the fix."""
    res = check_scale(scale_rows)
    assert not res.passed and res.status == "failed" and res.score == 0.5, res
    assert res.details["orientation"] == "exchanged", res
    assert res.message.startswith("correct on all 4 inputs, but orientation: only when launched with x and y exchanged")
    assert "Launched the course's way, x along the columns" in res.message and "it is wrong: out[" in res.message
    assert "write `j, i = cuda.grid(2)`" in res.hint, res
    assert [c.name for c in res.checks if not c.passed] == ["orientation"], res


def test_other_orientation_with_a_launch_function():
    launch = lambda a, out: (((out.shape[1] + 3) // 4, (out.shape[0] + 3) // 4), (4, 4))  # noqa: E731
    assert check_scale(scale_cols, threads=None, launch=launch).passed
    res = check_scale(scale_rows, threads=None, launch=launch)
    assert not res.passed and res.score == 0.5 and "x and y exchanged" in res.message, res


def test_guard_on_the_wrong_dimensions_is_right_only_on_square_inputs():
    res = check_scale(scale_swapped_guard, sizes=[(5, 9)])
    assert not res.passed
    assert "correct on square inputs (size (5, 5)), wrong on non-square" in res.hint, res


def test_input_read_transposed_is_named():
    # for a map, reading a transposed and writing out transposed are the same result
    res = check_scale(scale_reads_transposed, sizes=[(6, 6)])
    assert not res.passed and "row and column are swapped" in res.hint, res
    nonsquare = check_scale(scale_reads_transposed, sizes=[(5, 9)])
    assert not nonsquare.passed and "On square inputs (size (5, 5))" in nonsquare.hint, nonsquare
    assert "row and column are swapped" in nonsquare.hint


def test_output_transposed_on_a_square_input():
    @cuda.jit
    def copy_swapped(a, out):
        j, i = cuda.grid(2)
        if i < out.shape[0] and j < out.shape[1]:
            out[j, i] = a[i, j]

    res = check_kernel(
        copy_swapped,
        spec=lambda a: a.copy(),
        inputs=lambda s, rng: random_arrays(rng, s),
        sizes=[(6, 6)],
        threads=(4, 4),
    )
    assert not res.passed and "row and column are swapped" in res.hint


def test_missing_guard_on_one_axis():
    res = check_scale(scale_half_guard, sizes=[(5, 9)])
    assert not res.passed and "missing bounds guard" in res.hint
    assert "launch: scale_half_guard[" in res.message


def test_rows_never_written():
    res = check_scale(scale_first_row_only, sizes=[(5, 9)])
    assert not res.passed and "36 elements of out were never written (first: (1, 0))" in res.hint, res


def test_exercise_specific_mistake_hint():
    @cuda.jit
    def transpose_copies(a, out):
        j, i = cuda.grid(2)
        if i < out.shape[0] and j < out.shape[1]:
            out[i, j] = a[i, j]

    res = check_kernel(
        transpose_copies,
        spec=lambda a: np.ascontiguousarray(a.T),
        inputs=lambda s, rng: random_arrays(rng, s),
        sizes=[(5, 5)],
        threads=(4, 4),
        mistakes={"copied instead of transposing": lambda a: a},
    )
    assert res.hint == "copied instead of transposing"


@cuda.jit
def copy_x_along_rows(a, out):
    i, j = cuda.grid(2)  # x -> row: neighbouring threads are a whole row apart
    if i < a.shape[0] and j < a.shape[1]:
        out[i, j] = a[i, j]


@cuda.jit
def copy_x_along_cols(a, out):
    j, i = cuda.grid(2)  # x -> column
    if i < a.shape[0] and j < a.shape[1]:
        out[i, j] = a[i, j]


def test_coalescing_budget_with_a_fixed_launch():
    common = dict(
        spec=lambda a: a.copy(),
        inputs=lambda s, rng: random_arrays(rng, s),
        sizes=[(40, 40)],
        budget=Budget(sectors={"a": 2.0, "out": 2.0}),
        points=2,
    )
    good = check_kernel(copy_x_along_cols, launch=lambda a, out: ((2, 5), (32, 8)), **common)
    assert good.passed, good
    bad = check_kernel(copy_x_along_rows, launch=lambda a, out: ((2, 5), (32, 8)), **common)
    assert bad.status == "over budget" and bad.score == 1
    # 40 rows: full warps use 32 sectors (ideal 4), the 8 lanes past row 32 use 8 (ideal 1); 20 / 2.5 on average
    assert (
        "coalescing of a: uncoalesced: reads of a use 20.0 sectors per warp request, ideal 2.5 (8x the memory traffic)"
    ) in bad.message
    assert "threadIdx.x" in bad.hint


def test_one_dimensional_launch_functions_are_not_swapped():
    @cuda.jit
    def add_stride_one_block(a, b, out):
        for i in range(cuda.threadIdx.x, out.shape[0], cuda.blockDim.x):
            out[i] = a[i] + b[i] + 1  # wrong on purpose

    res = check_kernel(
        add_stride_one_block,
        spec=lambda a, b: a + b,
        inputs=lambda n, rng: random_arrays(rng, n, n),
        sizes=[40],
        launch=lambda a, b, out: (1, 32),
    )
    assert not res.passed and "exchanged" not in res.message + res.hint
