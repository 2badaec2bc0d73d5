"""Labs 05, 07 and 08: beginners' mistakes get a verdict that names them. Kernels are built from source with
gpulab.source.define, as a notebook cell defines them.

Before: a block sum with `cuda.shared.array(cuda.blockDim.x, float32)` got full marks although it does not
compile for a GPU, and a batched convolution with its window shifted by one, its stride ignored, its filter
flipped or its bias missing got "expected ..., got ..." with no hint; lab 08's max-pool backward called its
output `out` (the kernel's is dx) and named none of: assigning instead of adding overlapping windows' gradients,
giving the whole window the gradient, decoding arg swapped or as a 2x2 window's; a linear backward that
averaged over the batch got no hint. Lab 05's softmax with one warp per row names shuffling down, no maximum, one
column per lane, a shuffle behind a guard and a kernel without shuffles.
"""

from __future__ import annotations

import math
from pathlib import Path

import nbformat
import pytest
from numba import cuda, float32

from gpulab import ptx
from gpulab.problems import lab05, lab07, lab08
from gpulab.problems import lab05_softmax as softmax_hints
from gpulab.source import define
from kernel_edits import edited

BLOCK_SUM_RUNTIME_SHARED = """
@cuda.jit
def block_sum_kernel(x, partial):
    buf = cuda.shared.array(cuda.blockDim.x, float32)
    tx = cuda.threadIdx.x
    i = cuda.grid(1)
    buf[tx] = x[i] if i < x.size else float32(0)
    cuda.syncthreads()  # the block's values are loaded
    s = cuda.blockDim.x // 2
    while s > 0:
        if tx < s:
            buf[tx] += buf[tx + s]
        cuda.syncthreads()  # this level of the tree is complete
        s //= 2
    if tx == 0:
        partial[cuda.blockIdx.x] = buf[0]
"""


def _nvvm_available() -> bool:
    try:
        return (
            ptx.compile_source(
                "from numba import cuda\n\n@cuda.jit\ndef k(x):\n    x[0] = 1\n", "k", "void(float32[:])", ccs=[(7, 5)]
            ).get("7.5")
            == "ok"
        )
    except Exception:  # noqa: BLE001 - no NVVM here: the PTX check says "not checked"
        return False


def test_block_sum_with_a_runtime_sized_shared_array_fails_the_ptx_check():
    if not _nvvm_available():
        pytest.skip("NVVM (numba-cuda[cu12]) is not installed: the PTX check cannot run")
    kernel = define(BLOCK_SUM_RUNTIME_SHARED, "block_sum_kernel", {"cuda": cuda, "float32": float32})
    res = lab05.BLOCK_SUM.check(kernel)
    assert not res.passed and res.score < res.max_score, res
    assert "NVVM rejected the kernel" in str(res) and "shared.array" in str(res), res


CONV2D = """
@cuda.jit
def conv2d_kernel(x, w, b, stride, pad, out):
    idx = cuda.grid(1)
    if idx < out.size:
        n = idx // (out.shape[1] * out.shape[2] * out.shape[3])
        f = (idx // (out.shape[2] * out.shape[3])) % out.shape[1]
        i = (idx // out.shape[3]) % out.shape[2]
        j = idx % out.shape[3]
        k = w.shape[2]
        acc = BIAS
        for c in range(x.shape[1]):
            for a in range(k):
                for d in range(k):
                    r = ROW
                    q = COL
                    if 0 <= r < x.shape[2] and 0 <= q < x.shape[3]:
                        acc += x[n, c, r, q] * w[f, c, TAP_A, TAP_D]
        out[n, f, i, j] = acc
"""
RIGHT = {"BIAS": "b[f]", "ROW": "i * stride + a - pad", "COL": "j * stride + d - pad", "TAP_A": "a", "TAP_D": "d"}


@pytest.mark.parametrize(
    ("change", "hint"),
    [
        ({"ROW": "i * stride + a - pad + 1", "COL": "j * stride + d - pad + 1"}, "the window is shifted by one"),
        ({"ROW": "i + a - pad", "COL": "j + d - pad"}, "the stride is ignored"),
        ({"TAP_A": "k - 1 - a", "TAP_D": "k - 1 - d"}, "the filter is flipped"),
        ({"BIAS": "float32(0.0)"}, "the bias is missing"),
        ({"ROW": "i * stride + a", "COL": "j * stride + d"}, "padding ignored"),
        ({}, None),
    ],
    ids=["shifted", "stride", "flipped", "bias", "padding", "right"],
)
def test_lab07_conv2d_mistakes_are_named(change, hint):
    src = CONV2D
    for key, value in {**RIGHT, **change}.items():
        src = src.replace(key, value)
    kernel = define(src, "conv2d_kernel", {"cuda": cuda, "float32": float32, "math": math})
    res = lab07.CONV2D.check(kernel)
    if hint is None:
        assert res.passed, res
    else:
        assert not res.passed and res.hint.startswith(hint), res


