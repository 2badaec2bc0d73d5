"""Lab 09's 2-D launches (matmul, im2col) and a loop that ignores an axis of them (capstone review F5).

`for t in range(cuda.grid(1), cols.size, cuda.gridsize(1))` is right in any launch, but in the 2-D launch training
uses every row of threads runs it (cuda.grid(1) counts x only): on a GPU, im2col for the first convolution at batch
128 wrote each element 100,352 times. Before, such kernels got full marks (3/3: their result is right, their writes
coalesced, and the same values written twice are no race). Now the traced launch counts each element's writers
(gpulab.exercises.writers): "failed" with half the points, not registered, the fix in the hint."""

from __future__ import annotations

import numpy as np
import pytest
from numba import cuda, float32

from gpulab import capstone
from gpulab.capstone_budgets import BUDGETS
from gpulab.exercises import check_kernel
from gpulab.exercises.writers import WRITERS, writer_checks
from gpulab.trace import trace
from test_capstone import LIBRARY
from test_capstone_orientation import _gemm, _im2col

TILE = 16
POINTS = 3  # the points of lab 09's matmul and conv cells


def lab_check(op, kernel, block=None, trusted=False):
    """The lab's check cell: `cap.accept(op, kernel, check_kernel(kernel, **cap.problem(op, kernel), points=3))`
    (``trusted``: the course's own kernel, which a learner's check refuses)."""
    cap = capstone.Capstone()
    res = check_kernel(kernel, **cap.problem(op, kernel, block=block), points=POINTS, trusted=trusted)
    return cap.accept(op, kernel, res, block=block), cap


@cuda.jit
def im2col_flat(x, cols, kh, kw, stride, pad, ho, wo):  # one flat 1-D grid-stride loop over cols
    C, H, W = x.shape[1], x.shape[2], x.shape[3]
    K = cols.shape[1]
    for t in range(cuda.grid(1), cols.size, cuda.gridsize(1)):
        r, q = t // K, t % K
        n, i, j = r // (ho * wo), (r // wo) % ho, r % wo
        a, b, c = q // (kw * C), (q // C) % kw, q % C
        ih, iw = i * stride + a - pad, j * stride + b - pad
        v = float32(0.0)
        if ih >= 0 and ih < H and iw >= 0 and iw < W:
            v = x[n, c, ih, iw]
        cols[r, q] = v


@cuda.jit
def im2col_block_rows(x, cols, kh, kw, stride, pad, ho, wo):  # rows from threadIdx.y by blockDim.y: ignores blockIdx.y
    q0, _ = cuda.grid(2)
    sq, _ = cuda.gridsize(2)
    C, H, W = x.shape[1], x.shape[2], x.shape[3]
    for r in range(cuda.threadIdx.y, cols.shape[0], cuda.blockDim.y):
        n, i, j = r // (ho * wo), (r // wo) % ho, r % wo
        for q in range(q0, cols.shape[1], sq):
            a, b, c = q // (kw * C), (q // C) % kw, q % C
            ih, iw = i * stride + a - pad, j * stride + b - pad
            cols[r, q] = x[n, c, ih, iw] if 0 <= ih < H and 0 <= iw < W else 0.0


@cuda.jit
def matmul_flat(A, B, C):  # one flat 1-D grid-stride loop over C
    N = C.shape[1]
    for t in range(cuda.grid(1), C.size, cuda.gridsize(1)):
        i, j = t // N, t % N
        acc = float32(0.0)
        for k in range(A.shape[1]):
            acc += A[i, k] * B[k, j]
        C[i, j] = acc


def _assert_repeated(res, cap, op, array, writers, words):
    assert res.status == "failed" and res.score == POINTS / 2 and res.max_score == POINTS, res
    assert res.message.startswith("correct on all"), res
    assert f"but {WRITERS}: each element of {array} should be written by one thread" in res.message, res
    assert f"was written by {writers}:" in res.message, res
    assert words in res.hint and "cuda.gridsize(2)" in res.hint, res
    assert op in cap.missing(), "a kernel that repeats its work is not registered: on a GPU training would crawl"


