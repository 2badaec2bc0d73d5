"""The emulated gpu-size tier: every lab check and the lessons' numeric asserts at their gpu-mode sizes,
with the GPU's float32 arithmetic emulated in NumPy.

No GPU is needed. Each lab Problem runs at ``scale="gpu"`` with its kernel replaced by a faithful float32
stand-in (``host=``): where a GPU thread accumulates sequentially (a matmul's loop over k, a convolution's
taps), the emulation adds float32 products into a float32 accumulator in the same order; tree reductions
halve in float32 as the kernel does; atomics add in a random order. A tolerance that a correct kernel
cannot meet at gpu sizes fails here, in CI, instead of on a learner's Colab GPU. The tier has teeth: the
same emulations fail when the old constant tolerance (rtol=1e-4, atol=1e-5) is put back.

The lessons' asserts whose tolerance depends on the arithmetic are emulated at the end of this file
(lesson notebooks 00, 03, 05, 06, 07, 10) with the figures their gpu-mode cells use, and lesson 09's
accuracy target for the digits fallback is trained at its gpu-mode settings (read from the notebook).
"""

from __future__ import annotations

import functools
import hashlib
import math
from pathlib import Path

import numpy as np
import pytest

from gpulab import problems

F32 = np.float32


# ---------------------------------------------------------------------------------------------------
# float32 building blocks, in the order a GPU thread computes


def seq_matmul(A: np.ndarray, B: np.ndarray, init: np.ndarray | None = None) -> np.ndarray:
    """C = init + A @ B with one float32 accumulator per output, adding k = 0, 1, ... in order
    (the loop of a naive or tiled kernel: a tile adds its TILE products in the same k order)."""
    m, K = A.shape
    n = B.shape[1]
    C = np.zeros((m, n), F32) if init is None else np.broadcast_to(init, (m, n)).astype(F32)
    tmp = np.empty((m, n), F32)
    for k in range(K):
        np.multiply(A[:, k : k + 1], B[k : k + 1, :], out=tmp)  # float32 product, rounded
        C += tmp  # float32 add, rounded
    return C


def seq_sum_rows(X: np.ndarray) -> np.ndarray:
    """Sum over axis 0 one row after another in float32 (a sequential loop over the batch)."""
    acc = np.zeros(X.shape[1:], F32)
    for r in range(X.shape[0]):
        acc += X[r]
    return acc


def tree_sum(buf: np.ndarray) -> np.ndarray:
    """A shared-memory tree along the last axis (a power of two): buf[t] += buf[t + s], s halving."""
    buf = buf.astype(F32).copy()
    s = buf.shape[-1] // 2
    while s > 0:
        buf[..., :s] += buf[..., s : 2 * s]
        s //= 2
    return buf[..., 0]


def strided_partials(X: np.ndarray, tpb: int) -> np.ndarray:
    """Each of tpb threads sums columns t, t + tpb, ... of every row in order (float32): (rows, tpb)."""
    rows, cols = X.shape
    acc = np.zeros((rows, tpb), F32)
    for start in range(0, cols, tpb):
        chunk = X[:, start : start + tpb]
        acc[:, : chunk.shape[1]] += chunk
    return acc


def memo(n_out: int):
    """Cache an emulation's outputs (its last ``n_out`` arguments) by the bytes of its inputs: lab03
    and lab04 share matmul inputs, and the teeth tests rerun the pass tests' largest cases."""

    def deco(fn):
        cache: dict = {}

        @functools.wraps(fn)
        def wrapper(*args):
            ins, outs = args[:-n_out], args[-n_out:]
            h = hashlib.blake2b(digest_size=16)
            for a in ins:
                if isinstance(a, np.ndarray):
                    h.update(repr((a.shape, a.dtype.str)).encode() + np.ascontiguousarray(a).tobytes())
                else:
                    h.update(repr(a).encode())
            key = h.hexdigest()
            if key not in cache:
                fn(*args)
                cache[key] = [np.array(o) for o in outs]
            for o, v in zip(outs, cache[key]):
                o[...] = v

        return wrapper

    return deco


# ---------------------------------------------------------------------------------------------------
# One emulation per lab problem (host=fn(*kernel arguments))


def _add(a, b, out):
    out[...] = a + b


def _affine(A, alpha, beta, out):
    out[...] = alpha * A + beta


def _saxpy(alpha, x, y, out):
    out[...] = alpha * x + y


def _stencil3(x, out):  # acc = x[i]; acc += x[i-1]; acc += x[i+1]
    acc = x.copy()
    acc[1:] += x[:-1]
    acc[:-1] += x[1:]
    out[...] = acc


def _blur3(a, out):  # acc = np.float32(0.0); acc += at_clamped(a, i + di, j + dj) for di, dj in -1..1; acc / 9.0
    n, m = a.shape
    rows, cols = np.clip(np.arange(-1, n + 1), 0, n - 1), np.clip(np.arange(-1, m + 1), 0, m - 1)
    p = a.astype(F32)[np.ix_(rows, cols)]
    acc = np.zeros((n, m), F32)  # the lab's solution accumulates in float32 (each add rounded)
    for di in range(3):
        for dj in range(3):
            acc += p[di : di + n, dj : dj + m]
    out[...] = acc.astype(np.float64) / 9.0  # float32 / float64 literal: a float64 division, rounded once to out


