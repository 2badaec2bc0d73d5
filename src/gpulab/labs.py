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
  badge points at the student copy. Adding a lab takes more than its solution notebook: see
  labs/README.md, "Adding a lab".
* ``labs check``: fail if a student version is missing, stale (differs from what ``release``
  would write) or contains solution text; used by the test suite.
* ``labs grade PATH [--lab NAME] [--json FILE] [--out DIR [--merge]] [--workers N] [--timeout S]``: grade a
  submitted notebook (or every notebook in a folder, in parallel) in a sandbox. Only the answer
  cells come from the submission; test cells, hidden tests and points come from labs/solutions.
  Prints a score table; a folder also gets gradebook.csv/.json and per-student HTML feedback. ``--merge``
  puts the rows of what was graded into ``--out``'s gradebook, replacing that student's rows for that lab
  and keeping the others (grading one student again). See :mod:`gpulab.grading`.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

from . import release as _release
from .release import BEGIN, BEGIN_HIDDEN, CODE_STUB, END, END_HIDDEN, CheckProblem, derived_notebook, strip_regions

# The markers and stubs are gpulab.release's (shared with the lessons' learner versions), named here too.
__all__ = [
    "BEGIN",
    "BEGIN_HIDDEN",
    "CODE_STUB",
    "END",
    "END_HIDDEN",
    "CheckProblem",
    "check",
    "configure",
    "find_root",
    "grade",
    "main",
    "release",
    "run",
    "student_cell_source",
    "student_notebook",
]


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


def student_cell_source(source: str, markdown: bool = False) -> str:
    """What ``labs release`` makes of one cell's source (solution regions stubbed, hidden tests gone)."""
    if BEGIN in source or BEGIN_HIDDEN in source:
        return strip_regions(source, markdown)
    return source


def student_notebook(solution_path: Path) -> Any:
    """The student version of one solution notebook (an nbformat node); markdown links to the
    solution point at the student copy."""
    solution_rel, student_rel = f"labs/solutions/{solution_path.name}", f"labs/student/{solution_path.name}"
    nb = derived_notebook(solution_path, lambda src: src.replace(solution_rel, student_rel))
    return _release.lock_lab_cells(nb)  # the lab's own cells: the graders run the lab's, so no edit is lost unseen


def _solutions(root: Path) -> list[Path]:
    return sorted((root / "labs" / "solutions").glob("*.ipynb"))


def _versions(root: Path) -> _release.Versions:
    return _release.Versions(
        "labs",
        root,
        _solutions(root),
        root / "labs" / "student",
        student_notebook,
        "has no solution notebook in labs/solutions",
    )


def release(root: Path | None = None) -> list[Path]:
    """Write every student version; returns the paths written."""
    return _release.release(_versions(root or find_root()))


def check(root: Path | None = None) -> list[CheckProblem]:
    """Problems with the student versions (empty list: all current and free of solution text)."""
    root = root or find_root()
    versions = _versions(root)
    none = [] if versions.sources else [CheckProblem(str(root / "labs" / "solutions"), "no solution notebooks found")]
    return none + _release.check(versions)


# --------------------------------------------------------------------------------------------------
# Grading lives in gpulab.grading (sandboxed, rebuilt from the lab's source); these names stay here.


def grade(
    notebook: Path,
    timeout: float = 120,
    kernel_name: str = "python3",
    source: Path | None = None,
    root: Path | None = None,
) -> list:
    """Grade one submission in the sandbox; see :func:`gpulab.grading.grader.grade`."""
    from gpulab.grading.grader import grade as _grade

    return _grade(notebook, timeout=timeout, kernel_name=kernel_name, source=source, root=root)


def __getattr__(name: str) -> Any:
    if name in ("GradeRow", "format_table"):
        from gpulab.grading import rows

        return getattr(rows, name)
    raise AttributeError(f"module 'gpulab.labs' has no attribute {name!r}")


# --------------------------------------------------------------------------------------------------
# Command line


def _kernel_name(text: str) -> str:
    if text != "python3":
        raise argparse.ArgumentTypeError(
            f"unknown kernel {text!r}: labs grade runs each submission with this Python inside a sandbox, "
            "not in a Jupyter kernel, so only 'python3' is accepted (leave --kernel out)"
        )
    return text


