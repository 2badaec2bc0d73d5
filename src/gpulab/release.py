"""Generated notebook versions: the one release/check loop behind ``labs release|check`` (student
versions of ``labs/solutions``) and ``lessons release|check`` (learner versions of the lessons).

A source notebook holds each answer between nbgrader's markers::

    ### BEGIN SOLUTION
    i = cuda.grid(1)
    ...
    ### END SOLUTION

Its generated version replaces each solution region with ``# YOUR CODE HERE`` +
``raise NotImplementedError(...)`` (``YOUR ANSWER HERE`` in markdown), drops ``### BEGIN/END HIDDEN
TESTS`` regions, clears outputs, ids and widget state, and lets the caller rewrite markdown (the
Colab badge or links pointing at the generated copy). :func:`check` reports a version that is
missing, stale (differs from what :func:`release` writes), leaks solution text, a marker or an
output, or has no source.
"""

from __future__ import annotations

import hashlib
import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from collections.abc import Callable

__all__ = [
    "BEGIN",
    "BEGIN_HIDDEN",
    "CODE_STUB",
    "END",
    "END_HIDDEN",
    "MARKDOWN_STUB",
    "CheckProblem",
    "Versions",
    "check",
    "derived_notebook",
    "blank_guess",
    "lock_lab_cells",
    "leaks",
    "release",
    "report",
    "solution_lines",
    "strip_regions",
    "write",
]

BEGIN, END = "### BEGIN SOLUTION", "### END SOLUTION"
BEGIN_HIDDEN, END_HIDDEN = "### BEGIN HIDDEN TESTS", "### END HIDDEN TESTS"
MARKERS = (BEGIN, END, BEGIN_HIDDEN, END_HIDDEN)
CODE_STUB = 'raise NotImplementedError("replace this line with your code")'
MARKDOWN_STUB = "YOUR ANSWER HERE"


@dataclass
class CheckProblem:
    """One thing wrong with a generated version: its path (relative to the root) and what to do."""

    path: str
    problem: str


def strip_regions(source: str, markdown: bool) -> str:
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


def solution_lines(nb: Any) -> set[str]:
    """Meaningful lines that appear only inside solution (or hidden-test) regions of a source notebook."""
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


def derived_notebook(source: Path, markdown: Callable[[str], str] | None = None) -> Any:
    """The generated version of ``source`` (an nbformat node): solution regions stubbed, hidden tests,
    outputs, ids and widget state removed; ``markdown`` (if given) rewrites each markdown cell."""
    import nbformat

    nb = nbformat.read(str(source), as_version=4)
    for cell in nb.cells:
        is_markdown = cell.cell_type == "markdown"
        src = cell.source
        if BEGIN in src or BEGIN_HIDDEN in src:
            src = strip_regions(src, is_markdown)
        if is_markdown and markdown is not None:
            src = markdown(src)
        cell.source = src
        if cell.cell_type == "code":
            cell.outputs = []
            cell.execution_count = None
        for key in ("execution", "collapsed", "scrolled"):
            cell.metadata.pop(key, None)
    nb.metadata.pop("widgets", None)
    return nb


def lock_lab_cells(nb: Any) -> Any:
    """Lock the lab's own code cells (imports, setup, ungraded demos) in ``nb``, a lab: nbgrader's ``locked`` (so
    autograde puts them back from the source, as ``labs grade`` does) and JupyterLab's ``editable``/``deletable``
    false. Answer cells, test cells (locked already) and blank guesses (``guess = None  # not graded``, to be
    typed into) are left as they are. A cell without a grade_id gets ``<lab>-code-<its index>``."""
    ids = [str(c.metadata.get("nbgrader", {}).get("grade_id", "")) for c in nb.cells]
    prefix = next((i.split("-")[0] for i in ids if i), "lab")
    for k, cell in enumerate(nb.cells):
        meta = dict(cell.metadata.get("nbgrader", {}))
        text = "".join(cell.source) if isinstance(cell.source, list) else cell.source
        if cell.cell_type != "code" or meta.get("solution") or meta.get("grade") or blank_guess(text):
            continue
        meta.setdefault("grade", False)
        meta.setdefault("grade_id", f"{prefix}-code-{k}")
        meta.update(locked=True, schema_version=meta.get("schema_version", 3), solution=False)
        cell.metadata["nbgrader"] = meta
        cell.metadata["editable"] = False
        cell.metadata["deletable"] = False
    return nb


