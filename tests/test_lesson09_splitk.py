"""Lesson 09's split-K exercise (gpulab.lessons.ex_09_splitk): the reference and the notebook's answer pass on a
3-D grid (block z = slice z of K) with PTX compiled; each typical mistake, made in the notebook's own answer, fails
with its named hint; the prediction's counts; the given launcher against NumPy. Before: lesson 09 explained the
weight gradient's two blocks in prose, and no exercise or launcher existed."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import gpulab
from gpulab import lessons
from gpulab.kernels.matmul import TILE
from gpulab.kernels.splitk import matmul_splitk_kernel, plan
from gpulab.lessons import ex_09_splitk
from gpulab.occupancy import sm_limits
from kernel_edits import edited_kernel

NOTEBOOK = Path(__file__).resolve().parents[1] / "notebooks" / "09_train_cnn.ipynb"


def _answer_source() -> str:
    """The notebook's answer cell (the kernel the learner writes), markers dropped."""
    cells = json.loads(NOTEBOOK.read_text())["cells"]
    (src,) = ["".join(c["source"]) for c in cells if "def matmul_splitk_kernel" in "".join(c["source"])]
    return "\n".join(line for line in src.splitlines() if "### " not in line)


def _answer(*edits: tuple[str, str]) -> object:
    from numba import cuda, float32

    return edited_kernel(_answer_source(), "matmul_splitk_kernel", {"cuda": cuda, "float32": float32}, *edits)


def test_the_reference_passes_on_a_3d_grid_with_its_ptx_compiled():
    res = lessons.exercise("09", "matmul_splitk").check(matmul_splitk_kernel, trusted=True)
    assert res.passed, res
    rows = {c.name: c for c in res.checks}
    assert rows["PTX"].passed and "float32[:, :, :]" in rows["PTX"].message, rows["PTX"]
    assert "[(1, 1, 8), (16, 16)]" in str(res)  # 3 tiles of K in 8 slices: blockIdx.z up to 7, five slices empty
    assert rows["races"].passed


def test_the_notebooks_answer_passes():
    res = lessons.check("09", "matmul_splitk", _answer())
    assert res.passed, res


SECOND_BARRIER = (
    "        cuda.syncthreads()  # wait until every thread is done reading the tiles before they are overwritten\n"
)
STORE_IN_LOOP = (
    SECOND_BARRIER + "    if i < partials.shape[1] and j < partials.shape[2]:\n        partials[z, i, j] = acc",
    SECOND_BARRIER + "        if i < partials.shape[1] and j < partials.shape[2]:\n            partials[z, i, j] = acc",
)


@pytest.mark.parametrize(
    ("edits", "words"),
    [
        ((STORE_IN_LOOP,), "an empty slice left partials[z] unwritten"),
        ((("range(z * per, min(tiles, (z + 1) * per))", "range(tiles)"),), "every slice summed the whole of K"),
        (
            (("per = (tiles + partials.shape[0] - 1) // partials.shape[0]", "per = tiles // partials.shape[0]"),),
            "per = tiles // S rounds down",
        ),
        ((("min(tiles, (z + 1) * per))", "min(tiles, (z + 1) * per + 1))"),), "neighbouring slices share a tile"),
        (
            (
                (
                    SECOND_BARRIER,
                    "",
                ),
            ),
            "The missing barrier is the one BEFORE the next overwrite",
        ),
    ],
    ids=["empty-slice-unwritten", "whole-k", "per-rounded-down", "overlap-by-one", "no-second-barrier"],
)
def test_each_typical_mistake_fails_with_its_hint(edits, words):
    res = lessons.check("09", "matmul_splitk", _answer(*edits))
    assert not res.passed and words in res.hint, res


def test_the_prediction_counts_two_blocks_against_over_a_thousand_resident():
    M, K, N = ex_09_splitk.CONV1_WGRAD
    assert (M, K, N) == (32, 128 * 28 * 28, 9)
    tiled = ex_09_splitk.blocks_of((-(-N // TILE), -(-M // TILE)))
    assert tiled == 2
    assert 132 * (sm_limits("sm_90").max_threads_per_sm // (TILE * TILE)) == 1056
    h200 = plan(M, N, K, sms=132)
    assert ex_09_splitk.blocks_of(h200.grid) == 2 * h200.slices == 524
    assert ex_09_splitk.blocks_of(7) == 7


@pytest.mark.parametrize(("M", "K", "N", "slices"), [(20, 70, 17, 3), (5, 40, 3, 8), (7, 1, 5, 4)], ids=str)
def test_the_given_launcher_sums_the_partials(M, K, N, slices):
    rng = np.random.default_rng(M + K)
    a, b = rng.standard_normal((M, K)).astype(np.float32), rng.standard_normal((K, N)).astype(np.float32)
    got = gpulab.to_host(ex_09_splitk.splitk_launch(_answer(), gpulab.to_device(a), gpulab.to_device(b), slices))
    np.testing.assert_allclose(got, a.astype(np.float64) @ b, rtol=1e-5, atol=1e-4)


def test_an_empty_slice_writes_zeros_in_the_spec():
    a, b = np.ones((2, 40), np.float32), np.ones((40, 3), np.float32)
    p = ex_09_splitk.splitk_spec(a, b, 8)  # 3 tiles, one a slice: slices 3-7 empty
    assert p.shape == (8, 2, 3)
    np.testing.assert_array_equal(p[:3, 0, 0], [16, 16, 8])
    assert not p[3:].any()
