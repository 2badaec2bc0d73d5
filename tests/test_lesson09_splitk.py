"""Lesson 09's split-K exercise (gpulab.lessons.ex_09_splitk): the reference and the notebook's answer pass on a
3-D grid (block z = slice z of K) with PTX compiled; each typical mistake, made in the notebook's own answer, fails
with its named hint; the prediction's counts; the given launcher against NumPy. Before: lesson 09 explained the
weight gradient's two blocks in prose, and no exercise or launcher existed."""

from __future__ import annotations

import json
import re
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


LOOP = "for t in range(z * per, min(tiles, (z + 1) * per)):"
PER = "per = (tiles + partials.shape[0] - 1) // partials.shape[0]"
STORE = "partials[z, i, j] = acc"
BY_ELEMENTS = (  # slices of ceil(K / S) elements: the sum of the partials is A @ B, the partials are not the tiles'
    (PER, "chunk = (K + partials.shape[0] - 1) // partials.shape[0]\n    end = min(K, (z + 1) * chunk)"),
    (
        LOOP + "  # this slice's tiles; an empty slice writes zeros\n        k0 = t * TILE",
        "for k0 in range(z * chunk, end, TILE):",
    ),
    ("k0 + tx < K", "k0 + tx < end"),
    ("k0 + ty < K", "k0 + ty < end"),
)


@pytest.mark.parametrize(
    ("edits", "words"),
    [
        # s27 review M2: x taken as the row, the rest of the kernel unchanged (no hint before)
        ((("j, i = cuda.grid(2)", "i, j = cuda.grid(2)"),), "your kernel takes the row of C from x"),
        # M3: a slice one tile short, or one tile late (no hint before)
        (((LOOP, "for t in range(z * per, min(tiles, (z + 1) * per - 1)):"),), "each slice stops one tile short"),
        (((LOOP, "for t in range(z * per + 1, min(tiles, (z + 1) * per)):"),), "each slice skips its first tile"),
        # M4: partials indexed in another order, the line guarded ("missing bounds guard?" before)
        (((STORE, "partials[i, j, z] = acc"),), "partials is (S, M, N): the slice first"),
        (((STORE, "partials[z, j, i] = acc"),), "Your kernel writes `partials[z, j, i]`; write `partials[z, i, j]`"),
        # M5: S read from the wrong axis (the hint spoke only of rounding down, which the kernel does not)
        (((PER, PER.replace("shape[0]", "shape[2]")),), "S = partials.shape[0]"),
        # M6: right sums from other cuts of K: one passed (S never divided the tiles), the other had no hint
        (((PER, "per = tiles // partials.shape[0] + 1"),), "your slices add up to A @ B"),
        (BY_ELEMENTS, "your slices add up to A @ B"),
        # M7: cuda.grid(3) unpacked into two names (a ValueError without a hint before)
        ((("j, i = cuda.grid(2)", "j, i = cuda.grid(3)"),), "`cuda.grid(3)` gives x, y and z"),
        # L2: a load past the end of K (the hint's usual causes were about convolutions and pooling)
        (
            ((LOOP, "for t in range(z * per, (z + 1) * per):"), (" and k0 + tx < K", ""), ("k0 + ty < K and ", "")),
            "read past the end of K",
        ),
        # L4: a barrier without () (the hint said a barrier was missing, which the learner sees is there)
        ((("cuda.syncthreads()  # wait until every thread is done", "cuda.syncthreads  # wait"),), "without `()`"),
    ],
    ids=[
        "x-as-row",
        "slice-one-tile-short",
        "slice-one-tile-late",
        "partials-axes-rotated",
        "partials-row-column-exchanged",
        "S-from-another-axis",
        "per-plus-one",
        "slices-of-elements",
        "grid3-into-two-names",
        "past-the-end-of-K",
        "syncthreads-without-call",
    ],
)
def test_the_review_s_mistakes_fail_with_a_hint_that_names_them(edits, words):
    res = lessons.check("09", "matmul_splitk", _answer(*edits))
    assert not res.passed and words in res.hint, res
    assert "missing bounds guard" not in res.hint and "pooling" not in res.hint, res.hint