def _stencil_shared(x, out):  # buf[tx] + buf[tx+1] + buf[tx+2] = (x[i-1] + x[i]) + x[i+1]
    p = np.concatenate([[F32(0)], x, [F32(0)]]).astype(F32)
    out[...] = (p[:-2] + p[1:-1]) + p[2:]


def _copy(a, out):
    out[...] = a


def _rotate(a, out):  # a quarter turn clockwise: out[j, M - 1 - i] = a[i, j]
    out[...] = np.rot90(a, k=-1)


def _pipelined_add(x_h, y_h, out_h, chunk, n_streams):  # lab02's host function: float32 adds, one per element
    for start in range(0, x_h.size, chunk):
        part = slice(start, min(start + chunk, x_h.size))
        np.add(x_h[part], y_h[part], out=out_h[part])


@memo(1)
def _vecmat(A, x, y):  # y[j]: acc += x[i] * A[i, j] for i = 0, 1, ..., M - 1
    y[...] = seq_matmul(x[None, :], A)[0]


@memo(1)
def _matmul(A, B, C):
    C[...] = seq_matmul(A, B)


@memo(1)
def _dense_relu(X, W, b, Y):  # W (n_out, n_in): acc = b[j]; acc += X[i, k] * W[j, k]; max(acc, 0)
    Y[...] = np.maximum(seq_matmul(X, W.T, init=b[None, :]), F32(0))


def _block_reverse(x, out):
    out[...] = problems.lab04.block_reverse_spec(x)


def _sum_atomic(x, out):  # atomics: one running float32 total, in whatever order the warps arrive
    order = np.random.default_rng(0).permutation(x.size)
    out[0] = np.cumsum(x[order], dtype=F32)[-1] if x.size else F32(0)


def _histogram(labels, counts):
    counts[...] = np.bincount(labels, minlength=counts.size)


def _confusion(labels, predictions, cm):  # the counts of lab05's confusion matrix, row the label
    c = cm.shape[0]
    cm[...] = np.bincount(labels.astype(np.int64) * c + predictions, minlength=c * c).reshape(c, c)


def _block_sum(x, partial):
    tpb = problems.lab05.TPB
    buf = np.zeros(partial.size * tpb, F32)
    buf[: x.size] = x
    partial[...] = tree_sum(buf.reshape(partial.size, tpb))


def _softmax(x, out):  # lab05's kernel: strided max, tree; strided exp-sum (float32), tree; divide
    tpb = problems.lab05.TPB
    m = x.max(axis=1, keepdims=True)
    e = np.exp(x - m).astype(F32)
    s = tree_sum(strided_partials(e, tpb))
    out[...] = e / s[:, None]


def xor_butterfly(v: np.ndarray) -> np.ndarray:
    """``v += cuda.shfl_xor_sync(FULL, v, k)`` for k = 16, 8, 4, 2, 1 along the last axis (32 lanes), in float32:
    lane l adds lane l ^ k's value; both partners get the same sum, so at the end every lane holds the same."""
    v = v.astype(F32)
    lanes = np.arange(v.shape[-1])
    k = v.shape[-1] // 2
    while k > 0:
        v = v + v[..., lanes ^ k]
        k //= 2
    return v


def _softmax_warp(x, out):  # lab05's warp kernel: strided max; per-lane strided exp-sums (float32), xor steps; divide
    m = x.max(axis=1, keepdims=True)  # a maximum is exact in any order
    e = np.exp(x - m).astype(F32)
    s = xor_butterfly(strided_partials(e, 32))  # (rows, 32): lane l's columns l, l + 32, ... in order, then 16..1
    assert (s == s[:, :1]).all()  # every lane ends with the same sum
    out[...] = e / s[:, :1]


def _conv1d(x, w, out):
    K = w.size
    acc = np.zeros(out.size, F32)
    for k in range(K):
        acc += x[k : k + out.size] * w[k]
    out[...] = acc


def _conv2d_dilated(x, w, dilation, out):
    ho, wo = out.shape
    acc = np.zeros(out.shape, F32)
    for a in range(w.shape[0]):
        for b in range(w.shape[1]):
            acc += x[dilation * a : dilation * a + ho, dilation * b : dilation * b + wo] * w[a, b]
    out[...] = acc


@memo(1)
def _conv2d(x, w, b, stride, pad, out):  # acc = b[f]; for c, a, d: acc += x * w (taps in padding skipped)
    n, f, ho, wo = out.shape
    c_in, k = w.shape[1], w.shape[2]
    xp_ = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    acc = np.broadcast_to(b[None, :, None, None], out.shape).astype(F32)
    for c in range(c_in):
        for a in range(k):
            for d in range(k):
                patch = xp_[:, c, a : a + stride * ho : stride, d : d + stride * wo : stride]  # (N, Ho, Wo)
                acc += patch[:, None] * w[None, :, c, a, d, None, None]  # zeros in the padding add 0
    out[...] = acc


