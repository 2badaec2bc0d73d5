"""Recorded benchmark results: one JSON file per device and date in ``gpulab/results/``.

Notebooks in simulator mode cannot measure a GPU, so they show a recording instead, always labelled
with the device and date it came from (or say that none exists yet). ``make gpu-check`` and
``python -m gpulab bench ... --record`` write them.

File layout::

    {"device": "NVIDIA H100 80GB HBM3", "date": "2026-11-29", "gpulab": "0.1.0",
     "source": "make gpu-check", "sections": {"matmul": [{...row...}, ...], "copy": [...]}}
"""

from __future__ import annotations

import datetime as _dt
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["RESULTS_DIR", "Recording", "latest", "list_recordings", "record"]

RESULTS_DIR = Path(__file__).parent / "results"


@dataclass(frozen=True)
class Recording:
    """One results file: where it came from and its sections of rows."""

    device: str
    date: str
    source: str
    sections: dict[str, Any]
    path: Path

    @property
    def label(self) -> str:
        """The label every figure built from this recording must carry."""
        return f"recorded on {self.device}, {self.date} ({self.source})"


def _load(path: Path) -> Recording:
    data = json.loads(path.read_text())
    return Recording(data["device"], data["date"], data.get("source", "unknown"), data.get("sections", {}), path)


def list_recordings(directory: Path | None = None) -> list[Recording]:
    """All recordings, oldest first."""
    d = Path(directory) if directory else RESULTS_DIR
    recs = [_load(p) for p in sorted(d.glob("*.json"))]
    return sorted(recs, key=lambda r: (r.date, r.device))


def latest(section: str, device: str | None = None, directory: Path | None = None) -> Recording | None:
    """The newest recording that has ``section`` (optionally for a device name substring), or None."""
    recs = [r for r in list_recordings(directory) if section in r.sections]
    if device:
        recs = [r for r in recs if device.lower() in r.device.lower()]
    return recs[-1] if recs else None


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def record(section: str, rows: Any, device: str, *, source: str = "python -m gpulab bench",
           directory: Path | None = None, date: str | None = None) -> Path:
    """Write ``rows`` as ``section`` into today's file for ``device`` (merging with other sections)."""
    from . import __version__

    d = Path(directory) if directory else RESULTS_DIR
    d.mkdir(parents=True, exist_ok=True)
    date = date or _dt.date.today().isoformat()
    path = d / f"{_slug(device)}_{date}.json"
    data = json.loads(path.read_text()) if path.exists() else {
        "device": device, "date": date, "gpulab": __version__, "source": source, "sections": {}}
    data["sections"][section] = rows
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    tmp.replace(path)
    return path
