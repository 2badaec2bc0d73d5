"""The labs' problems (``gpulab.problems``): coalescing costs points, softmax must subtract the max,
every check is the one the lab notebooks run, and every graded cell has hidden tests."""

from __future__ import annotations

import math
import re
from pathlib import Path

import numpy as np
import pytest
from numba import cuda, float32

from gpulab import problems
from gpulab.exercises import Problem
from gpulab.labs import BEGIN_HIDDEN, END_HIDDEN, student_notebook

ROOT = Path(__file__).resolve().parents[1]
TILE = problems.lab04.TILE
TILE_PAD = TILE + 1  # computed here: Numba cannot size a shared array with TILE + 1 in the kernel
TPB5 = problems.lab05.TPB

# ---------------------------------------------------------------------------------------------------
# Kernels: the coalesced way (x along the contiguous axis) and a correct but uncoalesced way.


@cuda.jit
def copy_coalesced(a, out):
    j, i = cuda.grid(2)
    if i < a.shape[0] and j < a.shape[1]:
        out[i, j] = a[i, j]


@cuda.jit
def copy_uncoalesced(a, out):
    i, j = cuda.grid(2)  # x along the rows: correct on a square matrix, lanes a row apart
    if i < a.shape[0] and j < a.shape[1]:
        out[i, j] = a[i, j]


@cuda.jit
def matmul_coalesced(A, B, C):
    j, i = cuda.grid(2)
    if i < C.shape[0] and j < C.shape[1]:
        acc = float32(0.0)
        for k in range(A.shape[1]):
            acc += A[i, k] * B[k, j]
        C[i, j] = acc


@cuda.jit
def matmul_uncoalesced(A, B, C):
    i, j = cuda.grid(2)
    if i < C.shape[0] and j < C.shape[1]:
        acc = float32(0.0)
        for k in range(A.shape[1]):
            acc += A[i, k] * B[k, j]
        C[i, j] = acc


