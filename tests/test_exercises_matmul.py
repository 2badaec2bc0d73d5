"""Harness on matmul exercises: naive and tiled, each usual mistake named; coalescing and shared budgets. In gpu mode
the kernels run on the GPU; verdicts that need the simulator (IndexError, race and barrier detection, access counts)
skip there."""

from __future__ import annotations

import math
import re

import pytest
from numba import cuda, float32

import gpulab
from gpulab.exercises import Budget, check_kernel, random_arrays, tile_bytes

TILE = 8
TILE_PAD = TILE + 1  # a constant: NVVM rejects `(TILE, TILE + 1)` as a shared-array shape (the PTX check finds it)
SIZES = [(1, 1, 1), (13, 10, 7), (16, 9, 16)]


def inputs(s, rng):
    m, k, n = s
    return random_arrays(rng, (m, k), (k, n))


def check(kernel, sizes=SIZES, **kw):
    opts = dict(
        spec=lambda A, B: A @ B, inputs=inputs, sizes=sizes, threads=(TILE, TILE), reduction=lambda A, B: A.shape[1]
    )
    opts.update(kw)
    return check_kernel(kernel, **opts)


# --- naive ----------------------------------------------------------------------------------------


@cuda.jit
def mm_naive(A, B, C):
    j, i = cuda.grid(2)  # x -> column (the course's convention)
    if i < C.shape[0] and j < C.shape[1]:
        acc = float32(0.0)
        for k in range(A.shape[1]):
            acc += A[i, k] * B[k, j]
        C[i, j] = acc


@cuda.jit
def mm_naive_rows(A, B, C):
    i, j = cuda.grid(2)  # x -> row: correct, but for the other launch orientation
    if i < C.shape[0] and j < C.shape[1]:
        acc = float32(0.0)
        for k in range(A.shape[1]):
            acc += A[i, k] * B[k, j]
        C[i, j] = acc


@cuda.jit
def mm_b_transposed(A, B, C):
    j, i = cuda.grid(2)
    if i < C.shape[0] and j < C.shape[1]:
        acc = float32(0.0)
        for k in range(A.shape[1]):
            acc += A[i, k] * B[j, k]  # B's indices swapped: computes A @ B.T
        C[i, j] = acc


@cuda.jit
def mm_wrong_dim(A, B, C):
    j, i = cuda.grid(2)
    if i < C.shape[0] and j < C.shape[1]:
        acc = float32(0.0)
        for k in range(A.shape[0]):  # should be A.shape[1]
            acc += A[i, k] * B[k, j]
        C[i, j] = acc