POOL_BACKWARD = """
@cuda.jit
def maxpool_backward_kernel(dout, arg, k, stride, dx):
    t = cuda.grid(1)
    if t < dx.size:
        w_ = t % dx.shape[3]
        h = (t // dx.shape[3]) % dx.shape[2]
        c = (t // (dx.shape[3] * dx.shape[2])) % dx.shape[1]
        n = t // (dx.shape[3] * dx.shape[2] * dx.shape[1])
        g = float32(0.0)
        for i in range(dout.shape[2]):
            for j in range(dout.shape[3]):
                a = h - i * stride
                b = w_ - j * stride
                if 0 <= a < k and 0 <= b < k and WON:
                    ADD
        dx[n, c, h, w_] = g
"""


@pytest.mark.parametrize(
    ("won", "add", "hint"),
    [
        ("arg[n, c, i, j] == a * k + b", "g = dout[n, c, i, j]", "where windows overlap, a pixel that won several"),
        ("True", "g += dout[n, c, i, j]", "every pixel of a window got its dout"),
        ("arg[n, c, i, j] == b * k + a", "g += dout[n, c, i, j]", "arg was decoded with row and column swapped"),
        ("arg[n, c, i, j] == a * 2 + b", "g += dout[n, c, i, j]", "arg was decoded as a * 2 + b"),
        ("arg[n, c, i, j] == a * k + b", "g += dout[n, c, i, j]", None),
    ],
    ids=["assigned", "whole-window", "swapped", "2x2-habit", "right"],
)
def test_lab08_maxpool_backward_mistakes_are_named_after_dx(won, add, hint):
    src = POOL_BACKWARD.replace("WON", won).replace("ADD", add)
    kernel = define(src, "maxpool_backward_kernel", {"cuda": cuda, "float32": float32})
    res = lab08.MAXPOOL_BACKWARD.check(kernel)
    if hint is None:
        assert res.passed, res
    else:
        assert not res.passed and res.hint.startswith(hint) and res.message.startswith("dx["), res


def test_lab08_linear_backward_mean_is_named():
    def host(x, W, dout, dx, dW, db):
        dx[...], dW[...], db[...] = dout @ W, dout.T @ x / x.shape[0], dout.mean(axis=0)

    res = lab08.LINEAR_BACKWARD.check(host=host)
    assert not res.passed and res.hint.startswith("this is the mean over the batch"), res


IM2COL_CHANNELS_FASTEST = """
@cuda.jit
def im2col_kernel(x, k, stride, pad, cols):
    q, r = cuda.grid(2)
    ho = (x.shape[2] + 2 * pad - k) // stride + 1
    wo = (x.shape[3] + 2 * pad - k) // stride + 1
    if r < cols.shape[0] and q < cols.shape[1]:
        n = r // (ho * wo)
        i = (r // wo) % ho
        j = r % wo
        c = q % x.shape[1]
        a = q // (x.shape[1] * k)
        d = (q // x.shape[1]) % k
        h = i * stride + a - pad
        w = j * stride + d - pad
        v = float32(0.0)
        if 0 <= h < x.shape[2] and 0 <= w < x.shape[3]:
            v = x[n, c, h, w]
        cols[r, q] = v
"""


def test_lab07_im2col_in_the_lessons_column_order_is_named():
    """Lesson 07 (and the library) order im2col's columns (a, d, c); the lab asks for (c, a, d)."""
    kernel = define(IM2COL_CHANNELS_FASTEST, "im2col_kernel", {"cuda": cuda, "float32": float32})
    res = lab07.IM2COL.check(kernel)
    assert not res.passed and res.hint.startswith("the columns are in the library's order"), res


