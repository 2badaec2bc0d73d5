"""The fused attention kernel's online-softmax mistakes get a verdict that names them, in lesson 12's exercise
(the library's kernel with one learner's edit) and in lab 12's challenge (the lab solution's kernel, read from
the notebook, with the same edit). The hints come from NumPy models of the mistaken loop over key tiles
(``gpulab.problems._flash._flash_tiles``), compared with the kernel's output as every named mistake is.

Before these hints, each of these kernels got only "out[16, 0]: expected ..., got ... (2 of 34 elements
wrong)" with no hint: the running maximum reset in every tile, each tile's exp taken relative to its own
maximum, acc divided by row_sum inside the loop (with the causal stop or over every tile), or divided twice,
and scores left unscaled. A kernel whose new_max is the tile's own maximum, rescaled by alpha = exp(old max -
new max) (above 1 when a tile's maximum is lower), passed: exact in real numbers, but alpha overflows float32
once the gap passes 88.7, which no case reached with logits up to 100; the last case now has logits up to 200.
"""

from __future__ import annotations

import inspect
import math
import textwrap
from pathlib import Path

import nbformat
import numpy as np
import pytest
from numba import cuda, float32

from gpulab import lessons, problems
from gpulab.lessons import ex_12
from kernel_edits import edited_kernel
from gpulab.transformer import flash

# the mistaken kernels' float32 overflow (alpha above 1) warns in the simulator, as a learner's would
pytestmark = pytest.mark.filterwarnings("ignore:(overflow|invalid value) encountered:RuntimeWarning")

L = problems.lab12
LAB = Path(__file__).resolve().parents[1] / "labs" / "solutions" / "lab12_transformers.ipynb"

RESET = "out is the attention over the last key tile alone"
RUNNING = "new_max must be the running maximum"
OWN_MAX = "relative to that tile's own maximum"
IN_LOOP = "acc is divided by row_sum inside the loop over tiles"
TWICE = "acc is divided by row_sum twice"
NO_ACC_RESCALE = "the accumulator must be rescaled too"
UNSCALED = "the scores are not scaled"
NEW_HINTS = (RESET, RUNNING, OWN_MAX, IN_LOOP, TWICE, UNSCALED)

_TILE_MAX = "        tile_max = float32(-math.inf)\n"
_DIVIDE_IN_LOOP = (
    "            row_max = new_max\n",
    "            row_max = new_max\n" + "            for a in range(ACC):\n                acc[a] /= row_sum\n",
)
_EVERY_TILE = ("last_key = min(m - 1, min(row0 + BQ, n) - 1 + offset)", "last_key = m - 1")
_NO_FINAL_DIVIDE = ("acc[a] / row_sum", "acc[a]")

# name -> (one learner's edits of the kernel's source, the hint it must get)
MISTAKES = {
    "row_max reset in every tile": ([(_TILE_MAX, "        row_max = float32(-math.inf)\n" + _TILE_MAX)], RESET),
    "all the state reset in every tile": (
        [
            (
                _TILE_MAX,
                "        row_max = float32(-math.inf)\n        row_sum = float32(0.0)\n"
                "        for a in range(ACC):\n            acc[a] = 0.0\n" + _TILE_MAX,
            )
        ],
        RESET,
    ),
    "each tile's own max, rescaled": ([("new_max = max(row_max, tile_max)", "new_max = tile_max")], RUNNING),
    "each tile's own max, no rescale": (
        [
            ("new_max = max(row_max, tile_max)", "new_max = tile_max"),
            ("alpha = math.exp(row_max - new_max)", "alpha = float32(1.0)"),
        ],
        OWN_MAX,
    ),
    "acc / row_sum in the loop": ([_DIVIDE_IN_LOOP, _NO_FINAL_DIVIDE], IN_LOOP),
    "acc / row_sum in the loop, every tile visited": ([_DIVIDE_IN_LOOP, _NO_FINAL_DIVIDE, _EVERY_TILE], IN_LOOP),
    "acc / row_sum in the loop and at the end": ([_DIVIDE_IN_LOOP], TWICE),
    "scores not scaled": ([("        s *= scale\n", "")], UNSCALED),
}
# mistakes named before (tests/test_problems_lab12.py): they keep their own hint, none of the new ones
OTHERS = {
    "acc not rescaled": ([("acc[a] *= alpha", "acc[a] *= 1.0")], NO_ACC_RESCALE),
    "no final division": ([_NO_FINAL_DIVIDE], "divide the accumulator by the running sum at the end"),
    "causal mask without the offset": ([("key > row + offset", "key > row")], "keys up to i + (m - n)"),
}