def _maxpool(x, k, stride, out):
    out[...] = problems.lab07.maxpool_spec(x, k, stride)


def _im2col(x, k, stride, pad, cols):
    cols[...] = problems.lab07.im2col_spec(x, k, stride, pad)


def _conv2d_im2col(x, w, b, stride, pad, out):  # cols, then the course's matmul (k in order), then + b
    f, c, k, _ = w.shape
    n, _, ho, wo = out.shape
    cols = problems.lab07.im2col_spec(x, k, stride, pad)
    y = seq_matmul(cols, np.ascontiguousarray(w.reshape(f, c * k * k).T))
    y += b
    out[...] = y.reshape(n, ho, wo, f).transpose(0, 3, 1, 2)


def _leaky_relu_backward(dout, y, alpha, dx):
    dx[...] = np.where(y > 0, dout, alpha * dout)


def _maxpool_backward(dout, arg, k, stride, dx):  # the kernel's gather: acc += dout over (a, b) in order
    dx[...] = problems.lab08.maxpool_backward_spec(np.empty(dx.shape, F32), dout, arg, k, stride)


def _dropout_kernel(
    x, states, p, out
):  # the grid-stride loop a row of the grid at a time: row k, draw k of each thread
    from gpulab import xoroshiro

    threads = states.size
    for start in range(0, x.size, threads):  # the elements i = start + tid, each thread's next draw
        u = xoroshiro.uniform_float32_streams(states, 1)[0]  # advances every state by one draw, as the kernel does
        part = slice(start, min(start + threads, x.size))
        width = part.stop - part.start
        kept = u[:width] >= p
        out[part] = np.where(kept, x[part] / (F32(1) - p), F32(0))
    # (in a last, partial row the threads past the end advance here and not in the kernel: nothing reads them after)


def _dropout_step(x, dy, words, p, y, dx):  # lab08's dropout_step: forward on words, backward on a copy from before
    saved = words.copy()
    _dropout_kernel(x, problems.lab08.as_states(words), p, y)
    _dropout_kernel(dy, problems.lab08.as_states(saved), p, dx)


@memo(3)
def _linear_backward(x, W, dout, dx, dW, db):  # cuBLAS/CUB order unknown: sequential, the worst usual case
    dx[...] = seq_matmul(dout, W)
    dW[...] = seq_matmul(np.ascontiguousarray(dout.T), x)
    db[...] = seq_sum_rows(dout)


@memo(3)
def _conv2d_backward(x, w, dout, stride, pad, dx, dw, db):
    ops = __import__("gpulab.nn.ops", fromlist=["get"]).get("numpy")
    f, c, k, _ = w.shape
    n, _, ho, wo = dout.shape
    cols, _, _ = ops.im2col(x, k, k, stride, pad)  # (N*Ho*Wo, k*k*C)
    d = np.ascontiguousarray(dout.transpose(0, 2, 3, 1).reshape(n * ho * wo, f))
    dw[...] = (
        seq_matmul(np.ascontiguousarray(d.T), np.ascontiguousarray(cols)).reshape(f, k, k, c).transpose(0, 3, 1, 2)
    )
    db[...] = seq_sum_rows(d)
    wmat = np.ascontiguousarray(w.transpose(0, 2, 3, 1).reshape(f, k * k * c))
    dx[...] = ops.col2im(seq_matmul(d, wmat), x.shape, k, k, stride, pad)


def _scale_mask(s, scale, causal, out):
    out[...] = problems.lab12.scale_mask_spec(s, scale, causal)  # one float32 multiply per element, as the kernel


def _softmax_backward(p, dp, ds):
    dot = tree_sum(strided_partials(p * dp, problems.lab12.TPB))  # strided float32 sums, then the tree
    ds[...] = p * (dp - dot[:, None])


def _combine(mx, sm, o, out):
    top = mx.max(axis=0)
    num = np.zeros(out.shape, F32)
    den = np.zeros(out.shape[0], F32)
    for t in range(mx.shape[0]):  # splits in order, float32 accumulators
        w = np.exp(mx[t] - top).astype(F32)
        num += w[:, None] * o[t]
        den += w * sm[t]
    out[...] = num / den[:, None]


def _online_attention(q, k, v, scale, causal, bk):
    """The fused kernel's float32 online softmax, one key tile of bk after another: (out, row log-sum-exp)."""
    n, m = q.shape[0], k.shape[0]
    rows = np.arange(n)[:, None]
    row_max = np.full(n, -np.inf, F32)
    row_sum = np.zeros(n, F32)
    acc = np.zeros((n, v.shape[1]), F32)
    for k0 in range(0, m, bk):  # the online softmax, one key tile at a time, in float32
        s = (q @ k[k0 : k0 + bk].T) * F32(scale)
        if causal:
            s = np.where(np.arange(k0, min(k0 + bk, m))[None, :] <= rows + (m - n), s, -np.inf).astype(F32)
        new = np.maximum(row_max, s.max(axis=1))
        with np.errstate(invalid="ignore"):
            alpha = np.where(np.isneginf(new), F32(1), np.exp(row_max - new)).astype(F32)
            p = np.where(np.isneginf(new)[:, None], F32(0), np.exp(s - new[:, None])).astype(F32)
        row_sum = row_sum * alpha + p.sum(axis=1, dtype=F32)
        acc = acc * alpha[:, None] + p @ v[k0 : k0 + bk]
        row_max = new
    return acc / row_sum[:, None], row_max + np.log(row_sum)


