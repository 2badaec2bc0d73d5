"""The labs' "Predict" prompts that have an answer in simulator mode: a blank guess cell comes before the work it
predicts, an ungraded cell after the check compares it (through lessons.compare, with an explanation), and
neither cell carries points, so grading is as before."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# {lab: {guess variable: the grade_id of the answer cell it must come before (its check: that id + "-check")}}
GUESSES = {
    "lab02_memory": {"guess_rotate_out_sectors": "lab02-rotate"},
    "lab03_matmul": {"guess_vecmat_sectors": "lab03-vecmat", "guess_dense_w_sectors": "lab03-dense"},
    "lab07_convolution": {"guess_patch_width": "lab07-conv2d-single", "guess_out_outputs": "lab07-conv2d-single"},
    "lab10_scaling_up": {"guess_clip_first_step": "lab10-unscale"},
}
CHECKS = {"lab10-unscale": "lab10-scaling-check"}  # (a) and (b) share one check cell


def _cells(folder: str, lab: str) -> list[dict]:
    return json.loads((ROOT / "labs" / folder / f"{lab}.ipynb").read_text(encoding="utf-8"))["cells"]


def _compares(src: str) -> dict[str, ast.Call]:
    if "lessons.compare(" not in src:
        return {}
    calls = {}
    for node in ast.walk(ast.parse(src)):
        if isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "compare" and node.args:
            if isinstance(node.args[0], ast.Name):
                calls[node.args[0].id] = node
    return calls


@pytest.mark.parametrize("folder", ["solutions", "student"])
@pytest.mark.parametrize("lab", sorted(GUESSES))
def test_each_lab_prediction_is_blank_before_the_work_and_compared_after_its_check(lab, folder):
    cells = _cells(folder, lab)
    ids = [c["metadata"].get("nbgrader", {}).get("grade_id") for c in cells]
    for var, answer_id in GUESSES[lab].items():
        guess = [k for k, c in enumerate(cells) if f"{var} = None  # not graded" in "".join(c["source"])]
        assert len(guess) == 1, f"{lab}: no (or several) blank guess cells for {var}"
        assert guess[0] < ids.index(answer_id), f"{lab}: {var} is asked after the learner writes {answer_id}"
        check = ids.index(CHECKS.get(answer_id, f"{answer_id}-check"))
        found = [k for k, c in enumerate(cells) if c["cell_type"] == "code" and var in _compares("".join(c["source"]))]
        assert len(found) == 1 and found[0] > check, f"{lab}: {var} is not compared after the check {answer_id}-check"
        call = _compares("".join(cells[found[0]]["source"]))[var]
        assert "why" in {kw.arg for kw in call.keywords}, f"{lab}: the compare of {var} does not say why"
        meta = cells[guess[0]]["metadata"]
        assert "nbgrader" not in meta and meta.get("editable", True), f"{lab}: the guess cell for {var} is not free"
        compare = cells[found[0]]["metadata"].get("nbgrader", {})  # the lab's own cell: locked in the student version
        assert not compare.get("grade") and not compare.get("points"), f"{lab}: the compare of {var} is graded"


@pytest.mark.parametrize("lab", sorted(GUESSES))
def test_a_guess_typed_into_its_cell_is_not_noted_as_a_cell_the_grader_skipped(lab):
    import nbformat

    from gpulab.grading.assemble import assemble

    nb = nbformat.read(str(ROOT / "labs" / "student" / f"{lab}.ipynb"), as_version=4)
    for cell in nb.cells:
        for var in GUESSES[lab]:
            cell.source = cell.source.replace(f"{var} = None  # not graded", f"{var} = 7  # not graded")
    notes = assemble(ROOT / "labs" / "solutions" / f"{lab}.ipynb", nb).notes
    assert not [n for n in notes if "not a cell of the lab" in n], notes


def test_a_guess_cell_that_also_defines_other_things_is_still_noted():
    """Review r4 finding 4: such a cell was skipped without the note (its names were compared as a set, and imports,
    tuple targets, loops and globals() writes define no name there). Only plain guess assignments are skipped."""
    import nbformat

    from gpulab.grading.assemble import assemble

    lab = "lab07_convolution"
    nb = nbformat.read(str(ROOT / "labs" / "student" / f"{lab}.ipynb"), as_version=4)
    extra = [
        "guess_patch_width = 5\nfrom numpy import add as my_helper",
        "guess_patch_width = 5\nmy_a, my_b = 1, 2",
        "guess_patch_width = 5\nfor my_i in range(3):\n    pass",
        "guess_patch_width = 5\nglobals()['my_kernel'] = None",
    ]
    for k, text in enumerate(extra):
        nb.cells.insert(1 + k, nbformat.v4.new_code_cell(text))
    nb.cells.insert(1, nbformat.v4.new_code_cell("guess_patch_width = 5  # mine\nguess_out_outputs = 4 * 4"))
    notes = [
        n for n in assemble(ROOT / "labs" / "solutions" / f"{lab}.ipynb", nb).notes if "not a cell of the lab" in n
    ]
    assert len(notes) == len(extra), notes