@cuda.jit
def tiled_coalesced(A, B, C):
    sA = cuda.shared.array((TILE, TILE_PAD), float32)  # a padded tile must fit the budget
    sB = cuda.shared.array((TILE, TILE_PAD), float32)
    tx, ty = cuda.threadIdx.x, cuda.threadIdx.y
    j, i = cuda.grid(2)
    acc = float32(0.0)
    for t in range((A.shape[1] + TILE - 1) // TILE):
        k = t * TILE
        sA[ty, tx] = A[i, k + tx] if i < A.shape[0] and k + tx < A.shape[1] else float32(0.0)
        sB[ty, tx] = B[k + ty, j] if k + ty < B.shape[0] and j < B.shape[1] else float32(0.0)
        cuda.syncthreads()  # wait until both tiles are loaded
        for kk in range(TILE):
            acc += sA[ty, kk] * sB[kk, tx]
        cuda.syncthreads()  # wait before the next tiles overwrite these
    if i < C.shape[0] and j < C.shape[1]:
        C[i, j] = acc


@cuda.jit
def tiled_uncoalesced(A, B, C):
    """Correct on every shape, but the tiles are loaded with tx walking the rows (a row apart)."""
    sA = cuda.shared.array((TILE, TILE), float32)
    sB = cuda.shared.array((TILE, TILE), float32)
    tx, ty = cuda.threadIdx.x, cuda.threadIdx.y
    i0 = cuda.blockIdx.y * TILE
    j0 = cuda.blockIdx.x * TILE
    acc = float32(0.0)
    for t in range((A.shape[1] + TILE - 1) // TILE):
        k = t * TILE
        sA[tx, ty] = A[i0 + tx, k + ty] if i0 + tx < A.shape[0] and k + ty < A.shape[1] else float32(0.0)
        sB[tx, ty] = B[k + tx, j0 + ty] if k + tx < B.shape[0] and j0 + ty < B.shape[1] else float32(0.0)
        cuda.syncthreads()  # wait until both tiles are loaded
        for kk in range(TILE):
            acc += sA[ty, kk] * sB[kk, tx]
        cuda.syncthreads()  # wait before the next tiles overwrite these
    if i0 + ty < C.shape[0] and j0 + tx < C.shape[1]:
        C[i0 + ty, j0 + tx] = acc


@cuda.jit
def conv2d_coalesced(x, w, dilation, out):
    j, i = cuda.grid(2)
    if i < out.shape[0] and j < out.shape[1]:
        acc = 0.0
        for a in range(w.shape[0]):
            for b in range(w.shape[1]):
                acc += x[i + dilation * a, j + dilation * b] * w[a, b]
        out[i, j] = acc


@cuda.jit
def conv2d_uncoalesced(x, w, dilation, out):
    i, j = cuda.grid(2)
    if i < out.shape[0] and j < out.shape[1]:
        acc = 0.0
        for a in range(w.shape[0]):
            for b in range(w.shape[1]):
                acc += x[i + dilation * a, j + dilation * b] * w[a, b]
        out[i, j] = acc


COALESCING = [
    # (problem, coalesced, uncoalesced, sizes on which the uncoalesced one is correct, uncoalesced arrays)
    (problems.lab02.COPY2D, copy_coalesced, copy_uncoalesced, [(40, 40)], "a"),
    (problems.lab03.MATMUL, matmul_coalesced, matmul_uncoalesced, [(32, 8, 32)], "A"),
    (problems.lab04.MATMUL_TILED, tiled_coalesced, tiled_uncoalesced, None, "A"),
    (problems.lab07.CONV2D_SINGLE, conv2d_coalesced, conv2d_uncoalesced, [(34, 34, 3, 2)], "x"),
]


@pytest.mark.parametrize("problem, good, bad, square, array", COALESCING, ids=lambda p: getattr(p, "name", None))
def test_uncoalesced_but_correct_kernel_gets_half_and_coalesced_full_marks(problem, good, bad, square, array):
    sizes = {"sizes": square} if square else {}
    full = problem.check(good, ptx=None, **sizes)
    assert full.passed and full.score == full.max_score == problem.points, full
    half = problem.check(bad, ptx=None, **sizes)
    assert half.status == "over budget", half
    assert half.score == problem.points / 2, half
    assert f"coalescing of {array}" in half.message and "sectors" in half.message, half
    assert "threadIdx.x" in half.hint, half  # says what to change


def test_row_major_mapping_is_recognised_in_its_own_orientation_and_earns_half():
    """`i, j = cuda.grid(2)` is correct when x runs along the rows, so the harness tries that launch
    orientation too (issue 10.3: every legitimate variant is recognised, not scored 0); the labs teach
    `j, i = cuda.grid(2)` and every later launch puts x along the columns, so it is not a pass: half the
    points, the orientation named first, its uncoalesced reads of A listed too."""
    res = problems.lab03.MATMUL.check(matmul_uncoalesced)
    assert res.status == "failed" and res.score == 1.5 and "but orientation:" in res.message, res
    assert "uncoalesced" in str(res) and "coalescing of A" in str(res), res


def test_the_rotation_budget_covers_its_reads_only():
    """A quarter turn writes down the columns of out, as a transpose does: only the reads of a are budgeted."""
    res = problems.lab02.ROTATE.check(VARIANTS["lab02.ROTATE"][0])
    assert res.passed and res.score == 2, res
    assert [c.name for c in res.checks if c.name.startswith("budget")] == ["budget: coalescing of a"], res


# ---------------------------------------------------------------------------------------------------
# Labs 02 and 03 ask for variants of lesson exercises: the lesson's answer (lessons.reveal) fails them, named.
# (Lab 02's challenge turns lesson 02's tiled transpose into a tiled quarter turn.)

ROTATE_SRC = """
@cuda.jit
def rotate_kernel(a, out):
    j, i = cuda.grid(2)
    if i < a.shape[0] and j < a.shape[1]:
        out[j, a.shape[0] - 1 - i] = a[i, j]
"""
ROTATE_TILED_SRC = """
@cuda.jit
def rotate_tiled_kernel(a, out):
    tile = cuda.shared.array((32, 33), float32)
    tx = cuda.threadIdx.x
    ty = cuda.threadIdx.y
    row0 = cuda.blockIdx.y * 32
    col0 = cuda.blockIdx.x * 32
    m = a.shape[0]
    for r in range(ty, 32, 8):
        if row0 + r < m and col0 + tx < a.shape[1]:
            tile[r, tx] = a[row0 + r, col0 + tx]
    cuda.syncthreads()  # the tile is loaded
    for r in range(ty, 32, 8):
        if col0 + r < a.shape[1] and row0 + tx < m:
            out[col0 + r, m - 1 - (row0 + tx)] = tile[tx, r]
"""
VECMAT_SRC = """
@cuda.jit
def vecmat_kernel(A, x, y):
    j = cuda.grid(1)
    if j < y.size:
        acc = float32(0.0)
        for i in range(A.shape[0]):
            acc += x[i] * A[i, j]
        y[j] = acc
"""
DENSE_SRC = """
@cuda.jit
def dense_relu_kernel(X, W, b, Y):
    j, i = cuda.grid(2)
    if i < Y.shape[0] and j < Y.shape[1]:
        acc = b[j]
        for k in range(X.shape[1]):
            acc += X[i, k] * W[j, k]
        Y[i, j] = max(acc, float32(0.0))
"""


def _kernel(src: str, name: str):
    from gpulab.source import define

    return define(src, name, {"cuda": cuda, "float32": float32})


# problem -> (reference kernel, its source and name, the lesson exercise it varies, what the verdict says)
VARIANTS = {
    "lab02.ROTATE": (_kernel(ROTATE_SRC, "rotate_kernel"), ROTATE_SRC, ("02", "transpose_naive"), "transpose_naive"),
    "lab02.ROTATE_TILED": (
        _kernel(ROTATE_TILED_SRC, "rotate_tiled_kernel"),
        ROTATE_TILED_SRC,
        ("02", "transpose_tiled"),
        "transpose_tiled",
    ),
    "lab03.VECMAT": (_kernel(VECMAT_SRC, "vecmat_kernel"), VECMAT_SRC, ("03", "matvec"), "lesson 03's matvec"),
    "lab03.DENSE_RELU": (_kernel(DENSE_SRC, "dense_relu_kernel"), DENSE_SRC, ("03", "linear_relu"), "linear_relu"),
}


@pytest.mark.parametrize("key", sorted(VARIANTS))
def test_lab_variant_reference_scores_full_marks(key):
    problem = problems.all_problems()[key]
    res = problem.check(VARIANTS[key][0])  # DENSE_RELU's check compiles it to PTX as well
    assert res.passed and res.score == problem.points, res


@pytest.mark.parametrize("key", sorted(VARIANTS))
def test_the_lessons_answer_pasted_into_the_lab_fails_and_is_named(key):
    from gpulab.lessons.problems import exercise

    _, _, (lesson, name), named = VARIANTS[key]
    res = problems.all_problems()[key].check(exercise(lesson, name).reference, trusted=True)
    assert not res.passed and res.score == 0, res
    assert named in res.hint and "lab" in res.hint, res


@pytest.mark.ptx
def test_lab_variant_references_compile_to_ptx():
    """ROTATE and VECMAT have no ptx= of their own (DENSE_RELU's check compiles): their references are real CUDA."""
    from gpulab import ptx

    head = "from numba import cuda, float32\n"
    items = {
        "rotate_kernel": {
            "source": head + ROTATE_SRC,
            "name": "rotate_kernel",
            "signature": "void(float32[:, :], float32[:, :])",
        },
        "vecmat_kernel": {
            "source": head + VECMAT_SRC,
            "name": "vecmat_kernel",
            "signature": "void(float32[:, :], float32[:], float32[:])",
        },
    }
    res = ptx.compile_sources(items)
    assert res == {"rotate_kernel": "ok", "vecmat_kernel": "ok"}, res


# ---------------------------------------------------------------------------------------------------
# Softmax must subtract the row maximum.


@cuda.jit
def softmax_shifted(x, out):
    buf = cuda.shared.array(TPB5, float32)
    row = cuda.blockIdx.x
    tx = cuda.threadIdx.x
    n = x.shape[1]
    m = -math.inf
    for j in range(tx, n, TPB5):
        m = max(m, x[row, j])
    buf[tx] = m
    cuda.syncthreads()  # partial maxima stored
    s = TPB5 // 2
    while s > 0:
        if tx < s:
            buf[tx] = max(buf[tx], buf[tx + s])
        cuda.syncthreads()  # halving step complete
        s //= 2
    row_max = buf[0]
    cuda.syncthreads()  # everyone read the maximum before buf is reused
    total = float32(0.0)
    for j in range(tx, n, TPB5):
        total += math.exp(x[row, j] - row_max)
    buf[tx] = total
    cuda.syncthreads()  # partial sums stored
    s = TPB5 // 2
    while s > 0:
        if tx < s:
            buf[tx] += buf[tx + s]
        cuda.syncthreads()  # halving step complete
        s //= 2
    row_sum = buf[0]
    for j in range(tx, n, TPB5):
        out[row, j] = math.exp(x[row, j] - row_max) / row_sum


@cuda.jit
def softmax_unshifted(x, out):
    """Right for small logits, but exp(x) overflows for large ones."""
    buf = cuda.shared.array(TPB5, float32)
    row = cuda.blockIdx.x
    tx = cuda.threadIdx.x
    n = x.shape[1]
    total = float32(0.0)
    for j in range(tx, n, TPB5):
        total += math.exp(x[row, j])
    buf[tx] = total
    cuda.syncthreads()  # partial sums stored
    s = TPB5 // 2
    while s > 0:
        if tx < s:
            buf[tx] += buf[tx + s]
        cuda.syncthreads()  # halving step complete
        s //= 2
    row_sum = buf[0]
    for j in range(tx, n, TPB5):
        out[row, j] = math.exp(x[row, j]) / row_sum


def test_softmax_inputs_have_large_magnitudes():
    x = problems.lab05.softmax_inputs((8, 70), np.random.default_rng(0))
    assert np.abs(x).max() > 1000
    assert np.abs(x[0]).max() <= 20  # the first row is unshifted: a plain softmax is right there


def test_softmax_without_max_subtraction_fails_and_with_it_passes():
    problem = problems.lab05.SOFTMAX
    good = problem.check(softmax_shifted, ptx=None)
    assert good.passed and good.score == problem.points, good
    bad = problem.check(softmax_unshifted, ptx=None)
    assert not bad.passed and bad.score == 0, bad
    # the same kernel passes on small logits (the old -30..30 inputs): the large ones are what catch it
    small = problem.check(softmax_unshifted, ptx=None, sizes=[(1, 1), (1, 70)])
    assert small.passed, small


def test_softmax_overflow_is_named_when_the_outputs_are_nan():
    """On a GPU exp overflows to inf (in the simulator too: gpulab.simulator.ieee_math); the verdict names the max."""

    def gpu_like(x, out):  # float32 exp without the max: inf / inf and 0 / 0 give nan, as on a GPU
        with np.errstate(over="ignore", invalid="ignore"):
            e = np.exp(x)
            out[...] = e / e.sum(axis=1, keepdims=True)

    res = problems.lab05.SOFTMAX.check(host=gpu_like, sizes=[(3, 5)], race_check=False)
    assert not res.passed and "subtract the row's maximum" in res.hint, res


# ---------------------------------------------------------------------------------------------------
# The problems as data, and the notebooks that use them.

SUMS = [
    "lab03.VECMAT",
    "lab03.MATMUL",
    "lab03.DENSE_RELU",
    "lab04.MATMUL_TILED",
    "lab05.SUM_ATOMIC",
    "lab05.BLOCK_SUM",
    "lab07.CONV1D",
    "lab07.CONV2D_SINGLE",
    "lab07.CONV2D",
    "lab07.CONV2D_IM2COL",
    "lab08.MAXPOOL_BACKWARD",
    "lab08.LINEAR_BACKWARD",
    "lab08.CONV2D_BACKWARD",
]


def test_every_sum_is_judged_by_the_rounding_bound_not_a_constant_tolerance():
    every = problems.all_problems()
    for key in SUMS:
        assert every[key].reduction is not None, key
    for key, p in every.items():
        assert p.gpu_sizes, f"{key} states no gpu-mode sizes"
        assert p.rtol <= 1e-4, key


def test_two_d_kernels_of_labs_02_03_04_07_have_a_coalescing_budget():
    for key in [
        "lab02.COPY2D",
        "lab02.ROTATE",
        "lab02.ROTATE_TILED",
        "lab03.MATMUL",
        "lab03.DENSE_RELU",
        "lab04.MATMUL_TILED",
        "lab07.CONV2D_SINGLE",
        "lab07.IM2COL",
    ]:
        p = problems.all_problems()[key]
        assert p.budget is not None and p.budget.sectors, key


def test_tiled_matmul_budget_allows_padded_tiles():
    assert problems.lab04.MATMUL_TILED.budget.shared_bytes >= 2 * TILE * (TILE + 1) * 4


def test_two_d_launches_put_x_along_the_columns():
    grid, block = problems.grid_2d(rows=10, cols=70, block=(16, 8))
    assert grid == (5, 2) and block == (16, 8)
    a = np.zeros((10, 70), np.float32)
    assert problems.launch_2d((16, 8))(a) == ((5, 2), (16, 8))


# the labs whose graded cells run gpulab.problems checks (lab09 and lab11 grade with their own cells)
LAB_FILES = sorted(p for p in (ROOT / "labs" / "solutions").glob("lab*.ipynb") if p.name[:5] in problems.LABS)
_CALL = re.compile(r"problems\.(lab\d\d)\.([A-Z0-9_]+)\.check\(")


def _unalias(source: str, nb) -> str:
    """``L10.BUDGET.check(`` read as ``problems.lab10.BUDGET.check(`` where the notebook sets ``L10 = problems.lab10``
    (lab 10 names its problems module once)."""
    code = "\n".join(c.source for c in nb.cells if c.cell_type == "code")
    for alias, lab in re.findall(r"^(\w+) = problems\.(lab\d\d)\b", code, flags=re.M):
        source = re.sub(rf"\b{alias}\.", f"problems.{lab}.", source)
    return source


@pytest.mark.parametrize("path", LAB_FILES, ids=lambda p: p.stem)
def test_every_graded_cell_runs_a_problem_and_hidden_tests(path):
    import nbformat

    nb = nbformat.read(str(path), as_version=4)
    graded = [c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade")]
    assert graded
    every = problems.all_problems()
    for cell in graded:
        meta = cell.metadata["nbgrader"]
        calls = _CALL.findall(_unalias(cell.source, nb))
        assert calls, meta["grade_id"]
        points = sum(every[f"{lab}.{name}"].points for lab, name in set(calls))  # one cell may grade two parts
        assert points == meta["points"], (meta["grade_id"], points, meta["points"])
        assert cell.source.count(BEGIN_HIDDEN) == 1 and cell.source.count(END_HIDDEN) == 1, meta["grade_id"]
        hidden = cell.source.split(BEGIN_HIDDEN)[1].split(END_HIDDEN)[0]
        assert "seed=" in hidden and "sizes=" in hidden and "results.append(hidden)" in hidden, meta["grade_id"]
    student = student_notebook(path)
    assert not any(BEGIN_HIDDEN in c.source or "hidden = " in c.source for c in student.cells)


def test_all_problems_lists_every_lab():
    keys = problems.all_problems()
    assert {k.split(".")[0] for k in keys} == set(problems.LABS)
    assert all(isinstance(p, Problem) for p in keys.values())


def test_the_course_library_kernels_score_full_marks_in_labs_03_and_04():
    """The library's coalesced naive and tiled matmuls (lessons 03/04) follow the labs' convention, so a
    learner who applies the lessons gets full marks (before: matmul_naive_kernel scored 0/3 in lab03)."""
    import importlib

    mm = importlib.import_module("gpulab.kernels.matmul")  # the module (gpulab.kernels.matmul is the launcher)
    naive = problems.lab03.MATMUL.check(mm.matmul_naive_kernel, trusted=True)  # gpulab's own: no own-code stage
    assert naive.passed and naive.score == 3, naive
    assert mm.TILE == TILE  # the lab's tile is the library's
    tiled = problems.lab04.MATMUL_TILED.check(mm.matmul_tiled_kernel, ptx=None, trusted=True)
    assert tiled.passed and tiled.score == 4, tiled