def configure(parser: argparse.ArgumentParser) -> None:
    """Add ``release``, ``check`` and ``grade`` to ``parser``."""
    from gpulab.errors import int_at_least, positive_float

    sub = parser.add_subparsers(dest="command", required=True)
    p_rel = sub.add_parser("release", help="write labs/student/*.ipynb from labs/solutions")
    p_chk = sub.add_parser("check", help="verify student versions are current and contain no solutions")
    for p in (p_rel, p_chk):
        p.add_argument("--root", type=Path, default=None, help="repository root (default: found from cwd)")
    p_gr = sub.add_parser(
        "grade",
        help="grade a submitted notebook, or every notebook in a folder",
        description="Grade submissions in a sandbox: test cells, points and hidden tests come from "
        "labs/solutions; only the answer cells come from the submission.",
    )
    p_gr.add_argument("path", type=Path, help="a submitted .ipynb, or a folder of them (searched recursively)")
    p_gr.add_argument(
        "--lab", default=None, help="lab to grade against, e.g. lab01_threads (default: from each file's name)"
    )
    p_gr.add_argument("--root", type=Path, default=None, help="repository root (default: found from cwd)")
    p_gr.add_argument(
        "--json",
        type=Path,
        default=None,
        help="write the scores to this JSON file (for a folder: the same list as gradebook.json)",
    )
    p_gr.add_argument(
        "--out",
        type=Path,
        default=None,
        help="folder for gradebook.csv, gradebook.json and feedback/*.html "
        "(default for a folder: FOLDER-graded next to it)",
    )
    p_gr.add_argument(
        "--workers",
        type=int_at_least(1, "a number of workers"),
        default=None,
        help="submissions graded at once (default: the CPUs this process may use, its CPU affinity capped by a "
        "cgroup CPU quota such as a JupyterHub pod's cpu limit)",
    )
    p_gr.add_argument(
        "--timeout",
        type=positive_float,
        default=120.0,
        help="seconds per cell before the cell is stopped (default: %(default)s)",
    )
    p_gr.add_argument(
        "--total-timeout",
        type=positive_float,
        default=1800.0,
        help="seconds per submission, all cells and restarts (default: %(default)s)",
    )
    p_gr.add_argument(
        "--memory-mb",
        type=int_at_least(256, "megabytes"),
        default=4096,
        help="memory limit per submission in MB (default: %(default)s)",
    )
    p_gr.add_argument(
        "--merge",
        action="store_true",
        help="with --out: replace only the rows and feedback pages of the students and labs graded now in --out's "
        "gradebook, keeping every other row (hand-changed scores included) and page; to grade one student again",
    )
    p_gr.add_argument("--kernel", type=_kernel_name, default="python3", help="kept for old scripts; python3 only")


def _limits(ns: argparse.Namespace) -> Any:
    from gpulab.grading.sandbox import Limits

    return Limits(cell_timeout=ns.timeout, total_timeout=ns.total_timeout, memory_mb=ns.memory_mb)


def _refuse_unwritable(json_file: Path | None, out: Path | None) -> None:
    """Refuse, before any grading, what would fail only once the grading is done: a --json path that is a folder, or
    whose folder is missing, a file or not writable; an --out path that is a file, lies below a file, or would be (or
    is) a folder that cannot be written (a missing --out folder is made)."""
    from gpulab.errors import UsageError

    if json_file is not None:
        folder = json_file.parent
        if json_file.is_dir():
            raise UsageError(
                f"--json {json_file} is a folder; --json takes the name of the file to write the scores to, "
                f"e.g. --json {json_file / 'scores.json'}"
            )
        if not folder.exists():
            raise UsageError(f"folder {folder} for --json does not exist; create it or choose another path")
        if not folder.is_dir():
            raise UsageError(f"--json {json_file}: {folder} is a file, not a folder; choose another path for --json")
        if not os.access(folder, os.W_OK):
            raise UsageError(f"cannot write to {folder}; choose a writable place for --json")
    if out is not None:
        from gpulab.grading.gradebook import check_out_folder

        check_out_folder(out)


