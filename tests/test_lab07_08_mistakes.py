"""Labs 07 and 08, more beginners' mistakes named (each edit is one line a learner gets wrong; the right kernel or
function still gets full marks).

Before: a 1-D or 2-D convolution one tap short (`range(K - 1)`), a single-channel 2-D convolution with its filter
flipped, a batched convolution whose guard skips only the taps past the bottom and right edges, a max-pool one
row and column short or with its stride ignored, an im2col with a tap's row and column offsets swapped, a ReLU
backward passing dout where y == 0, a linear backward whose db is a mean or the sum of all of dout, and a
convolution backward with dw reshaped without moving C, wmat or dout flattened in the wrong order, or db a mean,
all got "expected ..., got ..." with no hint.
"""

from __future__ import annotations

import re
from pathlib import Path

import nbformat
import numpy as np
import pytest
from numba import cuda, float32

from gpulab import lessons, nn
from gpulab.problems import lab07, lab08
from kernel_edits import edited_kernel

NS = {"cuda": cuda, "float32": float32}
reference = nn.ops.get("numpy")  # as the lab's notebook: its im2col and col2im are given

CONV1D = """
@cuda.jit
def conv1d_kernel(x, w, out):
    i = cuda.grid(1)
    if i < out.size:
        s = float32(0.0)
        for k in range(w.size):
            s += x[i + k] * w[k]
        out[i] = s
"""

CONV2D_DILATED = """
@cuda.jit
def conv2d_dilated_kernel(x, w, dilation, out):
    j, i = cuda.grid(2)
    if i < out.shape[0] and j < out.shape[1]:
        s = float32(0.0)
        for a in range(w.shape[0]):
            for b in range(w.shape[1]):
                s += x[i + dilation * a, j + dilation * b] * w[a, b]
        out[i, j] = s
"""

CONV2D = """
@cuda.jit
def conv2d_kernel(x, w, b, stride, pad, out):
    t = cuda.grid(1)
    if t < out.size:
        j = t % out.shape[3]
        i = (t // out.shape[3]) % out.shape[2]
        f = (t // (out.shape[3] * out.shape[2])) % out.shape[1]
        n = t // (out.shape[3] * out.shape[2] * out.shape[1])
        k = w.shape[2]
        s = b[f]
        for c in range(x.shape[1]):
            for a in range(k):
                for d in range(k):
                    r = i * stride + a - pad
                    q = j * stride + d - pad
                    if 0 <= r < x.shape[2] and 0 <= q < x.shape[3]:
                        s += x[n, c, r, q] * w[f, c, a, d]
        out[n, f, i, j] = s
"""

MAXPOOL = """
@cuda.jit
def maxpool_kernel(x, k, stride, out):
    t = cuda.grid(1)
    if t < out.size:
        j = t % out.shape[3]
        i = (t // out.shape[3]) % out.shape[2]
        c = (t // (out.shape[3] * out.shape[2])) % out.shape[1]
        n = t // (out.shape[3] * out.shape[2] * out.shape[1])
        m = x[n, c, i * stride, j * stride]
        for a in range(k):
            for b in range(k):
                v = x[n, c, i * stride + a, j * stride + b]
                if v > m:
                    m = v
        out[n, c, i, j] = m
"""

IM2COL = """
@cuda.jit
def im2col_kernel(x, k, stride, pad, cols):
    q, r = cuda.grid(2)
    ho = (x.shape[2] + 2 * pad - k) // stride + 1
    wo = (x.shape[3] + 2 * pad - k) // stride + 1
    if r < cols.shape[0] and q < cols.shape[1]:
        n = r // (ho * wo)
        i = (r // wo) % ho
        j = r % wo
        c = q // (k * k)
        a = (q // k) % k
        d = q % k
        h = i * stride + a - pad
        w = j * stride + d - pad
        v = float32(0.0)
        if 0 <= h < x.shape[2] and 0 <= w < x.shape[3]:
            v = x[n, c, h, w]
        cols[r, q] = v
"""

LEAKY_RELU_BACKWARD = """
@cuda.jit
def leaky_relu_backward_kernel(dout, y, alpha, dx):
    i = cuda.grid(1)
    if i < dx.size:
        if y[i] > 0:
            dx[i] = dout[i]
        else:
            dx[i] = alpha * dout[i]
"""