def _flash_lse(q, k, v, scale, causal, out, lse):
    out[...], lse[...] = _online_attention(q, k, v, scale, causal, problems.lab12.BK)


# Lesson 12's in-flow exercises (gpulab.lessons.EXERCISES) that have gpu sizes.
def _lesson_scores(q, k, scale, causal, s):  # acc += q[i, c] * k[j, c] in order, then * scale; masked: -inf
    n, m = s.shape
    scores = seq_matmul(q, np.ascontiguousarray(k.T)) * F32(scale)
    if causal:
        scores[np.arange(m)[None, :] > np.arange(n)[:, None] + (m - n)] = -np.inf
    s[...] = scores


def _lesson_online_softmax(x, out):  # per thread: strided running (max, sum); tree merge; exp(x - max) / sum
    from gpulab.lessons import answers_12

    tpb = answers_12.SOFTMAX_TPB
    rows, cols = x.shape
    run_max = np.full((rows, tpb), -np.inf, F32)
    run_sum = np.zeros((rows, tpb), F32)
    with np.errstate(invalid="ignore"):
        for start in range(0, cols, tpb):
            chunk = x[:, start : start + tpb]
            w = chunk.shape[1]
            new = np.maximum(run_max[:, :w], chunk)
            live = new != -np.inf
            upd = run_sum[:, :w] * np.exp(run_max[:, :w] - new) + np.exp(chunk - new)
            run_sum[:, :w] = np.where(live, upd, run_sum[:, :w]).astype(F32)
            run_max[:, :w] = new
        stride = tpb // 2
        while stride > 0:
            m1, m2 = run_max[:, :stride], run_max[:, stride : 2 * stride]
            new = np.maximum(m1, m2)
            merged = run_sum[:, :stride] * np.exp(m1 - new) + run_sum[:, stride : 2 * stride] * np.exp(m2 - new)
            run_sum[:, :stride] = np.where(new != -np.inf, merged, run_sum[:, :stride]).astype(F32)
            run_max[:, :stride] = new
            stride //= 2
    out[...] = np.exp(x - run_max[:, :1]) / run_sum[:, :1]


def _lesson_flash(q, k, v, scale, causal, out):
    from gpulab.transformer import flash

    out[...] = _online_attention(q, k, v, scale, causal, flash.BK)[0]


LESSON_EMULATIONS = {
    ("12", "scores"): _lesson_scores,
    ("12", "online_softmax"): _lesson_online_softmax,
    ("12", "flash"): _lesson_flash,
}

EMULATIONS = {
    "lab01.ADD": _add,
    "lab01.AFFINE": _affine,
    "lab01.SAXPY": _saxpy,
    "lab01.STENCIL3": _stencil3,
    "lab01.BLUR3": _blur3,
    "lab02.COPY2D": _copy,
    "lab02.ROTATE": _rotate,
    "lab02.ROTATE_TILED": _rotate,
    "lab02.PIPELINED_ADD": _pipelined_add,
    "lab03.VECMAT": _vecmat,
    "lab03.MATMUL": _matmul,
    "lab03.DENSE_RELU": _dense_relu,
    "lab04.BLOCK_REVERSE": _block_reverse,
    "lab04.MATMUL_TILED": _matmul,
    "lab04.STENCIL_SHARED": _stencil_shared,
    "lab05.SUM_ATOMIC": _sum_atomic,
    "lab05.HISTOGRAM": _histogram,
    "lab05.BLOCK_SUM": _block_sum,
    "lab05.SOFTMAX": _softmax,
    "lab05.SOFTMAX_WARP": _softmax_warp,
    "lab05.CONFUSION": _confusion,
    "lab07.CONV1D": _conv1d,
    "lab07.CONV2D_SINGLE": _conv2d_dilated,
    "lab07.CONV2D": _conv2d,
    "lab07.MAXPOOL": _maxpool,
    "lab07.IM2COL": _im2col,
    "lab07.CONV2D_IM2COL": _conv2d_im2col,
    "lab08.LEAKY_RELU_BACKWARD": _leaky_relu_backward,
    "lab08.MAXPOOL_BACKWARD": _maxpool_backward,
    "lab08.LINEAR_BACKWARD": _linear_backward,
    "lab08.CONV2D_BACKWARD": _conv2d_backward,
    "lab08.DROPOUT_BACKWARD": _dropout_kernel,
    "lab08.DROPOUT_STEP": _dropout_step,
    "lab12.SCALE_MASK": _scale_mask,
    "lab12.SOFTMAX_BACKWARD": _softmax_backward,
    "lab12.COMBINE": _combine,
    "lab12.FLASH_LSE": _flash_lse,
}
# Labs whose emulations live in a file of their own (their host functions take other arguments): the tests there
# check every one of their problems at gpu sizes, as the tests below do for the rest.
OWN_FILES = {"lab06": "test_gpu_sizes_lab06.py", "lab10": "test_gpu_sizes_lab10.py"}
EVERY = problems.all_problems()
ALL = {key: p for key, p in EVERY.items() if key.split(".")[0] not in OWN_FILES}


