"""Lessons 07-08 and labs 07-08 (s25 learner review): mistakes that got a hint naming another mistake, or none,
and predictions whose check accepted the wrong answer. Each kernel is built from source with
gpulab.source.define, as a notebook cell would define it."""

from __future__ import annotations

import ast
import json
import math
from pathlib import Path

import numpy as np
import pytest
from numba import cuda, float32

import gpulab
from gpulab import lessons
from gpulab.lessons.answers_05_10 import K, TPB
from gpulab.source import define

ROOT = Path(__file__).resolve().parents[1]
NAMESPACE = {"cuda": cuda, "float32": float32, "math": math, "TPB": TPB, "K": K}
SIMULATOR = pytest.mark.skipif(gpulab.is_gpu(), reason="unwritten elements are seen through the simulator's fill")


def _check(lesson: str, name: str, source: str):
    fn_name = source.split("def ", 1)[1].split("(", 1)[0]
    return lessons.check(lesson, name, define(source, fn_name, dict(NAMESPACE)))


CONV_GUARD_ONE_SHORT = """
@cuda.jit
def conv2d_single_kernel(x, w, out):
    j, i = cuda.grid(2)
    if i < x.shape[0] - K and j < x.shape[1] - K:
        acc = float32(0.0)
        for a in range(K):
            for b in range(K):
                acc += x[i + a, j + b] * w[a, b]
        out[i, j] = acc
"""

POOL_BACK_ODD_EDGE_UNWRITTEN = """
@cuda.jit
def maxpool2x2_backward_kernel(dout, arg, dx):
    j, i = cuda.grid(2)
    oi = i // 2
    oj = j // 2
    if oi < dout.shape[0] and oj < dout.shape[1]:
        g = float32(0.0)
        if arg[oi, oj] == (i % 2) * 2 + j % 2:
            g = dout[oi, oj]
        dx[i, j] = g
"""


@SIMULATOR
def test_a_guard_one_short_of_the_output_is_not_called_a_reduction():
    """Before: on the first case (a 1 x 1 output) "nothing was written to out, whose one element sums up (or
    reduces) 9 input values. A reduction's result is written once ... cuda.atomic.add"."""
    res = _check("07", "conv2d_single", CONV_GUARD_ONE_SHORT)
    assert not res.passed
    assert "reduction" not in res.hint and "atomic" not in res.hint, res.hint
    assert "the guard stops one short of the output size" in res.hint, res.hint


@SIMULATOR
def test_a_last_odd_row_left_unwritten_in_maxpool_backward_is_named():
    """Before: the generic "15 elements of dx were never written ... grid stride" hint."""
    res = _check("08", "maxpool2x2_backward", POOL_BACK_ODD_EDGE_UNWRITTEN)
    assert not res.passed
    assert "last odd row or column" in res.hint and "grid stride" not in res.hint, res.hint


POOL_BACK_SCATTER = """
@cuda.jit
def maxpool_backward_kernel(dout, arg, k, stride, dx):
    t = cuda.grid(1)
    N, C, HO, WO = dout.shape[0], dout.shape[1], dout.shape[2], dout.shape[3]
    if t < N * C * HO * WO:
        n = t // (C * HO * WO)
        c = (t // (HO * WO)) % C
        i = (t // WO) % HO
        j = t % WO
        a = arg[n, c, i, j] // k
        b = arg[n, c, i, j] % k
        dx[n, c, i * stride + a, j * stride + b] += dout[n, c, i, j]
"""

POOL_BACK_ASSIGN = """
@cuda.jit
def maxpool_backward_kernel(dout, arg, k, stride, dx):
    t = cuda.grid(1)
    N, C, H, W = dx.shape[0], dx.shape[1], dx.shape[2], dx.shape[3]
    HO, WO = dout.shape[2], dout.shape[3]
    if t < N * C * H * W:
        n = t // (C * H * W)
        c = (t // (H * W)) % C
        h = (t // W) % H
        w = t % W
        acc = float32(0.0)
        for a in range(k):
            if h - a >= 0 and (h - a) % stride == 0 and (h - a) // stride < HO:
                i = (h - a) // stride
                for b in range(k):
                    if w - b >= 0 and (w - b) % stride == 0 and (w - b) // stride < WO:
                        j = (w - b) // stride
                        if arg[n, c, i, j] == a * k + b:
                            acc = dout[n, c, i, j]
        dx[n, c, h, w] = acc
"""


