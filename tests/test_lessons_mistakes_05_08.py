"""Lessons 05-08: the mistakes beginners make get a verdict that names them (a hint saying what is wrong and
what to write instead), never a misleading generic hint or none. Each kernel is built from source with
gpulab.source.define, as a notebook cell would define it.

Before these hints existed, e.g. `i = cuda.grid(1)` in the add-two-while-loading kernel was called "an
off-by-one at the edge", a scan that never swapped its buffers was called "an exclusive scan", a convolution
with its filter transposed was told "x is transposed", a ReLU backward with an inverted mask was told "dx
equals dout everywhere", and a convolution launched with x along the rows passed.
"""

from __future__ import annotations

import math
import re

import pytest
from numba import cuda, float32

from gpulab import lessons
from gpulab.lessons.answers_05_10 import K, TPB
from gpulab.source import define

NAMESPACE = {"cuda": cuda, "float32": float32, "math": math, "TPB": TPB, "K": K}

CASES = [
    (
        "max_up_halving_wrong",
        "05",
        "block_max",
        "partial holds the maximum of the even positions only",
        """
@cuda.jit
def block_max_kernel(x, partial):
    buf = cuda.shared.array(TPB, float32)
    tx = cuda.threadIdx.x
    i = cuda.grid(1)
    buf[tx] = x[i] if i < x.size else float32(-math.inf)
    cuda.syncthreads()
    s = TPB // 2
    while s > 1:
        if tx < s:
            buf[tx] = max(buf[tx], buf[tx + s])
        cuda.syncthreads()
        s //= 2
    if tx == 0:
        partial[cuda.blockIdx.x] = buf[0]
""",
    ),
    (
        "pair_wrong_offset",
        "05",
        "sum_two_per_thread",
        "the blocks overlap",
        """
@cuda.jit
def sum_two_per_thread_kernel(x, partial):
    buf = cuda.shared.array(TPB, float32)
    tx = cuda.threadIdx.x
    i = cuda.grid(1)
    v = float32(0.0)
    if i < x.size:
        v = x[i]
    if i + TPB < x.size:
        v += x[i + TPB]
    buf[tx] = v
    cuda.syncthreads()
    s = TPB // 2
    while s > 0:
        if tx < s:
            buf[tx] += buf[tx + s]
        cuda.syncthreads()
        s //= 2
    if tx == 0:
        partial[cuda.blockIdx.x] = buf[0]
""",
    ),
    (
        "warp_stops_at_offset_2",
        "05",
        "warp_sum",
        "partial holds the sum of the even lanes only",
        """
@cuda.jit
def warp_sum_kernel(x, partial):
    warp_sums = cuda.shared.array(32, float32)
    tx = cuda.threadIdx.x
    lane = tx % 32
    warp = tx // 32
    i = cuda.grid(1)
    v = x[i] if i < x.size else float32(0.0)
    offset = 16
    while offset > 1:
        v += cuda.shfl_down_sync(0xFFFFFFFF, v, offset)
        offset //= 2
    if lane == 0:
        warp_sums[warp] = v
    cuda.syncthreads()
    if warp == 0:
        v = warp_sums[lane] if lane < TPB // 32 else float32(0.0)
        offset = 16
        while offset > 1:
            v += cuda.shfl_down_sync(0xFFFFFFFF, v, offset)
            offset //= 2
        if lane == 0:
            partial[cuda.blockIdx.x] = v
""",
    ),
    (
        "warp_first_stage_stops_at_offset_2",
        "05",
        "warp_sum",
        "partial holds the sum of the even lanes only",
        """
@cuda.jit
def warp_sum_kernel(x, partial):
    warp_sums = cuda.shared.array(32, float32)
    tx = cuda.threadIdx.x
    lane = tx % 32
    warp = tx // 32
    i = cuda.grid(1)
    v = x[i] if i < x.size else float32(0.0)
    offset = 16
    while offset > 1:
        v += cuda.shfl_down_sync(0xFFFFFFFF, v, offset)
        offset //= 2
    if lane == 0:
        warp_sums[warp] = v
    cuda.syncthreads()
    if warp == 0:
        v = warp_sums[lane] if lane < TPB // 32 else float32(0.0)
        offset = 16
        while offset > 0:
            v += cuda.shfl_down_sync(0xFFFFFFFF, v, offset)
            offset //= 2
        if lane == 0:
            partial[cuda.blockIdx.x] = v
""",
    ),
    (
        "warp_no_second_stage",
        "05",
        "warp_sum",
        "partial holds the sum of the block's first 32 elements",
        """
@cuda.jit
def warp_sum_kernel(x, partial):
    tx = cuda.threadIdx.x
    lane = tx % 32
    warp = tx // 32
    i = cuda.grid(1)
    v = x[i] if i < x.size else float32(0.0)
    offset = 16
    while offset > 0:
        v += cuda.shfl_down_sync(0xFFFFFFFF, v, offset)
        offset //= 2
    if tx == 0:
        partial[cuda.blockIdx.x] = v
""",
    ),
    (
        "warp_shuffled_up",
        "05",
        "warp_sum",
        "lane 0 ended with its own value doubled",
        """
@cuda.jit
def warp_sum_kernel(x, partial):
    warp_sums = cuda.shared.array(32, float32)
    tx = cuda.threadIdx.x
    lane = tx % 32
    warp = tx // 32
    i = cuda.grid(1)
    v = x[i] if i < x.size else float32(0.0)
    offset = 16
    while offset > 0:
        v += cuda.shfl_up_sync(0xFFFFFFFF, v, offset)
        offset //= 2
    if lane == 0:
        warp_sums[warp] = v
    cuda.syncthreads()
    if warp == 0:
        v = warp_sums[lane] if lane < TPB // 32 else float32(0.0)
        offset = 16
        while offset > 0:
            v += cuda.shfl_up_sync(0xFFFFFFFF, v, offset)
            offset //= 2
        if lane == 0:
            partial[cuda.blockIdx.x] = v
""",
    ),
    (
        "warp_padded_with_minus_inf",
        "05",
        "warp_sum",
        "partial is -inf for the blocks that run past the end of x",
        """
@cuda.jit
def warp_sum_kernel(x, partial):
    warp_sums = cuda.shared.array(32, float32)
    tx = cuda.threadIdx.x
    lane = tx % 32
    warp = tx // 32
    i = cuda.grid(1)
    v = x[i] if i < x.size else float32(-math.inf)
    offset = 16
    while offset > 0:
        v += cuda.shfl_down_sync(0xFFFFFFFF, v, offset)
        offset //= 2
    if lane == 0:
        warp_sums[warp] = v
    cuda.syncthreads()
    if warp == 0:
        v = warp_sums[lane] if lane < TPB // 32 else float32(0.0)
        offset = 16
        while offset > 0:
            v += cuda.shfl_down_sync(0xFFFFFFFF, v, offset)
            offset //= 2
        if lane == 0:
            partial[cuda.blockIdx.x] = v
""",
    ),
    (
        "scan_noswap",
        "05",
        "scan_block",
        "each step read the values as loaded",
        """
@cuda.jit
def scan_block_kernel(x, out, block_sums):
    buf = cuda.shared.array((2, TPB), float32)
    tx = cuda.threadIdx.x
    i = cuda.grid(1)
    buf[0, tx] = x[i] if i < x.size else float32(0.0)
    cuda.syncthreads()
    offset = 1
    while offset < TPB:
        if tx >= offset:
            buf[1, tx] = buf[0, tx] + buf[0, tx - offset]
        else:
            buf[1, tx] = buf[0, tx]
        cuda.syncthreads()
        offset *= 2
    if i < out.size:
        out[i] = buf[1, tx]
    if tx == TPB - 1:
        block_sums[cuda.blockIdx.x] = buf[1, tx]
""",
    ),
    (
        "scan_exclusive",
        "05",
        "scan_block",
        "you computed an exclusive scan",
        """
@cuda.jit
def scan_block_kernel(x, out, block_sums):
    buf = cuda.shared.array((2, TPB), float32)
    tx = cuda.threadIdx.x
    i = cuda.grid(1)
    buf[0, tx] = x[i - 1] if (i < x.size and tx > 0) else float32(0.0)
    cuda.syncthreads()
    src = 0
    offset = 1
    while offset < TPB:
        dst = 1 - src
        if tx >= offset:
            buf[dst, tx] = buf[src, tx] + buf[src, tx - offset]
        else:
            buf[dst, tx] = buf[src, tx]
        cuda.syncthreads()
        src = dst
        offset *= 2
    if i < out.size:
        out[i] = buf[src, tx]
    if tx == TPB - 1:
        block_sums[cuda.blockIdx.x] = buf[src, tx]
""",
    ),
    (
        "conv_offbyone_range",
        "07",
        "conv2d_single",
        "the loops over the taps stop one short",
        """
@cuda.jit
def conv2d_single_kernel(x, w, out):
    j, i = cuda.grid(2)
    if i < out.shape[0] and j < out.shape[1]:
        acc = float32(0.0)
        for a in range(w.shape[0] - 1):
            for b in range(w.shape[1] - 1):
                acc += x[i + a, j + b] * w[a, b]
        out[i, j] = acc
""",
    ),
    (
        "conv_centered_pad",
        "07",
        "conv2d_single",
        "the window is centred on (i, j)",
        """
@cuda.jit
def conv2d_single_kernel(x, w, out):
    j, i = cuda.grid(2)
    if i < out.shape[0] and j < out.shape[1]:
        acc = float32(0.0)
        for a in range(K):
            for b in range(K):
                r = i + a - 1
                c = j + b - 1
                if r >= 0 and c >= 0 and r < x.shape[0] and c < x.shape[1]:
                    acc += x[r, c] * w[a, b]
        out[i, j] = acc
""",
    ),
    (
        "conv_w_transposed",
        "07",
        "conv2d_single",
        "the filter is transposed",
        """
@cuda.jit
def conv2d_single_kernel(x, w, out):
    j, i = cuda.grid(2)
    if i < out.shape[0] and j < out.shape[1]:
        acc = float32(0.0)
        for a in range(K):
            for b in range(K):
                acc += x[i + a, j + b] * w[b, a]
        out[i, j] = acc
""",
    ),
    (
        "conv_noacc",
        "07",
        "conv2d_single",
        "each output is only the product of the last tap",
        """
@cuda.jit
def conv2d_single_kernel(x, w, out):
    j, i = cuda.grid(2)
    if i < out.shape[0] and j < out.shape[1]:
        for a in range(K):
            for b in range(K):
                out[i, j] = x[i + a, j + b] * w[a, b]
""",
    ),
    (
        "im2col_ho_wo_swapped",
        "07",
        "im2col_single",
        "the rows of cols go down the columns",
        """
@cuda.jit
def im2col_single_kernel(x, cols):
    q, r = cuda.grid(2)
    ho = x.shape[0] - K + 1
    if r < cols.shape[0] and q < cols.shape[1]:
        i = r % ho
        j = r // ho
        a = q // K
        b = q % K
        cols[r, q] = x[i + a, j + b]
""",
    ),
    (
        "im2col_ab_swapped",
        "07",
        "im2col_single",
        "the taps of a row are transposed",
        """
@cuda.jit
def im2col_single_kernel(x, cols):
    q, r = cuda.grid(2)
    wo = x.shape[1] - K + 1
    if r < cols.shape[0] and q < cols.shape[1]:
        i = r // wo
        j = r % wo
        a = q % K
        b = q // K
        cols[r, q] = x[i + a, j + b]
""",
    ),
    (
        "pool_no2",
        "07",
        "maxpool2x2",
        "the windows overlap",
        """
@cuda.jit
def maxpool2x2_kernel(x, out):
    j, i = cuda.grid(2)
    if i < out.shape[0] and j < out.shape[1]:
        m = max(x[i, j], x[i, j + 1])
        m = max(m, x[i + 1, j])
        out[i, j] = max(m, x[i + 1, j + 1])
""",
    ),
    (
        "pool_zero_init",
        "07",
        "maxpool2x2",
        "the maximum is 0 where a window is all negative",
        """
@cuda.jit
def maxpool2x2_kernel(x, out):
    j, i = cuda.grid(2)
    if i < out.shape[0] and j < out.shape[1]:
        m = float32(0.0)
        for a in range(2):
            for b in range(2):
                m = max(m, x[2 * i + a, 2 * j + b])
        out[i, j] = m
""",
    ),
    (
        "bias_first_row",
        "08",
        "bias_grad",
        "db holds only one sample's term, the first row",
        """
@cuda.jit
def bias_grad_kernel(dout, db):
    o = cuda.grid(1)
    if o < db.size:
        db[o] = dout[0, o]
""",
    ),
    (
        "bias_mean",
        "08",
        "bias_grad",
        "db is the mean over the batch",
        """
@cuda.jit
def bias_grad_kernel(dout, db):
    o = cuda.grid(1)
    if o < db.size:
        acc = float32(0.0)
        for n in range(dout.shape[0]):
            acc += dout[n, o]
        db[o] = acc / dout.shape[0]
""",
    ),
    (
        "wg_first_sample",
        "08",
        "linear_weight_grad",
        "dw holds only one sample's term, dout[0, i] * x[0, j]",
        """
@cuda.jit
def linear_weight_grad_kernel(dout, x, dw):
    j, i = cuda.grid(2)
    if i < dw.shape[0] and j < dw.shape[1]:
        dw[i, j] = dout[0, i] * x[0, j]
""",
    ),
    (
        "wg_last_sample",
        "08",
        "linear_weight_grad",
        "dw holds only one sample's term, the last sample's",
        """
@cuda.jit
def linear_weight_grad_kernel(dout, x, dw):
    j, i = cuda.grid(2)
    if i < dw.shape[0] and j < dw.shape[1]:
        for n in range(x.shape[0]):
            dw[i, j] = dout[n, i] * x[n, j]
""",
    ),
    (
        "relu_ge0",
        "08",
        "relu_backward",
        "dx equals dout everywhere",
        """
@cuda.jit
def relu_backward_kernel(dout, y, dx):
    i = cuda.grid(1)
    if i < dx.size:
        dx[i] = dout[i] if y[i] >= 0 else float32(0.0)
""",
    ),
    (
        "relu_inverted",
        "08",
        "relu_backward",
        "the mask is inverted",
        """
@cuda.jit
def relu_backward_kernel(dout, y, dx):
    i = cuda.grid(1)
    if i < dx.size:
        dx[i] = dout[i] if y[i] <= 0 else float32(0.0)
""",
    ),
    (
        "relu_times_y",
        "08",
        "relu_backward",
        "the gradient was multiplied by y",
        """
@cuda.jit
def relu_backward_kernel(dout, y, dx):
    i = cuda.grid(1)
    if i < dx.size:
        dx[i] = dout[i] * y[i]
""",
    ),
    (
        "poolb_all",
        "08",
        "maxpool2x2_backward",
        "every pixel of a window got its dout",
        """
@cuda.jit
def maxpool2x2_backward_kernel(dout, arg, dx):
    j, i = cuda.grid(2)
    if i < dx.shape[0] and j < dx.shape[1]:
        oi = i // 2
        oj = j // 2
        g = float32(0.0)
        if oi < dout.shape[0] and oj < dout.shape[1]:
            g = dout[oi, oj]
        dx[i, j] = g
""",
    ),
    (
        "poolb_arg_transposed",
        "08",
        "maxpool2x2_backward",
        "arg was decoded with row and column swapped",
        """
@cuda.jit
def maxpool2x2_backward_kernel(dout, arg, dx):
    j, i = cuda.grid(2)
    if i < dx.shape[0] and j < dx.shape[1]:
        oi = i // 2
        oj = j // 2
        g = float32(0.0)
        if oi < dout.shape[0] and oj < dout.shape[1] and arg[oi, oj] == (j % 2) * 2 + i % 2:
            g = dout[oi, oj]
        dx[i, j] = g
""",
    ),
    (
        "squared_diff_precedence",
        "06",
        "squared_diff",
        "out is x - y**2",
        """
@cuda.jit
def squared_diff_kernel(x, y, out):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = x[i] - y[i] ** 2
""",
    ),
    (
        "leaky_relu_slope",
        "06",
        "leaky_relu",
        "negative inputs were multiplied by 0.1",
        """
@cuda.jit
def leaky_relu_kernel(x, out):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = x[i] if x[i] > 0 else 0.1 * x[i]
""",
    ),
]


