"""``python -m gpulab notebooks sync|check|execute``: Colab badges, install cells and metadata.

Every notebook under ``notebooks/`` and ``labs/`` starts with a title + Open-in-Colab badge (markdown),
then a code cell tagged ``colab-setup`` that installs gpulab on Colab only. Both are generated from
:mod:`gpulab._meta` (the repository is named there once), so they never drift:

- ``sync`` rewrites the badge line, the setup cell and the Colab metadata in place, idempotently,
  leaving every other cell (and all outputs) as they were.
- ``check`` lists notebooks whose badge, setup cell or metadata is missing or stale, and exits 1.
- ``execute`` runs them again in place in simulator mode, as they are committed (:mod:`gpulab.nbrefresh`).

The setup cell installs gpulab with ``pip install --no-deps``: Colab already ships numba-cuda,
cupy-cuda12x, ipywidgets 7.7 and plotly, and upgrading any of them breaks Colab's GPU stack or its
widget manager. The remaining dependencies (numba, numpy, tqdm) are Colab built-ins too; they are
named in a second ``pip install`` whose version floors Colab already meets, so pip leaves them alone
there and installs them only where one is missing.
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import _meta
from .errors import UsageError

__all__ = [
    "BADGE_IMAGE",
    "COLAB_METADATA",
    "PROTECTED_ON_COLAB",
    "SETUP_TAG",
    "badge_line",
    "check_notebook",
    "colab_url",
    "find_notebooks",
    "configure",
    "main",
    "read_notebook",
    "run",
    "setup_source",
    "sync_notebook",
    "sync_path",
]

SETUP_TAG = "colab-setup"
SETUP_CELL_ID = "colab-setup"
BADGE_IMAGE = "https://colab.research.google.com/assets/colab-badge.svg"
# Colab's GPU stack and widget manager: gpulab's install must never upgrade these.
PROTECTED_ON_COLAB = ("numba-cuda", "cupy-cuda12x", "ipywidgets", "plotly")
# gpulab's other runtime dependencies (floors as in pyproject.toml), and NVML's bindings from the gpu extras, so
# that lesson 11 reads the GPU's energy counter rather than estimating: pip installs only what Colab lacks.
COLAB_EXTRA_REQUIREMENTS = ("numba>=0.60", "numpy>=1.26", "tqdm>=4.66", "nvidia-ml-py>=12")
COLAB_METADATA: dict[str, Any] = {"accelerator": "GPU", "colab": {"gpuType": "T4", "provenance": []}}
NOTEBOOK_DIRS = ("notebooks", "labs")


def colab_url(relpath: str | Path) -> str:
    """The Colab URL that opens ``relpath`` (a path inside the repository) from GitHub."""
    rel = Path(relpath).as_posix().lstrip("/")
    return f"https://colab.research.google.com/github/{_meta.REPO}/blob/{_meta.BRANCH}/{rel}"


def badge_line(relpath: str | Path) -> str:
    """The markdown Open-in-Colab badge for the notebook at ``relpath``."""
    return f"[![Open In Colab]({BADGE_IMAGE})]({colab_url(relpath)})"


def setup_source() -> str:
    """The source of the ``colab-setup`` cell (the same in every notebook)."""
    extras = " ".join(f'"{r}"' for r in COLAB_EXTRA_REQUIREMENTS)
    return (
        "# Colab only: install gpulab without upgrading Colab's numba-cuda, cupy, ipywidgets or plotly.\n"
        "import sys\n"
        'if "google.colab" in sys.modules:\n'
        f'    !pip install -q --no-deps "gpulab @ git+{_meta.REPO_URL}@{_meta.BRANCH}"\n'
        "    # Already on Colab at these versions, so pip changes nothing; installs only what is missing.\n"
        f"    !pip install -q {extras}"
    )


def _lines(text: str) -> list[str]:
    """A cell source the way nbformat stores it: a list of lines, each but the last ending in \\n."""
    return text.splitlines(keepends=True)


def _text(source: Any) -> str:
    return "".join(source) if isinstance(source, list) else str(source)


def _is_setup(cell: dict[str, Any]) -> bool:
    return cell.get("cell_type") == "code" and SETUP_TAG in cell.get("metadata", {}).get("tags", [])


def _first_markdown(nb: dict[str, Any]) -> int | None:
    for idx, cell in enumerate(nb.get("cells", [])):
        if cell.get("cell_type") == "markdown":
            return idx
    return None


def _with_badge(text: str, relpath: str | Path) -> str:
    """``text`` with its Colab badge line replaced (or added below the title)."""
    badge = badge_line(relpath)
    lines = text.split("\n")
    for k, line in enumerate(lines):
        if BADGE_IMAGE in line or "colab.research.google.com/github/" in line:
            lines[k] = badge
            return "\n".join(lines)
    for k, line in enumerate(lines):
        if line.startswith("#"):
            return "\n".join(lines[: k + 1] + [badge] + lines[k + 1 :])
    return "\n".join([badge, ""] + lines) if text else badge


def check_notebook(nb: dict[str, Any], relpath: str | Path) -> list[str]:
    """Problems with the notebook's badge, setup cell and Colab metadata (empty list: up to date)."""
    problems: list[str] = []
    cells = nb.get("cells", [])
    md = _first_markdown(nb)
    if md is None or md != 0:
        problems.append("the first cell is not the markdown title cell with the Colab badge")
    else:
        text = _text(cells[md].get("source", ""))
        if badge_line(relpath) not in text.split("\n"):
            problems.append(
                "Colab badge missing or stale"
                if BADGE_IMAGE not in text
                else f"Colab badge does not point to {relpath}"
            )
    setups = [i for i, c in enumerate(cells) if _is_setup(c)]
    if not setups:
        problems.append(f"no code cell tagged {SETUP_TAG!r}")
    else:
        if len(setups) > 1:
            problems.append(f"{len(setups)} cells tagged {SETUP_TAG!r} (expected one)")
        if setups[0] != 1:
            problems.append(f"the {SETUP_TAG!r} cell is cell {setups[0] + 1}, expected cell 2")
        if _text(cells[setups[0]].get("source", "")) != setup_source():
            problems.append(f"the {SETUP_TAG!r} cell is stale")
    meta = nb.get("metadata", {})
    if meta.get("accelerator") != COLAB_METADATA["accelerator"]:
        problems.append('metadata "accelerator" is not "GPU"')
    colab = meta.get("colab")
    if not isinstance(colab, dict) or any(colab.get(k) != v for k, v in COLAB_METADATA["colab"].items()):
        problems.append('metadata "colab" lacks {"gpuType": "T4", "provenance": []}')
    return problems