CASES = [
    (lab07.CONV1D, CONV1D, "conv1d_kernel", ("range(w.size)", "range(w.size - 1)"), "the last tap is missing"),
    (
        lab07.CONV2D_SINGLE,
        CONV2D_DILATED,
        "conv2d_dilated_kernel",
        ("w[a, b]", "w[w.shape[0] - 1 - a, w.shape[1] - 1 - b]"),
        "you flipped the filter",
    ),
    (
        lab07.CONV2D_SINGLE,
        CONV2D_DILATED,
        "conv2d_dilated_kernel",
        ("range(w.shape[", "range(-1 + w.shape["),
        "the last row and column of taps",
    ),
    (
        lab07.CONV2D_SINGLE,
        CONV2D_DILATED,
        "conv2d_dilated_kernel",
        ("x[i + dilation * a, j + dilation * b]", "x[i + a, j + b]"),
        "this is lesson 07's conv2d_single",
    ),
    (
        lab07.CONV2D_SINGLE,
        CONV2D_DILATED,
        "conv2d_dilated_kernel",
        ("j + dilation * b]", "j + b]"),
        "the dilation is applied to one axis only",
    ),
    (
        lab07.CONV2D_SINGLE,
        CONV2D_DILATED,
        "conv2d_dilated_kernel",
        ("x[i + dilation * a", "x[i + a"),
        "the dilation is applied to one axis only",
    ),
    (
        lab07.CONV2D,
        CONV2D,
        "conv2d_kernel",
        ("0 <= r < x.shape[2] and 0 <= q < x.shape[3]", "r < x.shape[2] and q < x.shape[3]"),
        "taps above or left of x",
    ),
    (
        lab07.MAXPOOL,
        MAXPOOL,
        "maxpool_kernel",
        ("range(k)", "range(k - 1)"),
        "the window is one row and one column short",
    ),
    (lab07.MAXPOOL, MAXPOOL, "maxpool_kernel", ("* stride", "* 1"), "the stride is ignored"),
    (
        lab07.IM2COL,
        IM2COL,
        "im2col_kernel",
        ("a = (q // k) % k\n        d = q % k", "d = (q // k) % k\n        a = q % k"),
        "a tap's row and column offsets are swapped",
    ),
    (
        lab08.LEAKY_RELU_BACKWARD,
        LEAKY_RELU_BACKWARD,
        "leaky_relu_backward_kernel",
        ("y[i] > 0", "y[i] >= 0"),
        "dout passed unchanged where y == 0",
    ),
    (
        lab08.LEAKY_RELU_BACKWARD,
        LEAKY_RELU_BACKWARD,
        "leaky_relu_backward_kernel",
        ("alpha * dout[i]", "float32(0.0)"),
        "this is lesson 08's relu_backward",
    ),
    (
        lab08.LEAKY_RELU_BACKWARD,
        LEAKY_RELU_BACKWARD,
        "leaky_relu_backward_kernel",
        (
            "dx[i] = dout[i]\n        else:\n            dx[i] = alpha * dout[i]",
            "dx[i] = alpha * dout[i]\n        else:\n            dx[i] = dout[i]",
        ),
        "where y[i] <= 0 the kernel passed dout[i] unchanged",  # the first case has one element: see below
    ),
    (
        lab08.LEAKY_RELU_BACKWARD,
        LEAKY_RELU_BACKWARD,
        "leaky_relu_backward_kernel",
        ("if y[i] > 0:", "if dout[i] > 0:"),
        "where y[i] <= 0 the kernel passed dout[i] unchanged",
    ),
    (
        lab08.LEAKY_RELU_BACKWARD,
        LEAKY_RELU_BACKWARD,
        "leaky_relu_backward_kernel",
        ("            dx[i] = alpha * dout[i]", "            dx[i] = alpha * y[i]"),
        "where y[i] <= 0 the kernel stored alpha * y[i]",
    ),
    (
        lab08.LEAKY_RELU_BACKWARD,
        LEAKY_RELU_BACKWARD,
        "leaky_relu_backward_kernel",
        (
            "dx[i] = dout[i]\n        else:\n            dx[i] = alpha * dout[i]",
            "dx[i] = dout[i] * y[i]\n        else:\n            dx[i] = dout[i] * y[i]",
        ),
        "the gradient was multiplied by y",
    ),
]


@pytest.mark.parametrize(("problem", "src", "name", "edit", "hint"), CASES, ids=[c[4][:24] for c in CASES])
def test_kernel_mistake_gets_its_hint_and_the_right_kernel_full_marks(problem, src, name, edit, hint):
    right = problem.check(edited_kernel(src, name, NS))
    assert right.passed and right.score == right.max_score, right
    res = problem.check(edited_kernel(src, name, NS, edit))
    assert not res.passed and res.score == 0, res
    assert res.hint.startswith(hint), res


