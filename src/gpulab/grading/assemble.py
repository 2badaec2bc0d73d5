"""The notebook that is graded: the lab's source with only the student's answers taken in.

nbgrader's rule: locked cells, test cells (hidden tests included), points, ids and metadata come
from the source in ``labs/solutions``; from the submission only the *code* of solution cells is
taken, matched by ``grade_id`` (else by cell id). A solution cell the student deleted gets the
released stub back, graded cells the student added are ignored, and points a student raised in a
cell's metadata are the source's again.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpulab.errors import UsageError

__all__ = ["Cell", "Assembled", "assemble", "read_submission", "source_for"]


@dataclass
class Cell:
    """One cell to run: ``kind`` is "test" (a grade cell), "answer" (the student's code) or "code"."""

    index: int
    kind: str
    source: str
    grade_id: str = ""
    points: float = 0.0
    tags: list[str] = field(default_factory=list)


@dataclass
class Assembled:
    cells: list[Cell]
    notes: list[str]

    @property
    def tests(self) -> list[Cell]:
        return [c for c in self.cells if c.kind == "test"]


def read_submission(path: Path) -> Any:
    """Read a submitted notebook, refusing what is not one with a message (no traceback)."""
    import nbformat

    path = Path(path)
    if not path.exists():
        raise UsageError(f"{path} does not exist; give the path of a submitted .ipynb file or a folder of them")
    if path.is_dir():
        raise UsageError(
            f"{path} is a folder, not a notebook; to grade every notebook in it, run "
            f"`python -m gpulab labs grade {path}` with a lab name: --lab NAME"
        )
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise UsageError(f"cannot read {path}: {exc.strerror}; check its permissions") from None
    if not raw.strip():
        raise UsageError(f"{path} is empty (0 bytes of notebook); ask for the submission again")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise UsageError(
            f"{path} is not a notebook (binary data, not UTF-8 JSON); a submission is the .ipynb file saved by Jupyter"
        ) from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise UsageError(
            f"{path} is not valid notebook JSON ({exc.msg} at line {exc.lineno}); it may be "
            "truncated: ask for the submission again"
        ) from None
    if not isinstance(data, dict) or not isinstance(data.get("cells"), list):
        raise UsageError(
            f"{path} is JSON but not a notebook (no list of 'cells'); a submission is the .ipynb file saved by Jupyter"
        )
    try:
        return nbformat.reads(text, as_version=4)
    except Exception as exc:  # nbformat raises several kinds for odd documents
        raise UsageError(f"{path} is not a notebook nbformat can read ({str(exc).splitlines()[0][:200]})") from None


def _meta(cell: Any) -> dict:
    meta = cell.get("metadata", {}).get("nbgrader", {})
    return meta if isinstance(meta, dict) else {}


def source_for(submission: Path, solutions_dir: Path, lab: str | None = None) -> Path:
    """The lab source a submission is graded against: ``lab`` if given, else the submission's name."""
    name = lab or Path(submission).name
    if not name.endswith(".ipynb"):
        name += ".ipynb"
    candidates = sorted(p.name for p in Path(solutions_dir).glob("*.ipynb"))
    path = Path(solutions_dir) / name
    if path.is_file():
        return path
    # "lab01" or "lab01_threads-alice.ipynb": match on the lab number prefix
    stem = Path(name).stem
    matches = [c for c in candidates if stem.startswith(c.split("_")[0]) or c.startswith(stem)]
    if len(matches) == 1:
        return Path(solutions_dir) / matches[0]
    if lab is None:  # "submission.ipynb": the lab its graded cells belong to ("lab01-add-check" -> lab01)
        try:
            cells = json.loads(Path(submission).read_text(encoding="utf-8")).get("cells", [])
            prefixes = {str(_meta(c).get("grade_id", "")).split("-")[0] for c in cells if isinstance(c, dict)}
        except (OSError, ValueError, AttributeError):
            prefixes = set()
        matches = [c for c in candidates if c.split("_")[0] in prefixes]
        if len(matches) == 1:
            return Path(solutions_dir) / matches[0]
    raise UsageError(
        f"which lab is {submission}? no labs/solutions/{name}; pass --lab with one of: " + ", ".join(candidates)
    )


def _stub(source: str) -> str:
    from gpulab.labs import student_cell_source

    return student_cell_source(source)


def _code(cell: Any) -> str:
    text = cell.get("source", "")
    return "".join(text) if isinstance(text, list) else str(text)


def _test_cell_notes(source: Any, submission: Any) -> list[str]:
    """What the teacher should know about the submission's test cells (they are never run)."""
    theirs = {
        str(_meta(c)["grade_id"]): c for c in submission.cells if _meta(c).get("grade") and _meta(c).get("grade_id")
    }
    missing, edited, points = [], [], []
    for cell in source.cells:
        meta = _meta(cell)
        if not meta.get("grade") or not meta.get("grade_id"):
            continue
        gid = str(meta["grade_id"])
        sub = theirs.get(gid)
        if sub is None:
            missing.append(gid)
            continue
        if _code(sub).strip() not in (_stub(_code(cell)).strip(), _code(cell).strip()):  # student or solution form
            edited.append(gid)
        if str(_meta(sub).get("points")) != str(meta.get("points")):
            points.append(f"{gid} ({_meta(sub).get('points')} instead of {meta.get('points')})")
    notes = []
    if missing:
        notes.append(
            f"test cells missing from the submission (deleted, or an older release): {', '.join(missing)}; "
            "the lab's own were run"
        )
    if edited:
        notes.append(
            f"test cells that differ from the lab's (edited, or an older release): {', '.join(edited)}; "
            "the lab's own were run"
        )
    if points:
        notes.append(f"points changed in the submission's metadata: {', '.join(points)}; the lab's count")
    return notes


def assemble(source_path: Path, submission: Any) -> Assembled:
    """Cells to run for ``submission`` (an nbformat notebook) graded against ``source_path``."""
    import nbformat

    source = nbformat.read(str(source_path), as_version=4)
    answers: dict[str, str] = {}
    by_id: dict[str, str] = {}
    notes: list[str] = []
    for cell in submission.cells:
        meta = _meta(cell)
        if cell.get("cell_type") != "code":
            continue
        text = cell.get("source", "")
        text = "".join(text) if isinstance(text, list) else str(text)
        if meta.get("solution") and meta.get("grade_id"):
            answers.setdefault(str(meta["grade_id"]), text)
        if cell.get("id"):
            by_id.setdefault(str(cell["id"]), text)
    source_ids = {str(_meta(c).get("grade_id")) for c in source.cells if _meta(c).get("grade_id")}
    extra = sorted(
        str(_meta(c).get("grade_id"))
        for c in submission.cells
        if _meta(c).get("grade") and str(_meta(c).get("grade_id")) not in source_ids
    )
    if extra:
        notes.append(f"ignored graded cells that are not in the lab: {', '.join(extra)}")
    notes += _test_cell_notes(source, submission)
    sub_answers = {str(_meta(c).get("grade_id")) for c in submission.cells if _meta(c).get("solution")}
    src_answers = {str(_meta(c).get("grade_id")) for c in source.cells if _meta(c).get("solution")}
    if sub_answers and not sub_answers & src_answers:
        notes.append(
            f"none of the submission's answer cells ({', '.join(sorted(sub_answers))}) is in this release of "
            f"{source_path.stem} ({', '.join(sorted(src_answers))}): another lab, or an older release? "
            "Check --lab, or have the student paste their answers into the current student version"
        )
    elif sub_answers - src_answers and src_answers - sub_answers:
        notes.append(
            f"answer cells {', '.join(sorted(sub_answers - src_answers))} are not in this release of "
            f"{source_path.stem}, which asks for {', '.join(sorted(src_answers - sub_answers))}: an older "
            "release? Their code was not graded; have the student paste it into the current student version"
        )
    cells: list[Cell] = []
    for k, cell in enumerate(source.cells):
        if cell.cell_type != "code":
            continue
        meta = _meta(cell)
        gid = str(meta.get("grade_id", ""))
        tags = list(cell.metadata.get("tags", []))
        if meta.get("grade"):
            cells.append(Cell(k, "test", cell.source, gid or f"cell-{k}", float(meta.get("points", 0) or 0), tags))
        elif meta.get("solution"):
            text = answers.get(gid) if gid else None
            if text is None and cell.get("id"):
                text = by_id.get(str(cell["id"]))
            if text is None:
                notes.append(f"answer cell {gid or k} missing from the submission: graded as not answered")
                text = _stub(cell.source)
            cells.append(Cell(k, "answer", text, gid, 0.0, tags))
        else:
            cells.append(Cell(k, "code", cell.source, gid, 0.0, tags))
    return Assembled(cells, notes)