def _lab_check(problem, source: str):
    fn_name = source.split("def ", 1)[1].split("(", 1)[0]
    return problem.check(define(source, fn_name, dict(NAMESPACE)))


@SIMULATOR
def test_a_scattering_maxpool_backward_is_told_to_gather_not_that_its_index_is_wrong():
    """Before: "Two threads computed the same output index while other elements were never written: the index is
    wrong." The kernel scatters with `+=` (one thread per window): a race onto an unzeroed dx."""
    from gpulab.problems import lab08

    res = _lab_check(lab08.MAXPOOL_BACKWARD, POOL_BACK_SCATTER)
    assert not res.passed
    assert "the index is wrong" not in res.hint, res.hint
    assert "scatter" in res.hint and "gather" in res.hint, res.hint


@SIMULATOR
def test_a_gathering_maxpool_backward_that_assigns_instead_of_adding_is_named():
    """Before: no hint. Gathering over (a, b) in order, `acc = dout[...]` keeps the FIRST window a pixel won, the
    known mistake's model kept the last."""
    from gpulab.problems import lab08

    res = _lab_check(lab08.MAXPOOL_BACKWARD, POOL_BACK_ASSIGN)
    assert not res.passed
    assert "kept only one window's dout" in res.hint, res.hint


def _compare_keywords(nb: str, var: str) -> dict:
    """The literal keywords (tolerance, factor) of the lessons.compare call that compares ``var`` in a lesson source."""
    cells = json.loads((ROOT / "notebooks" / nb).read_text(encoding="utf-8"))["cells"]
    for cell in cells:
        src = "".join(cell["source"])
        if cell["cell_type"] != "code" or f"lessons.compare({var}" not in src:
            continue
        for node in ast.walk(ast.parse(src)):
            if isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "compare" and node.args[0].id == var:
                return {k.arg: ast.literal_eval(k.value) for k in node.keywords if k.arg in ("tolerance", "factor")}
    raise AssertionError(f"{nb} does not compare {var}")


def _verdict(prediction, measured, **kw) -> str:
    return lessons.compare(prediction, measured, **kw).split("\n")[0].rsplit(":", 1)[-1].strip()


@pytest.mark.parametrize(
    ("var", "measured", "contrast"),
    [
        ("predicted_bad_pool_error", 0.5774, 1e-8),  # "a right backward gives about 1e-8"
        ("predicted_float32_error", 0.07717, 1.3e-10),  # float64's figure, shown just above
    ],
)
def test_a_within_a_factor_of_2_prediction_rejects_the_figure_it_is_contrasted_with(var, measured, contrast):
    """Before: tolerance=1 (relative) accepted anything from 0 to 2x: 1e-8 was "right" for 0.58."""
    kw = _compare_keywords("08_backprop.ipynb", var)
    assert _verdict(contrast, measured, **kw).startswith("too low"), kw
    assert _verdict(measured / 3, measured, **kw).startswith("too low"), kw
    assert _verdict(measured / 1.9, measured, **kw) == "right." and _verdict(1.9 * measured, measured, **kw) == "right."
    assert _verdict(2.1 * measured, measured, **kw).startswith("too high"), kw


def test_the_interior_count_is_not_right_for_the_average_loads_per_output():
    """Before (25%): 36 = 2·C·k², the interior output's count that the why says the border pulls down, was "right"
    for the measured average 30.25 (and 37, with the bias load)."""
    kw = _compare_keywords("07_convolution.ipynb", "predicted_loads_per_output")
    assert _verdict(36, 30.25, **kw).startswith("too high") and _verdict(30, 30.25, **kw) == "right."


def test_compare_factor_is_checked():
    with pytest.raises(Exception, match="factor is a number above 1"):
        lessons.compare(1, 1, factor=0.5)


@pytest.mark.parametrize("nb", ["07_convolution.ipynb", "08_backprop.ipynb"])
def test_a_cell_ending_in_a_compare_does_not_print_its_verdict_twice(nb):
    """Before: lesson 07's stride/filters cell ended in `lessons.compare(...)` without `;`: its returned text showed
    again as the cell's value, a quoted string with \\n in it."""
    cells = json.loads((ROOT / "notebooks" / nb).read_text(encoding="utf-8"))["cells"]
    for k, cell in enumerate(cells):
        src = "".join(cell["source"])
        if cell["cell_type"] != "code" or "lessons.compare(" not in src:
            continue
        last = ast.parse(src).body[-1]
        if isinstance(last, ast.Expr) and isinstance(last.value, ast.Call) and last.value.func.attr == "compare":
            assert src.rstrip().endswith(";"), f"{nb} cell {k + 1}"
            assert not [o for o in cell.get("outputs", []) if o["output_type"] == "execute_result"], f"cell {k + 1}"


