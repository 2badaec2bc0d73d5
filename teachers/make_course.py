"""Lay out an nbgrader course from the gpulab labs: ``python teachers/make_course.py COURSE_DIR``.

Copies each ``labs/solutions/<lab>.ipynb`` to ``COURSE_DIR/source/<lab>/<lab>.ipynb`` and
``teachers/nbgrader_config.py`` next to it. Then, in COURSE_DIR::

    nbgrader generate_assignment lab01_threads     # release/: solutions and hidden tests removed
    nbgrader release_assignment lab01_threads      # to the exchange (JupyterHub)
    nbgrader collect lab01_threads
    nbgrader autograde lab01_threads               # hidden tests and locked cells put back
    nbgrader generate_feedback lab01_threads
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    course = Path(argv[0])
    course.mkdir(parents=True, exist_ok=True)
    shutil.copy(ROOT / "teachers" / "nbgrader_config.py", course / "nbgrader_config.py")
    for sol in sorted((ROOT / "labs" / "solutions").glob("*.ipynb")):
        target = course / "source" / sol.stem / sol.name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(sol, target)
        print(f"source/{sol.stem}/{sol.name}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