def test_a_flat_grid_stride_im2col_repeats_its_work_in_every_row_of_threads():
    res, cap = lab_check("im2col", im2col_flat)  # before: passed, 3/3
    # traced in 2 blocks of 32 x 2 threads: 4 rows of threads, each writing every element of cols
    _assert_repeated(res, cap, "im2col", "cols", 4, "your loop ignores y")
    assert "the threads (x, y) = (0, 0), (0, 1), (0, 2), (0, 3) of the launch" in res.message, res
    assert "which differ only in y" in res.message, res
    assert "`for i in range(i0, cols.shape[0], si):`" in res.hint, res


def test_an_im2col_that_ignores_blockidx_y_repeats_its_work_in_every_block():
    res, cap = lab_check("im2col", im2col_block_rows)  # before: passed, 3/3 (one block along y was traced)
    _assert_repeated(res, cap, "im2col", "cols", 2, "your loop ignores blockIdx")
    assert "the same thread of different blocks" in res.message, res


def test_a_flat_grid_stride_matmul_repeats_its_work_and_says_so_before_its_coalescing():
    res, cap = lab_check("matmul", matmul_flat)  # before: over budget (A's reads), 1.5/3, registered
    _assert_repeated(res, cap, "matmul", "C", 4, "your loop ignores y")
    assert any(c.name == "budget: coalescing of A" and not c.passed for c in res.checks), res  # still listed


def test_a_flat_grid_stride_matmul_registered_in_blocks_repeats_its_work_in_each_row_of_threads():
    res, cap = lab_check("matmul", matmul_flat, block=(TILE, TILE))  # before: passed, 3/3
    # the check's launch: 2 x 2 blocks of 16 x 16 for C 20 x 17, so 32 rows of threads write every element
    _assert_repeated(res, cap, "matmul", "C", 32, "your loop ignores y")


@pytest.mark.parametrize(
    ("op", "kernel"),
    [("im2col", _im2col()), ("im2col", LIBRARY["im2col"]), ("matmul", _gemm()), ("matmul", LIBRARY["matmul"])],
    ids=["im2col", "im2col-course", "matmul", "matmul-course"],
)
def test_2d_grid_stride_kernels_keep_full_marks(op, kernel):
    res, cap = lab_check(op, kernel, trusted=kernel is LIBRARY[op])
    assert res.passed and res.score == POINTS, res
    assert any(c.name == WRITERS and c.passed and "written by one thread" in c.message for c in res.checks), res
    assert op not in cap.missing()


def test_the_2d_ops_count_writers_in_a_launch_with_rows_of_threads_in_two_blocks():
    for op, out in (("matmul", "c"), ("im2col", "cols")):
        budget = BUDGETS[op]
        assert budget.writers_per_element == {out: 1}, op
        assert budget.grid[1] >= 2 and budget.block[1] >= 2, op  # ignored threadIdx.y and ignored blockIdx.y show


@cuda.jit
def _scatter(x, out, atomic):  # every thread adds (or writes) into out[0]
    i = cuda.grid(1)
    if i < x.size:
        if atomic:
            cuda.atomic.add(out, 0, x[i])
        else:
            out[0] = x[i]


def test_atomic_updates_are_not_repeated_work_and_plain_writes_are():
    x, out = np.ones(8, np.float32), np.zeros(1, np.float32)
    (ok,) = writer_checks(trace(_scatter, 2, 4, x, out, True, names=("x", "out", "atomic")), {"out": 1}, 8, "here")
    assert ok.passed and "out not written without atomics" in ok.message, ok
    (bad,) = writer_checks(trace(_scatter, 2, 4, x, out, False, names=("x", "out", "atomic")), {"out": 1}, 8, "here")
    assert not bad.passed and "out[0] was written by 8: the threads x = 0, 1, 2, 3 and 4 more" in bad.message, bad
    assert "your loop ignores x" in bad.hint, bad
