"""A shape error raised in the learner's array code (gpulab.exercises.shapes): the verdict names the learner's
function and line, the error, the shapes the code was given (by argument name), the shape each output must have,
and a hint: the exercise's named mistake that raises the same error, else one about the operation.

Before: lab 08's linear backward with `dx = dout @ W.T` got only "ValueError in your code at line 12: `dx = dout @
W.T`: matmul: Input operand 1 has a mismatch in its core dimension 0, ... (size 4 is different from 3)", and with
`db = dout.sum(axis=1)` "could not broadcast input array from shape (5,) into shape (3,)", with no hint.
"""

from __future__ import annotations

import numpy as np
import pytest
from numba import cuda

from gpulab import nn
from gpulab.exercises import check_kernel
from gpulab.exercises.shapes import MATMUL_HINT, RESHAPE_HINT, is_shape_error
from gpulab.lessons.problems import check_function
from gpulab.problems import lab08

reference = nn.ops.get("numpy")  # as the lab's notebook: its im2col and col2im are given

GIVEN = "your code was given: x float32(5, 4), W float32(3, 4), dout float32(5, 3)"
MUST = "the outputs must have the shapes: dx (5, 4), dW (3, 4), db (3,)"


def _hint(start: str, problem=lab08.LINEAR_BACKWARD) -> str:
    (hint,) = [h for h in problem.mistakes if h.startswith(start)]
    return hint


def linear_backward(x, W, dout, wrong=""):
    """The lab's linear backward, or one with the mistake ``wrong``."""
    dx = dout @ W.T if wrong == "dx" else dout @ W
    dW = x @ dout if wrong == "dW" else x.T @ dout if wrong == "dW.T" else dout.T @ x
    db = dout.sum(axis=1) if wrong == "db" else dout.sum(axis=0)
    return dx, dW, db


def _linear(wrong: str):
    def linear_host(x, W, dout, dx, dW, db):
        dx[...], dW[...], db[...] = linear_backward(x, W, dout, wrong)

    return lab08.LINEAR_BACKWARD.check(host=linear_host)


@pytest.mark.parametrize(
    ("wrong", "line", "error", "hint"),
    [
        ("dx", "dx = dout @ W.T if wrong", "matmul: Input operand 1", "dx = dout @ W: dout is (N, out)"),
        ("dW", "dW = x @ dout if wrong", "matmul: Input operand 1", "x @ dout multiplies (N, in) by (N, out)"),
        ("dW.T", "dx[...], dW[...], db[...] =", "from shape (4,3) into shape (3,4)", "dW must have W's shape"),
        ("db", "dx[...], dW[...], db[...] =", "from shape (5,) into shape (3,)", "db = dout.sum(axis=1) sums over"),
    ],
)
def test_linear_backward_transposes_name_the_shapes_and_the_mistake(wrong, line, error, hint):
    res = _linear(wrong)
    assert res.status == "error" and res.score == 0, res
    first = res.message.splitlines()[0]
    assert first.startswith("ValueError in your function ") and f": `{line}" in first and error in first, res
    assert GIVEN in res.message and MUST in res.message, res
    assert "input: size=(5, 4, 3)" in res.message, res
    assert res.hint == _hint(hint), res


def test_a_result_stored_into_an_output_of_another_shape_names_that_output():
    res = _linear("db")
    assert "a result of shape (5,) was stored into db, which has the shape (3,)" in res.message, res
    res = _linear("dW.T")
    assert "a result of shape (4, 3) was stored into dW, which has the shape (3, 4)" in res.message, res


def test_the_right_linear_backward_still_passes():
    res = _linear("")
    assert res.passed and res.score == res.max_score, res


def test_a_transpose_that_raises_nothing_on_square_inputs_is_named_by_its_values():
    """in == out: `dout @ W.T` has dx's shape; the same named mistake explains the wrong values."""

    def linear_host(x, W, dout, dx, dW, db):
        dx[...], dW[...], db[...] = linear_backward(x, W, dout, "dx")

    res = lab08.LINEAR_BACKWARD.check(host=linear_host, sizes=[(5, 3, 3)])
    assert res.status == "failed" and res.message.startswith("dx["), res
    assert res.hint == _hint("dx = dout @ W: dout is (N, out)"), res


def test_a_shape_error_no_mistake_makes_gets_the_operations_hint():
    """`W @ dout.T` fails too, with another text than any named mistake's: the hint is about matmul."""

    def linear_host(x, W, dout, dx, dW, db):
        dx[...], dW[...], db[...] = (W @ dout.T).T, dout.T @ x, dout.sum(axis=0)

    res = lab08.LINEAR_BACKWARD.check(host=linear_host)
    assert res.status == "error" and "matmul" in res.message and GIVEN in res.message, res
    assert res.hint == MATMUL_HINT, res


