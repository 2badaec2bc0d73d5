"""``gpulab course [DEST]``: copy the lessons and labs out of the installed package, ready for ``jupyter lab``.

A wheel ships the course as package data (``gpulab/_course/``, copied in by the build step in
``setup.py``; nothing is duplicated in git). From a checkout (an editable install) the repository's
own ``notebooks/`` and ``labs/`` are used. The folder it writes::

    DEST/lessons/NN_name.ipynb            the lessons to work in (learner versions: exercises open)
    DEST/lessons/complete/NN_name.ipynb   the complete lessons, solutions included (to compare)
    DEST/labs/labNN_name.ipynb            the labs (student versions), checked by gpulab's harness
    DEST/README.md                        what is where, and how to start

A file the learner already has is never overwritten: an unchanged copy is left alone, an edited one is
skipped (or, with ``--backup``, moved aside to ``name.bak-DATE.ipynb`` and replaced), and the command
says which. It also turns off JupyterLab's "get notified about official Jupyter news?" pop-up for the
environment gpulab is installed in (``--no-jupyter-settings`` leaves it alone).
"""

from __future__ import annotations

import argparse
import datetime as _dt
import importlib.util
import json
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path

from . import _meta
from .errors import UsageError
from .paths import free_name

__all__ = ["CoursePlan", "configure", "copy_course", "course_source", "main", "quiet_jupyterlab_news", "run"]

PACKAGE_COURSE = Path(__file__).parent / "_course"
REPO_ROOT = Path(__file__).resolve().parents[2]

# (source folder inside the course, glob, destination folder inside DEST)
LAYOUT = (
    ("notebooks/learner", "[0-9]*.ipynb", "lessons"),
    ("notebooks", "[0-9]*.ipynb", "lessons/complete"),
    ("labs/student", "*.ipynb", "labs"),
)

README = f"""# gpulab: your copy of the course

- `lessons/`: the lessons to work in, in order (00, 01, ...). Exercises say "not implemented yet"
  until you write them; the checks tell you what to fix.
- `lessons/complete/`: the same lessons with every solution, to compare with yours.
- `labs/`: the graded labs (student versions), one per topic.

Start with `jupyter lab lessons/00_why_gpus.ipynb`. Without a CUDA GPU, gpulab runs every kernel in
Numba's CUDA simulator on the CPU (`gpulab doctor` says which mode and why).

`gpulab course` never overwrites your files: run it again after updating gpulab to get new lessons
(gpulab is not on PyPI: `git pull` in your clone and reinstall it, or
`pip install --force-reinstall --no-deps "gpulab @ git+{_meta.REPO_URL}"`);
edited notebooks are skipped (or kept as `name.bak-DATE.ipynb` with `--backup`).
"""


def course_source() -> Path:
    """Where the course is: the installed package data, else the repository (editable install)."""
    if (PACKAGE_COURSE / "notebooks").is_dir():
        return PACKAGE_COURSE
    if (REPO_ROOT / "notebooks").is_dir() and (REPO_ROOT / "labs").is_dir():
        return REPO_ROOT
    raise UsageError(
        "this gpulab installation has no course files (no gpulab/_course in the package and no repository "
        f'next to it at {REPO_ROOT}). Reinstall it from a clone (pip install ".[lab,data]") or from GitHub '
        f'(pip install --force-reinstall --no-deps "gpulab @ git+{_meta.REPO_URL}"), or run from a checkout of the '
        "repository."
    )


@dataclass
class CoursePlan:
    """What :func:`copy_course` did, file by file (paths relative to DEST)."""

    dest: Path
    copied: list[str] = field(default_factory=list)  # new files (a replaced one is in backed_up)
    unchanged: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)  # the learner's edited copy was kept
    backed_up: list[tuple[str, str]] = field(default_factory=list)  # (file, its backup)


def _files(source: Path) -> list[tuple[Path, str]]:
    """``(source file, path relative to DEST)`` for every course file; learner versions fall back to
    the complete lessons when none were built."""
    out: list[tuple[Path, str]] = []
    for folder, pattern, target in LAYOUT:
        for src in sorted((source / folder).glob(pattern)):
            out.append((src, f"{target}/{src.name}"))
    if not any(rel.startswith("lessons/") and "/complete/" not in rel for _, rel in out):
        out += [(src, f"lessons/{src.name}") for src in sorted((source / "notebooks").glob("[0-9]*.ipynb"))]
    return out


