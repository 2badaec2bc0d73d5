"""Hints that two learner reviews (2026-12-03) found sending a learner to the wrong fix: each test is a learner's
kernel from the review, and checks that the hint names the real cause and fix (and no longer the wrong one)."""

from __future__ import annotations

import math

from numba import cuda, float32

from gpulab import lessons
from gpulab.lessons.answers_05_10 import K, TPB
from gpulab.source import define

NAMESPACE = {"cuda": cuda, "float32": float32, "math": math, "TPB": TPB, "K": K}


def _check(lesson: str, name: str, source: str):
    fn_name = source.split("def ", 1)[1].split("(", 1)[0]
    return lessons.check(lesson, name, define(source, fn_name, dict(NAMESPACE)))


MATVEC_ADDS_INTO_Y = """
@cuda.jit
def matvec_kernel(A, x, y):
    i = cuda.grid(1)
    if i < y.size:
        for k in range(A.shape[1]):
            y[i] += A[i, k] * x[k]
"""


def test_matvec_adding_into_y_is_told_y_is_not_zeroed():
    # A4: the first case is 1x1, one output element: it was told "nothing was written to y ... guard too strict?"
    res = _check("03", "matvec", MATVEC_ADDS_INTO_Y)
    assert not res.passed, res
    assert "adds into it" in res.hint and "local variable" in res.hint, res
    assert "nothing was written" not in res.hint and "too strict" not in res.hint, res


BIAS_GRAD_ADDS_INTO_DB = """
@cuda.jit
def bias_grad_kernel(dout, db):
    o = cuda.grid(1)
    if o < db.size:
        for n in range(dout.shape[0]):
            db[o] += dout[n, o]
"""


def test_bias_grad_adding_into_db_is_told_db_is_not_zeroed():
    # B4: the first case is (1, 1): one element of db, which disabled the "adds into it" hint
    res = _check("08", "bias_grad", BIAS_GRAD_ADDS_INTO_DB)
    assert not res.passed, res
    assert "adds into it" in res.hint and "local variable" in res.hint, res
    assert "nothing was written" not in res.hint, res