def test_a_kernel_with_x_the_row_throughout_keeps_the_orientation_verdict():
    """x as the row in the unpack, the loads and tx/ty exchanged too: right launched the other way, half the points
    and the harness's orientation hint (the source hint does not replace it)."""
    edits = [("j, i = cuda.grid(2)", "i, j = cuda.grid(2)"), ("tx = cuda.threadIdx.x", "tx = cuda.threadIdx.Y")]
    edits += [("ty = cuda.threadIdx.y", "ty = cuda.threadIdx.x"), ("threadIdx.Y", "threadIdx.y")]
    res = lessons.check("09", "matmul_splitk", _answer(*edits))
    assert res.score == 0.5 and res.details.get("orientation") == "exchanged", res
    assert res.hint.startswith("your kernel takes the row from x"), res.hint


@pytest.mark.parametrize("threads_too", [False, True], ids=["indices", "indices-and-tx-ty"])
def test_the_course_s_unpack_with_j_as_the_row_gets_a_hint_that_does_not_ask_for_that_unpack(threads_too):
    """s27 review L5: `j, i = cuda.grid(2)`, then j the row and i the column everywhere (and tx, ty exchanged too:
    right launched the other way). Before: "write `j, i = cuda.grid(2)`" (ROW_FROM_X_HINT, or the harness's
    orientation hint), which the learner had written."""
    from numba import cuda, float32

    names = r"\b(?:i|j|tx|ty)\b" if threads_too else r"\b[ij]\b"
    other = {"i": "j", "j": "i", "tx": "ty", "ty": "tx"}
    swapped = re.sub(names, lambda m: other[m.group()], _answer_source())
    source = swapped.replace("i, j = cuda.grid(2)", "j, i = cuda.grid(2)")
    assert "j, i = cuda.grid(2)" in source and "partials[z, j, i] = acc" in source
    kernel = edited_kernel(source, "matmul_splitk_kernel", {"cuda": cuda, "float32": float32})
    res = lessons.check("09", "matmul_splitk", kernel)
    assert not res.passed, res
    assert res.hint.startswith("you unpack `j, i = cuda.grid(2)` as the course does"), res.hint
    assert "then use j as the row" in res.hint and "store `partials[z, i, j]`" in res.hint, res.hint
    assert "write `j, i = cuda.grid(2)`" not in res.hint.lower(), res.hint


def test_a_count_of_one_is_said_in_the_singular():
    """s27 review L1: "You predicted 1 blocks"."""
    said = lessons.compare(1, 2, unit="blocks", what="counted")
    assert said.startswith("You predicted 1 block; counted 2 blocks: too low"), said
    assert lessons.compare(None, 1, unit="bytes per element").startswith("Measured: 1 byte per element.")
    assert "1 ms;" in lessons.compare(1, 1, unit="ms")
    assert "1 x the forward" in lessons.compare(1, 1, unit="x the forward")


def test_the_h200_figures_come_from_the_recording_that_names_its_source():
    """s27 review H1/M1: the lesson printed 10.9 ms (the register-tiled kernel, 1 block, in a training step) beside
    lesson 04's tiled kernel (2 blocks), from no recording. The GEMM times alone are the recording's gemm_shapes
    (a diagnostic script, so labelled), and the notebook's code prints them from there, typing none."""
    note = ex_09_splitk.recorded_gemm_note()
    assert note.startswith("(32 x 100,352) @ (100,352 x 9) alone, recorded on NVIDIA H200, 2026-12-04 (diagnostic ")
    assert "outside gpu-check; timing.benchmark medians of 10" in note
    for part in ("register-tiled kernel 9.686 ms (1 block)", "lesson 04's tiled kernel 2.897 ms (2 blocks)"):
        assert part in note
    assert "CuPy's a @ b (cuBLAS) 0.064 ms" in note
    code = ["".join(c["source"]) for c in json.loads(NOTEBOOK.read_text())["cells"] if c["cell_type"] == "code"]
    assert any("recorded_gemm_note(" in c for c in code)
    typed = [m for c in code for m in re.findall(r"\b\d+\.\d+ ms\b", c)]
    assert not typed, f"the notebook's code types GPU times {typed}: read them from the recording"


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