def _check_dest(dest: Path) -> None:
    if dest.exists() and not dest.is_dir():
        raise UsageError(f"{dest} is a file; give a folder for the course (it is created if missing).")
    try:
        dest.mkdir(parents=True, exist_ok=True)
        probe = dest / ".gpulab-write-test"
        probe.write_text("")
        probe.unlink()
    except OSError as exc:
        raise UsageError(
            f"cannot write into {dest} ({exc.strerror or exc}). Choose a folder you can write to, "
            "e.g. `gpulab course ~/gpulab-course`."
        ) from exc


def _backup_name(target: Path, stamp: str) -> Path:
    """``name.bak-STAMP.ipynb`` beside ``target``, or ``name.bak-STAMP-2.ipynb`` (-3, ...) when that exists (two
    backups in one second), so that an earlier backup is never replaced."""
    return free_name(target, f"{target.stem}.bak-{stamp}", target.suffix, first=2)


def copy_course(
    dest: Path, *, backup: bool = False, source: Path | None = None, today: str | None = None
) -> CoursePlan:
    """Copy the course into ``dest`` without ever overwriting a learner's edited file (see module doc)."""
    source = source or course_source()
    dest = Path(dest).expanduser()
    _check_dest(dest)
    plan = CoursePlan(dest)
    stamp = today or _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    files = _files(source) + [(None, "README.md")]
    for src, rel in files:
        target = dest / rel
        new = README.encode() if src is None else src.read_bytes()
        if target.exists():
            if target.read_bytes() == new:
                plan.unchanged.append(rel)
                continue
            if not backup:
                plan.skipped.append(rel)
                continue
            kept = _backup_name(target, stamp)
            target.replace(kept)
            plan.backed_up.append((rel, str(kept.relative_to(dest))))
        else:
            plan.copied.append(rel)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(new)
    return plan


NEWS_SETTING = ("@jupyterlab/apputils-extension:notification", "fetchNews")


def quiet_jupyterlab_news(prefix: str | os.PathLike | None = None) -> Path:
    """Turn off JupyterLab's first-start "get notified about official Jupyter news?" pop-up for one
    environment: ``{prefix}/share/jupyter/lab/settings/overrides.json`` gets ``fetchNews: "false"``
    (other overrides are kept). Returns the file. ``make lab`` and ``gpulab course`` call it."""
    path = Path(prefix or sys.prefix) / "share" / "jupyter" / "lab" / "settings" / "overrides.json"
    data = {}
    if path.exists():
        try:
            data = json.loads(path.read_text(encoding="utf-8") or "{}")
        except json.JSONDecodeError as exc:
            raise UsageError(f"{path} is not valid JSON ({exc}); fix or delete it, then run again.") from exc
    plugin, key = NEWS_SETTING
    section = data.setdefault(plugin, {})
    if section.get(key) != "false":
        section[key] = "false"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    return path


def configure(parser: argparse.ArgumentParser) -> None:
    """``gpulab course [DEST] [--backup] [--no-jupyter-settings]``."""
    parser.add_argument(
        "dest",
        nargs="?",
        type=Path,
        default=Path("gpulab-course"),
        help="folder to copy the course into (default: %(default)s)",
    )
    parser.add_argument(
        "--backup",
        action="store_true",
        help="replace edited notebooks with the new version, keeping yours as name.bak-DATE.ipynb "
        "(default: keep yours and skip the new one)",
    )
    parser.add_argument(
        "--no-jupyter-settings",
        action="store_true",
        help="leave JupyterLab's settings alone (default: turn off its news pop-up)",
    )


def run(ns: argparse.Namespace) -> int:
    """Copy the course and say what happened to each file."""
    plan = copy_course(ns.dest, backup=ns.backup)
    where = plan.dest
    for rel in plan.copied:
        print(f"copied    {rel}")
    for rel, kept in plan.backed_up:
        print(f"replaced  {rel} (your version kept as {kept})")
    for rel in plan.skipped:
        print(f"skipped   {rel} (you edited it; kept as it is. --backup replaces it and keeps yours)")
    if plan.unchanged:
        print(f"unchanged {len(plan.unchanged)} files already up to date")
    if not ns.no_jupyter_settings:
        try:
            print(f"JupyterLab news pop-up turned off in {quiet_jupyterlab_news()}")
        except OSError as exc:
            print(f"(could not write JupyterLab's settings: {exc}; the news pop-up may appear once)")
    print(f"\nThe course is in {where}. Start it with:\n  cd {where} && jupyter lab lessons/00_why_gpus.ipynb")
    if importlib.util.find_spec("jupyterlab") is None:
        print("(JupyterLab is not installed in this environment: pip install jupyterlab)")
    return 0


def main(argv: list[str] | None = None) -> int:
    """``gpulab course ...`` for callers that pass a list."""
    from .cli import main as cli_main

    return cli_main(["course", *(sys.argv[1:] if argv is None else argv)])