@pytest.mark.parametrize(
    ("edit", "hint"),
    [
        (("if y[i] > 0:", "if dout[i] > 0:"), "the slope is chosen by the sign of dout"),
        (
            (
                "if y[i] > 0:\n            dx[i] = dout[i]\n        else:\n            dx[i] = alpha * dout[i]",
                "dx[i] = max(dout[i], alpha * dout[i])",
            ),
            "the slope is chosen by the sign of dout",
        ),
        (
            (
                "dx[i] = dout[i]\n        else:\n            dx[i] = alpha * dout[i]",
                "dx[i] = alpha * dout[i]\n        else:\n            dx[i] = dout[i]",
            ),
            "the slopes are swapped",
        ),
    ],
)
def test_leaky_relu_slope_mistakes_are_told_apart_where_the_input_can(edit, hint):
    """On one element with y <= 0 and dout > 0 (the check's first case) slopes swapped and slopes chosen by dout's
    sign give the same dx: before, both were told "the slopes are swapped". That input gets a hint true of both;
    an input that tells them apart names each."""
    kernel = edited_kernel(LEAKY_RELU_BACKWARD, "leaky_relu_backward_kernel", NS, edit)
    res = lab08.LEAKY_RELU_BACKWARD.check(kernel, sizes=[(100, 0.2)])
    assert not res.passed and res.hint.startswith(hint), res


LINEAR = {
    "right": lambda x, W, d: (d @ W, d.T @ x, d.sum(axis=0)),
    "db mean": lambda x, W, d: (d @ W, d.T @ x, d.mean(axis=0)),
    "db of all": lambda x, W, d: (d @ W, d.T @ x, d.sum()),
}


@pytest.mark.parametrize(
    ("problem", "lesson", "name", "verdict"),
    [
        (lab07.CONV2D_SINGLE, "07", "conv2d_single", "this is lesson 07's conv2d_single"),
        (lab08.LEAKY_RELU_BACKWARD, "08", "relu_backward", "this is lesson 08's relu_backward"),
    ],
)
def test_the_lessons_revealed_answer_fails_the_lab_and_is_named(problem, lesson, name, verdict):
    """The lab's exercise is a variant of the lesson's: the lesson's answer, from lessons.reveal, fails as it is
    (it takes one parameter fewer), and with the lab's extra parameter added and ignored it gets the named
    verdict. Before, it was the lab's answer and earned full marks."""
    shown = lessons.reveal(lesson, name)  # the lesson's kernel, as a learner can print it
    kernel = re.search(r"def (\w+)\(", shown).group(1)
    as_is = problem.check(edited_kernel(shown, kernel, NS), trusted=True)
    assert not as_is.passed and as_is.score == 0, as_is
    extra = "dilation" if lesson == "07" else "alpha"
    out = "out" if lesson == "07" else "dx"
    adapted = edited_kernel(shown, kernel, NS, (f", {out}):", f", {extra}, {out}):"))
    res = problem.check(adapted, trusted=True)
    assert not res.passed and res.score == 0 and res.hint.startswith(verdict), res


@pytest.mark.parametrize(
    ("which", "hint"),
    [("right", None), ("db mean", "this is the mean over the batch"), ("db of all", "db holds the sum of all")],
)
def test_linear_backward_db_mistakes_are_named(which, hint):
    def host(x, W, dout, dx, dW, db):
        dx[...], dW[...], db[...] = LINEAR[which](x, W, dout)

    res = lab08.LINEAR_BACKWARD.check(host=host)
    if hint is None:
        assert res.passed and res.score == res.max_score, res
    else:
        assert not res.passed and res.hint.startswith(hint) and res.message.startswith("db["), res


def conv2d_backward(x, w, dout, stride, pad, wrong=""):
    """The lab's im2col backward, or one with the mistake ``wrong``."""
    ops = reference
    f, c, k, _ = w.shape
    cols, _, _ = ops.im2col(x, k, k, stride, pad)
    d = dout.reshape(-1, f) if wrong == "d" else dout.transpose(0, 2, 3, 1).reshape(-1, f)
    dw = (d.T @ cols).reshape(f, c, k, k) if wrong == "dw" else (d.T @ cols).reshape(f, k, k, c).transpose(0, 3, 1, 2)
    wmat = w.reshape(f, c * k * k) if wrong == "wmat" else w.transpose(0, 2, 3, 1).reshape(f, k * k * c)
    db = dout.mean(axis=(0, 2, 3)) if wrong == "db" else d.sum(axis=0)
    return ops.col2im(d @ wmat, x.shape, k, k, stride, pad), dw, db