def gpu_check(key: str, **overrides):
    """The problem at its gpu-mode sizes with the emulation in place of the kernel."""
    # the emulations call gpulab's references (a test of the check at gpu sizes, not a learner's code)
    return ALL[key].check(host=EMULATIONS[key], scale="gpu", race_check=False, ptx=None, trusted=True, **overrides)


def test_every_lab_problem_has_an_emulation():
    assert set(EMULATIONS) == set(ALL)
    from test_gpu_sizes_lab06 import EMULATIONS as LAB06
    from test_gpu_sizes_lab10 import EMULATIONS as LAB10

    assert set(LAB06) == {k for k in EVERY if k.startswith("lab06.")}
    assert {f"lab10.{k}" for k in LAB10} == {k for k in EVERY if k.startswith("lab10.")}
    assert all((Path(__file__).parent / name).is_file() for name in OWN_FILES.values())
    assert set(problems.LABS) == {key.split(".")[0] for key in EVERY}  # every lab's problems are here or there


def test_lesson_exercises_check_the_same_sizes_in_both_modes():
    """The lessons' in-flow exercises (gpulab.lessons.EXERCISES) have no gpu sizes, unless an emulation
    here checks them at scale='gpu' (lesson 12's, below): in gpu mode the others check the sizes the
    simulator tests already pass (tests/test_lessons.py)."""
    from gpulab import lessons

    assert lessons.EXERCISES
    grown = [key for key, ex in lessons.EXERCISES.items() if ex.problem.gpu_sizes is not None]
    missing = [key for key in grown if key not in LESSON_EMULATIONS]
    assert not missing, f"{missing}: add an emulation to LESSON_EMULATIONS and check them at scale='gpu'"


@pytest.mark.parametrize("key", sorted(LESSON_EMULATIONS))
def test_lesson_exercise_passes_a_faithful_float32_emulation_at_gpu_sizes(key):
    from gpulab import lessons

    problem = lessons.EXERCISES[key].problem
    res = problem.check(host=LESSON_EMULATIONS[key], scale="gpu", race_check=False, ptx=None)
    assert res.passed, res
    assert len(res.checks) >= len(problem.gpu_sizes)


@pytest.mark.parametrize("key", sorted(ALL))
def test_lab_check_passes_a_faithful_float32_emulation_at_gpu_sizes(key):
    res = gpu_check(key)
    assert res.passed, res
    assert len(res.checks) >= len(ALL[key].gpu_sizes)


# The tier has teeth: with the old constant tolerance the same emulations fail at gpu sizes.
TEETH = {
    "lab03.VECMAT": [(8192, 4096)],  # sums of 8192 products
    "lab03.MATMUL": [(2048, 1024, 1536)],
    "lab08.LINEAR_BACKWARD": [(4096, 1024, 512)],  # dW: 4096-term sums
    "lab08.CONV2D_BACKWARD": [(64, 32, 14, 14, 64, 3, 1, 1)],
}


@pytest.mark.parametrize("key", sorted(TEETH))
def test_old_constant_tolerance_fails_the_same_emulation(key):
    old = gpu_check(key, sizes=TEETH[key], reduction=None, rtol=1e-4, atol=1e-5)
    assert not old.passed and old.status == "failed", old  # (the same case passes the bound: test above)


def test_lab05_warp_softmax_emulation_is_the_solution_kernels_arithmetic():
    """The emulation computes what the lab's solution kernel computes (run in the simulator on rows of 1 to 200
    columns), and at gpu size (4097 x 1000) its float32 error uses a small part of the tolerance (0.2%), not none."""
    import math

    import nbformat
    from numba import cuda, float32

    from gpulab.source import define

    nb = nbformat.read(str(Path(__file__).resolve().parents[1] / "labs/solutions/lab05_reductions.ipynb"), 4)
    src = next(c.source for c in nb.cells if c.source.startswith("@cuda.jit\ndef softmax_warp_kernel"))
    ns = {"cuda": cuda, "float32": float32, "math": math, "FULL": 0xFFFFFFFF, "ROWS_PER_BLOCK": 4}
    kernel = define(src, "softmax_warp_kernel", ns)
    p = problems.lab05.SOFTMAX_WARP
    for shape in [(1, 1), (5, 33), (2, 200)]:
        x = problems.lab05.softmax_inputs(shape, np.random.default_rng(7))
        got, emulated = np.zeros_like(x), np.zeros_like(x)
        kernel[p.launch(x, got)](x, got)
        _softmax_warp(x, emulated)
        np.testing.assert_allclose(got, emulated, rtol=1e-6, atol=1e-12)  # the same sums (exp: within an ulp or two)
    x = problems.lab05.softmax_inputs((4097, 1000), np.random.default_rng(0))
    out = np.zeros_like(x)
    _softmax_warp(x, out)
    exp = problems.lab05.softmax_spec(x).astype(np.float64)
    used = np.abs(out - exp) / (p.atol + p.rtol * np.abs(exp))  # the share of the tolerance each element uses
    assert 0 < used.max() < 0.1, used.max()  # about 0.002: a wide margin


