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
* the learner version ends with two generated cells (:func:`whats_next`): a markdown "What's next" that
  names the lesson's lab (``labs/student/labNN_*.ipynb``) and how to grade it yourself, and
  ``gpulab.lessons.progress("NN")``, the table of this session's verdicts.
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
from .. import release as _release
from ..errors import UsageError
from ..release import BEGIN, CheckProblem

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
    "whats_next",
]

LESSON_GLOB = "[0-9][0-9]_*.ipynb"
LEARNER_DIR = "notebooks/learner"


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
    rel = learner_path(root, source).relative_to(root).as_posix()

    def badge(src: str) -> str:
        if nbtools.BADGE_IMAGE not in src:
            return src
        return "\n".join(nbtools.badge_line(rel) if nbtools.BADGE_IMAGE in line else line for line in src.split("\n"))

    nb = _release.derived_notebook(source, badge)
    nb.cells += whats_next(source, root)
    return nb


WHATS_NEXT = "## What's next"


def whats_next(source: Path, root: Path) -> list[Any]:
    """The two cells that end a learner version: "What's next" (the matching lab, if there is one, how to grade
    it yourself, the next lesson) and the code cell ``gpulab.lessons.progress("NN")``."""
    import nbformat

    number = source.name[:2]
    labs = sorted((root / "labs" / "student").glob(f"lab{number}_*.ipynb"))
    later = [s for s in sources(root) if s.name > source.name]
    text = [
        WHATS_NEXT,
        "The cell below lists this lesson's exercises and which of them passed their check in this session (a cell "
        "that fell back on the reference answer does not count). Each one not done yet: write it, run its check "
        f'cell; stuck? `lessons.hint("{number}", "NAME")`.',
    ]
    if labs:
        lab = labs[0].relative_to(root).as_posix()
        text.append(
            f"**Then the lab**: `{lab}` (in a `gpulab course` folder: `labs/{labs[0].name}`), graded exercises on "
            "this lesson's ideas. Grade it yourself from a terminal in the gpulab repository (it runs the notebook "
            "headless and prints each exercise's score, status and message, and the total):\n\n"
            f"```bash\npython -m gpulab labs grade {lab}\n```"
        )
    text.append(f"**Next lesson**: `{later[0].stem}`." if later else "This was the last lesson of the course.")
    code = f'from gpulab import lessons\n\nlessons.progress("{number}")'
    cells = [nbformat.v4.new_markdown_cell("\n\n".join(text)), nbformat.v4.new_code_cell(code)]
    for cell, cid in zip(cells, ("whats-next", "whats-next-progress")):
        cell["id"] = cid  # fixed ids, so releasing twice writes the same text
    return cells


def _versions(root: Path) -> _release.Versions:
    return _release.Versions(
        "lessons",
        root,
        sources(root),
        root / LEARNER_DIR,
        lambda src: learner_notebook(src, root),
        "has no lesson source in notebooks/: delete it",
    )


def release(root: Path | None = None) -> list[Path]:
    """Write every learner version; returns the paths written."""
    return _release.release(_versions(root or find_root()))


def check(root: Path | None = None) -> list[CheckProblem]:
    """Problems with the learner versions (empty list: all current, solution-free, output-free)."""
    return _release.check(_versions(root or find_root()))


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
        p.add_argument(
            "--root",
            type=Path,
            default=None,
            help="repository root (default: %(default)s = found from the current directory)",
        )


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
    return _release.report(
        check(root), f"lessons: {len(sources(root))} learner versions are current and contain no solution text"
    )


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