LAB07_CONV_PLUS_PAD = """
@cuda.jit
def conv2d_kernel(x, w, b, stride, pad, out):
    t = cuda.grid(1)
    N, F, HO, WO = out.shape[0], out.shape[1], out.shape[2], out.shape[3]
    C, H, W = x.shape[1], x.shape[2], x.shape[3]
    K = w.shape[2]
    if t < N * F * HO * WO:
        n = t // (F * HO * WO)
        f = (t // (HO * WO)) % F
        i = (t // WO) % HO
        j = t % WO
        acc = b[f]
        for c in range(C):
            for a in range(K):
                h = i * stride + a + pad
                if 0 <= h < H:
                    for d in range(K):
                        col = j * stride + d + pad
                        if 0 <= col < W:
                            acc += x[n, c, h, col] * w[f, c, a, d]
        out[n, f, i, j] = acc
"""

LAB07_IM2COL_PADDING_SKIPPED = """
@cuda.jit
def im2col_kernel(x, k, stride, pad, cols):
    q, r = cuda.grid(2)
    C, H, W = x.shape[1], x.shape[2], x.shape[3]
    HO = (H + 2 * pad - k) // stride + 1
    WO = (W + 2 * pad - k) // stride + 1
    if r < cols.shape[0] and q < cols.shape[1]:
        n = r // (HO * WO)
        i = (r // WO) % HO
        j = r % WO
        c = q // (k * k)
        a = (q // k) % k
        d = q % k
        h = i * stride + a - pad
        col = j * stride + d - pad
        if 0 <= h < H and 0 <= col < W:
            cols[r, q] = x[n, c, h, col]
"""


@SIMULATOR
def test_lab07_padding_added_and_padding_taps_left_unwritten_are_named():
    """Before: `+ pad` got no hint; im2col skipping the padding's taps got "444 elements of cols were never written
    ... Does the grid cover every element ... grid stride"."""
    from gpulab.problems import lab07

    res = _lab_check(lab07.CONV2D, LAB07_CONV_PLUS_PAD)
    assert not res.passed and "the padding was added, not subtracted" in res.hint, res.hint
    res = _lab_check(lab07.IM2COL, LAB07_IM2COL_PADDING_SKIPPED)
    assert not res.passed and "taps that fall in the padding were never written" in res.hint, res.hint


def test_lab07_conv2d_im2col_without_bias_is_named():
    """Before: no hint (the direct kernel's check named it, the im2col host function's did not)."""
    from gpulab.problems import lab07

    def conv2d_im2col(x, w, b, stride, pad, out):  # every window times the filters, and no `+ b`
        k = w.shape[2]
        xp_ = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
        for i in range(out.shape[2]):
            for j in range(out.shape[3]):
                patch = xp_[:, :, i * stride : i * stride + k, j * stride : j * stride + k]
                out[:, :, i, j] = np.einsum("ncab,fcab->nf", patch, w)

    res = lab07.CONV2D_IM2COL.check(host=conv2d_im2col)
    assert not res.passed and "the bias is missing" in res.hint, res.hint


ALL_FILTERS_NO_RESET = """
@cuda.jit
def conv2d_all_filters_kernel(x, w, out):
    j, i = cuda.grid(2)
    if i < out.shape[1] and j < out.shape[2]:
        win = cuda.local.array((K, K), float32)
        for a in range(K):
            for b in range(K):
                win[a, b] = x[i + a, j + b]
        acc = float32(0.0)
        for f in range(w.shape[0]):
            for a in range(K):
                for b in range(K):
                    acc += win[a, b] * w[f, a, b]
            out[f, i, j] = acc
"""

BIAS_GRAD = """
@cuda.jit
def bias_grad_kernel(dout, db):
    o = cuda.grid(1)
    if o < db.size:
        acc = float32(0.0)
        for n in range(dout.shape[0]):
            acc += dout[n, o]
        db[o] = acc
"""