def test_lab01_blur_emulation_is_the_solution_kernels_arithmetic():
    """_blur3 is bit for bit what lab 01's solution computes (a float32 accumulator, then acc / 9.0), run in the
    simulator on small images; at the gpu size (1081 x 1919) it uses 5 % of BLUR3's tolerance, not none."""
    import nbformat
    from numba import cuda

    from gpulab.source import define

    nb = nbformat.read(str(Path(__file__).resolve().parents[1] / "labs/solutions/lab01_threads.ipynb"), 4)
    ns = {"cuda": cuda, "np": np}
    src = next(c.source for c in nb.cells if c.source.startswith("@cuda.jit(device=True)\ndef at_clamped"))
    ns["at_clamped"] = define(src, "at_clamped", ns)
    src = next(c.source for c in nb.cells if c.source.startswith("@cuda.jit\ndef blur3_kernel"))
    kernel = define(src, "blur3_kernel", ns)
    rng = np.random.default_rng(5)
    for shape in [(1, 1), (3, 7), (9, 5)]:
        a = rng.uniform(-1, 1, shape).astype(F32)
        got, emulated = np.zeros_like(a), np.zeros_like(a)
        kernel[(1, 1), (16, 16)](a, got)
        _blur3(a, emulated)
        np.testing.assert_array_equal(got, emulated)
    p = problems.lab01.BLUR3
    size = p.gpu_sizes[-1]
    (a,) = p.inputs(size, np.random.default_rng(0))
    out = np.zeros_like(a)
    _blur3(a, out)
    exp = problems.lab01.blur3_spec(a).astype(np.float64)  # the check's reference (float64, rounded to float32)
    used = np.abs(out - exp) / (p.atol + p.rtol * np.abs(exp))
    assert 0 < used.max() < 0.2, used.max()  # 0.049 with the solution's float32 accumulator


# ---------------------------------------------------------------------------------------------------
# Lesson asserts at gpu-mode sizes. Each test names the notebook cell it stands for and uses its gpu-mode
# figures and its exact tolerance; the GPU's float32 work is emulated in the order the kernel (or, for
# cuBLAS, the least favourable usual order: one k after another) computes it.


def test_lesson00_spot_check_of_numpy_sgemm_at_n2048():
    """00_why_gpus cell 9: isclose(C[3, 5], float64 dot, rtol=1e-4, atol=1e-3) with N_NP = 2048. Every
    element of a 2048 x 32 slice passes, so the spot check holds whichever element it picks."""
    rng = np.random.default_rng(0)
    A = rng.standard_normal((2048, 2048)).astype(F32)
    B = rng.standard_normal((2048, 32)).astype(F32)
    ref = A.astype(np.float64) @ B.astype(np.float64)
    assert np.isclose(seq_matmul(A, B), ref, rtol=1e-4, atol=1e-3).all()


def test_lesson00_cublas_fp32_and_fp16_at_n4096():
    """00_why_gpus cell 11 (N_GPU = 4096): allclose(C32[:64, :64], float64, rtol=1e-3, atol=1e-2) and
    ||C16 - C32|| / ||C32|| < 5e-2 (FP16 inputs, FP32 accumulation: CuPy's compute type for float16)."""
    rng = np.random.default_rng(0)
    A = rng.standard_normal((64, 4096)).astype(F32)
    B = rng.standard_normal((4096, 4096)).astype(F32)
    C32 = seq_matmul(A, B[:, :1024])
    ref = A.astype(np.float64) @ B[:, :64].astype(np.float64)
    assert np.allclose(C32[:, :64], ref, rtol=1e-3, atol=1e-2)
    C16 = seq_matmul(A.astype(np.float16).astype(F32), B[:, :1024].astype(np.float16).astype(F32)).astype(np.float16)
    rel = float(np.linalg.norm(C16.astype(F32) - C32) / np.linalg.norm(C32))
    assert rel < 5e-2 / 10, rel  # about 4e-4: a wide margin