SOFTMAX_NO_BARRIER_BEFORE_REUSE = """
@cuda.jit
def softmax_kernel(x, out):
    row = cuda.blockIdx.x
    tx = cuda.threadIdx.x
    buf = cuda.shared.array(TPB, float32)
    m = float32(-math.inf)
    for j in range(tx, x.shape[1], TPB):
        m = max(m, x[row, j])
    buf[tx] = m
    cuda.syncthreads()  # the row's partial maxima are in buf
    k = TPB // 2
    while k > 0:
        if tx < k:
            buf[tx] = max(buf[tx], buf[tx + k])
        cuda.syncthreads()  # this level is done
        k //= 2
    mx = buf[0]
    s = float32(0.0)
    for j in range(tx, x.shape[1], TPB):
        s += math.exp(x[row, j] - mx)
    buf[tx] = s  # no barrier before this: thread 0 may overwrite buf[0] before the others read the maximum
    cuda.syncthreads()  # the partial sums are in buf
    k = TPB // 2
    while k > 0:
        if tx < k:
            buf[tx] += buf[tx + k]
        cuda.syncthreads()  # this level is done
        k //= 2
    total = buf[0]
    for j in range(tx, x.shape[1], TPB):
        out[row, j] = math.exp(x[row, j] - mx) / total
"""


def test_softmax_that_reuses_buf_too_early_is_told_about_the_barrier_not_the_maximum():
    # before: "OverflowError ... subtract the row's maximum before exp", which this kernel does
    ns = {"cuda": cuda, "float32": float32, "math": math, "TPB": lab05.TPB}
    res = lab05.SOFTMAX.check(define(SOFTMAX_NO_BARRIER_BEFORE_REUSE, "softmax_kernel", ns))
    assert not res.passed
    assert "cuda.syncthreads()" in res.hint and "subtract the row's maximum" not in res.hint, res


# ---------------------------------------------------------------------------------------------------
# Lab 05, exercise 4: softmax with one warp per row. The mistakes are made in the lab's own solution kernel.

LAB05 = Path(__file__).resolve().parents[1] / "labs" / "solutions" / "lab05_reductions.ipynb"
WARP_NS = {"cuda": cuda, "float32": float32, "math": math, "FULL": 0xFFFFFFFF, "ROWS_PER_BLOCK": lab05.ROWS_PER_BLOCK}


def _warp_solution() -> str:
    nb = nbformat.read(str(LAB05), as_version=4)
    return next(c.source for c in nb.cells if c.source.startswith("@cuda.jit\ndef softmax_warp_kernel"))


ONE_COLUMN_PER_LANE = """
@cuda.jit
def softmax_warp_kernel(x, out):
    warp = cuda.threadIdx.x // 32
    lane = cuda.laneid
    row = cuda.blockIdx.x * ROWS_PER_BLOCK + warp
    if row >= x.shape[0]:
        return
    col = lane  # one column per lane: no stride loop
    v = x[row, col] if col < x.shape[1] else float32(-math.inf)
    m = v
    k = 16
    while k > 0:
        m = max(m, cuda.shfl_xor_sync(FULL, m, k))
        k //= 2
    e = math.exp(v - m)
    s = e
    k = 16
    while k > 0:
        s += cuda.shfl_xor_sync(FULL, s, k)
        k //= 2
    WRITE
"""
WRITE_ONE = "if col < x.shape[1]:\n        out[row, col] = e / s"
WRITE_ALL = "for j in range(lane, x.shape[1], 32):\n        out[row, j] = math.exp(x[row, j] - m) / s"

GUARDED_SHUFFLES = """
@cuda.jit
def softmax_warp_kernel(x, out):
    warp = cuda.threadIdx.x // 32
    lane = cuda.laneid
    row = cuda.blockIdx.x * ROWS_PER_BLOCK + warp
    col = lane
    if row < x.shape[0] and col < x.shape[1]:
        m = x[row, col]
        k = 16
        while k > 0:
            m = max(m, cuda.shfl_xor_sync(FULL, m, k))
            k //= 2
        e = math.exp(x[row, col] - m)
        s = e
        k = 16
        while k > 0:
            s += cuda.shfl_xor_sync(FULL, s, k)
            k //= 2
        out[row, col] = e / s
"""

