"""``python -m gpulab bench kernels``: every reference kernel's throughput on a ladder of sizes.

For each kernel and size the result is checked against NumPy, then timed with
:func:`gpulab.timing.benchmark` (CUDA events in gpu mode). Memory-bound kernels report GB/s (bytes
a perfect kernel must move, divided by the median time); matmul reports GFLOP/s. Each figure is
compared with the device's spec-sheet peak (:data:`gpulab.timing.PEAKS`) and with a library baseline
measured in the same run: a CuPy copy of the same bytes for memory-bound kernels, cuBLAS (CuPy ``@``)
for matmul.

Each kind of case has its own ladder of sizes on a GPU (:data:`gpulab.bench.cases.LADDERS`): memory-bound kernels
up to 2**28 elements, so that the largest size measures the kernel rather than the launch (first, the run times that
launch floor: :mod:`gpulab.bench.launch`), matmul up to 4096 x 4096. A size that does not fit in the device's free
memory is skipped with a line that says so.

In simulator mode the sizes are tiny, the "device" is the CPU simulator, NumPy stands in for CuPy,
and every row is labelled ``simulator: not GPU performance``; such results are never recorded.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import importlib
import json
import sys
from pathlib import Path
from typing import Any
from collections.abc import Callable

import numpy as np

from .. import runtime, timing
from ..errors import UsageError, int_at_least, one_line
from ..hardware import missing_row_note
from ..nn.io import prepare_output_file
from ..timing import device_name
from . import failure
from .cases import CASES, LADDERS, Case, cases, clear_draws
from .launch import floor_line, launch_rows, measure_floor
from .sections import memory_rows, reduce_rows, section_rows, transfer_rows

# CASES, Case and the section builders are re-exported: they live in .cases and .sections, and callers
# (gpulab.results' builders, lessons, tests) import them from here too.
__all__ = [
    "SIMULATOR_LABEL",
    "CASES",
    "Case",
    "cases",
    "configure",
    "default_sizes",
    "launch_rows",
    "main",
    "measure",
    "memory_rows",
    "reduce_rows",
    "run",
    "section_rows",
    "to_html",
    "transfer_rows",
]

SIMULATOR_LABEL = "simulator: not GPU performance"
SIMULATOR_SIZES = [256, 1000]
DEFAULT_SIZES = {"gpu": LADDERS, "simulator": {kind: SIMULATOR_SIZES for kind in LADDERS}}
# Device memory a size may take, as a share of what is free (CuPy's cached blocks are released before each size).
MEMORY_SHARE = 0.9


def default_sizes(case: Case, mode: str | None = None) -> list[int]:
    """The sizes ``case`` runs at by default in ``mode`` (this process's mode when None)."""
    return list(DEFAULT_SIZES[mode or runtime.mode()][case.ladder])


def _free_device_bytes() -> tuple[int | None, str]:
    """Free device memory in bytes after CuPy's cached blocks are released (gpu mode), and ``""``; or None and why
    it is unknown: simulator mode (no device memory), or what could not be read and the error. Never raises: the
    caller tries every size then, and says so once."""
    if not runtime.is_gpu():
        return None, "simulator mode: no device memory to read"
    xp = runtime.xp()
    try:
        xp.get_default_memory_pool().free_all_blocks()
    except Exception:  # noqa: BLE001 - an allocator without a pool (or an emulated one): its free memory still counts
        pass
    try:
        return int(xp.cuda.runtime.memGetInfo()[0]), ""
    except Exception as exc:  # noqa: BLE001 - no reading: every size is tried, and one that does not fit fails alone
        return None, f"the GPU's free memory could not be read (cuda.runtime.memGetInfo: {one_line(exc)})"


def _unread_lines(dev: str) -> list[str]:
    """gpu mode: a line for each figure the report will lack, and why: the free device memory (sizes are then
    tried without that check) and the spec-sheet peak (% of peak), for the GPU named ``dev``."""
    lines = []
    free, why = _free_device_bytes()
    if free is None:
        lines.append(f"device memory: {why}; every size is tried, and one that does not fit fails alone")
    if timing.lookup_peak(dev) is None:
        lines.append(f"% of peak: not shown: {missing_row_note(dev)}")
    return lines


def _free_host_bytes() -> int | None:
    """Host memory available to this process (Linux's MemAvailable), or None where it cannot be read."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


# Host memory a size may take, estimated as this many times its device bytes (the inputs drawn on the host, the
# result copied back, a reference): at 2**28 elements a case's host arrays are 1 GiB each, and Colab has 12.7 GB.
HOST_FACTOR = 2


def _memory_short(case: Case, n: int) -> str:
    """Why ``case`` at ``n`` does not fit the device's free memory or the host's available memory, or ""."""
    need = case.device_bytes(n)
    free, _ = _free_device_bytes()  # unknown: measure() said why once; the size is tried
    if free is not None and need > MEMORY_SHARE * free:
        return (
            f"n={n:,} needs about {need / 1e9:.1f} GB of device memory ({case.arrays} float32 arrays), "
            f"{free / 1e9:.1f} GB is free"
        )
    host = _free_host_bytes()
    if host is not None and HOST_FACTOR * need > MEMORY_SHARE * host:
        clear_draws()  # the inputs kept for the next cases go first
        host = _free_host_bytes() or host
    if host is not None and HOST_FACTOR * need > MEMORY_SHARE * host:
        return f"n={n:,} needs about {HOST_FACTOR * need / 1e9:.1f} GB of host memory, {host / 1e9:.1f} GB is available"
    return ""


def _launcher(name: str) -> Callable[..., Any] | None:
    """A kernel launcher from gpulab.kernels (or one of its family modules), or None if absent."""
    try:
        pkg = importlib.import_module("gpulab.kernels")
    except ImportError:
        return None
    if hasattr(pkg, name):
        return getattr(pkg, name)
    for family in ("memory", "reduce", "elementwise", "matmul"):
        try:
            mod = importlib.import_module(f"gpulab.kernels.{family}")
        except ImportError:
            continue
        if hasattr(mod, name):
            return getattr(mod, name)
    return None


def _baseline_name(metric: str) -> str:
    if runtime.is_gpu():
        return "cuBLAS (CuPy @)" if metric == "GFLOP/s" else "CuPy copy"
    return "NumPy matmul (CPU)" if metric == "GFLOP/s" else "NumPy copy (CPU)"


def measure(
    sizes: list[int] | None = None,
    *,
    only: list[str] | None = None,
    repeat: int | None = None,
    seed: int = 0,
    log: Callable[[str], None] = print,
) -> dict[str, Any]:
    """Check and time every case at every size; returns the report (see ``--json``).

    ``only`` restricts to case names (``copy``, ``matmul_tiled``, ...). Cases whose launcher does
    not exist yet are listed under ``"skipped"`` with the reason.
    """
    gpu = runtime.is_gpu()
    if gpu:
        try:
            importlib.import_module("gpulab.kernels.matmul").disable_tf32()  # fair FP32 race with cuBLAS
        except (ImportError, AttributeError):
            pass
    mode = runtime.mode()
    given = list(sizes) if sizes else None
    repeat = repeat or (5 if gpu else 1)
    warmup = 1 if gpu else 0  # the correctness run already compiled (and warmed) each kernel
    dev = device_name()
    peak = timing.lookup_peak(dev) if gpu else None
    rows: list[dict[str, Any]] = []
    skipped: list[dict[str, Any]] = []
    failed: list[dict[str, Any]] = []  # a case that failed its check or raised: the others are still measured
    selected = [c for c in cases() if not only or c.name in only]
    unknown = sorted(set(only or []) - {c.name for c in cases()})
    if unknown:
        raise UsageError(f"unknown kernel(s) {', '.join(unknown)}; choose from {', '.join(c.name for c in cases())}.")
    launch = measure_floor()
    floor_us = launch["seconds"] * 1e6
    log(f"  launch floor: a launcher's call on one element (kernels.copy) takes {floor_us:,.1f} us per timed call")
    for line in _unread_lines(dev) if gpu else []:
        log(f"  {line}")
    ladders: dict[str, list[int]] = {}
    for case in selected:
        fn = _launcher(case.launcher)
        if fn is None:
            skipped.append({"kernel": case.name, "reason": f"gpulab.kernels.{case.launcher} does not exist yet"})
            log(f"  skip {case.name}: gpulab.kernels.{case.launcher} does not exist yet")
            continue
        case_sizes = given or default_sizes(case, mode)
        ladders.setdefault(case.ladder, case_sizes)
        for n in case_sizes:
            reason = _memory_short(case, n)
            if reason:
                skipped.append({"kernel": case.name, "size": int(n), "reason": reason})
                log(f"  skip {case.name} n={n}: {reason}")
                continue
            rng = np.random.default_rng(seed)
            try:
                prob = case.build(fn, n, rng)
            except LookupError as exc:
                skipped.append({"kernel": case.name, "reason": str(exc)})
                break
            try:
                prob.check(prob.run())  # correctness first; also compiles the kernel
                res = timing.benchmark(prob.run, warmup=warmup, repeat=repeat, label=case.name)
                base = timing.benchmark(prob.baseline, warmup=1, repeat=repeat, label="baseline")
            except Exception as exc:  # noqa: BLE001 - one wrong or crashing case must not lose the others' rows
                error = failure(exc)
                failed.append({"kernel": case.name, "size": int(n), "error": error})
                log(f"  FAILED {case.name} n={n}: {error.splitlines()[0]}")
                del prob  # its device arrays are freed before the next case is built
                break  # its larger sizes would fail the same way, and a GPU minute is precious
            scale = 1e9
            value = prob.work / res.median / scale
            base_value = prob.baseline_work / base.median / scale
            kind = "fp32_tflops" if case.metric == "GFLOP/s" else "dram_gbps"
            pct_peak = timing.percent_of_peak(value, dev, kind) if gpu else None
            row = {
                "kernel": case.name,
                "section": case.section,
                "metric": case.metric,
                "size": int(n),
                "shape": list(prob.shape),
                "work": prob.work,
                "seconds": res.median,
                "spread": res.spread,
                "value": value,
                "percent_of_peak": pct_peak,
                "baseline": _baseline_name(case.metric),
                "baseline_value": base_value,
                "percent_of_baseline": 100.0 * value / base_value if base_value > 0 else None,
                "verified": True,
                "mode": mode,
                "clock": res.clock,
                "repeat": repeat,
            }
            rows.append(row)
            del prob  # its device arrays are freed before the next size is built
            pk = f"{pct_peak:5.1f}% of peak" if pct_peak is not None else "peak n/a"
            log(
                f"  {case.name:<16} n={n:<10} {value:10.4g} {case.metric:<7} {pk}, "
                f"{row['percent_of_baseline']:6.3g}% of {row['baseline']}"
                + (f", {100 * floor_us * 1e-6 / res.median:3.0f}% of it the launch floor" if gpu else "")
            )
    clear_draws()
    peak_info = None
    if peak is not None:
        peak_info = {
            "name": peak.name,
            "dram_gbps": peak.dram_gbps,
            "fp32_gflops": peak.fp32_tflops * 1e3,
            "source": peak.source,
            "basis": peak.basis,
        }
    today = _dt.date.today().isoformat()
    report = {
        "device": dev,
        "mode": mode,
        "date": today,
        "label": f"measured on {dev}, {today}" if gpu else SIMULATOR_LABEL,
        "peak": peak_info,
        "sizes": given or ladders,  # the sizes given, else each ladder run ({"stream": [...], ...})
        "launch": launch,
        "rows": rows,
        "skipped": skipped,
        "failed": failed,
    }
    launch["line"] = floor_line(report)
    log(f"  {launch['line']}")
    return report


def to_html(report: dict[str, Any]) -> str:
    """The HTML report (see :func:`gpulab.viz.bench.report_html`)."""
    from ..viz.bench import report_html

    return report_html(report)


def configure(p: argparse.ArgumentParser) -> None:
    """``gpulab bench kernels`` arguments (validated where they enter)."""
    p.add_argument(
        "--sizes",
        type=int_at_least(1, "an element count"),
        nargs="+",
        metavar="N",
        help="element counts of the main array (2-D kernels use about sqrt(N) x sqrt(N)), for every case; "
        f"default on a GPU, by kind of case: {', '.join(f'{k} {v}' for k, v in LADDERS.items())}; "
        f"{SIMULATOR_SIZES} in the simulator",
    )
    p.add_argument("--kernels", nargs="+", metavar="NAME", help="only these cases (default: all; see --list)")
    p.add_argument(
        "--repeat", type=int_at_least(1), default=None, help="timed runs per point (default: 5 on a GPU, 1 simulated)"
    )
    p.add_argument("--json", type=Path, help="write the report as JSON to this file")
    p.add_argument("--html", type=Path, help="write an HTML report with plotly charts to this file")
    p.add_argument(
        "--record",
        action="store_true",
        help="store the rows in the user's recorded results (one file per device and date; gpu mode only)",
    )
    p.add_argument("--list", action="store_true", help="list the cases and exit")


def run(ns: argparse.Namespace) -> int:
    """Measure (or list) the cases; UsageError for unknown names or unwritable outputs, before any work."""
    if ns.list:
        for c in cases():
            ok = "" if _launcher(c.launcher) else "  (launcher missing: skipped)"
            print(f"{c.name:<18} {c.metric:<8} section {c.section:<12} sizes {c.ladder}{ok}")
        return 0
    if ns.record and not runtime.is_gpu():
        raise UsageError(
            "--record needs gpu mode. Simulator timings are CPU timings, not GPU results, so they "
            "are never recorded. Run on a machine with a CUDA GPU (GPULAB_DEVICE=gpu)."
        )
    unknown = sorted(set(ns.kernels or []) - {c.name for c in cases()})
    if unknown:
        raise UsageError(f"unknown kernel(s) {', '.join(unknown)}; choose from {', '.join(c.name for c in cases())}.")
    for path, what, example in ((ns.json, "--json", "kernels.json"), (ns.html, "--html", "kernels.html")):
        if path is not None:
            prepare_output_file(path, what, example=example)
    print(
        f"gpulab bench kernels: {device_name()} ({runtime.mode()} mode)"
        + ("" if runtime.is_gpu() else f" - {SIMULATOR_LABEL}")
    )
    report = measure(ns.sizes, only=ns.kernels, repeat=ns.repeat)
    if ns.json:
        ns.json.write_text(json.dumps(report, indent=1) + "\n")
        print(f"wrote {ns.json}")
    if ns.html:
        ns.html.write_text(to_html(report), encoding="utf-8")
        print(f"wrote {ns.html}")
    if ns.record:
        from .. import results

        paths = set()
        for section, rows in section_rows(report, transfer_rows()).items():
            paths.add(results.record(section, rows, report["device"], source="gpulab bench kernels"))
        for path in sorted(paths):
            print(f"recorded {path}")
    failed = report["failed"]
    print(
        f"{len(report['rows'])} measurements, {len(report['skipped'])} skipped"
        + (f", {len(failed)} FAILED ({', '.join(f['kernel'] for f in failed)})" if failed else "")
        + f". {report['label']}."
    )
    print(f"Launch floor: {report['launch']['line']}.")
    return 1 if failed else 0


def main(argv: list[str] | None = None) -> int:
    """``gpulab bench kernels ...`` for callers that pass a list (the command line goes through gpulab.cli)."""
    from ..cli import main as cli_main

    return cli_main(["bench", "kernels", *(sys.argv[1:] if argv is None else argv)])


if __name__ == "__main__":
    sys.exit(main())
