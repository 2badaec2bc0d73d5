"""The notebook that is graded: the lab's source with only the student's answers taken in.

nbgrader's rule: locked cells, test cells (hidden tests included), points, ids and metadata come
from the source in ``labs/solutions``; from the submission only the *code* of solution cells is
taken, matched by ``grade_id`` (else by cell id). A solution cell the student deleted gets the
released stub back, graded cells the student added are ignored, and points a student raised in a
cell's metadata are the source's again.

A notebook whose cells lost their nbgrader metadata (copied into a new notebook, saved by another
editor) still has its answers found when it is safe: an answer cell is taken from between the same
two test cells (found by their code) when exactly one cell there defines the names the lab's answer
defines; otherwise the exercise's row says the metadata was lost and how to fix it. Code cells the
student added are never run: a note names each (and the names it defines), and a test row whose
``NameError`` names one of them says so.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpulab.errors import UsageError
from .audience import for_teacher
from .cell_notes import _code, _meta, _stub, added_cells, defined_names, notes_on_test_cells

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
    lost: str = ""  # for an answer cell that could not be found because the notebook lost its metadata: why
    wants: list[str] = field(default_factory=list)  # for an answer cell: the names the lab's answer defines


@dataclass
class Assembled:
    cells: list[Cell]
    notes: list[str]
    added: dict[str, str] = field(default_factory=dict)  # a name an added (not run) cell defines -> that cell
    other_lab: str = ""  # none of the submission's answer cells is this lab's: what the notebook seems to be instead

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
        raise UsageError(for_teacher(f"{path} is empty (0 bytes of notebook)", "ask for the submission again"))
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
            for_teacher(
                f"{path} is not valid notebook JSON ({exc.msg} at line {exc.lineno}); it may be truncated",
                "ask for the submission again",
            )
        ) from None
    if not isinstance(data, dict) or not isinstance(data.get("cells"), list):
        raise UsageError(
            f"{path} is JSON but not a notebook (no list of 'cells'); a submission is the .ipynb file saved by Jupyter"
        )
    try:
        return nbformat.reads(text, as_version=4)
    except Exception as exc:  # nbformat raises several kinds for odd documents
        raise UsageError(f"{path} is not a notebook nbformat can read ({str(exc).splitlines()[0][:200]})") from None


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


LOST_METADATA = (
    "this notebook's cells lost their nbgrader grading metadata (it was copied into a new notebook or saved "
    "by another editor), so the answer for {gid} could not be found safely: it scores 0 until it is handed in "
    "again; paste your answers into a freshly fetched copy of the lab and hand that in"
)


def _by_position(source: Any, submission: Any, answers: dict[str, str], by_id: dict[str, str]) -> tuple:
    """Answer cells found by place and defined names in a submission whose cells lost their metadata.

    Returns (found answers {grade_id: code}, submission indices used, test cells found by code,
    {grade_id: why an answer could not be found safely})."""
    sub_code = [(k, c, _code(c)) for k, c in enumerate(submission.cells) if c.get("cell_type") == "code"]
    tests = [(k, c) for k, c in enumerate(source.cells) if c.cell_type == "code" and _meta(c).get("grade")]
    pos: dict[int, int] = {}  # source test cell index -> submission cell index
    found_tests: set[str] = set()
    for k, c in tests:
        gid = str(_meta(c).get("grade_id", ""))
        forms = {_code(c).strip(), _stub(_code(c)).strip()}
        hit = [j for j, sc, text in sub_code if gid and str(_meta(sc).get("grade_id", "")) == gid]
        if not hit:
            hit = [j for j, sc, text in sub_code if not _meta(sc).get("grade_id") and text.strip() in forms]
            if len(hit) == 1:
                found_tests.add(gid)
        if len(hit) == 1:
            pos[k] = hit[0]
    found: dict[str, str] = {}
    used: set[int] = set()
    unsure: dict[str, str] = {}
    lost_all = not any(_meta(c).get("grade_id") for c in submission.cells)
    for k, cell in enumerate(source.cells):
        gid = str(_meta(cell).get("grade_id", ""))
        if cell.cell_type != "code" or not _meta(cell).get("solution") or not gid:
            continue
        if gid in answers or (cell.get("id") and str(cell["id"]) in by_id):
            continue
        before = [t for t, _ in tests if t < k]
        after = [t for t, _ in tests if t > k]
        if (before and before[-1] not in pos) or (after and after[0] not in pos):
            if lost_all:
                unsure[gid] = LOST_METADATA.format(gid=gid)
            continue
        lo = pos[before[-1]] if before else -1
        hi = pos[after[0]] if after else len(submission.cells)
        want = set(defined_names(_code(cell)))
        candidates = [
            (j, text)
            for j, sc, text in sub_code
            if lo < j < hi and j not in used and text.strip() and not _meta(sc).get("grade_id")
        ]
        stub = _stub(_code(cell)).strip()
        fits = [(j, text) for j, text in candidates if text.strip() == stub]  # left as released
        fits = fits or [(j, text) for j, text in candidates if want and want <= set(defined_names(text))]
        if len(fits) == 1:
            found[gid] = fits[0][1]
            used.add(fits[0][0])
        elif lost_all:
            unsure[gid] = LOST_METADATA.format(gid=gid)
    return found, used, found_tests, unsure


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
    recovered, used, found_tests, unsure = _by_position(source, submission, answers, by_id)
    notes += notes_on_test_cells(source, submission, found_tests)
    if recovered:
        notes.append(
            "the notebook's cells lost their nbgrader metadata (copied into a new notebook, or saved by another "
            f"editor): the answers for {', '.join(recovered)} were found by their place and the names they define"
        )
    if unsure:
        notes.append(LOST_METADATA.format(gid=", ".join(unsure)))
    answers.update(recovered)
    sub_answers = {str(g) for c in submission.cells if _meta(c).get("solution") and (g := _meta(c).get("grade_id"))}
    src_answers = {str(g) for c in source.cells if _meta(c).get("solution") and (g := _meta(c).get("grade_id"))}
    by_cell_id = any(c.get("id") and str(c["id"]) in by_id for c in source.cells if _meta(c).get("solution"))
    # none of its answers is this lab's, by grade_id, cell id or place: another lab's notebook (or a much older release)
    other_lab = bool(sub_answers) and not sub_answers & src_answers and not by_cell_id and not recovered
    added = [] if other_lab else added_cells(source, submission, used)
    added_names: dict[str, str] = {}
    for what, names in added:
        if what.startswith("your edit of the lab's cell"):
            it = f" (it defines or imports {', '.join(names)})" if names else ""
            notes.append(
                f"{what} was not run{it}: the grader runs the lab's own cells as released and only the code of "
                "your answer cells, so put imports and helpers in the answer cell that uses them"
            )
        else:
            notes.append(
                f"{what} is not a cell of the lab and was not run: the grader runs only the lab's own cells and "
                "your answer cells, so put helpers in the answer cell that uses them"
            )
        for name in names:
            added_names.setdefault(name, what)
    why_other = _other_lab(source_path, sub_answers, src_answers) if other_lab else ""
    by_own_id = {  # the lab's answers whose grade_id the submission lacks, found by their cell id (renamed)
        str(_meta(c).get("grade_id"))
        for c in source.cells
        if _meta(c).get("solution") and c.get("id") and str(c["id"]) in by_id
    } & (src_answers - sub_answers)
    if not other_lab and sub_answers - src_answers and by_own_id:
        notes.append(
            f"answer cells {', '.join(sorted(sub_answers - src_answers))} have grade_ids this release of "
            f"{source_path.stem} does not use (renamed?): {', '.join(sorted(by_own_id))} found by cell id and graded"
        )
    if not other_lab and sub_answers - src_answers and src_answers - sub_answers - by_own_id:
        notes.append(
            for_teacher(
                f"answer cells {', '.join(sorted(sub_answers - src_answers))} are not in this release of "
                f"{source_path.stem}, which asks for {', '.join(sorted(src_answers - sub_answers))}: an older "
                "release? Their code was not graded",
                "have the student paste it into the current student version, then grade that again",
            )
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
                if gid not in unsure:
                    notes.append(f"answer cell {gid or k} missing from the submission: graded as not answered")
                text = _stub(cell.source)
            wants = defined_names(_code(cell))
            cells.append(Cell(k, "answer", text, gid, 0.0, tags, unsure.get(gid, ""), wants))
        else:
            cells.append(Cell(k, "code", cell.source, gid, 0.0, tags))
    return Assembled(cells, notes, added_names, why_other)


def _answer_ids(path: Path) -> set[str]:
    """The grade_ids of a lab source's answer (solution) cells; none for a file that cannot be read."""
    try:
        cells = json.loads(path.read_text(encoding="utf-8")).get("cells", [])
    except (OSError, ValueError, AttributeError):
        return set()
    return {
        str(_meta(c)["grade_id"])
        for c in cells
        if isinstance(c, dict) and _meta(c).get("solution") and _meta(c).get("grade_id")
    }


