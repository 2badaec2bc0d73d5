"""Every notebook the course ships is nbformat 4.5 with a unique id on every cell, and a generated version (learner,
student) keeps its source's cell ids: JupyterLab keeps ids it finds (it makes up random ones only for cells without),
so the grader can still find a student's answer cell by its id when its grade_id was changed."""

from __future__ import annotations

import re
from pathlib import Path

import nbformat
import pytest

from gpulab.grading.assemble import assemble

ROOT = Path(__file__).resolve().parents[1]
SHIPPED = sorted(
    p
    for folder in ("notebooks", "notebooks/learner", "labs/solutions", "labs/student")
    for p in (ROOT / folder).glob("*.ipynb")
)


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_a_shipped_notebook_is_nbformat_4_5_with_unique_cell_ids(path):
    nb = nbformat.read(str(path), as_version=nbformat.NO_CONVERT)
    assert (nb.nbformat, nb.nbformat_minor) == (4, 5), f"{path.name}: nbformat {nb.nbformat}.{nb.nbformat_minor}"
    ids = [c.get("id") for c in nb.cells]
    missing = [k + 1 for k, cid in enumerate(ids) if not cid]
    assert not missing, f"{path.name}: cells {missing} (counting from 1) have no id"
    assert len(set(ids)) == len(ids), f"{path.name}: duplicate cell ids {sorted({i for i in ids if ids.count(i) > 1})}"
    assert all(re.fullmatch(r"[a-zA-Z0-9_-]{1,64}", cid) for cid in ids)
    nbformat.validate(nb)  # raises on any schema error, an unexpected 'id' included


def _pairs() -> list[tuple[Path, Path]]:
    pairs = [(p, ROOT / "notebooks" / "learner" / p.name) for p in sorted((ROOT / "notebooks").glob("*.ipynb"))]
    pairs += [(p, ROOT / "labs" / "student" / p.name) for p in sorted((ROOT / "labs" / "solutions").glob("*.ipynb"))]
    return [(s, d) for s, d in pairs if d.exists()]


@pytest.mark.parametrize("source,derived", _pairs(), ids=lambda p: p.name)
def test_a_generated_version_keeps_its_sources_cell_ids(source, derived):
    src_ids = [c.id for c in nbformat.read(str(source), as_version=4).cells]
    got = {c.id for c in nbformat.read(str(derived), as_version=4).cells}
    lost = [cid for cid in src_ids if cid not in got]
    # learner versions drop hidden cells; lab student versions drop none
    if derived.parent.name == "student":
        assert not lost, f"{derived.name} lost the ids of its source's cells {lost}"
    else:
        assert len(lost) < len(src_ids) / 4, f"{derived.name} lost {len(lost)} of {len(src_ids)} source ids"


def test_a_renamed_grade_id_in_the_student_version_is_found_by_its_cell_id():
    """A student of labs/student/ (no nbgrader exchange) renames lab01-affine: the answer keeps the released cell's
    id, so it is found by that id and graded. Before student versions kept ids, nothing could match it by id."""
    source = ROOT / "labs" / "solutions" / "lab01_threads.ipynb"
    nb = nbformat.read(str(ROOT / "labs" / "student" / "lab01_threads.ipynb"), as_version=4)
    sol = next(c for c in nbformat.read(str(source), as_version=4).cells if _gid(c) == "lab01-affine")
    cell = next(c for c in nb.cells if _gid(c) == "lab01-affine")
    assert cell.id == sol.id
    cell.source = re.sub(r"^\s*### (BEGIN|END) SOLUTION[^\n]*(\n|\Z)", "", sol.source, flags=re.M)
    cell.metadata["nbgrader"]["grade_id"] = "lab01-affine-mine"
    a = assemble(source, nb)
    note = next(n for n in a.notes if "lab01-affine-mine" in n)
    assert "found by cell id and graded" in note, note
    affine = next(c for c in a.cells if c.grade_id == "lab01-affine")
    assert "cuda.grid" in affine.source


def _gid(cell) -> str:
    return cell.metadata.get("nbgrader", {}).get("grade_id", "")