def _run_grade(ns: argparse.Namespace) -> int:
    from gpulab.errors import UsageError
    from gpulab.grading.assemble import read_submission, source_for

    root = ns.root or find_root()
    solutions = root / "labs" / "solutions"
    if not any(solutions.glob("*.ipynb")):
        raise UsageError(
            f"--root {root} has no labs/solutions/*.ipynb: --root takes a clone of the gpulab repository (the folder "
            "that holds labs/solutions, the grading source), not an nbgrader course folder; leave --root out to use "
            "the clone you run this from"
        )
    if not ns.path.exists():
        raise UsageError(f"{ns.path} does not exist; give a submitted .ipynb file or a folder of them")
    if ns.merge and ns.out is None:
        raise UsageError(
            "--merge needs --out: the folder whose gradebook.csv/.json the new rows go into (the class's, e.g. "
            "--out graded/)"
        )
    if ns.path.is_dir() or ns.merge:
        from gpulab.grading.gradebook import grade_folder

        out = ns.out or ns.path.with_name(ns.path.name + "-graded")
        _refuse_unwritable(ns.json, out)
        if ns.merge and ns.path.is_file():
            read_submission(ns.path)  # a clear message before any work for what is not a notebook
        book = grade_folder(ns.path, solutions, out, lab=ns.lab, workers=ns.workers, limits=_limits(ns), merge=ns.merge)
        print(book.summary())
        if ns.json is not None:  # the same as gradebook.json, where the teacher asked for it
            ns.json.write_text(json.dumps(book.written or book.payload(), indent=2) + "\n", encoding="utf-8")
            print(f"wrote {ns.json}")
        again = [g for _, g in book.entries if g.not_graded]
        if again:  # the process did not start (grade them again), or unreadable (ask for them again): the reason each
            print(f"{len(again)} notebook(s) were not graded; grade them again, or ask for them again, as each says:")
            for g in again:  # the reason, without "not graded: " and the path it may start with
                why = g.why_not_graded.removeprefix("not graded: ").removeprefix(f"{Path(g.notebook).name} ")
                print(f"  {g.notebook}: {why[:200]}")
        return 1 if again else 0
    from gpulab.grading.grader import grade_notebook
    from gpulab.grading.rows import format_table

    read_submission(ns.path)  # a clear message before any work for what is not a notebook
    source = source_for(ns.path, solutions, ns.lab)
    _refuse_unwritable(ns.json, ns.out)
    graded = grade_notebook(ns.path, source, _limits(ns))
    print(
        format_table(
            graded.rows,
            title=f"{ns.path.name} vs labs/solutions/{source.name} (mode: {graded.mode}; sandbox: {graded.sandbox})",
        )
    )
    for note in graded.notes:
        print(f"note: {note}")
    if ns.json:
        ns.json.write_text(json.dumps(graded.to_dict(), indent=2) + "\n", encoding="utf-8")
    if ns.out:
        from gpulab.grading.gradebook import keep_earlier, write_feedback

        ns.out.mkdir(parents=True, exist_ok=True)
        page = ns.out / f"{ns.path.stem}.html"
        if page.exists():  # an earlier grading's page, maybe annotated by hand: renamed, never overwritten
            print(f"the earlier feedback page was kept as {keep_earlier(page).name}")
        write_feedback(graded, page)
        print(f"wrote {page}")
    return 1 if graded.not_graded else 0


def run(ns: argparse.Namespace) -> int:
    """Do what ``configure``'s arguments ask; raises UsageError for bad input."""
    if ns.command == "release":
        root = ns.root or find_root()
        for path in release(root):
            print(f"wrote {path.relative_to(root)}")
        return 0
    if ns.command == "check":
        root = ns.root or find_root()
        return _release.report(
            check(root), f"labs: {len(_solutions(root))} student versions are current and contain no solution text"
        )
    return _run_grade(ns)


def main(argv: list[str] | None = None) -> int:
    """``python -m gpulab labs release|check|grade ...``"""
    from gpulab.errors import GpulabError

    parser = argparse.ArgumentParser(prog="python -m gpulab labs", description=__doc__.split("\n\n")[0])
    configure(parser)
    ns = parser.parse_args(argv)
    try:
        return run(ns)
    except (GpulabError, FileNotFoundError) as exc:
        print(f"labs {ns.command}: {exc}", file=sys.stderr)
        return 2