def test_lesson03_04_matmul_error_bounds_at_1000x700x1300():
    """03 cell 11 / 04 cells 9 and 20: max |C - A @ B| < 1e-3 * sqrt(K), and 03 cell 13:
    assert_allclose(rtol=1e-3, atol=1e-3), at (M, K, N) = (1000, 700, 1300); naive, tiled and
    register-tiled kernels all add k in order (rows 0..199 emulated)."""
    rng = np.random.default_rng(0)
    a = rng.standard_normal((200, 700), dtype=F32)
    b = rng.standard_normal((700, 1300), dtype=F32)
    c, r = seq_matmul(a, b), a @ b
    assert np.abs(c - r).max() < 1e-3 * np.sqrt(700) / 10
    np.testing.assert_allclose(c, r, rtol=1e-3, atol=1e-3)


def test_lesson05_sums_at_4m_elements():
    """05 cells 7 and 10 (n = 1 << 22 values in [0, 1)): the atomic sum (one running float32 total, in
    a random order) within 1e-3 relative, the shared-memory tree (256 per block, repeated) within 1e-5."""
    rng = np.random.default_rng(0)
    x = rng.random(1 << 22, dtype=F32)
    exact = float(np.sum(x, dtype=np.float64))
    atomic = float(np.cumsum(x[rng.permutation(x.size)], dtype=F32)[-1])
    assert abs(atomic - exact) <= 1e-3 * exact
    assert abs(atomic - exact) > 1e-6 * exact  # the emulation does lose bits, as a GPU does
    cur = x
    while True:
        blocks = math.ceil(cur.size / 256)
        buf = np.zeros(blocks * 256, F32)
        buf[: cur.size] = cur
        cur = tree_sum(buf.reshape(blocks, 256))
        if blocks == 1:
            break
    assert abs(float(cur[0]) - exact) <= 1e-5 * exact


def test_lesson05_warp_sum_at_4m_elements():
    """05, the cell after the warp-shuffle exercise (n = 1 << 22 values in [0, 1)): sum_warp within 1e-5 relative.
    Emulated in the kernel's order: each warp's 32 values by shuffles down (offsets 16, ..., 1: lane k adds lane
    k + offset, a halving tree over 32), then the 8 warp sums of a block the same way (the 24 other lanes add 0),
    repeated on the partials."""
    rng = np.random.default_rng(0)
    x = rng.random(1 << 22, dtype=F32)
    exact = float(np.sum(x, dtype=np.float64))
    cur = x
    while True:
        blocks = math.ceil(cur.size / 256)
        buf = np.zeros(blocks * 256, F32)
        buf[: cur.size] = cur
        per_warp = tree_sum(buf.reshape(blocks, 8, 32))  # (blocks, 8)
        lanes = np.zeros((blocks, 32), F32)
        lanes[:, :8] = per_warp
        cur = tree_sum(lanes)
        if blocks == 1:
            break
    assert abs(float(cur[0]) - exact) <= 1e-5 * exact


def test_lesson05_softmax_at_8192x1000():
    """05 cell 21: allclose(probs, float64 softmax, rtol=1e-5, atol=1e-7) and rows summing to 1 within
    1e-5, for 8192 x 1000 scores ~ N(0, 16), emulating softmax_rows_kernel (128 threads per row)."""
    rng = np.random.default_rng(0)
    scores = (rng.standard_normal((8192, 1000)) * 4).astype(F32)
    e = np.exp(scores - scores.max(axis=1, keepdims=True)).astype(F32)
    probs = e / tree_sum(strided_partials(e, 128))[:, None]
    z = scores.astype(np.float64)
    e64 = np.exp(z - z.max(axis=1, keepdims=True))
    assert np.allclose(probs, e64 / e64.sum(axis=1, keepdims=True), rtol=1e-5, atol=1e-7)
    assert np.allclose(probs.sum(axis=1), 1.0, atol=1e-5)


def _round_tf32(x: np.ndarray) -> np.ndarray:
    """float32 -> TF32 (10 stored mantissa bits, round to nearest), as float32."""
    u = x.astype(F32).view(np.uint32).astype(np.uint64)
    return ((u + 0x1000) & ~np.uint64(0x1FFF)).astype(np.uint32).view(F32)


def test_lesson06_precision_errors_at_n1024():
    """06 cell 20 (n_err = 1024, inputs uniform in [-1, 1], error = max |C - ref| / max |ref|):
    fp32 < 1e-5, fp32 < fp16 < 1e-2, fp32 < tf32 < 1e-2 (rows 0..127 emulated; FP32 accumulation)."""
    rng = np.random.default_rng(0)
    a = rng.uniform(-1, 1, (1024, 1024)).astype(F32)[:128]
    b = rng.uniform(-1, 1, (1024, 1024)).astype(F32)
    ref = a.astype(np.float64) @ b.astype(np.float64)
    scale = float(np.abs(ref).max())
    err = {
        "fp32": np.abs(seq_matmul(a, b) - ref).max() / scale,
        "tf32": np.abs(seq_matmul(_round_tf32(a), _round_tf32(b)) - ref).max() / scale,
        "fp16": np.abs(
            seq_matmul(a.astype(np.float16).astype(F32), b.astype(np.float16).astype(F32))
            .astype(np.float16)
            .astype(np.float64)
            - ref
        ).max()
        / scale,
    }
    assert err["fp32"] < 1e-5, err
    assert err["fp32"] < err["fp16"] < 1e-2, err
    assert err["fp32"] < err["tf32"] < 1e-2, err


