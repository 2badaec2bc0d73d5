"""``make gpu-check``'s summary: what the stages' reports in ``--out`` say, in a few readable lines.

:func:`summary` is printed at the end of a run and written to ``summary.txt`` (and so into the bundle): one row per
stage (ok, FAILED with its exit code, or skipped), then what the reports hold: the GPU tests' outcomes
(``tests.jsonl``, :func:`gpulab.gpucheck_pytest.summary_lines`), the notebooks that failed and those run alone
(``notebooks/notebooks.json``, :mod:`gpulab.nbexec`), the kernels benchmark's largest sizes, the capstone backend's
time per op, and the figures the open issues ask of a GPU run (:func:`figure_lines`, from the executed notebooks).
A report cut off by a stopped stage is named as unreadable; the rest is still read.

Standard library only: ``python3 src/gpulab/gpucheck.py`` imports it from its own folder, before gpulab is installed.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

try:
    from .gpucheck_plan import TESTS_LOG, jobs
    from .gpucheck_pytest import summary_lines as _test_lines
except ImportError:  # run as a script: python3 src/gpulab/gpucheck.py (its folder is on sys.path)
    from gpucheck_plan import TESTS_LOG, jobs  # type: ignore[no-redef,import-not-found]
    from gpucheck_pytest import summary_lines as _test_lines  # type: ignore[no-redef,import-not-found]

__all__ = ["FIGURE_NOTEBOOKS", "figure_lines", "summary"]


def _notebook_lines(nbs: list[dict[str, Any]]) -> list[str]:
    ok = sum(r["status"] == "ok" for r in nbs)
    lines = [f"  notebooks: {ok} of {len(nbs)} ran without an error"]
    lone = [Path(r["path"]).stem for r in nbs if r.get("alone")]
    if lone:
        lines.append(f"    ran alone, one at a time after the others (their timings matter): {', '.join(lone)}")
    for r in nbs:
        if r["status"] != "ok":
            first = (r.get("error") or "").splitlines()[:1]
            lines.append(f"    {r['status']:<8} {r['path']} cell {r.get('cell')}: {first[0][:150] if first else ''}")
    return lines


def _kernel_lines(rep: dict[str, Any]) -> list[str]:
    lines = [f"  kernels ({rep['label']}), largest size:"]
    launch = (rep.get("launch") or {}).get("line")
    if launch:  # bench kernels measured its launch floor first (gpulab.bench.launch)
        lines.append(f"    launch floor: {launch}")
    largest: dict[str, dict[str, Any]] = {}
    for r in rep["rows"]:
        largest[r["kernel"]] = r
    for k, r in largest.items():
        pk = f"{r['percent_of_peak']:.0f}% of peak" if r["percent_of_peak"] is not None else "peak unknown"
        base = f", {r['percent_of_baseline']:.0f}% of {r['baseline']}" if r.get("baseline") else ""
        n = f"n={r['size']:,}" if "size" in r else ""
        lines.append(f"    {k:<16} {r['value']:10.1f} {r['metric']:<8} {n:<13} {pk}{base}")
    for s in rep.get("skipped", []):
        lines.append(f"    {s['kernel']:<16} skipped: {s['reason'][:150]}")
    for f in rep.get("failed", []):
        lines.append(f"    {f['kernel']:<16} FAILED at n={f['size']}: {f['error'].splitlines()[0][:150]}")
    return lines


# The executed notebooks whose outputs hold the figures the open issues ask of a GPU run: lab 09 (and lesson 09)
# train on MNIST with the learner's kernels (accuracy, images/s next to CuPy and PyTorch), lesson and lab 11 measure
# energy, lesson and lab 12 time the fused attention kernel against CuPy.
FIGURE_NOTEBOOKS = ("lab09", "09_", "11_", "lab11", "12_", "lab12")
FIGURE_RE = re.compile(
    r"measured in this run|MEASURED|images/s|test accuracy|target reached|per watt|mJ|joules|counter|fused"
)
NOT_FIGURE_RE = re.compile(r"^(ok|FAIL|\[[A-Z]+\])\s")  # a check's report lines ("ok  size 2: correct ...")


def figure_lines(folder: Path, per_notebook: int = 12) -> list[str]:
    """The output lines of :data:`FIGURE_NOTEBOOKS` in ``folder`` (executed notebooks) that carry figures
    (:data:`FIGURE_RE`), each once, at most ``per_notebook`` a notebook: what a session needs to read first."""
    lines: list[str] = []
    for path in sorted(folder.glob("*.ipynb")):
        if not path.stem.startswith(FIGURE_NOTEBOOKS):
            continue
        try:
            cells = json.loads(path.read_text(encoding="utf-8")).get("cells", [])
        except (OSError, ValueError, AttributeError):
            lines.append(f"  {path.stem}: unreadable")
            continue
        found: list[str] = []
        for cell in cells:
            for o in cell.get("outputs", []) if isinstance(cell, dict) else []:
                text = o.get("text") or o.get("data", {}).get("text/plain", "")
                for line in ("".join(text) if isinstance(text, list) else str(text)).splitlines():
                    if FIGURE_RE.search(line) and not NOT_FIGURE_RE.match(line.strip()) and line.strip() not in found:
                        found.append(line.strip())
        if found:
            lines.append(f"  {path.stem}:")
            lines += [f"    {line[:220]}" for line in found[:per_notebook]]
            if len(found) > per_notebook:
                lines.append(f"    (+{len(found) - per_notebook} more lines in {path.name})")
    return lines


def _per_op_lines(rep: dict[str, Any]) -> list[str]:
    """``bench cnn --per-op``'s table (the capstone's backend on the GPU): where a training step's time goes."""
    ips = rep.get("gpulab", {}).get("images_per_second")
    head = f"  cnn on the kernels backend: {ips:,.0f} images/s; time per op:" if ips else "  time per op:"
    rows = rep.get("per_op") or []
    return (
        [head]
        + [
            f"    {r['share']:6.1%}  {r['op']:<17} {r['calls']:>3} x {r['ms_per_call']:8.3f} ms  {r['shapes']}"
            for r in rows[:6]
        ]
        if rows
        else []
    )


