"""What a gradebook row records besides the scores: when the notebook was handed in, when and by what it was graded.

* ``submitted_at``: the first line of nbgrader's ``timestamp.txt`` beside the notebook (``collect`` and the
  exchange write it into ``submitted/<student>/<lab>/``: ``2026-12-04 13:26:08.123456 UTC``), "" where there is
  none (notebooks received by e-mail or an LMS: nbgrader's ``grades.csv`` has no time for them either);
* ``graded_at``: the local time of this grading, ``2026-12-04 14:05:11 +0000``;
* ``gpulab_version`` and ``gpulab_commit``: the version of the gpulab that graded, and the git commit of the
  checkout it was imported from (``abc1234def56``, with ``+local changes`` when tracked files differ from it), or
  "unknown" when it does not run from a git checkout (a wheel, a copy, no git installed): a term graded with one
  commit says so in every row, and a row merged in later (``labs grade --merge``) keeps its own.
"""

from __future__ import annotations

import functools
import subprocess
import time
from pathlib import Path

__all__ = ["UNKNOWN", "graded_at", "gpulab_commit", "gpulab_version", "submitted_at"]

UNKNOWN = "unknown"


def submitted_at(notebook: Path) -> str:
    """The time nbgrader recorded for the submission (``timestamp.txt`` in the notebook's folder), else ""."""
    try:
        text = (Path(notebook).parent / "timestamp.txt").read_text(encoding="utf-8", errors="replace")
    except OSError:  # none (not collected by nbgrader), or unreadable: no time, never an error
        return ""
    first = next((ln.strip() for ln in text.splitlines() if ln.strip()), "")
    return first[:64]


def graded_at() -> str:
    """Now, local time with its offset: when a row was graded."""
    return time.strftime("%Y-%m-%d %H:%M:%S %z")


def gpulab_version() -> str:
    """The version of the gpulab package that grades."""
    try:
        from gpulab import __version__

        return str(__version__)
    except Exception:  # noqa: BLE001 - a record, never a reason to stop grading
        return UNKNOWN


def _git(folder: Path, *args: str) -> str | None:
    try:
        done = subprocess.run(["git", "-C", str(folder), *args], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):  # no git, or it hung
        return None
    return done.stdout.strip() if done.returncode == 0 else None


@functools.cache
def gpulab_commit(package: str = "") -> str:
    """The git commit of the checkout the gpulab package (``package``: its folder; default, the imported one's)
    comes from, ``+local changes`` added when its tracked files differ from it; "unknown" where it is not in a git
    checkout that tracks it (installed from a wheel, copied, git missing)."""
    try:
        folder = Path(package) if package else Path(__file__).resolve().parents[1]
        # the package must be tracked by the repository around it (not a venv inside someone else's repository)
        if _git(folder, "ls-files", "--error-unmatch", "__init__.py") is None:
            return UNKNOWN
        sha = _git(folder, "rev-parse", "--short=12", "HEAD")
        if not sha:
            return UNKNOWN
        dirty = _git(folder, "status", "--porcelain", "--untracked-files=no", "--", ".")
        return sha + (" +local changes" if dirty else "")
    except Exception:  # noqa: BLE001 - a record, never a reason to stop grading
        return UNKNOWN
