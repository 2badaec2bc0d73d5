"""Recorded benchmark results: one JSON file per device and date.

Notebooks in simulator mode cannot measure a GPU, so they show a recording instead, always labelled
with the device and date it came from (or say that none exists yet). ``gpulab bench ... --record``
writes them into the user's data folder (:func:`user_results_dir`: ``$GPULAB_RESULTS_DIR``, else
``$XDG_DATA_HOME/gpulab/results``, ``~/.local/share/gpulab/results``; never into site-packages);
they are read from there and from the package's own ``gpulab/results/`` (recordings shipped with
gpulab), the user's winning when both have a file of the same name. ``make gpu-check`` records into
the repository's ``src/gpulab/results/`` (it sets ``GPULAB_RESULTS_DIR``) so recordings can be committed.

:data:`SECTIONS` is the one table of every section: which command produces it and which keys each of
its rows has. Producers write exactly those rows (:func:`record` checks them); notebooks and ``viz``
read only sections listed there (``tests/test_results_sections.py`` checks both sides).

File layout::

    {"device": "NVIDIA H100 80GB HBM3", "date": "2026-11-29", "gpulab": "0.1.0",
     "source": "make gpu-check", "sections": {"matmul": [{...row...}, ...], "copy": [...]}}
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import re
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

__all__ = [
    "RESULTS_DIR",
    "SECTIONS",
    "Recording",
    "Section",
    "check_rows",
    "latest",
    "list_recordings",
    "record",
    "user_results_dir",
]

RESULTS_DIR = Path(__file__).parent / "results"  # recordings shipped with the package (read only)


def user_results_dir() -> Path:
    """Where this user's recordings go: ``$GPULAB_RESULTS_DIR``, else the platform's user data folder
    (``$XDG_DATA_HOME/gpulab/results`` or ``~/.local/share/gpulab/results`` on Linux,
    ``~/Library/Application Support/gpulab/results`` on macOS, ``%APPDATA%\\gpulab\\results`` on Windows)."""
    if os.environ.get("GPULAB_RESULTS_DIR"):
        return Path(os.environ["GPULAB_RESULTS_DIR"]).expanduser()
    if sys.platform == "win32":
        base = Path(os.environ.get("APPDATA") or Path.home() / "AppData" / "Roaming")
    elif sys.platform == "darwin":
        base = Path.home() / "Library" / "Application Support"
    else:
        base = Path(os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share")
    return base / "gpulab" / "results"


@dataclass(frozen=True)
class Section:
    """A results section: the command that records it, its row builder, the keys every row has, who reads it."""

    producer: str  # the command that records it (``make gpu-check`` runs each one)
    builder: str  # "module:function" that builds the rows
    fields: tuple[str, ...]  # keys every row has (rows may carry more)
    readers: tuple[str, ...]  # notebooks / modules that show it


SECTIONS: dict[str, Section] = {
    "why_gpus": Section(
        "python -m gpulab bench lessons --record",
        "gpulab.bench.lessons:why_gpus_rows",
        ("label", "gflops"),
        ("notebooks/00_why_gpus.ipynb",),
    ),
    # lesson 02's copies and streams (gpulab.bench.streams): kind "copy" (GB/s of one array), "pipeline" (pipelined
    # saxpy, seconds for the 3 arrays moved), "model" (gpulab.streams' prediction from measured chunk times) or, from
    # 2026-12-04 on, "overlap" (one chunk's copy in and copy out issued together, against the two alone).
    "streams": Section(
        "python -m gpulab bench lessons --record",
        "gpulab.bench.streams:streams_rows",
        ("label", "kind", "seconds", "bytes", "gbps"),
        ("notebooks/02_memory.ipynb",),
    ),
    "memory": Section(
        "python -m gpulab bench kernels --record",
        "gpulab.bench.sections:memory_rows",
        ("label", "gbps"),
        ("notebooks/02_memory.ipynb",),
    ),
    "reduce": Section(
        "python -m gpulab bench kernels --record",
        "gpulab.bench.sections:reduce_rows",
        ("label", "gbps"),
        ("notebooks/05_reductions_atomics.ipynb",),
    ),
    # bench kernels' rows (value in GFLOP/s, baseline_value = cuBLAS, several sizes); viz.matmul also takes
    # kernels.matmul.benchmark_ladder rows (gflops + a reference row): both have "kernel".
    "matmul": Section(
        "python -m gpulab bench kernels --record",
        "gpulab.bench.sections:section_rows",
        ("kernel",),
        (
            "gpulab.viz.matmul.normalize_ladder_rows",
            "notebooks/03_matmul_naive.ipynb",
            "notebooks/04_shared_memory_tiling.ipynb",
            "gpulab.lessons.roofline.naive_matmul_note (lesson 11, lab 11)",
        ),
    ),
    "kernels": Section(
        "python -m gpulab bench kernels --record",
        "gpulab.bench.sections:section_rows",
        ("kernel", "section", "metric", "size", "value", "baseline", "baseline_value"),
        ("python -m gpulab bench kernels --html (every kernel at every size)",),
    ),
    # bench kernels' launch floor (gpulab.bench.launch): an empty kernel given a CuPy array ("array"), a Numba device
    # array ("numba"), and kernels.copy of 1 element ("launcher"), seconds per timed call, as the cases are timed.
    "launch": Section(
        "python -m gpulab bench kernels --record",
        "gpulab.bench.launch:launch_rows",
        ("label", "seconds", "kind"),
        ("gpulab.bench.launch.recorded_note", "notebooks/02_memory.ipynb", "notebooks/05_reductions_atomics.ipynb"),
    ),
    "matmul_precision": Section(
        "python -m gpulab bench lessons --record",
        "gpulab.interop:precision_benchmark",
        ("precision", "n", "seconds", "tflops", "rel_error"),
        ("gpulab.viz.precision.precision_bars", "notebooks/06_cupy_interop.ipynb"),
    ),
    "conv": Section(
        "python -m gpulab bench lessons --record",
        "gpulab.bench.lessons:conv_rows",
        ("name", "gflops", "seconds"),
        ("notebooks/07_convolution.ipynb",),
    ),
    "cnn_training": Section(
        "python -m gpulab bench lessons --record",
        "gpulab.bench.lessons:cnn_training_rows",
        ("backend", "images_per_second", "test_accuracy"),
        ("notebooks/09_train_cnn.ipynb",),
    ),
    # lesson 09: the CNN's weight-gradient products alone, per kernel (gpulab.bench.gemm_shapes): seconds per call
    # (median), the launch's blocks; the first rows (H200, 2026-12-04) came from a diagnostic script (see "sources").
    "gemm_shapes": Section(
        "python -m gpulab bench lessons --record",
        "gpulab.bench.gemm_shapes:gemm_shapes_rows",
        ("M", "K", "N", "kernel", "seconds"),
        ("notebooks/09_train_cnn.ipynb", "gpulab.lessons.ex_09_splitk.recorded_gemm_note"),
    ),
    "energy": Section(
        "python -m gpulab bench lessons --record",
        "gpulab.bench.energy:energy_rows",
        ("workload", "joules", "seconds", "watts", "method", "measured", "images", "flops"),
        ("notebooks/11_energy_cost_hardware.ipynb",),
    ),
    "attention": Section(
        "python -m gpulab bench lessons --record",
        "gpulab.bench.lessons:attention_rows",
        ("label", "seconds", "gflops", "n", "d"),
        ("notebooks/12_transformers.ipynb",),
    ),
    "cnn": Section(
        "python -m gpulab bench cnn --record",
        "gpulab.bench.cnn:main",
        ("backend", "gpulab"),
        ("make gpu-check summary (gpulab vs PyTorch, one JSON object)",),
    ),
}


def check_rows(section: str, rows: Any) -> None:
    """Raise ValueError unless ``rows`` fit ``SECTIONS[section]`` (a list of dicts with its keys; ``cnn``: one dict)."""
    if section not in SECTIONS:
        raise ValueError(
            f"unknown results section {section!r}; add it to gpulab.results.SECTIONS (known: {', '.join(SECTIONS)})."
        )
    spec = SECTIONS[section]
    items = [rows] if isinstance(rows, dict) else rows
    if not isinstance(items, list) or not items:
        raise ValueError(
            f"section {section!r} needs a non-empty list of row dicts, got {type(rows).__name__}: {str(rows)[:80]}"
        )
    for i, row in enumerate(items):
        missing = [f for f in spec.fields if not isinstance(row, dict) or f not in row]
        if missing:
            raise ValueError(
                f"section {section!r} row {i} lacks {missing}; every row needs {list(spec.fields)} "
                f"(see gpulab.results.SECTIONS), got {row!r:.200}"
            )


@dataclass(frozen=True)
class Recording:
    """One results file: where it came from and its sections of rows."""

    device: str
    date: str
    source: str
    sections: dict[str, Any]
    path: Path
    sources: dict[str, str] = field(default_factory=dict)  # section -> the command that wrote it (since 2026-12-04)

    def of(self, section: str) -> Recording:
        """This recording labelled with the command that wrote ``section`` (a file holds several commands' rows)."""
        return replace(self, source=self.sources.get(section, self.source))

    @property
    def label(self) -> str:
        """The label every figure built from this recording must carry."""
        return f"recorded on {self.device}, {self.date} ({self.source})"


def _load(path: Path) -> Recording:
    data = json.loads(path.read_text())
    return Recording(
        data["device"],
        data["date"],
        data.get("source", "unknown"),
        data.get("sections", {}),
        path,
        dict(data.get("sources", {})),
    )


def list_recordings(directory: Path | None = None) -> list[Recording]:
    """All recordings, oldest first: those in ``directory``, or by default the package's and the user's
    (:func:`user_results_dir`; a user file replaces a package file of the same name)."""
    dirs = [Path(directory)] if directory else [RESULTS_DIR, user_results_dir()]
    files: dict[str, Path] = {}
    for d in dirs:
        if d.is_dir():
            files.update({p.name: p for p in sorted(d.glob("*.json"))})
    recs = [_load(p) for p in files.values()]
    return sorted(recs, key=lambda r: (r.date, r.device))


def latest(section: str, device: str | None = None, directory: Path | None = None) -> Recording | None:
    """The newest recording that has ``section`` (optionally for a device name substring), or None."""
    recs = [r for r in list_recordings(directory) if section in r.sections]
    if device:
        recs = [r for r in recs if device.lower() in r.device.lower()]
    return recs[-1].of(section) if recs else None


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def record(
    section: str,
    rows: Any,
    device: str,
    *,
    source: str = "python -m gpulab bench",
    directory: Path | None = None,
    date: str | None = None,
) -> Path:
    """Write ``rows`` as ``section`` into today's file for ``device`` (merging with other sections), in
    ``directory`` or by default :func:`user_results_dir` (never the installed package).

    ``rows`` must fit :data:`SECTIONS` (:func:`check_rows`): a section nobody can read is an error.
    """
    from . import __version__

    check_rows(section, rows)

    d = Path(directory) if directory else user_results_dir()
    d.mkdir(parents=True, exist_ok=True)
    date = date or _dt.date.today().isoformat()
    path = d / f"{_slug(device)}_{date}.json"
    data: dict[str, Any] = (
        json.loads(path.read_text())
        if path.exists()
        else {"device": device, "date": date, "gpulab": __version__, "source": source, "sections": {}}
    )
    data["sections"][section] = rows
    # One file holds the sections of several commands (gpu-check runs bench kernels, lessons and cnn): each section's
    # command is kept, and the file's source names them all, so a label never credits one command with another's rows.
    sources = data.setdefault("sources", {s: data.get("source", "unknown") for s in data["sections"]})
    sources[section] = source
    data["source"] = " + ".join(dict.fromkeys(sources[s] for s in data["sections"] if s in sources))
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    tmp.replace(path)
    return path
