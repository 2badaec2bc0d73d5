"""The exercises added to lessons 05, 06 and 08 so that the learner writes what the lessons used to show:
lesson 08's ``central_difference`` (a host function through ``check_function``), lesson 05's ``add_offsets`` (an
in-place kernel) and lesson 06's ``round_to_tf32`` (a host function through ``as_host``). The reference passes;
each named mistake gets its hint."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from gpulab import lessons
from gpulab.lessons import finite_diff
from gpulab.lessons.problems import hints_of, lesson_exercises

ROOT = Path(__file__).resolve().parents[1]


def _cells(name: str, folder: str = "notebooks") -> list[str]:
    nb = json.loads((ROOT / folder / name).read_text(encoding="utf-8"))
    return ["".join(c["source"]) for c in nb["cells"]]


# --- lesson 08: central_difference ------------------------------------------------------------------------


def _check_cd(fn):
    return lessons.check_function(fn, finite_diff.CASES, hint=finite_diff.central_difference_hint)


def central_difference(f, x, h):
    return (f(x + h) - f(x - h)) / (2 * h)


def test_central_difference_right_answers_pass():
    assert _check_cd(central_difference).passed
    assert _check_cd(lambda f, x, h: (f(x + h) - f(x - h)) / 2 / h).passed  # the same formula, written otherwise
    assert finite_diff.CASES[0][1] == pytest.approx(12.01)  # t**3 at 2, h = 0.1: 3 x 2² + h²


@pytest.mark.parametrize(
    "wrong, named",
    [
        (lambda f, x, h: (f(x + h) - f(x)) / h, "one-sided"),
        (lambda f, x, h: (f(x) - f(x - h)) / h, "one-sided"),
        (lambda f, x, h: (f(x + h) - f(x - h)) / h, "2h apart"),
        (lambda f, x, h: (f(x + h) - f(x - h)) / 2 * h, "`/ (2 * h)`"),
        (lambda f, x, h: (f(x - h) - f(x + h)) / (2 * h), "sign is flipped"),
    ],
    ids=["forward", "backward", "missing /2", "/ 2 * h", "sign"],
)
def test_central_difference_mistakes_are_named(wrong, named):
    result = _check_cd(wrong)
    assert result.status == "failed" and named in result.hint, result


def test_central_difference_is_a_lesson_exercise_with_hints_and_a_stub():
    assert ("08", "central_difference") in lessons.FUNCTION_EXERCISES
    assert ("08", "central_difference") in lesson_exercises("08")
    assert len(hints_of("08", "central_difference")) == 2
    for case in finite_diff.CASES:  # the verdict names the function by its formula, not <function <lambda>>
        assert "<" not in repr(case[0][0])
    learner = _cells("08_backprop.ipynb", "notebooks/learner")
    stub = next(c for c in learner if c.startswith("def central_difference("))
    assert "return (f(x + h)" not in stub and "NotImplementedError" in stub
    assert not any("numerical_gradient)" in c and "show_source" in c for c in learner)


def test_central_difference_error_falls_as_h_squared():
    """What the check cell prints once it passes: 10 times smaller h, about 100 times smaller error."""
    errs = [abs(central_difference(math.sin, 0.5, h) - math.cos(0.5)) for h in (1e-1, 1e-2)]
    assert 90 < errs[0] / errs[1] < 110
