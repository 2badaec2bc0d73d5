"""A kernel right only with x and y exchanged (`i, j = cuda.grid(2)`, x along the rows) is recognised but not passed,
in lessons and labs alike: every later launch (a lesson's next cells, gpulab's launchers, the capstone) puts x along
the columns, where it is wrong. It earns half the points, the verdict names the fix, and ``or_reference`` hands the
cells below the reference instead (before, it passed, was handed on, and the next cell's assert failed)."""

from __future__ import annotations

import numpy as np
from numba import cuda, float32

import gpulab
from gpulab import lessons, problems
from gpulab.grading import report
from gpulab.kernels import blocks_for
from gpulab.kernels.matmul import launch_config
from gpulab.kernels.matmul import matmul_naive_kernel as naive_reference


@cuda.jit
def scale_rows_on_x(alpha, a, out):
    i, j = cuda.grid(2)  # x -> row: right only launched with x and y exchanged
    if i < out.shape[0] and j < out.shape[1]:
        out[i, j] = alpha * a[i, j]


@cuda.jit
def scale_cols_on_x(alpha, a, out):
    col, row = cuda.grid(2)
    if row < out.shape[0] and col < out.shape[1]:
        out[row, col] = alpha * a[row, col]


@cuda.jit
def matmul_rows_on_x(A, B, C):
    i, j = cuda.grid(2)
    if i < C.shape[0] and j < C.shape[1]:
        acc = float32(0.0)
        for k in range(A.shape[1]):
            acc += A[i, k] * B[k, j]
        C[i, j] = acc


@cuda.jit
def matmul_cols_on_x(A, B, C):
    col, row = cuda.grid(2)
    if row < C.shape[0] and col < C.shape[1]:
        acc = float32(0.0)
        for k in range(A.shape[1]):
            acc += A[row, k] * B[k, col]
        C[row, col] = acc


def assert_orientation_verdict(res, output: str) -> None:
    assert not res.passed and res.status == "failed" and res.score == res.max_score / 2, res
    assert res.details["orientation"] == "exchanged", res
    assert "but orientation: only when launched with x and y exchanged" in res.message, res
    assert "Launched the course's way, x along the columns" in res.message and f"it is wrong: {output}[" in res.message
    assert "write `j, i = cuda.grid(2)` (j the column, i the row)" in res.hint, res


def assert_reference_handed_on(res, kernel, lesson: str, name: str, capsys) -> object:
    ref = lessons.exercise(lesson, name).reference
    assert lessons.or_reference(res, kernel, lesson, name) is ref
    out = capsys.readouterr().out
    assert f"Your {res.name} is correct only when launched with x and y exchanged" in out, out
    assert "the cells below launch it the course's way, x along the columns, where it is wrong" in out, out
    assert "Write `j, i = cuda.grid(2)` (j the column, i the row) and run its check again." in out, out
    return ref


def test_lesson01_scale2d_rows_on_x_is_not_passed_and_the_next_cell_gets_the_reference(capsys):
    res = lessons.check("01", "scale2d", scale_rows_on_x)
    assert_orientation_verdict(res, "out")
    scale2d = assert_reference_handed_on(res, scale_rows_on_x, "01", "scale2d", capsys)
    # lesson 01's next cell: the course's launch, x along the columns (the learner's kernel left 160 unwritten)
    rows, cols = 20, 40
    m_h = np.random.default_rng(0).standard_normal((rows, cols)).astype(np.float32)
    s_h = np.zeros_like(m_h)
    scale2d[(blocks_for(cols, 16), blocks_for(rows, 16)), (16, 16)](np.float32(3.0), m_h, s_h)
    assert np.allclose(s_h, 3.0 * m_h)


def test_lesson03_matmul_naive_rows_on_x_is_not_passed_and_the_next_cell_gets_the_reference(capsys):
    res = lessons.check("03", "matmul_naive", matmul_rows_on_x)
    assert_orientation_verdict(res, "C")
    naive = assert_reference_handed_on(res, matmul_rows_on_x, "03", "matmul_naive", capsys)
    rng = np.random.default_rng(0)
    for M, K, N in [(1, 1, 1), (17, 33, 9), (31, 16, 47)]:  # lesson 03's next cell
        a_h = rng.standard_normal((M, K), dtype=np.float32)
        b_h = rng.standard_normal((K, N), dtype=np.float32)
        c_h = np.zeros((M, N), np.float32)
        naive[launch_config(naive_reference, M, N)](a_h, b_h, c_h)
        assert np.abs(c_h - a_h @ b_h).max() < 1e-3 * np.sqrt(K)


def test_kernels_in_the_course_orientation_still_pass_and_are_handed_on(capsys):
    for lesson, name, kernel in (("01", "scale2d", scale_cols_on_x), ("03", "matmul_naive", matmul_cols_on_x)):
        res = lessons.check(lesson, name, kernel)
        assert res.passed and res.score == res.max_score and "exchanged" not in res.message + res.hint, res
        assert "orientation" not in res.details and all(c.passed for c in res.checks), res
        assert lessons.or_reference(res, kernel, lesson, name) is kernel
    assert capsys.readouterr().out == ""


@cuda.jit
def affine_rows_on_x(A, alpha, beta, out):
    i, j = cuda.grid(2)
    if i < out.shape[0] and j < out.shape[1]:
        out[i, j] = alpha * A[i, j] + beta


@cuda.jit
def affine_cols_on_x(A, alpha, beta, out):
    col, row = cuda.grid(2)
    if row < out.shape[0] and col < out.shape[1]:
        out[row, col] = alpha * A[row, col] + beta


def test_lab01_affine_rows_on_x_earns_half_its_cell(capsys):
    res = problems.lab01.AFFINE.check(affine_rows_on_x)
    assert_orientation_verdict(res, "out")
    hidden = problems.lab01.AFFINE.check(affine_rows_on_x, sizes=[(1, 40), (40, 1), (33, 17)], seed=102)
    assert report(res, hidden, points=2) == 1.0
    good = problems.lab01.AFFINE.check(affine_cols_on_x)
    assert good.passed and report(good, points=2) == 2.0, good


def test_lab03_matmul_rows_on_x_earns_half():
    res = problems.lab03.MATMUL.check(matmul_rows_on_x)
    assert_orientation_verdict(res, "C")
    if gpulab.is_simulator():  # its coalescing, counted under the exchanged launch, is over budget too: listed after
        failed = [c.name for c in res.checks if not c.passed]
        assert failed[0] == "orientation" and any(n.startswith("budget") for n in failed[1:]), res