def conv2d_backward(x, w, dout, stride, pad, wrong=""):
    """The lab's im2col backward, or one with the mistake ``wrong`` (each raises on the lab's inputs)."""
    f, c, k, _ = w.shape
    n, _, h, wd = x.shape
    _, _, ho, wo = dout.shape
    cols, _, _ = reference.im2col(x, k, k, stride, pad)
    rows, width = (n * h * wd, f) if wrong == "hw" else (n * ho * wo, c if wrong == "c" else f)
    d = dout.transpose(0, 2, 3, 1).reshape(rows, width)
    dw = (d.T @ cols).reshape(f, k, k, c).transpose(0, 3, 1, 2)
    db = d.sum(axis=1) if wrong == "db" else d.sum(axis=0)
    wmat = w.transpose(0, 2, 3, 1).reshape(f, k * k * c)
    return reference.col2im(d @ wmat.T if wrong == "dcols" else d @ wmat, x.shape, k, k, stride, pad), dw, db


@pytest.mark.parametrize(
    ("wrong", "error", "hint"),
    [
        ("", None, None),
        ("dcols", "matmul: Input operand 1", "dcols = d @ wmat"),
        ("c", "cannot reshape array", "d is dout laid out as (N*Ho*Wo, F)"),
        ("hw", "cannot reshape array", "d has one row per output pixel"),
        ("db", "could not broadcast input array from shape", "db = d.sum(axis=1) sums over the filters"),
    ],
)
def test_conv2d_backward_shape_mistakes_are_named(wrong, error, hint):
    def conv_backward_host(x, w, dout, stride, pad, dx, dw, db):
        dx[...], dw[...], db[...] = conv2d_backward(x, w, dout, stride, pad, wrong)

    res = lab08.CONV2D_BACKWARD.check(host=conv_backward_host)
    if error is None:
        assert res.passed and res.score == res.max_score, res
        return
    assert res.status == "error" and error in res.message.splitlines()[0], res
    assert "your code was given: x float32(" in res.message and ", stride " in res.message, res
    assert "the outputs must have the shapes: dx (" in res.message, res
    assert res.hint == _hint(hint, lab08.CONV2D_BACKWARD), res


def test_a_shape_error_in_any_host_function_shows_the_shapes():
    def matmul_host(a, b, out):
        out[...] = a.reshape(3, 4) @ b

    res = check_kernel(
        None,
        lambda a, b: a @ b,
        inputs=lambda n, rng: (rng.random((n, 3)).astype(np.float32), rng.random((3, 2)).astype(np.float32)),
        sizes=[5],
        host=matmul_host,
    )
    first, given, must = res.message.splitlines()[:3]
    assert first.startswith("ValueError in your function matmul_host at line ") and "cannot reshape" in first, res
    assert given == "your code was given: a float32(5, 3), b float32(3, 2)", res
    assert must == "the outputs must have the shapes: out (5, 2)", res
    assert res.hint == RESHAPE_HINT, res


@cuda.jit
def sum_rows_kernel(x, out):
    i = cuda.grid(1)
    if i < out.size:
        out[i, 0] = x[i, 0] + x[i, 1]


def test_too_many_indices_in_a_kernel_shows_the_shapes_the_kernel_was_given():
    res = check_kernel(
        sum_rows_kernel,
        lambda x: x.sum(axis=1),
        inputs=lambda n, rng: rng.random((n, 2)).astype(np.float32),
        sizes=[40],
        threads=32,
    )
    assert res.status == "error" and "too many indices" in res.message, res
    assert "your kernel was given: x float32(40, 2)" in res.message and "out (40,)" in res.message, res


def test_errors_that_are_not_about_shapes_are_not_taken_for_them():
    assert not is_shape_error(ValueError("could not convert string to float: 'x'"))
    assert not is_shape_error(IndexError("index 100 is out of bounds for axis 0 with size 100"))
    with pytest.raises(ValueError) as info:
        np.zeros((2, 3)) @ np.zeros((2, 3))
    assert is_shape_error(info.value)


def test_check_function_names_the_learners_line():
    def flops(n, m):
        return n * m + "x"

    res = check_function(flops, [((2, 3), 6)])
    assert res.status == "error", res
    assert res.message.startswith("flops(2, 3) raised TypeError at line ") and '`return n * m + "x"`' in res.message