LANE_ALONE = """
@cuda.jit
def softmax_warp_kernel(x, out):
    row = cuda.blockIdx.x * ROWS_PER_BLOCK + cuda.threadIdx.x // 32
    if row < x.shape[0]:
        m = float32(-math.inf)
        for j in range(x.shape[1]):  # every lane the whole row: correct, 32 times the reads, no shuffle
            m = max(m, x[row, j])
        s = float32(0.0)
        for j in range(x.shape[1]):
            s += math.exp(x[row, j] - m)
        for j in range(cuda.laneid, x.shape[1], 32):
            out[row, j] = math.exp(x[row, j] - m) / s
"""


def _warp_mistake(name: str) -> str:
    src = _warp_solution()
    if name == "down":
        return edited(src, ("cuda.shfl_xor_sync", "cuda.shfl_down_sync"))
    if name == "no-max":
        return edited(src, ("math.exp(x[row, col] - m)", "math.exp(x[row, col])"))
    if name == "one-column":
        return ONE_COLUMN_PER_LANE.replace("WRITE", WRITE_ONE)
    if name == "one-column-strided-writes":
        return ONE_COLUMN_PER_LANE.replace("WRITE", WRITE_ALL)
    return src


@pytest.mark.parametrize(
    ("mistake", "hint"),
    [
        ("down", "only lane 0 ended with the row's maximum and sum"),
        ("no-max", softmax_hints.NO_MAX_HINT),
        ("one-column", "this is the softmax of each row's first 32 columns"),
        ("one-column-strided-writes", "this is the softmax of each row's first 32 columns"),
        ("right", None),
    ],
    ids=["down", "no-max", "one-column", "one-column-strided-writes", "right"],
)
def test_lab05_warp_softmax_mistakes_are_named(mistake, hint):
    kernel = define(_warp_mistake(mistake), "softmax_warp_kernel", dict(WARP_NS))
    res = lab05.SOFTMAX_WARP.check(kernel, ptx=None)
    if hint is None:
        assert res.passed and res.score == 3, res
    else:
        assert not res.passed and res.score == 0 and res.hint.startswith(hint), res
    if mistake == "down":  # and the fixes: xor, or lane 0's value broadcast
        assert "cuda.shfl_xor_sync(FULL, v, k)" in res.hint and "cuda.shfl_sync(FULL, v, 0)" in res.hint


def test_lab05_warp_softmax_the_no_max_hint_is_the_block_softmaxs():
    assert lab05.SOFTMAX.mistakes[softmax_hints.NO_MAX_HINT] is lab05.SOFTMAX_WARP.mistakes[softmax_hints.NO_MAX_HINT]


def test_lab05_a_guarded_shuffle_costs_the_points_with_the_line_and_the_fix():
    """Lanes that returned are not waited for (PTX), and what the others read from them is undefined: the
    learner reads a verdict (the read, its line, a neutral value for a maximum and a sum), not a traceback."""
    kernel = define(GUARDED_SHUFFLES, "softmax_warp_kernel", dict(WARP_NS))
    res = lab05.SOFTMAX_WARP.check(kernel)
    text = str(res)
    assert res.status == "failed" and res.score == 0, res
    assert "a shuffle read a lane that took no part" in res.hint and "which did not make the call" in res.hint, res
    assert "cuda.shfl_xor_sync(FULL, m, k)" in res.hint, res
    assert "not around the shuffles" in res.hint and "-inf for a maximum" in res.hint and "0 for a sum" in res.hint
    assert "Traceback" not in text and 'File "' not in text, text


def test_lab05_a_warp_softmax_without_shuffles_is_over_budget_with_the_shuffle_hint():
    kernel = define(LANE_ALONE, "softmax_warp_kernel", dict(WARP_NS))
    res = lab05.SOFTMAX_WARP.check(kernel, ptx=None)
    assert res.status == "over budget" and res.score == 1.5, res
    assert "reads of x" in res.message and res.hint == softmax_hints.SHUFFLE_BUDGET_HINT, res


@pytest.mark.ptx
def test_lab05_the_warp_softmax_solution_compiles_to_ptx():
    if not _nvvm_available():
        pytest.skip("NVVM (numba-cuda[cu12]) is not installed: the PTX check cannot run")
    header = "import math\nfrom numba import cuda, float32\n\nFULL = 0xFFFFFFFF\nROWS_PER_BLOCK = 4\n\n"
    source = header + _warp_solution()
    res = ptx.compile_source(source, "softmax_warp_kernel", lab05.SOFTMAX_WARP.ptx, ccs=[(7, 5), (9, 0)])
    assert res == {"7.5": "ok", "9.0": "ok"}, res
