"""Build step: ship the course (lessons, learner versions, student labs) inside the wheel.

Everything else is in pyproject.toml. The notebooks stay where they are in git (notebooks/,
notebooks/learner/, labs/student/); building copies them into ``gpulab/_course/`` of the wheel, so
``gpulab course`` can hand them to a learner who installed with pip. Nothing is duplicated in git.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = Path(__file__).parent
COURSE_FILES = ("notebooks/[0-9]*.ipynb", "notebooks/learner/[0-9]*.ipynb", "labs/student/*.ipynb", "labs/README.md")


class BuildPyWithCourse(build_py):
    """build_py, then copy the course files into build/lib/gpulab/_course/."""

    def run(self) -> None:
        super().run()
        dest = Path(self.build_lib) / "gpulab" / "_course"
        count = 0
        for pattern in COURSE_FILES:
            for src in sorted(HERE.glob(pattern)):
                target = dest / src.relative_to(HERE)
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(src, target)
                count += 1
        if not count:
            raise SystemExit(
                "setup.py: no course notebooks found next to setup.py; build from the repository "
                "or from an sdist that includes notebooks/ and labs/student/."
            )
        print(f"gpulab: {count} course files copied into {dest}")


setup(cmdclass={"build_py": BuildPyWithCourse})