WEIGHT_GRAD_MEAN = """
@cuda.jit
def linear_weight_grad_kernel(dout, x, dw):
    j, i = cuda.grid(2)
    if i < dw.shape[0] and j < dw.shape[1]:
        acc = float32(0.0)
        for n in range(x.shape[0]):
            acc += dout[n, i] * x[n, j]
        dw[i, j] = acc / x.shape[0]
"""

RELU_BACK_NO_ELSE = """
@cuda.jit
def relu_backward_kernel(dout, y, dx):
    i = cuda.grid(1)
    if i < dx.size:
        if y[i] > 0:
            dx[i] = dout[i]
"""


@SIMULATOR
@pytest.mark.parametrize(
    ("lesson", "name", "source", "named"),
    [
        ("07", "conv2d_all_filters", ALL_FILTERS_NO_RESET, "the accumulator was not reset for each filter"),
        (
            "08",
            "bias_grad",
            BIAS_GRAD.replace("range(dout.shape[0])", "range(dout.shape[1])").replace("dout[n, o]", "dout[o, n]"),
            "db[o] summed row o of dout",
        ),
        ("08", "bias_grad", BIAS_GRAD.replace("range(dout.shape[0])", "range(dout.shape[0] - 1)"), "stops one short"),
        ("08", "linear_weight_grad", WEIGHT_GRAD_MEAN, "dw is the mean over the batch"),
        ("08", "relu_backward", RELU_BACK_NO_ELSE, "dx was never written where y <= 0"),
    ],
)
def test_lesson_mistakes_that_had_no_hint_or_a_generic_one_are_named(lesson, name, source, named):
    """Before: no hint at all (the first four), or "53 elements of dx were never written ... grid stride"."""
    res = _check(lesson, name, source)
    assert not res.passed and named in res.hint, res.hint


def test_lab08_conv2d_backward_averaging_dw_is_named():
    """Before: no hint (db's mean was named, dw's not)."""
    from gpulab.nn import ops
    from gpulab.problems import lab08

    ref = ops.get("numpy")

    def conv_backward_host(x, w, dout, stride, pad, dx, dw, db):  # the im2col backward, dw divided by N
        f, c, k, _ = w.shape
        n, _, ho, wo = dout.shape
        cols, _, _ = ref.im2col(x, k, k, stride, pad)
        d = dout.transpose(0, 2, 3, 1).reshape(n * ho * wo, f)
        dw[...] = (d.T @ cols).reshape(f, k, k, c).transpose(0, 3, 1, 2) / n
        db[...] = d.sum(axis=0)
        dx[...] = ref.col2im(d @ w.transpose(0, 2, 3, 1).reshape(f, k * k * c), x.shape, k, k, stride, pad)

    res = lab08.CONV2D_BACKWARD.check(host=conv_backward_host)
    assert not res.passed and "dw is a mean over the batch" in res.hint, res.hint


IM2COL_WO_ONE_SHORT = """
@cuda.jit
def im2col_single_kernel(x, cols):
    q, r = cuda.grid(2)
    wo = x.shape[1] - K
    if r < cols.shape[0] and q < cols.shape[1]:
        cols[r, q] = x[r // wo + q // K, r % wo + q % K]
"""


@SIMULATOR
def test_an_im2col_output_width_one_short_points_at_the_width():
    """Before: the first case (3 x 3, so Wo = W - K = 0) stopped on "ZeroDivisionError ... integer division or
    modulo by zero" with no hint; from a 4 x 6 input the computed-index hint names `wo = W - K + 1`."""
    res = _check("07", "im2col_single", IM2COL_WO_ONE_SHORT)
    assert not res.passed and "ZeroDivisionError" not in res.message, res.message
    assert "`wo = W - K + 1`" in res.hint, res.hint


def _im2col_host(layout: str):
    """A learner's conv2d_im2col in NumPy (the lab's im2col order), with one of the layout slips."""

    def conv2d_im2col(x, w, b, stride, pad, out):
        f, c, k, _ = w.shape
        n, ho, wo = x.shape[0], out.shape[2], out.shape[3]
        xp_ = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
        cols = np.stack(
            [
                xp_[:, :, i * stride : i * stride + k, j * stride : j * stride + k].reshape(n, -1)
                for i in range(ho)
                for j in range(wo)
            ],
            axis=1,
        ).reshape(n * ho * wo, c * k * k)
        wmat = w.reshape(c * k * k, f) if layout == "wmat" else w.reshape(f, c * k * k).T
        y = cols @ wmat + b
        if layout == "straight":
            out[...] = y.reshape(n, f, ho, wo)
        elif layout == "axes":
            out[...] = y.reshape(n, ho, wo, f).transpose(0, 3, 2, 1)
        else:
            out[...] = y.reshape(n, ho, wo, f).transpose(0, 3, 1, 2)

    return conv2d_im2col


