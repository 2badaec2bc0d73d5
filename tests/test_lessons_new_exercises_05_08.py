"""The exercises added to lessons 05, 06 and 08 so that the learner writes what the lessons used to show:
lesson 08's ``central_difference`` (a host function through ``check_function``), lesson 05's ``add_offsets`` (an
in-place kernel) and lesson 06's ``round_to_tf32`` (a host function through ``as_host``). The reference passes;
each named mistake gets its hint."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from gpulab import interop, lessons
from gpulab.lessons import ex_06_tf32, finite_diff
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


@pytest.mark.parametrize(
    "lesson, name, key",
    [
        ("05", "add_offsets", "scanned_sums[b - 1]"),
        ("06", "round_to_tf32", "0xFFFFE000"),
        ("06", "round_to_tf32", ">> 13"),
        ("08", "central_difference", "f(x + h) - f(x - h)"),
    ],
)
def test_hints_outline_without_the_solutions_key_expression(lesson, name, key):
    tiers = hints_of(lesson, name)
    assert len(tiers) == 2 and all(len(t) > 40 for t in tiers)
    assert not any(key in t for t in tiers), f"{lesson}/{name}: a hint gives the solution's {key!r}"


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


# --- lesson 05: add_offsets -------------------------------------------------------------------------------

ADD_OFFSETS = """
@cuda.jit
def add_offsets_kernel(out, scanned_sums):
    i = cuda.grid(1)
    b = cuda.blockIdx.x
    {body}
