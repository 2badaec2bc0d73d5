"""Hints that two learner reviews (2026-12-03) found sending a learner to the wrong fix: each names the real
cause and fix now. Before each fix, the hint (or message) quoted in the test's docstring was given."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
from numba import cuda, float32

import gpulab
from gpulab import capstone, lessons
from gpulab.lessons.answers_05_10 import K, TPB
from gpulab.simulator.memory import filler_hint
from gpulab.source import define

NAMESPACE = {"cuda": cuda, "float32": float32, "math": math, "np": np, "TPB": TPB, "K": K}
SIMULATOR = pytest.mark.skipif(
    gpulab.is_gpu(),
    reason="the verdict comes from the simulator (its access log, or the IndexError and frame of the thread that "
    "ran past an array's end); on a GPU nothing checks an index and a race may give the right values",
)


def _check(lesson: str, name: str, source: str):
    fn_name = source.split("def ", 1)[1].split("(", 1)[0]
    return lessons.check(lesson, name, define(source, fn_name, dict(NAMESPACE)))


SCAN_ONE_BUFFER = """
@cuda.jit
def scan_block_kernel(x, out, block_sums):
    buf = cuda.shared.array(TPB, float32)
    tx = cuda.threadIdx.x
    i = cuda.grid(1)
    buf[tx] = x[i] if i < x.size else float32(0.0)
    cuda.syncthreads()
    off = 1
    while off < TPB:
        if tx >= off:
            buf[tx] += buf[tx - off]
        cuda.syncthreads()
        off *= 2
    if i < out.size:
        out[i] = buf[tx]
    if tx == TPB - 1:
        block_sums[cuda.blockIdx.x] = buf[tx]
"""


@SIMULATOR
def test_a_scan_in_one_buffer_is_told_to_read_before_any_thread_writes():
    """Before: "The missing barrier is the one BEFORE the next overwrite ... (in a loop: at the end of each
    iteration ...)", a barrier the kernel already has at the end of each step."""
    res = _check("05", "scan_block", SCAN_ONE_BUFFER)
    assert not res.passed, res
    assert "BEFORE the next overwrite" not in res.hint, res.hint
    assert "A barrier at the end of each step is not enough" in res.hint, res.hint
    assert "`buf[tx] += buf[tx - off]` on line" in res.hint and "in one statement" in res.hint, res.hint
    assert "two buffers" in res.hint and "`buf[tx] = v`" in res.hint, res.hint
    # the read and the write on two lines: named as such
    two_lines = SCAN_ONE_BUFFER.replace(
        "        if tx >= off:\n            buf[tx] += buf[tx - off]\n",
        "        v = buf[tx]\n        if tx >= off:\n            v += buf[tx - off]\n        buf[tx] = v\n",
    )
    res = _check("05", "scan_block", two_lines)
    assert not res.passed and "A barrier at the end of each step is not enough" in res.hint, res
    assert "overwrites it with no cuda.syncthreads() in between" in res.hint, res.hint


BLOCK_MAX_EVERY_THREAD_STORES = """
@cuda.jit
def block_max_kernel(x, partial):
    s = cuda.shared.array(TPB, float32)
    tx = cuda.threadIdx.x
    i = cuda.grid(1)
    s[tx] = x[i] if i < x.size else -math.inf
    cuda.syncthreads()
    h = TPB // 2
    while h > 0:
        if tx < h:
            s[tx] = max(s[tx], s[tx + h])
        cuda.syncthreads()
        h //= 2
    partial[cuda.blockIdx.x] = s[0]
"""


@SIMULATOR
def test_every_thread_storing_a_blocks_result_is_told_to_let_one_thread_store():
    """Before: "... the index (or a grid-stride loop's start or step) is wrong ... Build the index from
    cuda.grid()", when the index is right and `if tx == 0:` is what is missing."""
    res = _check("05", "block_max", BLOCK_MAX_EVERY_THREAD_STORES)
    assert not res.passed, res
    assert "if cuda.threadIdx.x == 0:" in res.hint and "The index is right" in res.hint, res.hint
    assert "grid-stride" not in res.hint and "cuda.grid()" not in res.hint, res.hint
    assert "threads of block (0, 0, 0) stored into it" in res.message, res.message


MAXPOOL_BACKWARD_NO_WINDOW_TEST = """
@cuda.jit
def maxpool2x2_backward_kernel(dout, arg, dx):
    j, i = cuda.grid(2)
    if i < dx.shape[0] and j < dx.shape[1]:
        oi = i // 2
        oj = j // 2
        v = 0.0
        if arg[oi, oj] == 2 * (i - 2 * oi) + (j - 2 * oj):
            v = dout[oi, oj]
        dx[i, j] = v
"""

IM2COL_WO_IS_W = """
@cuda.jit
def im2col_single_kernel(x, cols):
    q, r = cuda.grid(2)
    if r < cols.shape[0] and q < cols.shape[1]:
        wo = x.shape[1]
        i = r // wo
        j = r % wo
        a = q // K
        b = q % K
        cols[r, q] = x[i + a, j + b]
"""