@pytest.mark.parametrize(("case", "lesson", "name", "hint", "source"), CASES, ids=[c[0] for c in CASES])
def test_a_beginners_mistake_is_named(case, lesson, name, hint, source):
    fn_name = source.split("def ", 1)[1].split("(", 1)[0]
    kernel = define(source, fn_name, dict(NAMESPACE))
    res = lessons.check(lesson, name, kernel)
    assert not res.passed, res
    assert res.hint.startswith(hint), res


WARP_SUM_UNGUARDED_LOAD = """
@cuda.jit
def warp_sum_kernel(x, partial):
    warp_sums = cuda.shared.array(32, float32)
    tx = cuda.threadIdx.x
    lane = tx % 32
    warp = tx // 32
    i = cuda.grid(1)
    v = x[i]
    offset = 16
    while offset > 0:
        v += cuda.shfl_down_sync(0xFFFFFFFF, v, offset)
        offset //= 2
    if lane == 0:
        warp_sums[warp] = v
    cuda.syncthreads()
    if warp == 0:
        v = warp_sums[lane] if lane < TPB // 32 else float32(0.0)
        offset = 16
        while offset > 0:
            v += cuda.shfl_down_sync(0xFFFFFFFF, v, offset)
            offset //= 2
        if lane == 0:
            partial[cuda.blockIdx.x] = v
"""