def test_lesson07_convolution_at_gpu_size():
    """07 cells 8 and 11: allclose(out, conv2d_reference, rtol=1e-4, atol=1e-4) for x (64, 32, 28, 28),
    w (64, 32, 3, 3) / sqrt(288), pad 1 (images 0..3 emulated, taps added in the kernel's order)."""
    from gpulab.kernels import conv

    rng = np.random.default_rng(0)
    x = rng.standard_normal((4, 32, 28, 28)).astype(F32)
    w = (rng.standard_normal((64, 32, 3, 3)) / np.sqrt(32 * 9)).astype(F32)
    b = rng.standard_normal(64).astype(F32)
    out = np.empty((4, 64, 28, 28), F32)
    _conv2d.__wrapped__(x, w, b, 1, 1, out)
    assert np.allclose(out, conv.conv2d_reference(x, w, b, 1, 1), rtol=1e-4, atol=1e-4)


def test_lesson10_data_parallel_gradients_at_batch_256():
    """10 cell 16: 4 shards of a 256-image batch give the one-batch gradient within rtol=1e-4, atol=1e-6
    (NumPy backend, random images: the cell's fallback when MNIST is not cached)."""
    from gpulab import nn, scaling

    rng = np.random.default_rng(0)
    x, y = rng.random((256, 1, 28, 28), dtype=F32), rng.integers(0, 10, 256)
    model, loss_fn = nn.mnist_cnn(dropout=0.0), nn.SoftmaxCrossEntropy()
    loss, grads = scaling.full_batch_gradients(model, loss_fn, x, y)
    dp = scaling.data_parallel_gradients(model, loss_fn, x, y, 4)
    assert abs(np.mean(dp["shard_losses"]) - loss) < 1e-4
    for k in grads:
        assert np.allclose(dp["grads"][k], grads[k], rtol=1e-4, atol=1e-6), k


def _lesson09_gpu_settings() -> tuple[dict, dict]:
    """Lesson 09's gpu-mode figures, read from the notebook: ``{name: gpu value}`` of every
    ``name = gpulab.sizes(gpu=..., simulator=...)`` and ``{dataset: gpu target}`` of its accuracy targets."""
    import ast
    import json
    import re
    from pathlib import Path

    nb = json.loads((Path(__file__).resolve().parents[1] / "notebooks" / "09_train_cnn.ipynb").read_text())
    src = "\n".join("".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code")
    tree = ast.parse(re.sub(r"^(\s*)(?=[!%])", r"\1pass  # ", src, flags=re.MULTILINE))  # IPython magics

    def gpu_value(call):
        if isinstance(call, ast.Call) and ast.unparse(call.func) == "gpulab.sizes":
            return ast.literal_eval(next(k.value for k in call.keywords if k.arg == "gpu"))
        return None

    settings, targets = {}, {}
    loads = [ast.unparse(n) for n in ast.walk(tree) if isinstance(n, ast.Call) and ast.unparse(n.func) == "data.load"]
    assert "data.load('mnist', download=gpulab.is_gpu())" in loads, loads  # on a GPU (Colab): the verified download
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name):
            name, value = node.targets[0].id, node.value
            if gpu_value(value) is not None:
                settings[name] = gpu_value(value)
            if name == "target" and isinstance(value, ast.Subscript) and isinstance(value.value, ast.Dict):
                targets = {ast.literal_eval(k): gpu_value(v) for k, v in zip(value.value.keys, value.value.values)}
    return settings, targets


@pytest.mark.slow
def test_lesson09_digits_fallback_reaches_its_gpu_target():
    """09 cells 7 and 16 where MNIST cannot be had (no download): the 8x8 digits scaled to 28x28, all 1,437
    training images, the gpu-mode network and schedule, must pass the digits target (issue 17: the MNIST
    target 0.98 was applied and this run reaches 0.85, 0.875, 0.939 per epoch). NumPy float32 training stands
    in for the GPU's (the same float32 layers; cuBLAS's summation order moves accuracy by far less than the
    margin). MNIST's 0.98 at 60,000 images x 3 epochs is too slow to prove on CI's CPUs."""
    from gpulab import data, nn, train

    settings, targets = _lesson09_gpu_settings()
    assert {"channels", "hidden", "epochs", "batch_size"} <= set(settings) and set(targets) == {"mnist", "digits"}
    ds = data.load("digits", size=28)
    model = nn.mnist_cnn(
        seed=0, image_size=28, channels=settings["channels"], hidden=settings["hidden"], backend="numpy"
    )
    h = train.fit(model, ds, epochs=settings["epochs"], batch_size=settings["batch_size"], progress=False)
    acc = train.evaluate(model, ds.x_test, ds.y_test)["accuracy"]
    assert acc > targets["digits"], (acc, targets, h.test_accuracy)
    assert targets["digits"] < targets["mnist"]  # the target says which dataset it is for
