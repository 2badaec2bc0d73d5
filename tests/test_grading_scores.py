"""A lab cell's points match its verdicts: a penalty (half: over budget, not compilable, x and y exchanged) counts
once, also on the hidden checks that skip budgets and PTX, while wrong answers count as they always did."""

from __future__ import annotations

import math
from pathlib import Path

import gpulab  # noqa: F401  (picks the mode before numba loads)
import nbformat
import pytest
from numba import cuda, float32

from gpulab import problems
from gpulab.exercises import CheckResult
from gpulab.grading import report

ROOT = Path(__file__).resolve().parents[1]
TPB = problems.lab05.TPB
ROWS_PER_BLOCK = problems.lab05.ROWS_PER_BLOCK


def _r(name, score, max_score, status="passed", **details):
    return CheckResult(name, status, float(score), float(max_score), "msg", details=dict(details))


def test_a_penalty_counts_once_for_every_check_of_the_function():
    # lab 05's serial block sum: visible over budget (half), hidden (budget=None) correct
    assert report(_r("k", 1.5, 3, "over budget"), _r("k", 3, 3), points=3) == 1.5
    # x and y exchanged, seen by the visible check only
    assert report(_r("k", 1, 2, "failed", orientation="exchanged"), _r("k", 2, 2), points=2) == 1.0
    # several hidden checks: still half
    assert report(_r("k", 1, 2, "over budget"), _r("k", 2, 2), _r("k", 2, 2), points=2) == 1.0


def test_wrong_answers_count_as_before():
    # correct and within budget on the visible check, wrong on the hidden one: half the cell, as before
    assert report(_r("k", 3, 3), _r("k", 0, 3, "failed"), points=3) == 1.5
    # over budget and wrong on the hidden check: a quarter, as before
    assert report(_r("k", 1.5, 3, "over budget"), _r("k", 0, 3, "failed"), points=3) == 0.75
    # wrong on the visible check, right on the hidden one
    assert report(_r("k", 0, 3, "failed"), _r("k", 3, 3), points=3) == 1.5
    assert report(_r("k", 0, 3, "not implemented"), _r("k", 0, 3, "not implemented"), points=3) == 0.0
    assert report(_r("k", 3, 3, trusted=True), _r("k", 3, 3, trusted=True), points=3) == 0.0


def test_the_penalty_of_one_function_leaves_the_others_alone():
    # lab 09: two checks, each half the cell; the forward over budget costs a quarter of the cell, not half
    assert report(_r("dropout_forward", 1, 2, "over budget"), _r("dropout_backward", 2, 2), points=2) == 1.5
    # lab 06's gelu cell: three functions, each with a hidden check; gelu_layer copies (seen by its visible check
    # only here: the lab's hidden check sees it too), which costs gelu_layer's third of the cell, halved
    visible = [_r("gelu", 1, 1), _r("gelu_grad", 1, 1), _r("gelu_layer", 0.5, 1, "over budget")]
    hidden = [_r("gelu", 1, 1), _r("gelu_grad", 1, 1), _r("gelu_layer", 1, 1)]
    assert report(*visible, *hidden, points=3) == 2.5


def _cell_points(notebook: str, grade_id: str, **answers) -> float:
    """Run the lab source's test cell ``grade_id`` (hidden tests included) on ``answers``; its value."""
    nb = nbformat.read(str(ROOT / "labs" / "solutions" / notebook), as_version=4)
    cell = next(c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == grade_id)
    *body, last = cell.source.rstrip().splitlines()
    assert "BEGIN HIDDEN TESTS" in cell.source and last.startswith("report("), cell.source
    ns = {"problems": problems, "report": report, **answers}
    exec("\n".join(body), ns)
    return eval(last, ns)


@cuda.jit
def block_sum_tree(x, partial):
    buf = cuda.shared.array(TPB, float32)
    tx = cuda.threadIdx.x
    i = cuda.grid(1)
    buf[tx] = x[i] if i < x.size else float32(0.0)
    cuda.syncthreads()
    s = TPB // 2
    while s > 0:
        if tx < s:
            buf[tx] += buf[tx + s]
        cuda.syncthreads()
        s //= 2
    if tx == 0:
        partial[cuda.blockIdx.x] = buf[0]


@cuda.jit
def block_sum_serial(x, partial):  # thread 0 adds the block's values in a loop: correct, over the Tree budget
    buf = cuda.shared.array(TPB, float32)
    tx = cuda.threadIdx.x
    i = cuda.grid(1)
    buf[tx] = x[i] if i < x.size else 0.0
    cuda.syncthreads()
    if tx == 0:
        s = float32(0.0)
        for k in range(TPB):
            s += buf[k]
        partial[cuda.blockIdx.x] = s


@cuda.jit
def block_sum_drops_odd_last(x, partial):  # drops the last element of an odd n > 1: the visible sizes are even or 1
    buf = cuda.shared.array(TPB, float32)
    tx = cuda.threadIdx.x
    i = cuda.grid(1)
    n = x.size if x.size % 2 == 0 or x.size == 1 else x.size - 1
    buf[tx] = x[i] if i < n else float32(0.0)
    cuda.syncthreads()
    s = TPB // 2
    while s > 0:
        if tx < s:
            buf[tx] += buf[tx + s]
        cuda.syncthreads()
        s //= 2
    if tx == 0:
        partial[cuda.blockIdx.x] = buf[0]


@cuda.jit
def softmax_warp_serial(x, out):  # lane 0 of each warp does the whole row: correct, no shuffles
    warp = cuda.threadIdx.x // 32
    lane = cuda.threadIdx.x % 32
    r = cuda.blockIdx.x * ROWS_PER_BLOCK + warp
    if r < x.shape[0] and lane == 0:
        m = -math.inf
        for c in range(x.shape[1]):
            m = max(m, x[r, c])
        s = float32(0.0)
        for c in range(x.shape[1]):
            s += math.exp(x[r, c] - m)
        for c in range(x.shape[1]):
            out[r, c] = math.exp(x[r, c] - m) / s


@cuda.jit
def affine_columns(A, alpha, beta, out):
    j, i = cuda.grid(2)
    if i < A.shape[0] and j < A.shape[1]:
        out[i, j] = alpha * A[i, j] + beta


@cuda.jit
def affine_rows(A, alpha, beta, out):  # x along the rows: right only launched with x and y exchanged
    i, j = cuda.grid(2)
    if i < A.shape[0] and j < A.shape[1]:
        out[i, j] = alpha * A[i, j] + beta


@pytest.mark.slow
@pytest.mark.parametrize(
    ("kernel", "points"),
    [(block_sum_tree, 3.0), (block_sum_serial, 1.5), (block_sum_drops_odd_last, 1.5)],
    ids=["tree-full", "serial-over-budget-half", "wrong-on-hidden-half-as-before"],
)
def test_lab05_block_sum_cell(kernel, points):
    assert _cell_points("lab05_reductions.ipynb", "lab05-block-check", block_sum_kernel=kernel) == points


@pytest.mark.slow
def test_lab05_serial_softmax_warp_cell_earns_half():
    points = _cell_points("lab05_reductions.ipynb", "lab05-softmax-warp-check", softmax_warp_kernel=softmax_warp_serial)
    assert points == 1.5


@pytest.mark.slow
@pytest.mark.parametrize(("kernel", "points"), [(affine_columns, 2.0), (affine_rows, 1.0)], ids=["columns", "rows"])
def test_lab01_affine_cell(kernel, points):
    assert _cell_points("lab01_threads.ipynb", "lab01-affine-check", affine_kernel=kernel) == points