def test_a_warp_sum_reading_past_the_end_is_not_told_to_guard_the_shuffles():
    """The usual hint for an index past the end ("guard with `if i < ...:`") would lead to a guard around the
    shuffles, which leaves lanes out of them: a kernel with shuffles is told to load 0 there instead."""
    res = lessons.check("05", "warp_sum", define(WARP_SUM_UNGUARDED_LOAD, "warp_sum_kernel", dict(NAMESPACE)))
    assert res.status == "failed" and "indexed past the end" in res.message, res
    assert "guard around the shuffles is not the fix" in res.hint and "else float32(0.0)" in res.hint, res


WARP_SUM_GUARDED = """
@cuda.jit
def warp_sum_kernel(x, partial):
    warp_sums = cuda.shared.array(32, float32)
    tx = cuda.threadIdx.x
    lane = tx % 32
    warp = tx // 32
    i = cuda.grid(1)
    if i < x.size:
        v = x[i]
        offset = 16
        while offset > 0:
            v += cuda.shfl_down_sync(0xFFFFFFFF, v, offset)
            offset //= 2
        if lane == 0:
            warp_sums[warp] = v
    cuda.syncthreads()
    if warp == 0:
        v = warp_sums[lane] if lane < TPB // 32 else float32(0.0)
        offset = 16
        while offset > 0:
            v += cuda.shfl_down_sync(0xFFFFFFFF, v, offset)
            offset //= 2
        if lane == 0:
            partial[cuda.blockIdx.x] = v
"""
WARP_SUM_RETURNS_EARLY = """
@cuda.jit
def warp_sum_kernel(x, partial):
    warp_sums = cuda.shared.array(32, float32)
    tx = cuda.threadIdx.x
    lane = tx % 32
    warp = tx // 32
    i = cuda.grid(1)
    if i >= x.size:
        return
    v = x[i]
    offset = 16
    while offset > 0:
        v += cuda.shfl_down_sync(0xFFFFFFFF, v, offset)
        offset //= 2
    if lane == 0:
        warp_sums[warp] = v
    cuda.syncthreads()
    if warp == 0:
        v = warp_sums[lane] if lane < TPB // 32 else float32(0.0)
        offset = 16
        while offset > 0:
            v += cuda.shfl_down_sync(0xFFFFFFFF, v, offset)
            offset //= 2
        if lane == 0:
            partial[cuda.blockIdx.x] = v
"""


