"""Lab 09's checks on kernels with x along the rows, and on the mistakes named since the review of 2026-12-03.

A grid-stride kernel is right for any launch, so `r0, q0 = cuda.grid(2)` or a flat index decoded with the row fastest
computes the right result; before, such kernels, and a one-thread-per-output matmul with `i, j = cuda.grid(2)` (the
checks' sizes all fitted a transposed grid), got full marks. Now the first are over their coalescing budget
(gpulab.capstone_budgets) and the matmul is right only with x and y exchanged: half the points either way, with the
fix in the hint, as in labs 03, 04 and 07. Each test pastes the wrong answer into the lab's own check call."""

from __future__ import annotations

import inspect
import math
from pathlib import Path

import nbformat
import pytest
from numba import cuda, float32

import gpulab
from gpulab import capstone
from gpulab.capstone_budgets import BUDGETS
from gpulab.exercises import check_kernel
from gpulab.kernels import nn_ops
from gpulab.source import py_func

TILE = 16
POINTS = 3  # the points of lab 09's matmul, conv and adam cells (each check of a cell is worth them all)
LAB09 = Path(__file__).resolve().parents[1] / "labs" / "solutions" / "lab09_training.ipynb"


def lab_check(op, kernel, block=None):
    """The lab's check cell: `check_kernel(kernel, **cap.problem(op, kernel[, block]), points=...)`."""
    cap = capstone.Capstone()
    return check_kernel(kernel, **cap.problem(op, kernel, block=block), points=POINTS)


@cuda.jit
def matmul_rows_on_x(A, B, C):  # lab 03's matmul with the row from x
    i, j = cuda.grid(2)
    if i < C.shape[0] and j < C.shape[1]:
        acc = float32(0.0)
        for k in range(A.shape[1]):
            acc += A[i, k] * B[k, j]
        C[i, j] = acc


