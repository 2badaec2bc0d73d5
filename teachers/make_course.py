"""Lay out an nbgrader course from the gpulab labs: ``python teachers/make_course.py COURSE_DIR [--force]``.

Writes each ``labs/solutions/<lab>.ipynb`` to ``COURSE_DIR/source/<lab>/<lab>.ipynb`` (its Colab
link pointed at the student copy, so the released notebook's "Open in Colab" badge does not open the
solutions; the lab's own code cells locked, as ``labs release`` locks them) and
``teachers/nbgrader_config.py`` next to them. A file already there that differs (your edits) is kept and named;
``--force`` replaces it. Then, in COURSE_DIR::

    nbgrader generate_assignment lab01_threads     # release/: solutions and hidden tests removed
    nbgrader release_assignment lab01_threads      # to the exchange (JupyterHub)
    nbgrader collect lab01_threads
    nbgrader autograde lab01_threads               # hidden tests and locked cells put back
    nbgrader generate_feedback lab01_threads       # feedback/<student>/lab01_threads/, here only
    nbgrader release_feedback lab01_threads        # to the exchange: students fetch it (JupyterHub)
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def course_source(solution: Path) -> str:
    """The text of ``source/<lab>/<lab>.ipynb``: the solution, with links to itself (the Colab badge)
    pointed at ``labs/student/`` as ``labs release`` does for the student version."""
    import nbformat

    from gpulab.release import lock_lab_cells

    text = solution.read_text(encoding="utf-8")
    text = text.replace(f"labs/solutions/{solution.name}", f"labs/student/{solution.name}")
    # the lab's own code cells locked, as in labs/student: autograde puts them back from here, as labs grade does
    return nbformat.writes(lock_lab_cells(nbformat.reads(text, as_version=4))) + "\n"


def main(argv: list[str]) -> int:
    force = "--force" in argv
    args = [a for a in argv if a != "--force"]
    if len(args) != 1 or args[0].startswith("-"):
        print(__doc__, file=sys.stderr)
        return 2
    course = Path(args[0])
    course.mkdir(parents=True, exist_ok=True)
    files = {course / "nbgrader_config.py": (ROOT / "teachers" / "nbgrader_config.py").read_text(encoding="utf-8")}
    for sol in sorted((ROOT / "labs" / "solutions").glob("*.ipynb")):
        files[course / "source" / sol.stem / sol.name] = course_source(sol)
    kept = []
    for target, text in files.items():
        rel = target.relative_to(course)
        if target.exists() and target.read_text(encoding="utf-8") != text and not force:
            kept.append(str(rel))
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, encoding="utf-8")
        print(rel)
    if kept:
        print(
            f"kept {len(kept)} file(s) that differ from gpulab's (your edits?): {', '.join(kept)}. "
            "Run again with --force to replace them.",
            file=sys.stderr,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