@pytest.mark.parametrize(
    ("source", "says"),
    [
        # which lanes the simulator finds where depends on the Python threads' schedule: the patterns allow any
        (WARP_SUM_GUARDED, r"lanes? [-\d, ]+ waits? in cuda\.shfl_down_sync \(mask 0xffffffff\) at line 13"),
    ],
    ids=["if_around_the_shuffles"],
)
def test_a_guard_that_keeps_lanes_from_the_shuffles_gets_the_simulators_error(source, says):
    """On a GPU such a kernel computes garbage or hangs; the verdict is the simulator's error, which names the lanes
    and the lines, in the harness's words (which thread, which input, which launch), not a traceback."""
    res = lessons.check("05", "warp_sum", define(source, "warp_sum_kernel", dict(NAMESPACE)))
    assert res.status == "error" and res.message.startswith("RuntimeError in thread ("), res
    assert re.search(says, res.message) and "On a GPU" in res.message and "Traceback" not in str(res), res
    assert "input: size=1" in res.message and "launch: warp_sum_kernel[1, 128]" in res.message, res


def test_returning_before_the_shuffles_is_named():
    """Lanes that returned are not waited for (PTX), so the kernel runs, and what the others read from them is
    undefined: the verdict names that read (seen, not guessed) and says not to return before the shuffles."""
    res = lessons.check("05", "warp_sum", define(WARP_SUM_RETURNS_EARLY, "warp_sum_kernel", dict(NAMESPACE)))
    assert res.status == "failed" and "Traceback" not in str(res), res
    assert "a shuffle read a lane that took no part" in res.hint and "do not return before them" in res.hint, res
    assert "v += cuda.shfl_down_sync(0xFFFFFFFF, v, offset)" in res.hint, res


