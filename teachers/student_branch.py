"""Commit what students may see to a branch of its own: ``python teachers/student_branch.py [BRANCH]``.

nbgitpuller clones the whole repository it is given into each student's home, so a link to this
repository would hand out ``labs/solutions`` (and the hidden tests in them). This script commits the
current ``HEAD`` minus the paths ``binder/.dockerignore`` keeps out of the student image
(``labs/solutions``, ``tests``, ``teachers``, ...) to ``BRANCH`` (default ``student``), on top of
the branch's previous commit, so students' nbgitpuller clones update by fast-forward. Your working
tree, index and current branch are not touched. Then push it where students can read it, e.g.::

    git remote add course-public git@github.com:MY-ORG/gpulab-student.git   # once
    python teachers/student_branch.py && git push course-public student:main
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _git(*args: str, env: dict | None = None, cwd: Path = ROOT) -> str:
    proc = subprocess.run(["git", *args], cwd=cwd, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"git {' '.join(args)} failed: {proc.stderr.strip()}")
    return proc.stdout.strip()


def excluded(root: Path = ROOT) -> list[str]:
    """Top-level paths (files or folders) kept from students: binder/.dockerignore's plain entries."""
    lines = (root / "binder" / ".dockerignore").read_text(encoding="utf-8").splitlines()
    return [ln.strip().rstrip("/") for ln in lines if ln.strip() and not ln.startswith("#") and "*" not in ln]


def left_out(root: Path = ROOT, rev: str = "HEAD") -> list[str]:
    """The excluded paths that ``rev`` tracks (the others, such as artifacts/, are only in checkouts)."""
    tracked = set(_git("ls-tree", "--name-only", rev, "--", *excluded(root), cwd=root).splitlines())
    return [p for p in excluded(root) if p in tracked]


def make(branch: str = "student", root: Path = ROOT) -> str:
    """Commit HEAD's tree without the excluded paths to ``branch``; returns the new commit's id
    (the old one if nothing changed)."""
    head = _git("rev-parse", "HEAD", cwd=root)
    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "GIT_INDEX_FILE": str(Path(tmp) / "index")}
        _git("read-tree", head, env=env, cwd=root)
        _git("rm", "-r", "-q", "--cached", "--ignore-unmatch", "--", *excluded(root), env=env, cwd=root)
        tree = _git("write-tree", env=env, cwd=root)
    tracked = _git("ls-tree", "-r", "--name-only", tree, cwd=root).splitlines()
    leaked = [p for p in tracked if p.startswith("labs/solutions/")]
    if leaked:  # pragma: no cover - excluded() holds labs/solutions
        raise RuntimeError(f"labs/solutions still in the student tree: {leaked[:3]}")
    current = subprocess.run(
        ["git", "symbolic-ref", "-q", "--short", "HEAD"], cwd=root, capture_output=True, text=True
    ).stdout.strip()
    if current == branch:
        raise RuntimeError(
            f"{branch!r} is the branch checked out here: moving it would leave the solutions staged in your index. "
            "Name another branch (the default is 'student'), or check out another branch first."
        )
    parent = subprocess.run(
        ["git", "rev-parse", "--verify", "-q", f"refs/heads/{branch}"], cwd=root, capture_output=True, text=True
    ).stdout.strip()
    if parent and _git("rev-list", "-n", "1", parent, "--", "labs/solutions", cwd=root):
        raise RuntimeError(
            f"branch {branch!r} already exists and its history holds labs/solutions: a commit on top of it would "
            "still hand the solutions out to anyone who clones it. Name a new branch, or delete this one "
            f"(`git branch -D {branch}`) so that it is made again without that history."
        )
    if parent and _git("rev-parse", f"{parent}^{{tree}}", cwd=root) == tree:
        return parent
    message = f"Student version of {head[:12]} (without {', '.join(left_out(root, head))})"
    commit = _git("commit-tree", tree, *(["-p", parent] if parent else []), "-m", message, cwd=root)
    _git("update-ref", f"refs/heads/{branch}", commit, *([parent] if parent else []), cwd=root)
    return commit


def main(argv: list[str]) -> int:
    if len(argv) > 1 or (argv and argv[0].startswith("-")):
        print(__doc__, file=sys.stderr)
        return 2
    branch = argv[0] if argv else "student"
    try:
        commit = make(branch)
    except (RuntimeError, OSError) as exc:
        print(f"student_branch: {exc}", file=sys.stderr)
        return 1
    print(f"{branch} is at {commit[:12]}: HEAD without {', '.join(left_out())}. Push it for nbgitpuller.")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
