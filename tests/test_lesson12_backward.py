"""Lesson 12's exercise 4, the attention backward pass written in NumPy (gpulab.lessons.ex_12_backward): it is
checked against gpulab.transformer.backward, each named mistake (made in the lesson's own solution cell) gets its
hint, the hints are outlines and not the answer, and the lesson's gradient check runs on the learner's function."""

from __future__ import annotations

import inspect
import json
import math
import textwrap
from pathlib import Path

import numpy as np
import pytest

from gpulab import lessons
from gpulab.labs import BEGIN, CODE_STUB, END
from gpulab.lessons import answers_12, ex_12_backward
from gpulab.transformer import backward
from kernel_edits import edited_kernel

ROOT = Path(__file__).resolve().parents[1]
NAME = "12_transformers.ipynb"
NAMESPACE = {"np": np, "math": math}


def _code_cells(path: Path) -> list[str]:
    nb = json.loads(path.read_text(encoding="utf-8"))
    return ["".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code"]


def _solution_cell() -> str:
    """The lesson's exercise cell as the learner fills it in (the markers dropped)."""
    cell = next(c for c in _code_cells(ROOT / "notebooks" / NAME) if c.startswith("def attention_backward("))
    return "\n".join(ln for ln in cell.splitlines() if ln.strip() not in (BEGIN, END)) + "\n"


def _learner(*edits: tuple[str, str]):
    return edited_kernel(_solution_cell(), "attention_backward", NAMESPACE, *edits)


def _check(fn):
    return lessons.check("12", "attention_backward", fn)


def test_the_lessons_answer_passes_and_is_the_reference_answer():
    assert _check(_learner()).passed
    region = _solution_cell().split('"""\n', 1)[1]  # the body after the docstring
    body = inspect.getsource(answers_12.attention_backward).split('"""\n', 1)[1]
    assert textwrap.dedent(region).strip() == textwrap.dedent(body).strip()


def test_the_reference_matches_gpulab_backward_and_pytorch_where_installed():
    rng = np.random.default_rng(3)
    dout, q, k, v = (rng.standard_normal((7, 5)) for _ in range(4))
    ours = answers_12.attention_backward(dout, q, k, v)
    lib = ex_12_backward.backward_spec(dout, q, k, v)
    assert all(np.allclose(a, b, rtol=1e-12, atol=1e-12) for a, b in zip(ours, lib))
    try:
        torch_grads = backward.torch_gradients(q, k, v, dout)
    except ImportError:
        return
    assert all(np.allclose(a, b, atol=1e-10) for a, b in zip(ours, torch_grads))


def test_the_check_tries_one_token_n_equal_to_d_and_n_unlike_d():
    sizes = lessons.exercise("12", "attention_backward").problem.sizes
    assert any(n == 1 for n, _ in sizes) and any(n == d for n, d in sizes) and any(n != d for n, d in sizes)
    assert any(n > d for n, d in sizes) and any(n < d for n, d in sizes)


def test_unanswered_is_not_implemented_and_the_lesson_falls_back_to_the_reference(capsys):
    head = _solution_cell().split('"""\n', 1)[0]  # the def line and the docstring, as the learner version has them
    fn = edited_kernel(head + '"""\n    ' + CODE_STUB + "\n", "attention_backward", NAMESPACE)
    result = _check(fn)
    assert result.status == "not implemented" and "not implemented yet" in str(result), result
    used = lessons.or_reference(result, fn, "12", "attention_backward")
    assert used is answers_12.attention_backward and "reference function" in capsys.readouterr().out


SCALE = "the forward pass divides the scores by sqrt(d), so the backward pass does too"
ROW_SUM = "dS is not P * dP"
TRANSPOSE = "S = q k^T: k enters transposed"
SCORES = "dq, dk and dv are the gradients of the loss with respect to q, k and v"
FORWARD_SCALE = "the weights P come from the scaled scores"


@pytest.mark.parametrize(
    ("edits", "hint"),
    [
        ((("dq = (ds @ k) * scale", "dq = ds @ k"), ("dk = (ds.T @ q) * scale", "dk = ds.T @ q")), SCALE),
        ((("dk = (ds.T @ q) * scale", "dk = ds.T @ q"),), SCALE),  # dq right, only dk unscaled
        ((("ds = p * (dp - (dp * p).sum(axis=1, keepdims=True))", "ds = p * dp"),), ROW_SUM),
        ((("dk = (ds.T @ q) * scale", "dk = (ds @ q) * scale"),), TRANSPOSE),
        ((("return dq, dk, dv", "return ds, ds.T, dv"),), SCORES),  # n x n where n x d is expected: by its shape
        ((("return dq, dk, dv", "return ds * scale, ds.T * scale, dv"),), SCORES),
        ((("s = (q @ k.T) * scale", "s = q @ k.T"),), FORWARD_SCALE),
    ],
    ids=["no-scale", "no-scale-dk", "no-row-sum", "dk-untransposed", "scores-grad", "scores-grad-scaled", "fwd-scale"],
)
def test_each_named_mistake_gets_its_hint(edits, hint):
    result = _check(_learner(*edits))
    assert not result.passed and result.hint.startswith(hint), result
    others = [h for h in (SCALE, ROW_SUM, TRANSPOSE, SCORES, FORWARD_SCALE) if h != hint]
    assert not any(h in result.hint for h in others), result


def test_the_scores_gradient_is_named_by_its_values_where_n_equals_d():
    """At n == d an n x n result fits dq's shape: the named mistake's values find it (the shape test cannot)."""
    ex = lessons.exercise("12", "attention_backward")
    wrong = _learner(("return dq, dk, dv", "return ds, ds.T, dv"))
    result = ex.problem.check(host=ex.adapt(wrong), sizes=[(4, 4)], name="attention_backward")
    assert not result.passed and result.hint.startswith(SCORES) and "shape (4, 4) for inputs" not in str(result)


def test_hints_are_outlines_without_the_answers_code():
    tiers = lessons.exercise("12", "attention_backward").hints
    answer_lines = [ln.split("#")[0].strip() for ln in _solution_cell().splitlines()[2:]]
    hints = [*tiers, *ex_12_backward.BACKWARD_MISTAKES]
    for text in hints:
        for line in answer_lines:
            if len(line) > 12:
                assert line not in text, (line, text)
        assert "@" not in text and "keepdims" not in text and ".T" not in text, text
    assert len(tiers) == 2


def test_the_lessons_gradient_check_runs_on_the_learners_function():
    """After the check, the finite differences and the one-token prediction use or_reference's function: the
    learner's once it passes; the library's layer check comes after, in a cell of its own."""
    cells = _code_cells(ROOT / "notebooks" / NAME)
    k = next(i for i, c in enumerate(cells) if 'lessons.check("12", "attention_backward"' in c)
    grad = cells[k + 1]
    assert 'lessons.or_reference(result, attention_backward, "12", "attention_backward")' in grad
    assert "attn_backward(dout, qg, kg, vg)" in grad and "gradcheck.numerical_gradient" in grad
    assert "backward.attention_backward" not in grad
    assert "SelfAttention" in cells[k + 2]
    learner = _code_cells(ROOT / "notebooks" / "learner" / NAME)
    stub = next(c for c in learner if c.startswith("def attention_backward("))
    assert CODE_STUB in stub and "ds" not in stub.split('"""')[-1]


def test_the_formulas_for_the_answer_are_not_in_the_lesson_text():
    nb = json.loads((ROOT / "notebooks" / "learner" / NAME).read_text(encoding="utf-8"))
    text = "\n".join("".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "markdown")
    for formula in ("dv = P^T dout", "dP = dout v^T", "dq = dS k", "dk = dS^T q", "P.T @ dout", "ds.T @ q"):
        assert formula not in text, formula
    assert "S = q @ k.T / sqrt(d)" in text and "Exercise 4" in text