def _other_lab(source_path: Path, theirs: set[str], ours: set[str]) -> str:
    """Why a submission none of whose answer cells (``theirs``) is in the lab ``source_path`` (asking for ``ours``)
    cannot be graded as that lab: which of the course's labs (the sources beside it) its answer cells belong to."""
    lab = Path(source_path).stem
    owners: dict[str, list[str]] = {}
    for other in sorted(Path(source_path).parent.glob("*.ipynb")):
        mine = sorted(theirs & _answer_ids(other))
        if mine and other.stem != lab:
            owners[other.stem] = mine
    unknown = sorted(theirs - {gid for ids in owners.values() for gid in ids})
    asks = f"{lab} asks for {', '.join(sorted(ours))}"
    if len(owners) == 1 and not unknown:
        ((owner, ids),) = owners.items()
        return for_teacher(
            f"is {owner}'s notebook, not {lab}'s: its answer cells ({', '.join(ids)}) are {owner}'s, and {asks}",
            f"ask for the {lab} notebook again, or grade this one alone with --lab {owner}",
        )
    parts = [f"{owner}'s: {', '.join(ids)}" for owner, ids in owners.items()]
    if unknown:
        parts.append(f"in none of the course's labs (a much older release?): {', '.join(unknown)}")
    return for_teacher(
        f"is not {lab}'s notebook: none of its answer cells is in this release of {lab} ({'; '.join(parts)}), and "
        f"{asks}",
        f"ask for the {lab} notebook again, the answers pasted into the current student version",
    )
