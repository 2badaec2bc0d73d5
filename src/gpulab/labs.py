"""``python -m gpulab labs``: release student versions of the labs, check them, grade submissions.

The solution notebooks in ``labs/solutions/`` are the only source. Each exercise's answer sits
between nbgrader's markers, and each cell carries nbgrader metadata, so a teacher can also use
nbgrader itself::

    ### BEGIN SOLUTION
    i = cuda.grid(1)
    ...
    ### END SOLUTION

Commands (run from the repository, or pass ``--root``):

* ``labs release``: write ``labs/student/<name>.ipynb`` for every solution: each solution region
  becomes ``# YOUR CODE HERE`` + ``raise NotImplementedError(...)`` (``YOUR ANSWER HERE`` in
  markdown), ``### BEGIN/END HIDDEN TESTS`` regions are removed, outputs are cleared, and the Colab
  badge points at the student copy. Adding a lab = drop a solution notebook in ``labs/solutions``
  and run ``labs release``.
* ``labs check``: fail if a student version is missing, stale (differs from what ``release``
  would write) or contains solution text; used by the test suite.
* ``labs grade NOTEBOOK [--json FILE] [--timeout S]``: execute a submitted notebook headless
  (nbclient, simulator mode unless ``GPULAB_DEVICE`` is set), then print a score table per graded
  cell (``grade_id``, points, status, message) and optionally write it as JSON for a gradebook.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

__all__ = ["CheckProblem", "GradeRow", "check", "find_root", "grade", "main", "release", "student_notebook"]

BEGIN, END = "### BEGIN SOLUTION", "### END SOLUTION"
BEGIN_HIDDEN, END_HIDDEN = "### BEGIN HIDDEN TESTS", "### END HIDDEN TESTS"
CODE_STUB = 'raise NotImplementedError("replace this line with your code")'
MARKDOWN_STUB = "YOUR ANSWER HERE"


def find_root(start: Path | None = None) -> Path:
    """The repository root: the first folder at or above ``start`` (default: cwd) holding
    ``labs/solutions``, else the checkout this package was installed from."""
    here = Path(start or Path.cwd()).resolve()
    for p in (here, *here.parents):
        if (p / "labs" / "solutions").is_dir():
            return p
    pkg_root = Path(__file__).resolve().parents[2]
    if (pkg_root / "labs" / "solutions").is_dir():
        return pkg_root
    raise FileNotFoundError(
        f"no labs/solutions folder at or above {here}. Run this from the gpulab repository, or pass "
        "--root PATH_TO_REPOSITORY."
    )


def _strip_regions(source: str, markdown: bool) -> str:
    """Replace solution regions with the stub; drop hidden-test regions."""
    out: list[str] = []
    mode = None
    for line in source.splitlines():
        stripped = line.strip()
        if stripped == BEGIN:
            mode = "solution"
            indent = line[: len(line) - len(line.lstrip())]
            out.append(indent + MARKDOWN_STUB if markdown else f"{indent}# YOUR CODE HERE\n{indent}{CODE_STUB}")
            continue
        if stripped == BEGIN_HIDDEN:
            mode = "hidden"
            continue
        if stripped in (END, END_HIDDEN):
            mode = None
            continue
        if mode is None:
            out.append(line)
    return "\n".join(out)


def _solution_lines(nb: Any) -> set[str]:
    """Meaningful lines that appear only inside solution regions of the solution notebook."""
    inside: set[str] = set()
    outside: set[str] = set()
    for cell in nb.cells:
        mode = None
        for line in cell.source.splitlines():
            s = line.strip()
            if s in (BEGIN, BEGIN_HIDDEN):
                mode = s
                continue
            if s in (END, END_HIDDEN):
                mode = None
                continue
            (inside if mode else outside).add(s)
    return {s for s in inside - outside if len(s) >= 12 and not s.startswith("#")}


def student_notebook(solution_path: Path) -> Any:
    """The student version of one solution notebook (an nbformat node)."""
    import nbformat

    nb = nbformat.read(str(solution_path), as_version=4)
    student_rel = f"labs/student/{solution_path.name}"
    for cell in nb.cells:
        markdown = cell.cell_type == "markdown"
        src = cell.source
        if BEGIN in src or BEGIN_HIDDEN in src:
            src = _strip_regions(src, markdown)
        if markdown:
            src = src.replace(f"labs/solutions/{solution_path.name}", student_rel)
        cell.source = src
        if cell.cell_type == "code":
            cell.outputs = []
            cell.execution_count = None
        for key in ("execution", "collapsed", "scrolled"):
            cell.metadata.pop(key, None)
        cell.pop("id", None)
    nb.metadata.pop("widgets", None)
    return nb


def _write(nb: Any) -> str:
    import nbformat

    nb = nbformat.from_dict(json.loads(json.dumps(nb)))
    for cell in nb.cells:
        cell.pop("id", None)
    nb.nbformat, nb.nbformat_minor = 4, 4
    return nbformat.writes(nb) + "\n"


def _solutions(root: Path) -> list[Path]:
    return sorted((root / "labs" / "solutions").glob("*.ipynb"))


def release(root: Path | None = None) -> list[Path]:
    """Write every student version; returns the paths written."""
    root = root or find_root()
    out_dir = root / "labs" / "student"
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for sol in _solutions(root):
        target = out_dir / sol.name
        target.write_text(_write(student_notebook(sol)), encoding="utf-8")
        written.append(target)
    return written


@dataclass
class CheckProblem:
    path: str
    problem: str


def check(root: Path | None = None) -> list[CheckProblem]:
    """Problems with the student versions (empty list: all current and free of solution text)."""
    import nbformat

    root = root or find_root()
    problems: list[CheckProblem] = []
    sols = _solutions(root)
    if not sols:
        problems.append(CheckProblem(str(root / "labs" / "solutions"), "no solution notebooks found"))
    names = {s.name for s in sols}
    for sol in sols:
        target = root / "labs" / "student" / sol.name
        rel = str(target.relative_to(root))
        if not target.exists():
            problems.append(CheckProblem(rel, "missing: run `python -m gpulab labs release`"))
            continue
        text = target.read_text(encoding="utf-8")
        student = nbformat.reads(text, as_version=4)
        leaked = []
        for cell in student.cells:
            for marker in (BEGIN, END, BEGIN_HIDDEN, END_HIDDEN):
                if marker in cell.source:
                    leaked.append(marker)
        secret = _solution_lines(nbformat.read(str(sol), as_version=4))
        for cell in student.cells:
            for line in cell.source.splitlines():
                if line.strip() in secret:
                    leaked.append(line.strip())
            for out in cell.get("outputs", []):
                leaked += ["(an executed output)"]
                break
        if leaked:
            problems.append(CheckProblem(rel, f"contains solution text: {leaked[0]!r} "
                                         f"({len(leaked)} line(s)); run `python -m gpulab labs release`"))
        if text != _write(student_notebook(sol)):
            problems.append(CheckProblem(rel, f"stale: differs from what `labs release` writes from "
                                         f"labs/solutions/{sol.name}; run `python -m gpulab labs release`"))
    for extra in sorted((root / "labs" / "student").glob("*.ipynb")):
        if extra.name not in names:
            problems.append(CheckProblem(str(extra.relative_to(root)), "has no solution notebook in labs/solutions"))
    return problems


# --------------------------------------------------------------------------------------------------
# Grading


@dataclass
class GradeRow:
    grade_id: str
    points: float
    score: float
    status: str
    message: str


def _graded_cells(nb: Any) -> list[tuple[int, dict]]:
    rows = []
    for k, cell in enumerate(nb.cells):
        meta = cell.metadata.get("nbgrader", {})
        if meta.get("grade"):
            rows.append((k, meta))
    return rows


def _error_of(cell: Any) -> tuple[str, str] | None:
    for out in cell.get("outputs", []):
        if out.get("output_type") == "error":
            return out.get("ename", "Error"), out.get("evalue", "")
    return None


def grade(notebook: Path, timeout: float = 300, kernel_name: str = "python3") -> list[GradeRow]:
    """Execute ``notebook`` headless and score its graded cells."""
    import nbformat
    from nbclient import NotebookClient
    from nbclient.exceptions import CellTimeoutError

    nb = nbformat.read(str(notebook), as_version=4)
    graded = dict(_graded_cells(nb))
    results: dict[int, list[dict]] = {}
    os.environ.setdefault("GPULAB_DEVICE", "simulator")
    with tempfile.TemporaryDirectory(prefix="gpulab-grade-") as tmp:
        log = Path(tmp) / "results.jsonl"
        log.touch()
        old = os.environ.get("GPULAB_GRADE_LOG")
        os.environ["GPULAB_GRADE_LOG"] = str(log)
        seen = 0

        def on_cell_executed(cell: Any = None, cell_index: int = 0, **_: Any) -> None:
            nonlocal seen
            lines = log.read_text(encoding="utf-8").splitlines()
            new, seen = lines[seen:], len(lines)
            if new:
                results[cell_index] = [json.loads(x) for x in new]

        client = NotebookClient(
            nb, timeout=timeout, kernel_name=kernel_name, allow_errors=True, interrupt_on_timeout=True,
            resources={"metadata": {"path": str(Path(notebook).resolve().parent)}},
            on_cell_executed=on_cell_executed,
        )
        timed_out = None
        try:
            client.execute()
        except CellTimeoutError as exc:
            timed_out = str(exc).splitlines()[0] if str(exc) else "a cell timed out"
        finally:
            if old is None:
                os.environ.pop("GPULAB_GRADE_LOG", None)
            else:
                os.environ["GPULAB_GRADE_LOG"] = old

    rows = []
    for k, meta in graded.items():
        cell = nb.cells[k]
        points = float(meta.get("points", 0) or 0)
        gid = str(meta.get("grade_id", f"cell-{k}"))
        err = _error_of(cell)
        recorded = results.get(k, [])
        if recorded:
            total = sum(r["max_score"] for r in recorded) or 1.0
            frac = sum(r["score"] for r in recorded) / total
            worst = next((r for r in recorded if not r["passed"]), recorded[-1])
            status = worst["status"] if err or not worst["passed"] else "passed"
            message = worst["message"].splitlines()[0] if worst["message"] else ""
            if worst.get("hint") and status != "passed":
                message += f" (hint: {worst['hint']})"
            score = points * frac if status != "passed" else points
            if err and status == "passed":  # the harness passed but the cell's own asserts did not
                status, score, message = "failed", 0.0, f"{err[0]}: {err[1]}"
        elif err:
            ename, evalue = err
            status = "not implemented" if ename == "NotImplementedError" else ("timeout" if ename in ("CellTimeoutError", "KeyboardInterrupt") else "failed")
            message = "not implemented yet" if status == "not implemented" else f"{ename}: {evalue}"
            score = 0.0
        elif not cell.get("outputs") and cell.get("execution_count") is None:
            status, score, message = "not run", 0.0, timed_out or "the cell was not executed"
        else:
            status, score, message = "passed", points, "the cell ran without errors"
        rows.append(GradeRow(gid, points, round(score, 3), status, message))
    return rows


def format_table(rows: list[GradeRow], title: str = "") -> str:
    """A plain-text score table."""
    w = max([len("exercise")] + [len(r.grade_id) for r in rows])
    lines = [title] if title else []
    lines.append(f"{'exercise':<{w}}  {'score':>9}  {'status':<16} message")
    for r in rows:
        msg = r.message if len(r.message) <= 100 else r.message[:97] + "..."
        lines.append(f"{r.grade_id:<{w}}  {r.score:>4g}/{r.points:<4g}  {r.status:<16} {msg}")
    total, maximum = sum(r.score for r in rows), sum(r.points for r in rows)
    lines.append(f"{'total':<{w}}  {total:>4g}/{maximum:<4g}")
    return "\n".join(lines)


# --------------------------------------------------------------------------------------------------
# Command line


def main(argv: list[str] | None = None) -> int:
    """``python -m gpulab labs release|check|grade ...``"""
    parser = argparse.ArgumentParser(prog="python -m gpulab labs", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p_rel = sub.add_parser("release", help="write labs/student/*.ipynb from labs/solutions")
    p_chk = sub.add_parser("check", help="verify student versions are current and contain no solutions")
    for p in (p_rel, p_chk):
        p.add_argument("--root", type=Path, default=None, help="repository root (default: found from cwd)")
    p_gr = sub.add_parser("grade", help="execute a submitted notebook and score it")
    p_gr.add_argument("notebook", type=Path)
    p_gr.add_argument("--json", type=Path, default=None, help="write the scores to this JSON file")
    p_gr.add_argument("--timeout", type=float, default=300, help="seconds per cell (default 300)")
    p_gr.add_argument("--kernel", default="python3", help="Jupyter kernel name (default python3)")
    ns = parser.parse_args(argv)

    if ns.command == "release":
        root = ns.root or find_root()
        for path in release(root):
            print(f"wrote {path.relative_to(root)}")
        return 0
    if ns.command == "check":
        root = ns.root or find_root()
        problems = check(root)
        for p in problems:
            print(f"{p.path}: {p.problem}", file=sys.stderr)
        if not problems:
            print(f"labs: {len(_solutions(root))} student versions are current and contain no solution text")
        return 1 if problems else 0
    # grade
    if not ns.notebook.exists():
        print(f"labs grade: {ns.notebook} does not exist", file=sys.stderr)
        return 2
    rows = grade(ns.notebook, timeout=ns.timeout, kernel_name=ns.kernel)
    mode = os.environ.get("GPULAB_DEVICE", "simulator")
    print(format_table(rows, title=f"{ns.notebook.name} (mode: {mode})"))
    if ns.json:
        payload = {
            "notebook": str(ns.notebook), "mode": mode,
            "score": sum(r.score for r in rows), "max_score": sum(r.points for r in rows),
            "exercises": [asdict(r) for r in rows],
        }
        ns.json.write_text(json.dumps(payload, indent=2) + "\n", encoding="utf-8")
    return 0

