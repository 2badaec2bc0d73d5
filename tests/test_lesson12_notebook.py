"""Lesson 12's notebook: it checks every exercise of gpulab.lessons.ex_12, its solution regions are exactly
the reference answers (the fused kernel, filled in, is the library's flash_attention_kernel line for line),
and its learner version keeps the fused kernel's scaffolding around the two parts the learner writes."""

from __future__ import annotations

import inspect
import json
import math
import textwrap
from pathlib import Path

import pytest
from numba import cuda, float32

from gpulab import lessons
from gpulab.labs import BEGIN, CODE_STUB, END
from gpulab.lessons import answers_12
from gpulab.transformer import flash
from kernel_edits import edited_kernel

ROOT = Path(__file__).resolve().parents[1]
NAME = "12_transformers.ipynb"


def _cells(path: Path) -> list[str]:
    nb = json.loads(path.read_text(encoding="utf-8"))
    return ["".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code"]


def _exercise_cell(cells: list[str], kernel_name: str) -> str:
    return next(c for c in cells if f"def {kernel_name}(" in c)


def _source(fn) -> str:
    return textwrap.dedent(inspect.getsource(fn.py_func)).strip()


def test_every_exercise_of_lesson_12_is_checked():
    text = "\n".join(_cells(ROOT / "notebooks" / NAME))
    names = sorted(name for (lesson, name) in lessons.EXERCISES if lesson == "12")
    assert names == ["attention_backward", "flash", "online_softmax", "scores"]
    for name in names:
        assert f'lessons.check("12", "{name}"' in text, name


def test_solution_regions_are_the_reference_answers():
    cells = _cells(ROOT / "notebooks" / NAME)
    for fn in (answers_12.attention_scores_kernel, answers_12.online_softmax_kernel):
        cell = _exercise_cell(cells, fn.py_func.__name__)
        region = cell.split(BEGIN, 1)[1].split(END, 1)[0]
        body = _source(fn).split("\n", 2)[2]  # without decorator and def line
        assert textwrap.dedent(region).strip() == textwrap.dedent(body).strip(), fn.py_func.__name__
    cell = _exercise_cell(cells, "flash_attention_kernel")
    assert cell.count(BEGIN) == 2
    filled = "\n".join(ln for ln in cell.splitlines() if ln.strip() not in (BEGIN, END))
    assert filled.strip() == _source(flash.flash_attention_kernel)


def test_learner_version_keeps_the_scaffolding_and_stubs_two_parts():
    cell = _exercise_cell(_cells(ROOT / "notebooks" / "learner" / NAME), "flash_attention_kernel")
    assert cell.count(CODE_STUB) == 2 and BEGIN not in cell
    for kept in ("sQ[ty, c] = q[row, c]", "sK[r, c] = k[k0 + r, c]", "sS[ty, tx] = s", "# 2c.", "# 3."):
        assert kept in cell, kept
    for gone in ("alpha = math.exp(row_max - new_max)", "out[row, c] = acc[a] / row_sum"):
        assert gone not in cell, gone


@cuda.jit
def scores_rows_along_x_kernel(q, k, scale, causal, s):
    i, j = cuda.grid(2)  # x along the queries: correct values, but neighbouring threads write a column of s
    n = s.shape[0]
    m = s.shape[1]
    if i < n and j < m:
        if causal != 0 and j > i + (m - n):
            s[i, j] = -math.inf
        else:
            acc = float32(0.0)
            for c in range(q.shape[1]):
                acc += q[i, c] * k[j, c]
            s[i, j] = acc * scale


def test_scores_with_x_along_the_queries_are_over_the_coalescing_budget():
    # the exercise asks for x along the keys; before the budget, i, j = cuda.grid(2) passed with full marks
    res = lessons.check("12", "scores", scores_rows_along_x_kernel)
    assert res.status == "over budget" and "coalescing of s" in str(res), res


SCORES_SRC = """
@cuda.jit
def attention_scores_kernel(q, k, scale, causal, s):
    j, i = cuda.grid(2)
    n = s.shape[0]
    m = s.shape[1]
    if i < n and j < m:
        if causal != 0 and j > i + (m - n):
            s[i, j] = -math.inf
        else:
            acc = float32(0.0)
            for c in range(q.shape[1]):
                acc += q[i, c] * k[j, c]
            s[i, j] = acc * scale
"""


@pytest.mark.parametrize(
    ("edit", "hint", "not_hint"),
    [
        # before: a mask one key too permissive got "masked scores must be -inf, not 0" though its masked scores
        # are -inf (the allowed error is infinite where -inf is expected, so the zero mask's model matched it)
        (("j > i + (m - n)", "j > i + (m - n) + 1"), "one key too many is visible per row", "not 0"),
        (("s[i, j] = -math.inf", "s[i, j] = 0.0"), "masked scores must be -inf, not 0", "one key too many"),
    ],
    ids=["one-future-key", "mask-zero"],
)
def test_scores_mask_mistakes_get_their_own_hint(edit, hint, not_hint):
    ns = {"cuda": cuda, "float32": float32, "math": math}
    res = lessons.check("12", "scores", edited_kernel(SCORES_SRC, "attention_scores_kernel", ns, edit))
    assert not res.passed and res.hint.startswith(hint) and not_hint not in res.hint, res