"""


def _offsets_kernel(body: str):
    from numba import cuda

    ns: dict = {"cuda": cuda}
    exec(ADD_OFFSETS.format(body=body), ns)  # noqa: S102 - a learner's kernel, written out as the test's input
    return ns["add_offsets_kernel"]


def test_add_offsets_reference_and_a_right_answer_pass():
    ex = lessons.exercise("05", "add_offsets")
    assert ex.check(ex.reference, trusted=True).passed
    right = _offsets_kernel("if b > 0 and i < out.size:\n        out[i] = out[i] + scanned_sums[b - 1]")
    assert lessons.check("05", "add_offsets", right).passed


@pytest.mark.parametrize(
    "body, named",
    [
        ("if i < out.size:\n        out[i] += scanned_sums[b]", "one block too much"),
        ("if i < out.size:\n        out[i] += scanned_sums[b - 1]", "block 0 was changed"),
        ("if b > 0 and i < out.size:\n        out[i] = scanned_sums[b - 1]", "hold only the offset"),
        ("if b > 0:\n        out[i] += scanned_sums[b - 1]", "guard"),
    ],
    ids=["sums[b]", "block 0 adds", "stored", "unguarded"],
)
def test_add_offsets_mistakes_are_named(body, named):
    result = lessons.check("05", "add_offsets", _offsets_kernel(body))
    assert not result.passed
    assert named in result.hint or named in result.message, result


def test_lesson05_scans_on_the_learners_two_kernels_and_shows_no_add_offsets_source():
    for folder in ("notebooks", "notebooks/learner"):
        cells = _cells("05_reductions_atomics.ipynb", folder)
        assert not any("show_source(kernels.scan.add_offsets_kernel" in c for c in cells), folder
        (scan,) = [c for c in cells if "def scan(x):" in c]
        assert "block_scan[" in scan and "add_offsets[" in scan and "kernels.scan.add_offsets_kernel[" not in scan
    learner = _cells("05_reductions_atomics.ipynb", "notebooks/learner")
    stub = next(c for c in learner if "def add_offsets_kernel(" in c)
    assert "scanned_sums[b - 1]" not in stub and "NotImplementedError" in stub


# --- lesson 06: round_to_tf32 -----------------------------------------------------------------------------


def _tf32_right(x):
    bits = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    lsb = (bits >> np.uint32(13)) & np.uint32(1)
    return ((bits + np.uint32(0x0FFF) + lsb) & np.uint32(0xFFFFE000)).view(np.float32)


def _tf32_bits(x):
    return np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)


def test_round_to_tf32_reference_and_a_right_answer_pass():
    ex = lessons.exercise("06", "round_to_tf32")
    assert ex.check(ex.reference, trusted=True).passed
    assert lessons.check("06", "round_to_tf32", _tf32_right).passed


def test_round_to_tf32_inputs_hold_ties_both_ways_and_carries():
    x = ex_06_tf32.tf32_inputs(16, np.random.default_rng(0))
    low = _tf32_bits(x) & np.uint32(0x1FFF)
    ties = low == 0x1000
    kept_odd = (_tf32_bits(x) >> np.uint32(13)) & np.uint32(1)
    assert (ties & (kept_odd == 0)).any() and (ties & (kept_odd == 1)).any()  # ties that stay and ties that go up
    assert ((_tf32_bits(x) & np.uint32(0x7FFFFF)) == 0x7FFFFF).any()  # a carry into the exponent
    rounded = interop.round_to_tf32(x)
    assert np.array_equal(_tf32_right(x).view(np.uint32), rounded.view(np.uint32))
    assert np.isfinite(x).all() and (np.abs(x[x != 0]) > 65504).any()  # beyond float16's range


@pytest.mark.parametrize(
    "wrong, named",
    [
        (lambda x: (_tf32_bits(x) & np.uint32(0xFFFFE000)).view(np.float32), "truncation"),
        (lambda x: ((_tf32_bits(x) + np.uint32(0x1000)) & np.uint32(0xFFFFE000)).view(np.float32), "cvt.rna"),
        (
            lambda x: (
                (_tf32_bits(x) + np.uint32(0x1FF) + ((_tf32_bits(x) >> np.uint32(10)) & np.uint32(1)))
                & np.uint32(0xFFFFFC00)
            ).view(np.float32),
            "wrong number of bits",
        ),
        (lambda x: np.asarray(x, np.float32).astype(np.float16).astype(np.float32), "float16"),
        (lambda x: _tf32_right(x).view(np.uint32).astype(np.float32), "view them back"),
    ],
    ids=["truncated", "ties away", "13 bits kept", "float16", "bits as numbers"],
)
def test_round_to_tf32_mistakes_are_named(wrong, named):
    with np.errstate(over="ignore", under="ignore"):
        result = lessons.check("06", "round_to_tf32", wrong)
    assert result.status == "failed" and named in result.hint, result


def test_lesson06_tf32_exercise_comes_before_the_librarys_source():
    for folder in ("notebooks", "notebooks/learner"):
        cells = _cells("06_cupy_interop.ipynb", folder)
        check = next(k for k, c in enumerate(cells) if 'lessons.check("06", "round_to_tf32"' in c)
        shown = next(k for k, c in enumerate(cells) if "show_source(interop.round_to_tf32)" in c)
        assert check < shown, folder
    stub = next(c for c in _cells("06_cupy_interop.ipynb", "notebooks/learner") if c.startswith("def round_to_tf32("))
    assert "0xFFFFE000" not in stub and "NotImplementedError" in stub


# --- answers no longer given before the guess ---------------------------------------------------------------


@pytest.mark.parametrize(
    "notebook, guess, giveaways",
    [
        ("06_cupy_interop.ipynb", "predicted_fused_bytes", ("12 bytes", "12 fused", "bytes moved per element")),
        ("08_backprop.ipynb", "predicted_backward_ratio", ("twice the forward", "three times the work")),
    ],
)
def test_no_cell_before_a_guess_states_its_answer(notebook, guess, giveaways):
    """What the learner reads before the guess: the learner version's cells (the sources' solutions, hidden from
    the learner, may say it) and the outputs the source's run shows above it."""
    cells = _cells(notebook, "notebooks/learner")
    g = next(k for k, c in enumerate(cells) if c.startswith(f"{guess} = None"))
    nb = json.loads((ROOT / "notebooks" / notebook).read_text(encoding="utf-8"))
    outputs = [str(o.get("text", "")) for c in nb["cells"][:g] for o in c.get("outputs", [])]
    before = " ".join(cells[:g] + outputs)
    assert not [s for s in giveaways if s in before], guess


@pytest.mark.parametrize(
    "notebook, answer",
    [("06_cupy_interop.ipynb", 'print("Answer:'), ("08_backprop.ipynb", 'print("Answer:')],
)
def test_answers_are_compared_with_a_guess_not_printed(notebook, answer):
    assert not [c for c in _cells(notebook) if answer in c]
