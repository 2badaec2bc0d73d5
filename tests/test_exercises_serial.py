"""Serial "reductions" get half the points: a loop of one thread over the block's values (or a warp's lanes' work
done by one lane, or a warp sum without shuffles) computes the right result, but the exercises are about the
parallel algorithm. A review found these kernels passing lab 05's block sum and warp softmax and lesson 05's block
maximum and warp sum with full marks. The budgets that refuse them (``shared_reads_per_thread=Tree()``,
``reads_per_thread=``, ``min_shuffles=``) measure what the kernel did and say so in the verdict; the legitimate
variants (3 reads per step, a work-efficient scan) keep full marks, and the limit grows with the block size.

Also lesson 10's unscale: a kernel that counts only the infs, or only the NaNs, gets a named hint.
"""

from __future__ import annotations

import math

import numpy as np

import gpulab  # noqa: F401  (picks the mode before numba loads)
from numba import cuda, float32

from gpulab import lessons
from gpulab.exercises import Budget, Problem, Tree, random_arrays
from gpulab.exercises.budgets import SERIAL_HINT, SHUFFLE_HINT
from gpulab.lessons.answers_05_10 import TPB
from gpulab.problems import lab05
from gpulab.problems import lab05_softmax
from gpulab.source import define
from gpulab.trace import trace

NS = {"cuda": cuda, "float32": float32, "math": math, "TPB": TPB}
LAB_NS = {**NS, "TPB": lab05.TPB, "ROWS_PER_BLOCK": lab05.ROWS_PER_BLOCK}

BLOCK_SUM_SERIAL = """
@cuda.jit
def block_sum_kernel(x, partial):
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
"""

SOFTMAX_WARP_SERIAL = """
@cuda.jit
def softmax_warp_kernel(x, out):
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
"""

SOFTMAX_THREAD0 = """
@cuda.jit
def softmax_kernel(x, out):
    r = cuda.blockIdx.x
    if cuda.threadIdx.x == 0:
        m = -math.inf
        for c in range(x.shape[1]):
            m = max(m, x[r, c])
        s = float32(0.0)
        for c in range(x.shape[1]):
            s += math.exp(x[r, c] - m)
        for c in range(x.shape[1]):
            out[r, c] = math.exp(x[r, c] - m) / s
"""

MAX_SERIAL = """
@cuda.jit
def block_max_kernel(x, partial):
    buf = cuda.shared.array(TPB, float32)
    tx = cuda.threadIdx.x
    i = cuda.grid(1)
    buf[tx] = x[i] if i < x.size else -math.inf
    cuda.syncthreads()
    if tx == 0:
        m = buf[0]
        for k in range(1, TPB):
            m = max(m, buf[k])
        partial[cuda.blockIdx.x] = m
"""

MAX_THREAD0_READS_X = """
@cuda.jit
def block_max_kernel(x, partial):
    if cuda.threadIdx.x == 0:
        m = float32(-math.inf)
        start = cuda.blockIdx.x * TPB
        for k in range(start, min(start + TPB, x.size)):
            m = max(m, x[k])
        partial[cuda.blockIdx.x] = m
"""

MAX_THREE_READS_A_STEP = """
@cuda.jit
def block_max_kernel(x, partial):
    buf = cuda.shared.array(TPB, float32)
    tx = cuda.threadIdx.x
    i = cuda.grid(1)
    buf[tx] = x[i] if i < x.size else float32(-math.inf)
    cuda.syncthreads()
    s = TPB // 2
    while s > 0:
        if tx < s:
            if buf[tx + s] > buf[tx]:
                buf[tx] = buf[tx + s]
        cuda.syncthreads()
        s //= 2
    if tx == 0:
        partial[cuda.blockIdx.x] = buf[0]
"""

WARP_SUM_SERIAL = BLOCK_SUM_SERIAL.replace("block_sum_kernel", "warp_sum_kernel")  # one barrier, no shuffle

PAIRS_SERIAL = """
@cuda.jit
def sum_two_per_thread_kernel(x, partial):
    buf = cuda.shared.array(TPB, float32)
    tx = cuda.threadIdx.x
    i = cuda.blockIdx.x * (2 * TPB) + tx
    v = float32(0.0)
    if i < x.size:
        v = x[i]
    if i + TPB < x.size:
        v += x[i + TPB]
    buf[tx] = v
    cuda.syncthreads()
    if tx == 0:
        s = float32(0.0)
        for k in range(TPB):
            s += buf[k]
        partial[cuda.blockIdx.x] = s
"""