def blank_guess(text: str) -> bool:
    """Whether every line of a cell (comments aside) is a blank guess, ``name = None  # not graded ...``."""
    lines = [ln for ln in text.splitlines() if ln.strip() and not ln.lstrip().startswith("#")]
    return bool(lines) and all(re.match(r"\w+ = None\s+# not graded", ln) for ln in lines)


def write(nb: Any) -> str:
    """The text a generated version is saved as: nbformat 4.5, a final newline, and every cell with an id.

    A cell keeps its source's id, so the learner's JupyterLab keeps it too (it only makes up ids for cells that have
    none) and the grader can find a renamed answer cell by it. A cell the release added gets an id derived from the
    cell before it, so releasing twice writes the same text."""
    import nbformat

    nb = nbformat.from_dict(json.loads(json.dumps(nb)))
    nb.nbformat, nb.nbformat_minor = 4, 5
    seen = {str(c["id"]) for c in nb.cells if c.get("id")}
    before = "start"
    for cell in nb.cells:
        if not cell.get("id"):
            n = 0
            while (cid := hashlib.sha1(f"{before}:{n}".encode()).hexdigest()[:8]) in seen:
                n += 1
            cell["id"] = cid
            seen.add(cid)
        before = str(cell["id"])
    return nbformat.writes(nb) + "\n"


def leaks(derived: Any, source: Any) -> list[str]:
    """Solution text, markers or outputs found in a generated notebook, cell by cell."""
    found: list[str] = []
    secret = solution_lines(source)
    for cell in derived.cells:
        found += [m for m in MARKERS if m in cell.source]
        found += [line.strip() for line in cell.source.splitlines() if line.strip() in secret]
        if cell.get("outputs"):
            found.append("(an executed output)")
    return found


@dataclass(frozen=True)
class Versions:
    """One kind of generated version: its sources, where the versions go, and how one is built."""

    command: str  # "labs" or "lessons": the messages say ``python -m gpulab {command} release``
    root: Path
    sources: list[Path]
    out_dir: Path
    build: Callable[[Path], Any]  # source path -> the generated notebook
    orphan: str  # what to say about a version without a source

    def target(self, source: Path) -> Path:
        """Where the version of ``source`` lives."""
        return self.out_dir / source.name

    def rel(self, path: Path) -> str:
        return path.relative_to(self.root).as_posix()


def release(versions: Versions) -> list[Path]:
    """Write every generated version; returns the paths written."""
    versions.out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for src in versions.sources:
        target = versions.target(src)
        target.write_text(write(versions.build(src)), encoding="utf-8")
        written.append(target)
    return written


def check(versions: Versions) -> list[CheckProblem]:
    """Problems with the generated versions (empty list: all current, solution-free, output-free)."""
    import nbformat

    fix = f"run `python -m gpulab {versions.command} release`"
    problems: list[CheckProblem] = []
    for src in versions.sources:
        target = versions.target(src)
        rel = versions.rel(target)
        if not target.exists():
            problems.append(CheckProblem(rel, f"missing: {fix}"))
            continue
        text = target.read_text(encoding="utf-8")
        leaked = leaks(nbformat.reads(text, as_version=4), nbformat.read(str(src), as_version=4))
        if leaked:
            problems.append(CheckProblem(rel, f"contains solution text: {leaked[0]!r} ({len(leaked)} line(s)); {fix}"))
        if text != write(versions.build(src)):
            problems.append(
                CheckProblem(
                    rel, f"stale: differs from what `{versions.command} release` writes from {versions.rel(src)}; {fix}"
                )
            )
    names = {s.name for s in versions.sources}
    for extra in sorted(versions.out_dir.glob("*.ipynb")):
        if extra.name not in names:
            problems.append(CheckProblem(versions.rel(extra), versions.orphan))
    return problems


def report(problems: list[CheckProblem], ok: str) -> int:
    """Print the problems (stderr) or ``ok`` (stdout), for the CLIs; 1 if there were problems, else 0."""
    for p in problems:
        print(f"{p.path}: {p.problem}", file=sys.stderr)
    if not problems:
        print(ok)
    return 1 if problems else 0