WARP_SUM_AS_A_TREE = """
@cuda.jit
def warp_sum_kernel(x, partial):
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
"""


def test_a_shared_memory_tree_is_over_the_warp_sums_barrier_budget():
    """The tree of exercise 2 computes the same sums: it gets half the points and is pointed to the shuffles."""
    res = lessons.check("05", "warp_sum", define(WARP_SUM_AS_A_TREE, "warp_sum_kernel", dict(NAMESPACE)))
    assert res.status == "over budget" and "a thread passed 8 cuda.syncthreads() (limit 1" in res.message, res
    assert "cuda.shfl_down_sync" in res.hint, res


CONV_X_ALONG_ROWS = """
@cuda.jit
def conv2d_single_kernel(x, w, out):
    i, j = cuda.grid(2)
    if i < out.shape[0] and j < out.shape[1]:
        acc = float32(0.0)
        for a in range(w.shape[0]):
            for b in range(w.shape[1]):
                acc += x[i + a, j + b] * w[a, b]
        out[i, j] = acc
"""


def test_a_convolution_with_x_along_the_rows_is_not_passed():
    """Lesson 07 states x along the columns; before, `i, j = cuda.grid(2)` passed the check silently, then only its
    coalescing budget caught it. On the 40-wide input it is right only with x and y exchanged: that verdict first,
    its uncoalesced accesses listed too, half the points."""
    kernel = define(CONV_X_ALONG_ROWS, "conv2d_single_kernel", dict(NAMESPACE))
    res = lessons.check("07", "conv2d_single", kernel)
    assert res.status == "failed" and res.score == 0.5 and "but orientation:" in res.message, res
    assert "coalescing of x" in str(res) and "j, i = cuda.grid(2)" in res.hint, res