@SIMULATOR
def test_a_computed_index_past_the_end_in_a_guarded_thread_is_not_told_to_add_a_guard():
    """Before: "missing bounds guard? ... guard with `if i < out.shape[0]:`", for kernels that have their thread
    guard and whose computed index (a window's row, an output size) is what runs past the end."""
    res = _check("08", "maxpool2x2_backward", MAXPOOL_BACKWARD_NO_WINDOW_TEST)
    assert not res.passed and "indexed past the end of arg" in res.message, res
    assert "missing bounds guard" not in res.hint, res.hint
    assert "`arg[oi, oj]` ran past the end of arg: its index at axis 0, `oi`, is" in res.hint, res.hint
    assert "is not the fix" in res.hint and "`if oi < arg.shape[0]:`" in res.hint, res.hint

    res = _check("07", "im2col_single", IM2COL_WO_IS_W)
    assert not res.passed and "indexed past the end of x" in res.message, res
    assert "missing bounds guard" not in res.hint, res.hint
    assert "`x[i + a, j + b]` ran past the end of x: its index at axis 1, `j + b`, is" in res.hint, res.hint
    assert "`wo = W - K + 1`, not `W`" in res.hint, res.hint


@SIMULATOR
def test_the_same_kernel_without_its_thread_guard_is_still_told_to_guard():
    no_guard = IM2COL_WO_IS_W.replace("wo = x.shape[1]", "wo = x.shape[1] - K + 1").replace(
        "    if r < cols.shape[0] and q < cols.shape[1]:\n", "    if True:\n"
    )
    res = _check("07", "im2col_single", no_guard)
    assert not res.passed and "missing bounds guard" in res.hint, res


CONV_GUARDED_BY_THE_INPUT = """
@cuda.jit
def conv2d_single_kernel(x, w, out):
    j, i = cuda.grid(2)
    if i < x.shape[0] - 1 and j < x.shape[1] - 1:
        s = 0.0
        for a in range(w.shape[0]):
            for b in range(w.shape[1]):
                s += x[i + a, j + b] * w[a, b]
        out[i, j] = s
"""


@SIMULATOR
def test_a_guard_too_wide_for_the_output_is_told_to_guard_with_the_outputs_shape():
    """The same computed index past the end, in a thread that has no element of out (its guard uses x's shape):
    there the guard is the fix, and the hint says which store the thread had no element for."""
    res = _check("07", "conv2d_single", CONV_GUARDED_BY_THE_INPUT)
    assert not res.passed and "indexed past the end of x" in res.message, res
    assert "your guard lets this thread through, but it has no element to compute: out[" in res.hint, res.hint
    assert "`if i < out.shape[0]:`" in res.hint and "is not the fix" not in res.hint, res.hint


def _col2im_without_the_output_row_test():
    @cuda.jit
    def col2im(dcols, dx, kh, kw, stride, pad, ho, wo):
        N, C, H, W = dx.shape[0], dx.shape[1], dx.shape[2], dx.shape[3]
        for t in range(cuda.grid(1), N * C * H * W, cuda.gridsize(1)):
            n, c, h, w = t // (C * H * W), (t // (H * W)) % C, (t // W) % H, t % W
            acc = 0.0
            for a in range(kh):
                ii = h + pad - a
                if ii >= 0 and ii % stride == 0:  # `and ii // stride < ho` left out
                    for b in range(kw):
                        jj = w + pad - b
                        if jj >= 0 and jj % stride == 0 and jj // stride < wo:
                            acc += dcols[(n * ho + ii // stride) * wo + jj // stride, (a * kw + b) * C + c]
            dx[n, c, h, w] = acc

    return col2im


@SIMULATOR
def test_col2im_without_its_window_row_test_is_told_to_test_the_positions_not_the_thread():
    """Before: "missing bounds guard? ... guard with `if i < dcols.shape[0]:` on the array that line indexes", in a
    grid-stride loop where the window's output row ii // stride is what runs past ho."""
    res = capstone.Capstone().register("col2im", _col2im_without_the_output_row_test())
    assert not res.passed, res
    text = str(res)
    assert "indexed past the end of dcols" in text and "missing bounds guard" not in text, text
    assert "ran past the end of dcols: its index at axis 0" in text and "is not the fix" in text, text
    assert "testing each position that goes into the index against its own range" in text, text


def test_the_filler_check_on_minus_inf_writes_no_warning():
    """Before: "RuntimeWarning: invalid value encountered in subtract" (-inf - -inf) on stderr, which nbgrader counts
    against a grade cell."""
    got = np.array([-np.inf, 1.0, np.nan], np.float32)
    exp = np.array([-np.inf, 2.0, 0.5], np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert filler_hint(got, exp, "out") == ""


def test_a_plain_function_returning_none_is_told_so_not_blamed_on_gpulab():
    """Before: status "error", "gpulab's code (gpulab/lessons/exercise.py, line 68, in host) refused your kernel
    joules_per_image: ...": a library crash, and a plain function called a kernel."""

    def joules_per_image(t, w, n):
        e = float(np.sum(np.diff(t) * (np.asarray(w)[1:] + np.asarray(w)[:-1]) / 2)) / n  # noqa: F841

    res = lessons.check("11", "joules_per_image", joules_per_image)
    assert res.status == "failed", res
    assert res.message.startswith("your function joules_per_image returned None"), res.message
    assert "gpulab's code" not in res.message and "kernel" not in res.message, res.message
    assert "`return`" in res.hint, res.hint


def test_a_kernel_without_cuda_jit_is_not_blamed_on_gpulab():
    """Before: "TypeError raised in gpulab's code (gpulab/exercises/run.py, line 226), not in a line of yours ..."."""

    def add_plain(a, b, out):
        i = cuda.grid(1)
        if i < out.size:
            out[i] = a[i] + b[i]

    res = lessons.check("01", "add", add_plain)
    assert not res.passed, res
    assert res.message.startswith("add_plain is a plain Python function, not a kernel"), res.message
    assert "gpulab's code" not in res.message, res.message
    assert "@cuda.jit" in res.hint, res.hint