def summary(rows: list[dict[str, Any]], out: Path) -> str:
    """A readable summary of the stages, the notebooks and the benchmarks."""
    lines = ["", "gpu-check summary:"]
    for r in rows:
        status = "skipped" if r["rc"] is None else "ok" if r["rc"] == 0 else f"FAILED (rc {r['rc']})"
        lines.append(f"  {r['stage']:<14} {status:<16} {r['seconds']:7.1f} s")
    if (out / TESTS_LOG).exists():  # written test by test: read even when the stage was stopped
        try:
            lines += _test_lines(out / TESTS_LOG)
        except OSError as exc:
            lines.append(f"  {TESTS_LOG}: unreadable ({exc}); the tests stage's log says more")
    for report, part in (
        (out / "notebooks" / "notebooks.json", _notebook_lines),
        (out / "kernels.json", _kernel_lines),
        (out / "cnn-kernels.json", _per_op_lines),
    ):
        if report.exists():
            try:
                lines += part(json.loads(report.read_text()))
            except (ValueError, KeyError, TypeError, AttributeError) as exc:  # a stage stopped while writing it
                lines.append(f"  {report.name}: unreadable ({type(exc).__name__}: {exc}); the stage's log says more")
    figures = figure_lines(out / "notebooks") if (out / "notebooks").is_dir() else []
    if figures:
        lines += [
            "  figures for the open issues (output lines of the executed notebooks; up to "
            f"{jobs()} notebooks ran at once on this GPU, so their timings, images/s and joules include the others' "
            "work: only the bench stages, and the notebooks listed as run alone, measured alone):",
            *figures,
        ]
    return "\n".join(lines)