SCAN_SERIAL = """
@cuda.jit
def scan_block_kernel(x, out, block_sums):
    buf = cuda.shared.array(TPB, float32)
    tx = cuda.threadIdx.x
    i = cuda.grid(1)
    buf[tx] = x[i] if i < x.size else float32(0.0)
    cuda.syncthreads()
    if tx == 0:
        acc = float32(0.0)
        for k in range(TPB):
            acc += buf[k]
            buf[k] = acc
    cuda.syncthreads()
    if i < out.size:
        out[i] = buf[tx]
    if tx == TPB - 1:
        block_sums[cuda.blockIdx.x] = buf[tx]
"""

SCAN_WORK_EFFICIENT = """
@cuda.jit
def scan_block_kernel(x, out, block_sums):
    buf = cuda.shared.array(TPB, float32)
    tx = cuda.threadIdx.x
    i = cuda.grid(1)
    v = x[i] if i < x.size else float32(0.0)
    buf[tx] = v
    cuda.syncthreads()
    off = 1
    d = TPB // 2
    while d > 0:  # up-sweep
        if tx < d:
            buf[off * (2 * tx + 2) - 1] += buf[off * (2 * tx + 1) - 1]
        off *= 2
        cuda.syncthreads()
        d //= 2
    if tx == 0:
        buf[TPB - 1] = 0
    cuda.syncthreads()
    d = 1
    while d < TPB:  # down-sweep: an exclusive scan
        off //= 2
        if tx < d:
            ai = off * (2 * tx + 1) - 1
            bi = off * (2 * tx + 2) - 1
            t = buf[ai]
            buf[ai] = buf[bi]
            buf[bi] += t
        cuda.syncthreads()
        d *= 2
    r = buf[tx] + v
    if i < out.size:
        out[i] = r
    if tx == TPB - 1:
        block_sums[cuda.blockIdx.x] = r
"""


def _failed(res, name):
    return next(c for c in res.checks if c.name == name and not c.passed)


# --- lab 05 -------------------------------------------------------------------------------------------


def test_lab05_block_sum_by_one_threads_loop_gets_half_and_the_measured_reads():
    res = lab05.BLOCK_SUM.check(define(BLOCK_SUM_SERIAL, "block_sum_kernel", dict(LAB_NS)), ptx=None)
    assert res.status == "over budget" and res.score == 1.5 and res.max_score == 3, res
    assert "thread (0, 0, 0) of block (0, 0, 0) read 64 shared-memory elements" in res.message, res
    assert "a tree over 64 threads takes log2(64) = 6 steps: at most 3*6+4 = 22 reads per thread" in res.message
    assert res.hint == SERIAL_HINT and "s //= 2" in res.hint, res


def test_lab05_warp_softmax_with_one_lane_per_row_gets_half_without_shuffles():
    res = lab05.SOFTMAX_WARP.check(define(SOFTMAX_WARP_SERIAL, "softmax_warp_kernel", dict(LAB_NS)), ptx=None)
    assert res.status == "over budget" and res.score == 1.5, res
    assert "the busiest thread made 210 global reads (limit 9" in res.message, res  # 3 passes over 70 columns
    assert "no thread called one" in _failed(res, "budget: warp shuffles").message, res
    assert res.hint == lab05_softmax.SHUFFLE_BUDGET_HINT and "no lane loops over the whole row" in res.hint, res


def test_lab05_block_softmax_by_thread_0_alone_gets_half():
    res = lab05.SOFTMAX.check(define(SOFTMAX_THREAD0, "softmax_kernel", dict(LAB_NS)), ptx=None)
    assert res.status == "over budget" and res.score == 2, res
    assert "the busiest thread made 210 global reads (limit 6" in res.message, res  # 3 * ceil(70 / 64)
    assert "a stride loop" in res.hint, res


# --- lesson 05 ----------------------------------------------------------------------------------------


def test_lesson05_block_max_by_thread_0_gets_half_with_the_tree_bound():
    res = lessons.check("05", "block_max", define(MAX_SERIAL, "block_max_kernel", dict(NS)))
    assert res.status == "over budget" and res.score == 0.5, res
    assert "read 128 shared-memory elements; a tree over 128 threads takes log2(128) = 7 steps" in res.message, res
    assert "at most 3*7+4 = 25 reads per thread" in res.message and res.hint == SERIAL_HINT, res


def test_lesson05_block_max_by_thread_0_reading_x_itself_is_over_the_reads_per_thread():
    res = lessons.check("05", "block_max", define(MAX_THREAD0_READS_X, "block_max_kernel", dict(NS)))
    assert res.status == "over budget" and "the busiest thread made 128 global reads (limit 1" in res.message, res


def test_lesson05_a_tree_that_reads_three_values_a_step_keeps_full_marks():
    res = lessons.check("05", "block_max", define(MAX_THREE_READS_A_STEP, "block_max_kernel", dict(NS)))
    assert res.passed and res.score == 1, res