# --- predictions of exact counts -------------------------------------------------------------------------
COUNTS_05 = {
    "predicted_partials": 8,
    "predicted_atomic_updates": 512,
    "predicted_tree_writes": 2,
    "predicted_tree_barriers": 9,  # 1 + log2(256)
    "predicted_warp_barriers": 1,
    "predicted_warp_shared_writes": 8,  # one per warp of 256 threads
    "predicted_reads": 3,
}


def _compare_tolerances(nb_name: str) -> dict[str, float]:
    """{prediction variable: the tolerance its lessons.compare call passes (0.25, compare's default, if none)}."""
    import ast
    import json
    from pathlib import Path

    nb = json.loads((Path(__file__).resolve().parents[1] / "notebooks" / nb_name).read_text())
    found = {}
    for cell in nb["cells"]:
        if cell["cell_type"] != "code" or "lessons.compare(" not in "".join(cell["source"]):
            continue
        for node in ast.walk(ast.parse("".join(cell["source"]))):
            if isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "compare":
                kw = {k.arg: k.value for k in node.keywords}
                tol = kw.get("tolerance")
                found[node.args[0].id] = ast.literal_eval(tol) if tol is not None else 0.25
    return found


@pytest.mark.parametrize(("name", "right"), COUNTS_05.items())
def test_lesson05_exact_counts_are_not_right_when_off_by_a_few(name, right, capsys):
    """Before: compare's default 25% tolerance called 9 or 10 partial sums right (the answer is 8)."""
    tol = _compare_tolerances("05_reductions_atomics.ipynb")[name]
    wrong = right + max(1, right // 5)  # within 25% of the answer for every count above 3
    assert "right" not in lessons.compare(wrong, right, tolerance=tol).split("\n")[0].split(":")[-1]
    assert lessons.compare(right, right, tolerance=tol).split("\n")[0].endswith("right.")


def test_an_elementwise_spec_without_return_is_told_so():
    """Before: 'TypeError in your code: 'NoneType' object is not iterable' with a hint about kernels."""

    def axpy_elementwise_spec():
        spec = {"in_params": "float32 a, float32 x, float32 y", "out_params": "float32 z", "operation": "z = a * x + y"}
        spec["name"] = "axpy"  # built, but the `return spec` is missing

    res = lessons.check("06", "axpy_elementwise", axpy_elementwise_spec)
    assert res.status == "error" and "axpy_elementwise_spec returned None" in res.message, res
    assert "`return` statement missing" in res.message and "simulator ran your code" not in res.hint, res


def test_a_float_index_from_slash_is_named():
    # `s /= 2` makes s a float; numpy then refuses buf[tx + s] ("only integers ... are valid indices"),
    # which was answered with "missing bounds guard?"
    src = """
@cuda.jit
def block_max_kernel(x, partial):
    buf = cuda.shared.array(TPB, float32)
    tx = cuda.threadIdx.x
    i = cuda.grid(1)
    buf[tx] = x[i] if i < x.size else float32(-math.inf)
    cuda.syncthreads()  # the block's values are in buf
    s = TPB / 2
    while s > 0:
        if tx < s:
            buf[tx] = max(buf[tx], buf[tx + s])
        cuda.syncthreads()  # this level is done
        s /= 2
    if tx == 0:
        partial[cuda.blockIdx.x] = buf[0]
"""
    res = lessons.check("05", "block_max", define(src, "block_max_kernel", dict(NAMESPACE)))
    assert not res.passed and "non-integer index" in res.message
    assert "use `//`" in res.hint.lower() or "Use `//`" in res.hint, res.hint
    assert "bounds guard" not in res.hint


WARP_SUM_EVERY_LANE_STORES = WARP_SUM_RETURNS_EARLY.replace(
    "    if i >= x.size:\n        return\n    v = x[i]\n", "    v = x[i] if i < x.size else float32(0.0)\n"
).replace("        if lane == 0:\n            partial[cuda.blockIdx.x] = v\n", "        partial[cuda.blockIdx.x] = v\n")


def test_every_lane_of_warp_0_storing_the_block_sum_is_told_to_let_lane_0_write():
    assert "if lane == 0:\n            partial" not in WARP_SUM_EVERY_LANE_STORES
    res = lessons.check("05", "warp_sum", define(WARP_SUM_EVERY_LANE_STORES, "warp_sum_kernel", dict(NAMESPACE)))
    assert not res.passed and "let only that one write" in res.hint, res
    assert "PyTorch" not in res.hint.split("For a flag")[0], res


WARP_SUM_READS_EVERY_SLOT = WARP_SUM_EVERY_LANE_STORES.replace(
    "        partial[cuda.blockIdx.x] = v\n", "        if lane == 0:\n            partial[cuda.blockIdx.x] = v\n"
).replace("v = warp_sums[lane] if lane < TPB // 32 else float32(0.0)", "v = warp_sums[lane]")


def test_warp_0_reading_slots_no_warp_wrote_is_told_which_element_and_line():
    assert "v = warp_sums[lane]\n" in WARP_SUM_READS_EVERY_SLOT
    res = lessons.check("05", "warp_sum", define(WARP_SUM_READS_EVERY_SLOT, "warp_sum_kernel", dict(NAMESPACE)))
    assert not res.passed and "read warp_sums[4]" in res.hint and "which no thread of its block wrote" in res.hint
    assert "`v = warp_sums[lane]`" in res.hint and "if lane < TPB // 32 else float32(0.0)" in res.hint, res


WARP_SUM_ATOMIC_INTO_PARTIAL = """
@cuda.jit
def warp_sum_kernel(x, partial):
    lane = cuda.threadIdx.x % 32
    i = cuda.grid(1)
    v = x[i] if i < x.size else float32(0.0)
    offset = 16
    while offset > 0:
        v += cuda.shfl_down_sync(0xFFFFFFFF, v, offset)
        offset //= 2
    if lane == 0:
        cuda.atomic.add(partial, cuda.blockIdx.x, v)
"""


def test_atomic_adds_into_an_output_nobody_zeroed_are_named_not_called_unwritten():
    # each warp's lane 0 adds its sum into partial[b]: right if partial started at 0, but the check fills outputs
    # (NaN, a huge value), as a GPU leaves leftovers; "nothing was written" would send the learner the wrong way
    res = lessons.check("05", "warp_sum", define(WARP_SUM_ATOMIC_INTO_PARTIAL, "warp_sum_kernel", dict(NAMESPACE)))
    assert not res.passed and "partial[0] was only changed by cuda.atomic.*" in res.hint, res
    assert "not zeroed for you" in res.hint and "nothing was written" not in res.hint, res


@pytest.mark.parametrize("pad", ["x[0]", "x[x.size - 1]"])
def test_padding_with_a_real_element_is_named(pad):
    src = WARP_SUM_EVERY_LANE_STORES.replace(
        "        partial[cuda.blockIdx.x] = v\n", "        if lane == 0:\n            partial[cuda.blockIdx.x] = v\n"
    ).replace("v = x[i] if i < x.size else float32(0.0)", f"v = x[i] if i < x.size else {pad}")
    assert f"else {pad}" in src
    res = lessons.check("05", "warp_sum", define(src, "warp_sum_kernel", dict(NAMESPACE)))
    assert not res.passed and "loaded a real element" in res.hint, res