def _lesson_kernel(edits: list[tuple[str, str]]):
    src = textwrap.dedent(inspect.getsource(flash.flash_attention_kernel.py_func))
    return edited_kernel(src, "flash_attention_kernel", flash.__dict__, *edits, count=1)


def _lab_kernel(edits: list[tuple[str, str]]):
    nb = nbformat.read(LAB, as_version=4)
    (cell,) = [c.source for c in nb.cells if "def flash_lse_kernel" in c.source]
    src = "".join(line + "\n" for line in cell.splitlines() if "SOLUTION" not in line)
    ns = {"math": math, "cuda": cuda, "float32": float32, "BQ": L.BQ, "BK": L.BK, "ACC": L.DMAX // L.BK}
    return edited_kernel(src, "flash_lse_kernel", {**ns, "PAD": L.DMAX + 1}, *edits, count=1)


def _only(hint: str, verdict_hint: str) -> None:
    assert hint in verdict_hint, verdict_hint
    assert not [h for h in NEW_HINTS if h != hint and h in verdict_hint], verdict_hint


@pytest.mark.parametrize("name", list(MISTAKES) + list(OTHERS))
def test_lessons_fused_kernel_names_the_online_softmax_mistake(name):
    edits, hint = {**MISTAKES, **OTHERS}[name]
    res = lessons.check("12", "flash", _lesson_kernel(edits))
    assert not res.passed, res
    _only(hint, res.hint)


@pytest.mark.parametrize(
    "name",
    [
        "row_max reset in every tile",
        "each tile's own max, rescaled",
        "each tile's own max, no rescale",
        "acc / row_sum in the loop",
    ],
)
def test_labs_challenge_names_the_online_softmax_mistake(name):
    edits, hint = MISTAKES[name]
    res = L.FLASH_LSE.check(_lab_kernel(edits), race_check=False, budget=None, ptx=None)
    assert not res.passed, res
    _only(hint, res.hint)


@pytest.mark.parametrize("every_tile", [False, True])
def test_a_correct_kernel_gets_none_of_the_hints(every_tile):
    """Whether a causal block stops at its last visible key tile or visits them all, the right kernel passes."""
    edits = [_EVERY_TILE] if every_tile else []
    assert lessons.check("12", "flash", _lesson_kernel(edits)).passed
    assert L.FLASH_LSE.check(_lab_kernel(edits), race_check=False, budget=None, ptx=None).passed


def test_the_model_without_a_mistake_is_attention():
    """The mistakes' model of the kernel's loop, with every switch at the right setting, gives attention (so a
    mistake's output differs from the spec by the mistake alone)."""
    (fused,) = [e for e in ex_12.EXERCISES_LIST if e.name == "flash"]
    for size in fused.problem.sizes:
        ins = L.flash_lse_inputs(size, np.random.default_rng(7))
        want = ex_12.flash_spec(*ins)
        for every in (False, True):
            assert np.allclose(L._flash_tiles(*ins, all_tiles=every), want, rtol=1e-5, atol=1e-6), size


def test_the_large_logit_case_has_a_tile_maximum_far_below_the_one_before():
    """A gap past 88.7 between a row's running maximum and the next tile's maximum: exp(gap) overflows float32,
    so a kernel that rescales by alpha = exp(old max - new max) with the tile's own maximum gives nan there."""
    (fused,) = [e for e in ex_12.EXERCISES_LIST if e.name == "flash"]
    for problem in (L.FLASH_LSE, fused.problem):
        seed = problem.seed + len(problem.sizes) - 1  # the case's seed (exercises.cases: seed + its index)
        q, k, v, scale, causal = L.flash_lse_inputs(problem.sizes[-1], np.random.default_rng(seed))
        s = L._masked_scores(q, k, float(scale), bool(causal))
        first, second = s[:, : L.BK].max(axis=1), s[:, L.BK :].max(axis=1)
        assert (first - second).max() > np.log(np.finfo(np.float32).max), problem.name