def test_lesson05_warp_sum_without_shuffles_gets_half_and_the_shuffle_hint():
    res = lessons.check("05", "warp_sum", define(WARP_SUM_SERIAL, "warp_sum_kernel", dict(NS)))
    assert res.status == "over budget" and res.score == 0.5, res
    assert "budget: warp shuffles" in res.message and "no thread called one" in res.message, res
    assert "log2(32) = 5 shuffle steps (at least 5 expected" in res.message and res.hint == SHUFFLE_HINT, res


def test_lesson05_sum_two_per_thread_by_thread_0_gets_half():
    res = lessons.check("05", "sum_two_per_thread", define(PAIRS_SERIAL, "sum_two_per_thread_kernel", dict(NS)))
    assert res.status == "over budget" and "read 128 shared-memory elements" in res.message, res


def test_lesson05_scan_by_one_thread_gets_half_and_a_work_efficient_scan_full_marks():
    serial = lessons.check("05", "scan_block", define(SCAN_SERIAL, "scan_block_kernel", dict(NS)))
    assert serial.status == "over budget" and "a scan over 128 threads takes log2(128) = 7 steps" in serial.message
    assert "read 129 shared-memory elements" in serial.message and "2^d places" in serial.hint, serial
    blelloch = lessons.check("05", "scan_block", define(SCAN_WORK_EFFICIENT, "scan_block_kernel", dict(NS)))
    assert blelloch.passed, blelloch


# --- the limit grows with the block ---------------------------------------------------------------------


def test_tree_limit_follows_log2_of_the_block():
    assert [Tree().limit(t) for t in (32, 64, 128, 256, 1024)] == [19, 22, 25, 28, 34]
    assert Tree(trees=2).limit(64) == 44 and Tree(per_step=6).limit(128) == 46
    assert "2 trees over 64 threads take log2(64) = 6 steps each: at most 2*(3*6+4) = 44" in Tree(trees=2).explain(64)


BIG = 512  # a block as large as gpu-mode kernels use: the limit is taken from the traced launch


@cuda.jit
def _tree_sum_512(x, partial):
    buf = cuda.shared.array(BIG, float32)
    tx = cuda.threadIdx.x
    i = cuda.grid(1)
    buf[tx] = x[i] if i < x.size else float32(0.0)
    cuda.syncthreads()
    s = BIG // 2
    while s > 0:
        if tx < s:
            buf[tx] += buf[tx + s]
        cuda.syncthreads()
        s //= 2
    if tx == 0:
        partial[cuda.blockIdx.x] = buf[0]


@cuda.jit
def _serial_sum_512(x, partial):
    buf = cuda.shared.array(BIG, float32)
    tx = cuda.threadIdx.x
    i = cuda.grid(1)
    buf[tx] = x[i] if i < x.size else float32(0.0)
    cuda.syncthreads()
    if tx == 0:
        s = float32(0.0)
        for k in range(BIG):
            s += buf[k]
        partial[cuda.blockIdx.x] = s


def test_shared_reads_budget_holds_for_a_tree_at_512_threads_and_refuses_the_loop():
    problem = Problem(
        "sum512",
        lambda x: np.array([x.sum(dtype=np.float64)], np.float32),
        lambda n, rng: random_arrays(rng, n),
        sizes=[BIG],
        launch=lambda x, partial: (1, BIG),
        reduction=BIG,
        race_check=False,
        budget=Budget(shared_reads_per_thread=Tree()),
    )
    tree = problem.check(_tree_sum_512, trusted=True)
    assert tree.passed, tree  # 2 * 9 + 1 = 19 reads, limit 3 * 9 + 4 = 31
    serial = problem.check(_serial_sum_512, trusted=True)
    assert serial.status == "over budget" and "read 512 shared-memory elements" in serial.message, serial
    assert "log2(512) = 9 steps: at most 3*9+4 = 31" in serial.message, serial


def test_trace_counts_shuffles_and_shared_reads_per_thread():
    from gpulab.lessons.answers_05_10 import block_max_kernel, warp_sum_kernel

    x = np.arange(300, dtype=np.float32)
    log = trace(warp_sum_kernel, 3, TPB, x, np.zeros(3, np.float32), shared=True)
    assert log.max_warp_calls() == 10 and log.max_warp_calls("vote") == 0  # warp 0's lanes: 5 + 5
    assert sum(log.warp_calls.values()) == sum(log.warp_ops.values())
    tree = trace(block_max_kernel, 3, TPB, x, np.zeros(3, np.float32), shared=True)
    assert tree.max_warp_calls() == 0 and tree.max_shared_reads() == (15, ((0, 0, 0), (0, 0, 0)))