def _new_setup_cell(nbformat_minor: int) -> dict[str, Any]:
    cell: dict[str, Any] = {
        "cell_type": "code",
        "execution_count": None,
        "metadata": {"tags": [SETUP_TAG]},
        "outputs": [],
        "source": _lines(setup_source()),
    }
    if nbformat_minor >= 5:
        cell["id"] = SETUP_CELL_ID
    return cell


def sync_notebook(nb: dict[str, Any], relpath: str | Path) -> dict[str, Any]:
    """A copy of ``nb`` with an up-to-date badge, setup cell and Colab metadata.

    Only the first markdown cell's badge line, the ``colab-setup`` cell's source (its position
    becomes cell 2) and the two metadata keys change; every other cell is kept as it was.
    Other tools (e.g. the lab release) may call this on a notebook dict before writing it.
    """
    nb = copy.deepcopy(nb)
    cells: list[dict[str, Any]] = nb.setdefault("cells", [])
    md = _first_markdown(nb)
    if md is None:
        cells.insert(0, {"cell_type": "markdown", "metadata": {}, "source": _lines(badge_line(relpath))})
        if nb.get("nbformat_minor", 0) >= 5:
            cells[0]["id"] = "colab-title"
    else:
        if md != 0:
            cells.insert(0, cells.pop(md))
        text = _text(cells[0].get("source", ""))
        new = _with_badge(text, relpath)
        if new != text:
            cells[0]["source"] = _lines(new)
    setups = [c for c in cells if _is_setup(c)]
    setup = setups[0] if setups else _new_setup_cell(nb.get("nbformat_minor", 0))
    for c in setups:
        cells.remove(c)
    if _text(setup.get("source", "")) != setup_source():
        setup["source"] = _lines(setup_source())
    cells.insert(1, setup)
    meta = nb.setdefault("metadata", {})
    meta["accelerator"] = COLAB_METADATA["accelerator"]
    colab = meta.get("colab") if isinstance(meta.get("colab"), dict) else {}
    for key, value in COLAB_METADATA["colab"].items():
        if colab.get(key) != value:
            colab[key] = copy.deepcopy(value)
    meta["colab"] = colab
    return nb


