"""``python -m gpulab lessons release|check``: the learner versions of the lessons.

The lessons in ``notebooks/NN_name.ipynb`` are the source: complete, executed, with each exercise's
answer between the labs' markers::

    @cuda.jit
    def add_kernel(a, b, out):
        ### BEGIN SOLUTION
        i = cuda.grid(1)
        ...
        ### END SOLUTION

* ``lessons release`` writes ``notebooks/learner/NN_name.ipynb`` for every lesson: each solution
  region becomes ``# YOUR CODE HERE`` + ``raise NotImplementedError(...)`` (the labs' stub, so the
  check cell reports "not implemented yet"), ``### BEGIN/END HIDDEN TESTS`` regions (the source's
  ``assert result.passed``) are removed, outputs and widget state are cleared, and the Colab badge
  points at the learner copy.
* ``lessons check`` fails if a learner version is missing, stale, or contains solution text, a
  marker or an output; the test suite runs it.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path
from typing import Any

from .. import nbtools
from ..errors import UsageError
from ..labs import (
    CheckProblem,
    BEGIN,
    BEGIN_HIDDEN,
    END,
    END_HIDDEN,
    _solution_lines,
    _strip_regions,
    _write,
)

__all__ = [
    "LEARNER_DIR",
    "LESSON_GLOB",
    "CheckProblem",
    "check",
    "configure",
    "find_root",
    "learner_notebook",
    "learner_path",
    "main",
    "release",
    "run",
    "sources",
]

LESSON_GLOB = "[0-9][0-9]_*.ipynb"
LEARNER_DIR = "notebooks/learner"
_MARKERS = (BEGIN, END, BEGIN_HIDDEN, END_HIDDEN)


def find_root(start: Path | None = None) -> Path:
    """The repository root: the first folder at or above ``start`` (default: cwd) with ``notebooks/``
    holding lessons, else the checkout this package was installed from."""
    here = Path(start or Path.cwd()).resolve()
    candidates = (here, *here.parents, Path(__file__).resolve().parents[3])
    for p in candidates:
        if any((p / "notebooks").glob(LESSON_GLOB)):
            return p
    raise UsageError(
        f"no lesson notebooks (notebooks/{LESSON_GLOB}) at or above {here}. Run this from the gpulab "
        "repository, or pass --root PATH_TO_REPOSITORY."
    )


def sources(root: Path) -> list[Path]:
    """The lesson sources, ``notebooks/NN_name.ipynb``, sorted."""
    return sorted((root / "notebooks").glob(LESSON_GLOB))


def learner_path(root: Path, source: Path) -> Path:
    """Where the learner version of ``source`` lives."""
    return root / LEARNER_DIR / source.name


def learner_notebook(source: Path, root: Path) -> Any:
    """The learner version of one lesson (an nbformat node): solutions stubbed, hidden tests and
    outputs removed, Colab badge pointing at ``notebooks/learner/<name>``."""
    import nbformat

    nb = nbformat.read(str(source), as_version=4)
    rel = learner_path(root, source).relative_to(root).as_posix()
    for cell in nb.cells:
        markdown = cell.cell_type == "markdown"
        src = cell.source
        if any(m in src for m in (BEGIN, BEGIN_HIDDEN)):
            src = _strip_regions(src, markdown)
        if markdown and nbtools.BADGE_IMAGE in src:
            src = "\n".join(nbtools.badge_line(rel) if nbtools.BADGE_IMAGE in line else line
                            for line in src.split("\n"))
        cell.source = src
        if cell.cell_type == "code":
            cell.outputs = []
            cell.execution_count = None
        for key in ("execution", "collapsed", "scrolled"):
            cell.metadata.pop(key, None)
        cell.pop("id", None)
    nb.metadata.pop("widgets", None)
    return nb


def release(root: Path | None = None) -> list[Path]:
    """Write every learner version; returns the paths written."""
    root = root or find_root()
    out_dir = root / LEARNER_DIR
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for src in sources(root):
        target = learner_path(root, src)
        target.write_text(_write(learner_notebook(src, root)), encoding="utf-8")
        written.append(target)
    return written


def _leaks(learner: Any, source: Any) -> list[str]:
    """Solution text, markers or outputs found in a learner notebook."""
    found: list[str] = []
    secret = _solution_lines(source)
    for cell in learner.cells:
        found += [m for m in _MARKERS if m in cell.source]
        found += [line.strip() for line in cell.source.splitlines() if line.strip() in secret]
        if cell.get("outputs"):
            found.append("(an executed output)")
    return found


def check(root: Path | None = None) -> list[CheckProblem]:
    """Problems with the learner versions (empty list: all current, solution-free, output-free)."""
    import nbformat

    root = root or find_root()
    problems: list[CheckProblem] = []
    srcs = sources(root)
    fix = "run `python -m gpulab lessons release`"
    for src in srcs:
        target = learner_path(root, src)
        rel = target.relative_to(root).as_posix()
        if not target.exists():
            problems.append(CheckProblem(rel, f"missing: {fix}"))
            continue
        text = target.read_text(encoding="utf-8")
        leaked = _leaks(nbformat.reads(text, as_version=4), nbformat.read(str(src), as_version=4))
        if leaked:
            problems.append(CheckProblem(rel, f"contains solution text: {leaked[0]!r} ({len(leaked)} line(s)); {fix}"))
        if text != _write(learner_notebook(src, root)):
            problems.append(CheckProblem(rel, f"stale: differs from what `lessons release` writes from "
                                         f"notebooks/{src.name}; {fix}"))
    names = {s.name for s in srcs}
    for extra in sorted((root / LEARNER_DIR).glob("*.ipynb")):
        if extra.name not in names:
            problems.append(CheckProblem(extra.relative_to(root).as_posix(),
                                         "has no lesson source in notebooks/: delete it"))
    return problems


def exercise_count(path: Path) -> int:
    """How many solution regions a notebook holds (for the report line)."""
    text = path.read_text(encoding="utf-8")
    return len(re.findall(re.escape(BEGIN), text))


# --------------------------------------------------------------------------------------------------
# Command line


def configure(parser: argparse.ArgumentParser) -> None:
    """Add ``release`` and ``check`` to ``parser``."""
    sub = parser.add_subparsers(dest="lessons_command", required=True, metavar="{release,check}")
    p_rel = sub.add_parser("release", help=f"write {LEARNER_DIR}/*.ipynb from notebooks/NN_*.ipynb")
    p_chk = sub.add_parser("check", help="verify the learner versions are current and contain no solutions")
    for p in (p_rel, p_chk):
        p.add_argument("--root", type=Path, default=None,
                       help="repository root (default: %(default)s = found from the current directory)")


def run(ns: argparse.Namespace) -> int:
    """Do ``release`` or ``check``; 0 on success, 1 if ``check`` found problems."""
    root = (ns.root or find_root()).resolve()
    if ns.root is not None and not any((root / "notebooks").glob(LESSON_GLOB)):
        raise UsageError(f"--root {ns.root} holds no notebooks/{LESSON_GLOB}; pass the repository's root folder.")
    if ns.lessons_command == "release":
        out = root / LEARNER_DIR
        if out.exists() and not out.is_dir():
            raise UsageError(f"{out} exists and is not a folder; remove it and run `lessons release` again.")
        for path in release(root):
            print(f"wrote {path.relative_to(root)} ({exercise_count(root / 'notebooks' / path.name)} exercises)")
        return 0
    problems = check(root)
    for p in problems:
        print(f"{p.path}: {p.problem}", file=sys.stderr)
    if not problems:
        print(f"lessons: {len(sources(root))} learner versions are current and contain no solution text")
    return 1 if problems else 0


def main(argv: list[str] | None = None) -> int:
    """``python -m gpulab lessons release|check [--root PATH]``"""
    parser = argparse.ArgumentParser(prog="python -m gpulab lessons", description=__doc__.split("\n\n")[0])
    configure(parser)
    ns = parser.parse_args(argv)
    try:
        return run(ns)
    except UsageError as exc:
        print(f"gpulab lessons: {exc}", file=sys.stderr)
        return 2