@pytest.mark.parametrize(
    ("wrong", "out", "hint"),
    [
        ("", None, None),
        ("dw", "dw", "dw's elements are in the wrong places"),
        ("wmat", "dx", "dx was computed with the filters flattened in (c, a, b) order"),
        ("d", "dx", "dout was reshaped to (N*Ho*Wo, F) without moving F last"),
        ("db", "db", "db is a mean"),
    ],
)
def test_conv2d_backward_mistakes_are_named(wrong, out, hint):
    def host(x, w, dout, stride, pad, dx, dw, db):
        dx[...], dw[...], db[...] = conv2d_backward(x, w, dout, stride, pad, wrong)

    res = lab08.CONV2D_BACKWARD.check(host=host)
    if hint is None:
        assert res.passed and res.score == res.max_score, res
    else:
        assert not res.passed and res.hint.startswith(hint) and res.message.startswith(out + "["), res


def test_the_wrapped_low_taps_mistake_is_not_named_without_padding():
    """Without padding no tap falls above or left of x: the mistake cannot be made, so it names nothing."""
    rng = np.random.default_rng(0)
    x, w, b = (rng.standard_normal(s).astype(np.float32) for s in ((1, 1, 4, 4), (1, 1, 3, 3), (1,)))
    with pytest.raises(ValueError):
        lab07._conv_low_taps_wrapped(x, w, b, 1, 0)


def test_batched_conv2d_with_the_row_fastest_is_over_its_coalescing_budget():
    """Exercise 3's 1-D launch, t decoded with i = t % HO: correct values, but a warp's writes land WO elements
    apart. Before, it got full marks (no budget); exercise 2's 2-D conv with i from threadIdx.x got half."""
    right = lab07.CONV2D.check(edited_kernel(CONV2D, "conv2d_kernel", NS))
    assert right.passed and right.score == right.max_score, right
    row_fastest = (
        "j = t % out.shape[3]\n        i = (t // out.shape[3]) % out.shape[2]",
        "i = t % out.shape[2]\n        j = (t // out.shape[2]) % out.shape[3]",
    )
    res = lab07.CONV2D.check(edited_kernel(CONV2D, "conv2d_kernel", NS, row_fastest))
    assert res.status == "over budget" and res.score == res.max_score / 2, res
    assert "coalescing of out" in res.message and "j = t % WO" in res.hint, res


LEAKY = """
@cuda.jit
def leaky_relu_backward_kernel(dout, y, alpha, dx):
    i = cuda.grid(1)
    if i < dx.shape[0]:
        dx[i] = dout[i] if y[i] > 0 else alpha * dout[i]
"""


def test_lab08s_try_it_names_its_own_kernel_and_the_check_notices_the_edit():
    """Before: the summary's "Try it" named `relu_backward_kernel` (lesson 08's, not this lab's) and asked for
    dout "where y >= 0"; it now names the lab's leaky ReLU kernel, and its check notices that edit."""
    for folder in ("solutions", "student"):
        nb = nbformat.read(Path(__file__).resolve().parents[1] / "labs" / folder / "lab08_backprop.ipynb", as_version=4)
        try_it = next(c.source for c in nb.cells if c.cell_type == "markdown" and "**Try it:**" in c.source)
        assert "relu_backward_kernel" not in try_it.replace("leaky_relu_backward_kernel", ""), folder
        assert "`leaky_relu_backward_kernel`" in try_it and "(1 + alpha) / 2" in try_it, folder
    problem = lab08.LEAKY_RELU_BACKWARD
    assert problem.check(edited_kernel(LEAKY, "leaky_relu_backward_kernel", NS)).passed
    edit = ("y[i] > 0", "y[i] >= 0")
    assert not problem.check(edited_kernel(LEAKY, "leaky_relu_backward_kernel", NS, edit)).passed
    f = lambda x, alpha=0.1: x if x > 0 else alpha * x  # noqa: E731
    assert all(abs((f(h) - f(-h)) / (2 * h) - 0.55) < 1e-12 for h in (0.1, 1e-3, 1e-6))  # (1 + alpha) / 2 at 0
