"""Notes on the cells of a submission that the grader does not run: test cells deleted, edited or given other
points; code cells the student added (and the names they define); the lab's own cells the student edited (they
are locked at release, but an older release or another editor may not keep that). :mod:`gpulab.grading.assemble`
builds the graded notebook and calls these; the grader links a ``NameError`` to the cell that defines the name.
"""

from __future__ import annotations

import ast
import re
from typing import Any

from gpulab.release import blank_guess as _blank_guess

__all__ = ["added_cells", "bound_names", "defined_names", "describe", "notes_on_test_cells"]


def _meta(cell: Any) -> dict:
    meta = cell.get("metadata", {}).get("nbgrader", {})
    return meta if isinstance(meta, dict) else {}


def _stub(source: str) -> str:
    from gpulab.labs import student_cell_source

    return student_cell_source(source)


def _code(cell: Any) -> str:
    text = cell.get("source", "")
    return "".join(text) if isinstance(text, list) else str(text)


def notes_on_test_cells(source: Any, submission: Any, found: set[str] | None = None) -> list[str]:
    """What the teacher should know about the submission's test cells (they are never run).

    ``found``: test cells found by their code in cells that lost their metadata (not missing)."""
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
            if gid not in (found or set()):
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


def _lab_own_cells(source: Any) -> dict[str, Any]:
    """The lab's own code cells (not answers, tests or blank guesses), by cell id and by the grade_id
    ``labs release`` gives them when it locks them."""
    import copy

    from gpulab.release import lock_lab_cells

    locked = lock_lab_cells(copy.deepcopy(source))
    out: dict[str, Any] = {}
    for cell, mine in zip(source.cells, locked.cells):
        meta = _meta(mine)
        if cell.cell_type == "code" and meta.get("locked") and not meta.get("grade") and not meta.get("solution"):
            out[str(meta.get("grade_id"))] = cell
            if cell.get("id"):
                out[str(cell["id"])] = cell
    return out


def bound_names(text: str) -> list[str]:
    """The top-level names a cell binds: :func:`defined_names` and the names it imports."""
    names = defined_names(text)
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return names
    for node in tree.body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            names += [a.asname or a.name.split(".")[0] for a in node.names if a.name != "*"]
    return list(dict.fromkeys(names))


def defined_names(text: str) -> list[str]:
    """The top-level names a cell defines (functions, classes, assigned names), in order."""
    try:
        tree = ast.parse(text)
    except SyntaxError:  # a cell that does not parse: its ``def``/``class`` lines still say what it meant
        return re.findall(r"^(?:def|class)\s+(\w+)", text, flags=re.M)
    names: list[str] = []
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.append(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names += [t.id for t in targets if isinstance(t, ast.Name)]
    return list(dict.fromkeys(names))


def describe(index: int, total: int, text: str, names: list[str]) -> str:
    first = next((ln.strip() for ln in text.splitlines() if ln.strip()), "")
    first = first if len(first) <= 60 else first[:57] + "..."
    what = f"cell {index + 1} of {total} (counting from 1, text cells included; first line `{first}`"
    return what + (f"; defines {', '.join(names)})" if names else ")")


def _only_guesses(text: str, guesses: set[str]) -> bool:
    """Whether every statement of a cell is a plain ``guess = value`` to one of the lab's guess names (comments
    aside): a cell that also imports, unpacks, loops or defines anything else is an added cell, noted as such."""
    try:
        body = ast.parse(text).body
    except SyntaxError:
        return False
    return bool(body) and all(
        isinstance(st, ast.Assign)
        and len(st.targets) == 1
        and isinstance(st.targets[0], ast.Name)
        and st.targets[0].id in guesses
        for st in body
    )


def added_cells(source: Any, submission: Any, used: set[int]) -> list[tuple[str, list[str]]]:
    """Code cells of the submission that are not the lab's (added by the student): a description and the names
    each defines. Answer cells, graded cells, the lab's own cells (either form) and empty cells are not."""
    known = set()
    answer_ids = {str(c["id"]) for c in source.cells if c.get("id") and _meta(c).get("solution")}
    # the lab's blank guesses (`guess = None  # not graded`) are there to be typed into; the grader runs their blank
    # version (the lab's compare cells are ungraded), so a cell setting only those names is no "added" cell
    guesses = {
        n for c in source.cells if c.cell_type == "code" and _blank_guess(_code(c)) for n in defined_names(_code(c))
    }
    for cell in source.cells:
        if cell.cell_type == "code":
            known |= {_code(cell).strip(), _stub(_code(cell)).strip()}
    total = len(submission.cells)
    lab_own = _lab_own_cells(source)
    out = []
    for k, cell in enumerate(submission.cells):
        text = _code(cell)
        if cell.get("cell_type") != "code" or k in used or not text.strip() or text.strip() in known:
            continue
        if cell.get("id") and str(cell["id"]) in answer_ids:  # an answer found by its cell id
            continue
        own = lab_own.get(str(cell.get("id") or "")) or lab_own.get(str(_meta(cell).get("grade_id") or ""))
        if own is not None:  # the lab's own cell (imports, setup), edited: the grader runs the lab's version
            names = [n for n in bound_names(text) if n not in set(bound_names(_code(own)))]
            what = f"your edit of the lab's cell {k + 1} (counting from 1, text cells included)"
            out.append((what, names))
            continue
        if _meta(cell).get("grade_id") or _meta(cell).get("solution") or _meta(cell).get("grade"):
            continue
        names = defined_names(text)
        if _only_guesses(text, guesses):
            continue
        out.append((describe(k, total, text, names), names))
    return out


def renamed_answer(message: str, answer: Any) -> str:
    """The hint for a test row whose ``NameError`` names what the lab's answer cell defines and the student's answer
    cell (``answer``, a :class:`gpulab.grading.assemble.Cell`) does not, while it defines other names: a renamed
    kernel ("" otherwise)."""
    wants = list(getattr(answer, "wants", None) or [])
    missing = [n for n in re.findall(r"name '(\w+)' is not defined", message) if n in wants]
    mine = [n for n in defined_names(getattr(answer, "source", "")) if n not in wants]
    if not missing or not mine:
        return ""
    return (
        f"your answer cell {answer.grade_id} defines {', '.join(mine)}, but the check calls {missing[0]}: "
        f"keep the name {missing[0]} the lab gave it (the test cells call it by that name)"
    )