# --- lesson 10 · unscale ------------------------------------------------------------------------------

UNSCALE = """
@cuda.jit
def unscale_kernel(grads, inv_scale, out, found_inf):
    i = cuda.grid(1)
    if i < out.size:
        v = grads[i] * inv_scale
        out[i] = v
        if TEST:
            cuda.atomic.add(found_inf, 0, 1)
"""


def test_lesson10_unscale_counting_only_inf_or_only_nan_is_named():
    inf_only = lessons.check("10", "unscale", define(UNSCALE.replace("TEST", "math.isinf(v)"), "unscale_kernel", NS))
    assert inf_only.status == "failed" and "found_inf[0]: expected 5, got 3" in inf_only.message, inf_only
    assert "Count NaN too: `if math.isinf(v) or math.isnan(v):`" in inf_only.hint, inf_only
    nan_only = lessons.check("10", "unscale", define(UNSCALE.replace("TEST", "math.isnan(v)"), "unscale_kernel", NS))
    assert "expected 5, got 2" in nan_only.message and "counted the NaNs only" in nan_only.hint, nan_only
    flag = UNSCALE.replace("TEST", "math.isinf(v) or math.isnan(v)").replace("atomic.add", "atomic.max")
    flagged = lessons.check("10", "unscale", define(flag, "unscale_kernel", NS))
    assert "expected 5, got 1" in flagged.message and "found_inf is 1, a flag" in flagged.hint, flagged


# --- lab 12 / lesson 12: the row's partial results merged by one thread --------------------------------

SOFTMAX_BACKWARD_THREAD0_MERGES = """
@cuda.jit
def softmax_backward_kernel(p, dp, ds):
    buf = cuda.shared.array(TPB, float32)
    row = cuda.blockIdx.x
    tx = cuda.threadIdx.x
    acc = float32(0.0)
    for j in range(tx, p.shape[1], TPB):
        acc += p[row, j] * dp[row, j]
    buf[tx] = acc
    cuda.syncthreads()
    if tx == 0:
        total = float32(0.0)
        for k in range(TPB):
            total += buf[k]
        buf[0] = total
    cuda.syncthreads()
    dot = buf[0]
    for j in range(tx, p.shape[1], TPB):
        ds[row, j] = p[row, j] * (dp[row, j] - dot)
"""

ONLINE_SOFTMAX_THREAD0_MERGES = """
@cuda.jit
def online_softmax_kernel(x, out):
    row = cuda.blockIdx.x
    tx = cuda.threadIdx.x
    s_max = cuda.shared.array(TPB, float32)
    s_sum = cuda.shared.array(TPB, float32)
    run_max = float32(-math.inf)
    run_sum = float32(0.0)
    for j in range(tx, x.shape[1], TPB):
        xj = x[row, j]
        new_max = max(run_max, xj)
        if new_max != -math.inf:
            run_sum = run_sum * math.exp(run_max - new_max) + math.exp(xj - new_max)
        run_max = new_max
    s_max[tx] = run_max
    s_sum[tx] = run_sum
    cuda.syncthreads()
    if tx == 0:
        m = float32(-math.inf)
        for k in range(TPB):
            m = max(m, s_max[k])
        total = float32(0.0)
        for k in range(TPB):
            if s_max[k] != -math.inf:
                total += s_sum[k] * math.exp(s_max[k] - m)
        s_max[0] = m
        s_sum[0] = total
    cuda.syncthreads()
    row_max = s_max[0]
    row_sum = s_sum[0]
    for j in range(tx, x.shape[1], TPB):
        out[row, j] = math.exp(x[row, j] - row_max) / row_sum
"""


def test_lab12_softmax_backward_with_thread_0_merging_the_partials_gets_half():
    from gpulab.problems import lab12

    kernel = define(SOFTMAX_BACKWARD_THREAD0_MERGES, "softmax_backward_kernel", {**NS, "TPB": lab12.TPB})
    res = lab12.SOFTMAX_BACKWARD.check(kernel)
    assert res.status == "over budget" and res.score == 1.5, res
    assert "read 33 shared-memory elements; a tree over 32 threads takes log2(32) = 5 steps" in res.message, res


def test_lesson12_online_softmax_with_thread_0_merging_the_pairs_gets_half():
    from gpulab.lessons.answers_12 import SOFTMAX_TPB

    kernel = define(ONLINE_SOFTMAX_THREAD0_MERGES, "online_softmax_kernel", {**NS, "TPB": SOFTMAX_TPB})
    res = lessons.check("12", "online_softmax", kernel)
    assert res.status == "over budget" and "a tree of (max, sum) pairs over 32 threads" in res.message, res