@pytest.mark.parametrize(
    ("layout", "named"),
    [
        ("straight", "reshaped straight to (N, F, Ho, Wo)"),
        ("axes", "came out as (N, F, Wo, Ho)"),
        ("wmat", "wmat is w.reshape(C*k*k, F)"),
        ("right", ""),
    ],
)
def test_lab07_conv2d_im2col_layout_slips_are_named(layout, named):
    """Before: no hint for the first and third; for the second, a result stored into the wrong shape was told to
    "check the axis a sum or mean runs over, and which operand of a product is transposed"."""
    from gpulab.problems import lab07

    res = lab07.CONV2D_IM2COL.check(host=_im2col_host(layout))
    if not named:
        assert res.passed, res
        return
    assert not res.passed and named in res.hint, res.hint


POOL_BACK_OWN_WINDOW_ONLY = """
@cuda.jit
def maxpool_backward_kernel(dout, arg, k, stride, dx):
    t = cuda.grid(1)
    N, C, H, W = dx.shape[0], dx.shape[1], dx.shape[2], dx.shape[3]
    HO, WO = dout.shape[2], dout.shape[3]
    if t < N * C * H * W:
        n = t // (C * H * W)
        c = (t // (H * W)) % C
        h = (t // W) % H
        w = t % W
        acc = float32(0.0)
        i = h // stride
        j = w // stride
        if i < HO and j < WO and arg[n, c, i, j] == (h - i * stride) * k + (w - j * stride):
            acc += dout[n, c, i, j]
        dx[n, c, h, w] = acc
"""

LAB07_CONV_BIAS_PER_CHANNEL = LAB07_CONV_PLUS_PAD.replace(" + pad", " - pad").replace(
    "        acc = b[f]\n        for c in range(C):\n",
    "        acc = float32(0.0)\n        for c in range(C):\n            acc += b[f]\n",
)


@SIMULATOR
def test_lab_mistakes_without_a_hint_before_are_named():
    """Before: no hint for either (lab 08: a pixel gathering from its own window only; lab 07: the bias added once
    per input channel)."""
    from gpulab.problems import lab07, lab08

    res = _lab_check(lab08.MAXPOOL_BACKWARD, POOL_BACK_OWN_WINDOW_ONLY)
    assert not res.passed and "each pixel looked only at the window (h // stride, w // stride)" in res.hint, res.hint
    assert "acc += b[f]" in LAB07_CONV_BIAS_PER_CHANNEL
    res = _lab_check(lab07.CONV2D, LAB07_CONV_BIAS_PER_CHANNEL)
    assert not res.passed and "the bias was added once per input channel" in res.hint, res.hint


MAXPOOL_GUARD_ONE_SHORT = """
@cuda.jit
def maxpool2x2_kernel(x, out):
    j, i = cuda.grid(2)
    if i < x.shape[0] // 2 - 1 and j < x.shape[1] // 2 - 1:
        m = x[2 * i, 2 * j]
        for a in range(2):
            for b in range(2):
                m = max(m, x[2 * i + a, 2 * j + b])
        out[i, j] = m
"""


@SIMULATOR
@pytest.mark.parametrize(
    ("name", "source"),
    [
        (
            "conv2d_all_filters",
            ALL_FILTERS_NO_RESET.replace(
                "i < out.shape[1] and j < out.shape[2]", "i < x.shape[0] - K and j < x.shape[1] - K"
            )
            .replace("        acc = float32(0.0)\n        for f", "        for f")
            .replace(
                "            for a in range(K):\n                for b",
                "            acc = float32(0.0)\n            for a in range(K):\n                for b",
            ),
        ),
        ("maxpool2x2", MAXPOOL_GUARD_ONE_SHORT),
    ],
)
def test_a_guard_too_strict_on_a_per_element_exercise_is_not_called_a_reduction(name, source):
    """Before: the first case had a 1 x 1 output, so a guard that let no thread through got "A reduction's result is
    written once ... cuda.atomic.add(out, 0, v)"."""
    res = _check("07", name, source)
    assert not res.passed and "reduction" not in res.hint and "atomic" not in res.hint, res.hint
    assert "guard" in res.hint, res.hint