def _dumps(nb: dict[str, Any]) -> str:
    """Serialize exactly as nbformat does (so untouched notebooks stay byte-identical)."""
    return json.dumps(nb, sort_keys=True, indent=1, ensure_ascii=False) + "\n"


def find_notebooks(root: Path) -> list[Path]:
    """Every ``.ipynb`` under ``root/notebooks`` and ``root/labs`` (checkpoints excluded), sorted."""
    found: list[Path] = []
    for sub in NOTEBOOK_DIRS:
        base = root / sub
        if base.is_dir():
            found += [p for p in base.rglob("*.ipynb") if ".ipynb_checkpoints" not in p.parts]
    return sorted(found)


@dataclass
class SyncReport:
    """What ``sync`` or ``check`` found."""

    changed: list[Path] = field(default_factory=list)
    problems: dict[Path, list[str]] = field(default_factory=dict)


def read_notebook(path: Path) -> tuple[str, dict[str, Any]]:
    """A notebook's text and JSON; :class:`UsageError` saying what is wrong with anything else."""
    if not path.exists():
        raise UsageError(f"{path} does not exist. Pass notebook files (or folders holding them) that exist.")
    if path.is_dir():
        raise UsageError(f"{path} is a folder, not a notebook file (its name ends in .ipynb, but it holds no JSON).")
    try:
        raw = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"{path} cannot be read as a text file ({exc}).") from exc
    try:
        nb = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise UsageError(f"{path} is not a notebook: it is not valid JSON ({exc}).") from exc
    if not isinstance(nb, dict) or not isinstance(nb.get("cells"), list):
        kind = type(nb).__name__ if not isinstance(nb, dict) else "an object without a 'cells' list"
        raise UsageError(f"{path} is not a notebook: its JSON is {kind}, not a notebook object with 'cells'.")
    return raw, nb


def sync_path(path: Path, root: Path, *, write: bool = True) -> tuple[bool, list[str]]:
    """Sync (or with ``write=False`` only check) one notebook file; ``(changed, problems)``."""
    try:
        rel = path.resolve().relative_to(root.resolve())
    except ValueError:
        raise UsageError(
            f"{path} is outside the repository {root}: the Colab badge needs its path inside "
            "the repository. Run from the repository or pass --root."
        ) from None
    raw, nb = read_notebook(path)
    problems = check_notebook(nb, rel)
    if not write or not problems:
        return False, problems
    new = _dumps(sync_notebook(nb, rel))
    if new == raw:
        return False, []
    path.write_text(new, encoding="utf-8")
    return True, check_notebook(json.loads(new), rel)