@cuda.jit
def mm_c_transposed(A, B, C):
    j, i = cuda.grid(2)
    if i < C.shape[0] and j < C.shape[1]:
        acc = float32(0.0)
        for k in range(A.shape[1]):
            acc += A[i, k] * B[k, j]
        flat = j * C.shape[0] + i  # stored column-major: C holds (A @ B).T in row-major order
        C[flat // C.shape[1], flat % C.shape[1]] = acc


@cuda.jit
def mm_no_guard(A, B, C):
    j, i = cuda.grid(2)
    acc = float32(0.0)
    for k in range(A.shape[1]):
        acc += A[i, k] * B[k, j]
    C[i, j] = acc


def test_naive_matmul_passes_in_the_course_convention():
    res = check(mm_naive)
    assert res.passed, res
    assert "x and y exchanged" not in res.message


def test_the_other_orientation_is_not_passed_and_the_verdict_says_why():
    res = check(mm_naive_rows)
    assert not res.passed and res.status == "failed" and res.score == 0.5, res
    assert "but orientation: only when launched with x and y exchanged" in res.message, res
    assert "it is wrong: C[" in res.message and "j, i = cuda.grid(2)" in res.hint, res


@pytest.mark.skipif(
    gpulab.is_gpu(),
    reason="the verdict comes from the simulator's IndexError on a read past the end of B; a GPU reads whatever "
    "lies there",
)
def test_b_read_transposed_is_named_with_the_kernels_parameter_name():
    res = check(mm_b_transposed)
    assert not res.passed
    assert "B transposed" in res.hint and "B[j, k] for B[k, j]" in res.hint
    assert "bounds guard is not the fix" not in res.hint or "B transposed" in res.hint
    assert "line" in res.message and "B[j, k]" in res.message  # the failing source line is quoted


def test_b_read_transposed_on_square_inputs_only():
    res = check(mm_b_transposed, sizes=[(6, 6, 6)])
    assert not res.passed and "B transposed" in res.hint


@pytest.mark.skipif(
    gpulab.is_gpu(),
    reason="the verdict comes from the simulator's IndexError on a read past the end of A's rows; a GPU reads whatever "
    "lies there",
)
def test_right_only_on_square_sizes():
    res = check(mm_wrong_dim)
    assert not res.passed
    assert "correct on square inputs" in res.hint and "wrong on non-square" in res.hint
    assert "an index uses the wrong dimension" in res.hint
    assert "missing bounds guard" not in res.hint


def test_output_written_transposed_on_non_square():
    res = check(mm_c_transposed)
    assert not res.passed
    assert "C holds the expected result transposed" in res.hint
    assert re.search(r"C\[\d+, \d+\]: expected", res.message)  # C, the kernel's name, not 'out'


def test_missing_guard_names_the_launch_that_failed():
    res = check(mm_no_guard, sizes=[(13, 10, 7)])
    assert not res.passed and "missing bounds guard" in res.hint
    assert "launch: mm_no_guard[(1, 2), (8, 8)]" in res.message  # size (13, 10, 7): 1 x 2 blocks, x along N


# --- tiled ----------------------------------------------------------------------------------------


@cuda.jit
def mm_tiled(A, B, C):
    sA = cuda.shared.array((TILE, TILE_PAD), float32)  # padded against bank conflicts
    sB = cuda.shared.array((TILE, TILE_PAD), float32)
    tx = cuda.threadIdx.x
    ty = cuda.threadIdx.y
    j, i = cuda.grid(2)
    acc = float32(0.0)
    for t in range((A.shape[1] + TILE - 1) // TILE):
        k = t * TILE
        sA[ty, tx] = A[i, k + tx] if i < A.shape[0] and k + tx < A.shape[1] else float32(0.0)
        sB[ty, tx] = B[k + ty, j] if k + ty < B.shape[0] and j < B.shape[1] else float32(0.0)
        cuda.syncthreads()  # wait until both tiles are loaded
        for kk in range(TILE):
            acc += sA[ty, kk] * sB[kk, tx]
        cuda.syncthreads()  # wait until every thread used the tiles before they are overwritten
    if i < C.shape[0] and j < C.shape[1]:
        C[i, j] = acc


@cuda.jit
def mm_tiled_drops_last_tile(A, B, C):
    sA = cuda.shared.array((TILE, TILE), float32)
    sB = cuda.shared.array((TILE, TILE), float32)
    tx = cuda.threadIdx.x
    ty = cuda.threadIdx.y
    j, i = cuda.grid(2)
    acc = float32(0.0)
    for t in range(A.shape[1] // TILE):  # floor: the last partial tile of K is lost
        k = t * TILE
        sA[ty, tx] = A[i, k + tx] if i < A.shape[0] else float32(0.0)
        sB[ty, tx] = B[k + ty, j] if j < B.shape[1] else float32(0.0)
        cuda.syncthreads()  # wait until both tiles are loaded
        for kk in range(TILE):
            acc += sA[ty, kk] * sB[kk, tx]
        cuda.syncthreads()  # wait until every thread used the tiles
    if i < C.shape[0] and j < C.shape[1]:
        C[i, j] = acc


@cuda.jit
def mm_tiled_no_sync_after_load(A, B, C):
    sA = cuda.shared.array((TILE, TILE), float32)
    sB = cuda.shared.array((TILE, TILE), float32)
    tx = cuda.threadIdx.x
    ty = cuda.threadIdx.y
    j, i = cuda.grid(2)
    acc = float32(0.0)
    for t in range((A.shape[1] + TILE - 1) // TILE):
        k = t * TILE
        sA[ty, tx] = A[i, k + tx] if i < A.shape[0] and k + tx < A.shape[1] else float32(0.0)
        sB[ty, tx] = B[k + ty, j] if k + ty < B.shape[0] and j < B.shape[1] else float32(0.0)
        for kk in range(TILE):  # (the barrier after the loads is missing)
            acc += sA[ty, kk] * sB[kk, tx]
        cuda.syncthreads()  # wait until every thread used the tiles
    if i < C.shape[0] and j < C.shape[1]:
        C[i, j] = acc


@cuda.jit
def mm_tiled_no_sync_before_overwrite(A, B, C):
    sA = cuda.shared.array((TILE, TILE), float32)
    sB = cuda.shared.array((TILE, TILE), float32)
    tx = cuda.threadIdx.x
    ty = cuda.threadIdx.y
    j, i = cuda.grid(2)
    acc = float32(0.0)
    for t in range((A.shape[1] + TILE - 1) // TILE):
        k = t * TILE
        sA[ty, tx] = A[i, k + tx] if i < A.shape[0] and k + tx < A.shape[1] else float32(0.0)
        sB[ty, tx] = B[k + ty, j] if k + ty < B.shape[0] and j < B.shape[1] else float32(0.0)
        cuda.syncthreads()  # wait until both tiles are loaded
        for kk in range(TILE):
            acc += sA[ty, kk] * sB[kk, tx]
        # (missing: the barrier before the next iteration overwrites the tiles)
    if i < C.shape[0] and j < C.shape[1]:
        C[i, j] = acc


@cuda.jit
def mm_tiled_sync_in_branch(A, B, C):
    sA = cuda.shared.array((TILE, TILE), float32)
    sB = cuda.shared.array((TILE, TILE), float32)
    tx = cuda.threadIdx.x
    ty = cuda.threadIdx.y
    j, i = cuda.grid(2)
    if i < C.shape[0] and j < C.shape[1]:  # threads outside C skip the barriers below
        acc = float32(0.0)
        for t in range((A.shape[1] + TILE - 1) // TILE):
            k = t * TILE
            sA[ty, tx] = A[i, k + tx] if k + tx < A.shape[1] else float32(0.0)
            sB[ty, tx] = B[k + ty, j] if k + ty < B.shape[0] else float32(0.0)
            cuda.syncthreads()  # wait until both tiles are loaded
            for kk in range(TILE):
                acc += sA[ty, kk] * sB[kk, tx]
            cuda.syncthreads()  # wait until every thread used the tiles
        C[i, j] = acc


def tiled_budget():
    return Budget(
        reads_per_element={"A": lambda s: math.ceil(s[2] / TILE), "B": lambda s: math.ceil(s[0] / TILE)},
        shared_bytes=tile_bytes(TILE),
        sectors={"A": 2.0, "B": 2.0, "C": 2.0},
    )


def test_tiled_with_padded_tiles_passes_every_budget():
    res = check(mm_tiled, budget=tiled_budget(), points=2)
    assert res.passed and res.score == 2, res
    if gpulab.is_gpu():  # access counts come from the simulator: the verdict says they were not checked
        assert "not checked: access counts come from the simulator" in str(res)
    else:
        assert f"{2 * TILE * (TILE + 1) * 4} bytes of shared memory" in str(res)


def test_partial_k_tile_dropped():
    res = check(mm_tiled_drops_last_tile, sizes=[(13, 10, 7)])
    assert not res.passed
    assert "last partial tile of K is dropped" in res.hint and "first 8 of K = 10" in res.hint
    tiny = check(mm_tiled_drops_last_tile, sizes=[(1, 1, 1)])  # K < TILE: nothing summed at all
    assert "none of the K = 1 terms" in tiny.hint


@pytest.mark.skipif(
    gpulab.is_gpu(),
    reason="the race verdict comes from the simulator's shared-memory access log; on a GPU the result depends on how "
    "the warps happen to run",
)
def test_missing_barrier_after_the_load():
    res = check(mm_tiled_no_sync_after_load)
    assert not res.passed and res.score == 0
    assert "shared memory race" in res.hint and "AFTER the load" in res.hint


@pytest.mark.skipif(
    gpulab.is_gpu(),
    reason="the race verdict comes from the simulator's shared-memory access log; on a GPU the values can look right",
)
def test_missing_barrier_before_the_overwrite_even_when_values_look_right():
    res = check(mm_tiled_no_sync_before_overwrite)
    assert not res.passed and res.score == 0
    text = res.message + res.hint
    assert re.search(r"wrote s[AB]\[\d+, \d+\]", text) and "BEFORE the next overwrite" in text, text


@pytest.mark.skipif(gpulab.is_gpu(), reason="the race verdict comes from the simulator's shared-memory access log")
def test_a_race_seen_in_the_log_is_not_called_a_wrong_dimension():
    """Lesson 04's kernel without its second barrier is right on a square probe small enough for one tile and wrong
    on non-square sizes: the verdict names the race only, not "an index uses the wrong dimension" (a guess)."""
    import inspect

    from gpulab import lessons
    from gpulab.kernels.matmul import matmul_tiled_kernel
    from gpulab.source import define

    src = inspect.getsource(matmul_tiled_kernel.py_func)
    last = src.rfind("cuda.syncthreads()")
    broken = src[:last] + "pass" + src[last + len("cuda.syncthreads()") :]
    kernel = cuda.jit(
        define(broken.replace("@cuda.jit", "", 1), "matmul_tiled_kernel", dict(matmul_tiled_kernel.py_func.__globals__))
    )
    res = lessons.check("04", "matmul_tiled", kernel)
    assert not res.passed and "wrote sA[" in res.hint and "no cuda.syncthreads() in between" in res.hint, res
    assert "correct on square inputs" not in res.hint and "wrong dimension" not in res.hint, res


@pytest.mark.skipif(
    gpulab.is_gpu(),
    reason="the simulator finds the barrier that not all threads reach; on a GPU that is undefined behaviour (it may "
    "hang)",
)
def test_syncthreads_in_a_branch_not_all_threads_take():
    res = check(mm_tiled_sync_in_branch)
    assert not res.passed
    text = res.message + res.hint
    assert "cuda.syncthreads() inside a branch" in text and "deadlocks or is undefined" in text, text
    assert "out of the `if`" in text


# --- budgets: reads, coalescing, shared memory -----------------------------------------------------


@pytest.mark.skipif(
    gpulab.is_gpu(),
    reason="budgets count accesses in the simulator; gpu mode reports them as not checked",
)
def test_read_budget_separates_naive_from_tiled_matmul():
    budget = Budget(reads_per_element={"A": lambda s: math.ceil(s[2] / TILE), "B": lambda s: math.ceil(s[0] / TILE)})
    naive = check(mm_naive, budget=budget)
    assert naive.status == "over budget" and "reads of A" in naive.message and "shared memory" in naive.hint
    assert check(mm_tiled, budget=budget).passed


@pytest.mark.skipif(
    gpulab.is_gpu(),
    reason="budgets count accesses in the simulator; gpu mode reports them as not checked",
)
def test_uncoalesced_kernel_loses_half_the_points_and_says_by_how_much():
    budget = Budget(sectors={"A": 2.0, "B": 2.0, "C": 2.0})
    res = check(mm_naive_rows, sizes=[(16, 9, 16)], budget=budget, points=2)  # square C: right launched either way
    assert res.status == "over budget" and res.score == 1
    assert "uncoalesced: reads of A use 8.0 sectors per warp request, ideal 1.0 (8x the memory traffic)" in res.message
    assert res.hint.startswith("neighbouring threads (threadIdx.x) should touch neighbouring elements of the last axis")
    coalesced = check(mm_naive, budget=Budget(sectors=2.0))  # one limit for every array
    assert coalesced.passed, coalesced
    # on a non-square C it is right only with x and y exchanged: that is named first, still half the points
    both = check(mm_naive_rows, budget=budget, points=2)
    assert both.status == "failed" and both.score == 1 and "but orientation:" in both.message, both
    assert [c.name for c in both.checks if not c.passed][0] == "orientation", both


@pytest.mark.skipif(
    gpulab.is_gpu(),
    reason="budgets count accesses in the simulator; gpu mode reports them as not checked",
)
def test_unpadded_budget_rejects_padding_and_tile_bytes_accepts_it():
    tight = check(mm_tiled, budget=Budget(shared_bytes=2 * TILE * TILE * 4))
    assert tight.status == "over budget" and "shared memory" in tight.message
    assert check(mm_tiled, budget=Budget(shared_bytes=tile_bytes(TILE))).passed
    assert tile_bytes(16) == 2 * 16 * 17 * 4