@cuda.jit
def matmul_tiled_rows_on_x(A, B, C):  # lab 04's tiled matmul with x along the rows throughout (tx and ty exchanged)
    sA = cuda.shared.array((TILE, TILE), float32)
    sB = cuda.shared.array((TILE, TILE), float32)
    tx, ty = cuda.threadIdx.x, cuda.threadIdx.y
    i, j = cuda.grid(2)
    acc = float32(0.0)
    for t in range((A.shape[1] + TILE - 1) // TILE):
        k = t * TILE
        sA[tx, ty] = A[i, k + ty] if i < A.shape[0] and k + ty < A.shape[1] else float32(0.0)
        sB[tx, ty] = B[k + tx, j] if k + tx < B.shape[0] and j < B.shape[1] else float32(0.0)
        cuda.syncthreads()  # wait until both tiles are loaded
        for kk in range(TILE):
            acc += sA[tx, kk] * sB[kk, ty]
        cuda.syncthreads()  # wait until every thread used the tiles
    if i < C.shape[0] and j < C.shape[1]:
        C[i, j] = acc


def _gemm(rows_on_x=False, b_transposed=False):
    @cuda.jit
    def gemm(a, b, c):
        if rows_on_x:
            i0, j0 = cuda.grid(2)
            si, sj = cuda.gridsize(2)
        else:
            j0, i0 = cuda.grid(2)
            sj, si = cuda.gridsize(2)
        M, K, N = a.shape[0], a.shape[1], b.shape[1]
        for i in range(i0, M, si):
            for j in range(j0, N, sj):
                acc = 0.0
                for k in range(K):
                    acc += a[i, k] * (b[j, k] if b_transposed else b[k, j])
                c[i, j] = acc

    return gemm


@cuda.jit
def matmul_b_transposed(A, B, C):  # one thread per output, B[j, k] for B[k, j]
    j, i = cuda.grid(2)
    if i < C.shape[0] and j < C.shape[1]:
        acc = float32(0.0)
        for k in range(A.shape[1]):
            acc += A[i, k] * B[j, k]
        C[i, j] = acc


def _im2col(rows_on_x=False, offsets_swapped=False):
    @cuda.jit
    def im2col(x, cols, kh, kw, stride, pad, ho, wo):
        if rows_on_x:
            r0, q0 = cuda.grid(2)
            sr, sq = cuda.gridsize(2)
        else:
            q0, r0 = cuda.grid(2)
            sq, sr = cuda.gridsize(2)
        C, H, W = x.shape[1], x.shape[2], x.shape[3]
        for r in range(r0, cols.shape[0], sr):
            n, i, j = r // (ho * wo), (r // wo) % ho, r % wo
            for q in range(q0, cols.shape[1], sq):
                a, b, c = q // (kw * C), (q // C) % kw, q % C
                if offsets_swapped:
                    a, b = b, a
                ih, iw = i * stride + a - pad, j * stride + b - pad
                cols[r, q] = x[n, c, ih, iw] if 0 <= ih < H and 0 <= iw < W else 0.0

    return im2col


def _col2im(h_fastest=False, pad_sign=1):
    @cuda.jit
    def col2im(dcols, dx, kh, kw, stride, pad, ho, wo):
        N, C, H, W = dx.shape[0], dx.shape[1], dx.shape[2], dx.shape[3]
        for t in range(cuda.grid(1), N * C * H * W, cuda.gridsize(1)):
            n, c = t // (C * H * W), (t // (H * W)) % C
            h, w = (t % H, (t // H) % W) if h_fastest else ((t // W) % H, t % W)
            acc = 0.0
            for a in range(kh):
                ii = h + pad_sign * pad - a
                if ii >= 0 and ii % stride == 0 and ii // stride < ho:
                    for b in range(kw):
                        jj = w + pad_sign * pad - b
                        if jj >= 0 and jj % stride == 0 and jj // stride < wo:
                            acc += dcols[(n * ho + ii // stride) * wo + jj // stride, (a * kw + b) * C + c]
            dx[n, c, h, w] = acc

    return col2im


@cuda.jit
def maxpool_i_fastest(x, out, arg, k, stride):  # t decoded with the output row fastest
    N, C, HO, WO = out.shape[0], out.shape[1], out.shape[2], out.shape[3]
    for t in range(cuda.grid(1), N * C * HO * WO, cuda.gridsize(1)):
        n, c, i, j = t // (C * HO * WO), (t // (HO * WO)) % C, t % HO, (t // HO) % WO
        best, where = x[n, c, i * stride, j * stride], 0
        for a in range(k):
            for b in range(k):
                if x[n, c, i * stride + a, j * stride + b] > best:
                    best, where = x[n, c, i * stride + a, j * stride + b], a * k + b
        out[n, c, i, j], arg[n, c, i, j] = best, where


@cuda.jit
def maxpool_backward_h_fastest(dout, arg, dx, k, stride):  # t decoded with the input row fastest
    N, C, H, W = dx.shape[0], dx.shape[1], dx.shape[2], dx.shape[3]
    HO, WO = dout.shape[2], dout.shape[3]
    for t in range(cuda.grid(1), N * C * H * W, cuda.gridsize(1)):
        n, c, h, w = t // (C * H * W), (t // (H * W)) % C, t % H, (t // H) % W
        acc = 0.0
        for a in range(k):
            if h - a >= 0 and (h - a) % stride == 0 and (h - a) // stride < HO:
                for b in range(k):
                    if w - b >= 0 and (w - b) % stride == 0 and (w - b) // stride < WO:
                        if arg[n, c, (h - a) // stride, (w - b) // stride] == a * k + b:
                            acc += dout[n, c, (h - a) // stride, (w - b) // stride]
        dx[n, c, h, w] = acc


def _adam(m_hat=False, v_hat=False):
    @cuda.jit
    def adam(p, g, m, v, lr_t, b1, b2, eps_t):
        for i in range(cuda.grid(1), p.size, cuda.gridsize(1)):
            m[i] = b1 * m[i] + (1.0 - b1) * g[i]
            v[i] = b2 * v[i] + (1.0 - b2) * g[i] * g[i]
            mh = m[i] / (1.0 - b1) if m_hat else m[i]
            vh = v[i] / (1.0 - b2) if v_hat else v[i]
            p[i] -= lr_t * mh / (math.sqrt(vh) + eps_t)

    return adam


@pytest.mark.parametrize("kernel", [matmul_rows_on_x, matmul_tiled_rows_on_x], ids=["plain", "tiled"])
def test_a_matmul_in_blocks_with_the_row_from_x_is_right_only_exchanged_and_earns_half(kernel):
    res = lab_check("matmul", kernel, block=(TILE, TILE))
    # before: full marks, as every size fitted the transposed grid; (40, 9, 5) does not
    assert res.status == "failed" and res.score == POINTS / 2 and res.details["orientation"] == "exchanged", res
    assert "only when launched with x and y exchanged ([(3, 1), (16, 16)] for size (40, 9, 5))" in res.message, res
    assert "write `j, i = cuda.grid(2)`" in res.hint, res


@pytest.mark.parametrize(
    ("op", "kernel", "array", "fix"),
    [
        ("matmul", _gemm(rows_on_x=True), "a", "`j0, i0 = cuda.grid(2)`"),
        ("im2col", _im2col(rows_on_x=True), "cols", "`q0, r0 = cuda.grid(2)`"),
        ("col2im", _col2im(h_fastest=True), "dx", "w = t % W, h = (t // W) % H"),
        ("maxpool", maxpool_i_fastest, "out", "j = t % WO, i = (t // WO) % HO"),
        ("maxpool_backward", maxpool_backward_h_fastest, "dx", "w = t % W, h = (t // W) % H"),
    ],
)
def test_a_grid_stride_kernel_with_the_row_fastest_is_over_its_coalescing_budget(op, kernel, array, fix):
    res = lab_check(op, kernel)  # before: full marks (a grid-stride loop is right for any launch)
    assert res.status == "over budget" and res.score == POINTS / 2, res
    assert f"but budget: coalescing of {array}: uncoalesced" in res.message and fix in res.hint, res


def _xent(chunked=False, per_element=False):
    """softmax_xent by grid stride over rows (the course's), over a contiguous chunk of rows per thread, or with one
    step per element t = r * K + k (each recomputing its row's maximum and sum: right, and its own coalescing)."""

    @cuda.jit
    def xent(logits, labels, grad, losses):
        N, K = logits.shape[0], logits.shape[1]
        per = (N + cuda.gridsize(1) - 1) // cuda.gridsize(1)
        t0, step = cuda.grid(1), cuda.gridsize(1)
        start, stop, stride = (t0 * per, min(t0 * per + per, N), 1) if chunked else (t0, N * K, step)
        if not chunked and not per_element:
            stop = N
        for t in range(start, stop, stride):
            r, k0, k1 = (t // K, t % K, t % K + 1) if per_element else (t, 0, K)
            m = logits[r, 0]
            for c in range(1, K):
                m = max(m, logits[r, c])
            s = 0.0
            for c in range(K):
                s += math.exp(logits[r, c] - m)
            y = labels[r]
            for k in range(k0, k1):
                if k == y:
                    losses[r] = math.log(s) - (logits[r, y] - m)
                p = math.exp(logits[r, k] - m) / s
                grad[r, k] = (p - 1.0 if k == y else p) / N

    return xent


def test_softmax_xent_over_a_chunk_of_rows_per_thread_is_over_its_labels_budget():
    """Budgeted on labels only (gpulab.capstone_budgets): logits and grad are a row apart for the course's own kernel
    (one row per step), and a right kernel with one step per element writes losses scattered."""
    res = lab_check("softmax_xent", _xent(chunked=True))  # before: full marks
    assert res.status == "over budget" and res.score == POINTS / 2, res
    assert "but budget: coalescing of labels: uncoalesced" in res.message and "4x" in res.message, res
    assert "`for r in range(cuda.grid(1), N, cuda.gridsize(1)):`" in res.hint, res
    for right in (_xent(), _xent(per_element=True)):
        res = lab_check("softmax_xent", right)
        assert res.passed and res.score == POINTS, res
        assert any(c.name == "budget: coalescing of labels" and c.passed for c in res.checks), res


@pytest.mark.parametrize(
    ("op", "kernel", "block", "words"),
    [
        ("matmul", matmul_b_transposed, (TILE, TILE), "B is read transposed"),
        ("matmul", _gemm(b_transposed=True), None, "B is read transposed"),
        ("col2im", _col2im(pad_sign=-1), None, "the padding shifts the wrong way"),
        ("im2col", _im2col(offsets_swapped=True), None, "the window offsets a and b are swapped"),
        ("adam_update", _adam(m_hat=True), None, "m was bias-corrected (m / (1 - b1)) but v was not"),
        ("adam_update", _adam(m_hat=True, v_hat=True), None, "m and v were bias-corrected in the kernel"),
    ],
)
def test_a_newly_named_mistake_fails_and_is_named(op, kernel, block, words):
    res = lab_check(op, kernel, block)  # before: "expected X, got Y" with no hint (B transposed: past B's end)
    assert res.status == "failed" and res.score == 0 and res.max_score == POINTS, res
    assert words in res.hint, res


def test_the_budgets_name_the_course_kernels_parameters():
    for op, budget in BUDGETS.items():
        course = getattr(nn_ops, capstone.COURSE_KERNELS[op])
        assert tuple(budget.names) == tuple(inspect.signature(py_func(course)).parameters), op


def test_the_mistakes_module_is_reference_code():
    """capstone_mistakes computes each op's wrong answers from its spec with one change (its col2im gather, given
    the right shift, is col2im): a learner's kernel may not call it, as it may not call capstone_specs."""
    from gpulab import capstone_mistakes
    from gpulab.exercises.own_code import is_reference_module

    assert is_reference_module(capstone_mistakes._col2im_gather.__module__)


def test_lab09s_solution_kernels_keep_full_marks():
    """The solution notebook's answer and check cells, exercises 1-6 (not the training)."""
    nb = nbformat.read(str(LAB09), as_version=4)
    ns: dict = {"gpulab": gpulab}
    scores = {}
    for cell in nb.cells:
        grade_id = cell.metadata.get("nbgrader", {}).get("grade_id", "")
        if cell.cell_type != "code" or grade_id == "lab09-train-check":
            continue
        if "import gpulab" in cell.source and "banner" in cell.source or "google.colab" in cell.source:
            continue
        exec(compile(cell.source, grade_id or "lab09", "exec"), ns)  # noqa: S102 - the lab's own cells
        if grade_id.endswith("-check"):
            scores.update({r.name: (r.score, r.max_score) for r in ns["results"]})
        if "cap.report()" in cell.source:
            break
    assert len(scores) == len(capstone.LEARNER_OPS), scores
    assert all(score == top for score, top in scores.values()), scores