def repo_root(start: Path | None = None) -> Path:
    """The repository root: the nearest folder above ``start`` (default: cwd) with a pyproject.toml."""
    here = (start or Path.cwd()).resolve()
    for d in (here, *here.parents):
        if (d / "pyproject.toml").exists() and (d / "notebooks").is_dir():
            return d
    return here


def configure(parser: argparse.ArgumentParser) -> None:
    """``gpulab notebooks sync|check|execute [PATHS] [--root DIR] [--cell-timeout S]``."""
    parser.add_argument(
        "action",
        choices=("sync", "check", "execute"),
        help="sync: rewrite them in place; check: list stale notebooks, exit 1 if any; execute: run them again in "
        "place in simulator mode (each written back only when every cell ran)",
    )
    parser.add_argument(
        "paths",
        nargs="*",
        type=Path,
        help="notebooks or folders to process (default: every notebook under notebooks/ and labs/)",
    )
    parser.add_argument(
        "--root", type=Path, default=None, help="repository root (default: the repository around the current folder)"
    )
    parser.add_argument(
        "--cell-timeout", type=int, default=600, metavar="S", help="execute: seconds a cell may run (default 600)"
    )


def _expand(paths: list[Path]) -> list[Path]:
    out: list[Path] = []
    for p in paths:
        if p.is_dir() and p.suffix != ".ipynb":
            found = sorted(q for q in p.rglob("*.ipynb") if ".ipynb_checkpoints" not in q.parts and q.is_file())
            if not found:
                raise UsageError(f"the folder {p} holds no notebooks (.ipynb files).")
            out += [q.resolve() for q in found]
        else:
            out.append(p.resolve())
    return out


def run(ns: argparse.Namespace) -> int:
    """Sync or check; 1 when notebooks are stale, UsageError for a bad path or root."""
    root = (ns.root or repo_root()).resolve()
    if ns.root is not None and not root.is_dir():
        raise UsageError(f"--root {ns.root} is not a folder.")
    if ns.action == "execute":
        from .nbrefresh import refuse_generated, sources

        paths = _expand(list(ns.paths)) if ns.paths else sources(root)
        refuse_generated(paths, root)
    else:
        paths = _expand(list(ns.paths)) if ns.paths else find_notebooks(root)
    if not paths:
        raise UsageError(
            f"no notebooks under {root}/notebooks or {root}/labs: this is not the gpulab repository. "
            "Run the command inside a checkout of the repository, or pass --root /path/to/gpulab."
        )
    for path in paths:
        read_notebook(path)  # every path is checked before any file is rewritten
    if ns.action == "execute":
        from .nbrefresh import run_all

        if ns.cell_timeout < 1:
            raise UsageError(f"--cell-timeout {ns.cell_timeout}: give the seconds a cell may run, e.g. 600.")
        return run_all(paths, root, ns.cell_timeout)
    report = SyncReport()
    for path in paths:
        changed, problems = sync_path(path, root, write=ns.action == "sync")
        if changed:
            report.changed.append(path)
        if problems:
            report.problems[path] = problems
    for path in report.changed:
        print(f"synced {path.relative_to(root)}")
    for path, problems in report.problems.items():
        print(f"{path.relative_to(root)}: {'; '.join(problems)}")
    if report.problems:
        fix = "" if ns.action == "sync" else " Run `gpulab notebooks sync` to fix them."
        print(f"{len(report.problems)} of {len(paths)} notebooks are not Colab-ready.{fix}")
        return 1
    verb = f"synced {len(report.changed)}, " if ns.action == "sync" else ""
    print(f"gpulab notebooks: {verb}{len(paths)} notebooks have current Colab badges, setup cells and metadata.")
    return 0


def main(argv: list[str] | None = None) -> int:
    """``main(argv)`` for callers that pass a list; the command line goes through :mod:`gpulab.cli`."""
    from .cli import main as cli_main

    return cli_main(["notebooks", *(sys.argv[1:] if argv is None else argv)])


if __name__ == "__main__":
    sys.exit(main())
