"""``python -m gpulab bench kernels``: every reference kernel's throughput on a ladder of sizes.

For each kernel and size the result is checked against NumPy, then timed with
:func:`gpulab.timing.benchmark` (CUDA events in gpu mode). Memory-bound kernels report GB/s (bytes
a perfect kernel must move, divided by the median time); matmul reports GFLOP/s. Each figure is
compared with the device's spec-sheet peak (:data:`gpulab.timing.PEAKS`) and with a library baseline
measured in the same run: a CuPy copy of the same bytes for memory-bound kernels, cuBLAS (CuPy ``@``)
for matmul.

In simulator mode the sizes are tiny, the "device" is the CPU simulator, NumPy stands in for CuPy,
and every row is labelled ``simulator: not GPU performance``; such results are never recorded.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import importlib
import json
import math
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np

from .. import runtime, timing
from ..errors import UsageError, int_at_least
from ..kernels._launch import ceil_div
from ..timing import device_name
from . import check_writable

__all__ = ["SIMULATOR_LABEL", "CASES", "Case", "configure", "device_name", "main", "measure", "memory_rows",
           "reduce_rows", "run", "section_rows", "to_html", "transfer_rows"]

SIMULATOR_LABEL = "simulator: not GPU performance"
DEFAULT_SIZES = {"gpu": [1 << 20, 1 << 22, 1 << 24], "simulator": [256, 1000]}


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


@dataclass
class Problem:
    """One kernel at one size: how to run it, what it must return, how much work it does."""

    run: Callable[[], Any]
    check: Callable[[Any], None]
    work: float  # bytes (GB/s) or FLOPs (GFLOP/s)
    shape: tuple[int, ...]
    baseline: Callable[[], Any]
    baseline_work: float


@dataclass(frozen=True)
class Case:
    """A benchmarked kernel: its family (the results section), metric and problem builder."""

    name: str
    section: str
    metric: str  # "GB/s" or "GFLOP/s"
    launcher: str
    build: Callable[[Callable[..., Any], int, np.random.Generator], Problem]


def _xp() -> Any:
    return runtime.xp()


def _f32(rng: np.random.Generator, *shape: int) -> Any:
    return runtime.to_device(rng.standard_normal(shape, dtype=np.float32))


def _copy_baseline(nbytes_each_way: int) -> tuple[Callable[[], Any], float]:
    """The library's copy of the same number of bytes (read + write)."""
    xp = _xp()
    n = max(1, nbytes_each_way // 4)
    src, dst = xp.ones(n, dtype=np.float32), xp.empty(n, dtype=np.float32)
    return (lambda: xp.copyto(dst, src)), 2.0 * n * 4


def _close(expected: Any, rtol: float = 1e-5, atol: float = 1e-5) -> Callable[[Any], None]:
    def check(got: Any) -> None:
        np.testing.assert_allclose(np.asarray(runtime.to_host(got) if not np.isscalar(got) else got), expected,
                                   rtol=rtol, atol=atol)
    return check


def _square(n: int) -> int:
    return max(1, int(round(math.sqrt(n))))


def _build_copy(stride: int) -> Callable[..., Problem]:
    def build(fn: Callable[..., Any], n: int, rng: np.random.Generator) -> Problem:
        x_h = rng.standard_normal(n, dtype=np.float32)
        x = runtime.to_device(x_h)
        n_out = ceil_div(n, stride)
        out = _xp().empty(n_out, dtype=np.float32)
        base, base_work = _copy_baseline(n_out * 4)
        # A perfect strided copy still moves only the useful bytes: n_out reads + n_out writes.
        return Problem(lambda: fn(x, out, stride=stride), _close(x_h[::stride], 0, 0), 2.0 * n_out * 4, (n,),
                       base, base_work)
    return build


def _build_transpose(kernel_name: str) -> Callable[..., Problem]:
    def build(fn: Callable[..., Any], n: int, rng: np.random.Generator) -> Problem:
        side = _square(n)
        a_h = rng.standard_normal((side, side + 1), dtype=np.float32)  # not square: catches swapped axes
        a = runtime.to_device(a_h)
        out = _xp().empty(a_h.shape[::-1], dtype=np.float32)
        kern = importlib.import_module("gpulab.kernels.memory").__dict__.get(kernel_name)
        if kern is None:
            raise LookupError(f"gpulab.kernels.memory has no {kernel_name}")
        base, base_work = _copy_baseline(a_h.size * 4)
        return Problem(lambda: fn(a, out, kernel=kern), _close(a_h.T, 0, 0), 2.0 * a_h.size * 4, a_h.shape,
                       base, base_work)
    return build


def _build_sum(fn: Callable[..., Any], n: int, rng: np.random.Generator) -> Problem:
    x_h = rng.random(n, dtype=np.float32)  # positive: the float32 sum stays well conditioned
    x = runtime.to_device(x_h)
    expected = float(x_h.astype(np.float64).sum())
    base, base_work = _copy_baseline(n * 4)
    return Problem(lambda: fn(x), _close(expected, rtol=1e-4, atol=1e-3), 1.0 * n * 4, (n,), base, base_work)


def _build_softmax(fn: Callable[..., Any], n: int, rng: np.random.Generator) -> Problem:
    rows = _square(n)
    cols = max(1, n // rows)
    x_h = rng.standard_normal((rows, cols), dtype=np.float32)
    e = np.exp(x_h - x_h.max(axis=1, keepdims=True))
    expected = e / e.sum(axis=1, keepdims=True)
    x = runtime.to_device(x_h)
    out = _xp().empty_like(x)
    base, base_work = _copy_baseline(x_h.size * 4)
    return Problem(lambda: fn(x, out), _close(expected, rtol=1e-4, atol=1e-6), 2.0 * x_h.size * 4,
                   x_h.shape, base, base_work)


def _build_add(fn: Callable[..., Any], n: int, rng: np.random.Generator) -> Problem:
    a_h, b_h = rng.standard_normal(n, dtype=np.float32), rng.standard_normal(n, dtype=np.float32)
    a, b = runtime.to_device(a_h), runtime.to_device(b_h)
    out = _xp().empty(n, dtype=np.float32)
    base, base_work = _copy_baseline(n * 4)
    return Problem(lambda: fn(a, b, out), _close(a_h + b_h, 0, 0), 3.0 * n * 4, (n,), base, base_work)


def _build_matmul(kernel_name: str) -> Callable[..., Problem]:
    def build(fn: Callable[..., Any], n: int, rng: np.random.Generator) -> Problem:
        side = _square(n)
        M, K, N = side, side + 3, side + 1  # not multiples of the tile size
        a_h = rng.standard_normal((M, K), dtype=np.float32)
        b_h = rng.standard_normal((K, N), dtype=np.float32)
        a, b = runtime.to_device(a_h), runtime.to_device(b_h)
        out = _xp().empty((M, N), dtype=np.float32)
        xp = runtime.array_module(a)
        # The reference is the library's product (cuBLAS on a GPU, FP32 with TF32 off; NumPy here):
        # a float64 product on the CPU would take longer than the whole benchmark at GPU sizes.
        expected = runtime.to_host(xp.matmul(a, b))
        flops = 2.0 * M * N * K
        return Problem(lambda: fn(a, b, out, kernel=kernel_name),
                       _close(expected, rtol=1e-3, atol=1e-3 * math.sqrt(K)), flops, (M, K, N),
                       lambda: xp.matmul(a, b, out=out), flops)
    return build


def _matmul_kernel_names() -> list[str]:
    try:
        return list(importlib.import_module("gpulab.kernels.matmul").MATMUL_KERNELS)
    except (ImportError, AttributeError):
        return []


def cases() -> list[Case]:
    """Every benchmark case (matmul cases follow ``MATMUL_KERNELS`` as it is now)."""
    out = [
        Case("copy", "copy", "GB/s", "copy", _build_copy(1)),
        Case("copy_stride4", "copy", "GB/s", "copy", _build_copy(4)),
        Case("transpose_naive", "transpose", "GB/s", "transpose", _build_transpose("transpose_naive_kernel")),
        Case("transpose_tiled", "transpose", "GB/s", "transpose", _build_transpose("transpose_tiled_kernel")),
        Case("add", "elementwise", "GB/s", "add", _build_add),
        Case("sum_atomic", "reduce", "GB/s", "sum_atomic", _build_sum),
        Case("sum_tree", "reduce", "GB/s", "sum_tree", _build_sum),
        Case("sum_reduce", "reduce", "GB/s", "sum_reduce", _build_sum),
        Case("softmax_rows", "reduce", "GB/s", "softmax_rows", _build_softmax),
    ]
    out += [Case(f"matmul_{k}", "matmul", "GFLOP/s", "matmul", _build_matmul(k)) for k in _matmul_kernel_names()]
    return out


CASES = cases  # the list is built on call: kernels written later are picked up


def _baseline_name(metric: str) -> str:
    if runtime.is_gpu():
        return "cuBLAS (CuPy @)" if metric == "GFLOP/s" else "CuPy copy"
    return "NumPy matmul (CPU)" if metric == "GFLOP/s" else "NumPy copy (CPU)"


def measure(sizes: list[int] | None = None, *, only: list[str] | None = None, repeat: int | None = None,
        seed: int = 0, log: Callable[[str], None] = print) -> dict[str, Any]:
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
    sizes = list(sizes or DEFAULT_SIZES[mode])
    repeat = repeat or (5 if gpu else 1)
    warmup = 1 if gpu else 0  # the correctness run already compiled (and warmed) each kernel
    dev = device_name()
    peak = timing.lookup_peak(dev) if gpu else None
    rows: list[dict[str, Any]] = []
    skipped: list[dict[str, str]] = []
    selected = [c for c in cases() if not only or c.name in only]
    unknown = sorted(set(only or []) - {c.name for c in cases()})
    if unknown:
        raise UsageError(f"unknown kernel(s) {', '.join(unknown)}; choose from {', '.join(c.name for c in cases())}.")
    for case in selected:
        fn = _launcher(case.launcher)
        if fn is None:
            skipped.append({"kernel": case.name, "reason": f"gpulab.kernels.{case.launcher} does not exist yet"})
            log(f"  skip {case.name}: gpulab.kernels.{case.launcher} does not exist yet")
            continue
        for n in sizes:
            rng = np.random.default_rng(seed)
            try:
                prob = case.build(fn, n, rng)
            except LookupError as exc:
                skipped.append({"kernel": case.name, "reason": str(exc)})
                break
            prob.check(prob.run())  # correctness first; also compiles the kernel
            res = timing.benchmark(prob.run, warmup=warmup, repeat=repeat, label=case.name)
            base = timing.benchmark(prob.baseline, warmup=1, repeat=repeat, label="baseline")
            scale = 1e9
            value = prob.work / res.median / scale
            base_value = prob.baseline_work / base.median / scale
            kind = "fp32_tflops" if case.metric == "GFLOP/s" else "dram_gbps"
            pct_peak = timing.percent_of_peak(value, dev, kind) if gpu else None
            row = {
                "kernel": case.name, "section": case.section, "metric": case.metric, "size": int(n),
                "shape": list(prob.shape), "work": prob.work, "seconds": res.median, "spread": res.spread,
                "value": value, "percent_of_peak": pct_peak,
                "baseline": _baseline_name(case.metric), "baseline_value": base_value,
                "percent_of_baseline": 100.0 * value / base_value if base_value > 0 else None,
                "verified": True, "mode": mode, "clock": res.clock, "repeat": repeat,
            }
            rows.append(row)
            pk = f"{pct_peak:5.1f}% of peak" if pct_peak is not None else "peak n/a"
            log(f"  {case.name:<16} n={n:<10} {value:10.4g} {case.metric:<7} {pk}, "
                f"{row['percent_of_baseline']:6.3g}% of {row['baseline']}")
    peak_info = None
    if peak is not None:
        peak_info = {"name": peak.name, "dram_gbps": peak.dram_gbps, "fp32_gflops": peak.fp32_tflops * 1e3,
                     "source": peak.source}
    today = _dt.date.today().isoformat()
    return {
        "device": dev, "mode": mode, "date": today,
        "label": f"measured on {dev}, {today}" if gpu else SIMULATOR_LABEL,
        "peak": peak_info, "sizes": sizes, "rows": rows, "skipped": skipped,
    }


def _largest(report: dict[str, Any], names: list[str]) -> list[dict[str, Any]]:
    """The row of each named kernel at its largest size, in the order of ``names`` (missing ones left out)."""
    largest: dict[str, dict[str, Any]] = {}
    for r in report["rows"]:
        if r["kernel"] in names and r["size"] >= largest.get(r["kernel"], {"size": -1})["size"]:
            largest[r["kernel"]] = r
    return [largest[k] for k in names if k in largest]


# What lessons 02 and 05 call the kernels of bench kernels.
_MEMORY_LABELS = {"copy": "copy kernel", "copy_stride4": "copy kernel, stride 4",
                  "transpose_naive": "transpose, naive", "transpose_tiled": "transpose, shared-memory tiled"}
_REDUCE_LABELS = {"sum_atomic": "atomic", "sum_tree": "tree", "sum_reduce": "cuda.reduce"}


def transfer_rows(nbytes: int = 64 << 20, *, repeat: int = 5) -> list[dict[str, Any]]:
    """Host-to-device and device-to-host copies of ``nbytes`` (the ``memory`` section's first rows).

    Timed with :func:`gpulab.timing.benchmark` (CUDA events in gpu mode; in the simulator both are NumPy copies).
    """
    x_h = np.ones(max(1, nbytes // 4), dtype=np.float32)
    x_d = runtime.to_device(x_h)
    h2d = timing.benchmark(runtime.to_device, x_h, warmup=1, repeat=repeat, label="host -> device")
    d2h = timing.benchmark(runtime.to_host, x_d, warmup=1, repeat=repeat, label="device -> host")
    return [{"label": "host -> device", "gbps": x_h.nbytes / h2d.median / 1e9, "bytes": int(x_h.nbytes)},
            {"label": "device -> host", "gbps": x_h.nbytes / d2h.median / 1e9, "bytes": int(x_h.nbytes)}]


def memory_rows(report: dict[str, Any], transfers: list[dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    """Section ``memory`` (lesson 02): host link transfers, then the copy/transpose kernels and the library copy.

    Rows ``{"label", "gbps", ...}`` at the largest size of ``report`` (from :func:`run`).
    """
    out = [dict(t) for t in transfers or []]
    kern = _largest(report, list(_MEMORY_LABELS))
    out += [{"label": f"{_MEMORY_LABELS[r['kernel']]} (n={r['size']:,})", "gbps": r["value"], "kernel": r["kernel"],
             "size": r["size"]} for r in kern]
    copy = [r for r in kern if r["kernel"] == "copy"]
    if copy:
        out.append({"label": f"{copy[0]['baseline']} (n={copy[0]['size']:,})", "gbps": copy[0]["baseline_value"],
                    "kernel": "baseline", "size": copy[0]["size"]})
    return out


def reduce_rows(report: dict[str, Any]) -> list[dict[str, Any]]:
    """Section ``reduce`` (lesson 05): the three ways to sum float32 values, ``{"label", "gbps", ...}``,
    at the largest size."""
    return [{"label": f"{_REDUCE_LABELS[r['kernel']]} (n={r['size']:,})", "gbps": r["value"], "kernel": r["kernel"],
             "size": r["size"]} for r in _largest(report, list(_REDUCE_LABELS))]


def section_rows(report: dict[str, Any],
                 transfers: list[dict[str, Any]] | None = None) -> dict[str, list[dict[str, Any]]]:
    """Every results section bench kernels records (see :data:`gpulab.results.SECTIONS`); empty ones left out."""
    sections = {"kernels": report["rows"],
                "matmul": [r for r in report["rows"] if r["section"] == "matmul"],
                "memory": memory_rows(report, transfers),
                "reduce": reduce_rows(report)}
    return {name: rows for name, rows in sections.items() if rows}


def to_html(report: dict[str, Any]) -> str:
    """The HTML report (see :func:`gpulab.viz.bench.report_html`)."""
    from ..viz.bench import report_html

    return report_html(report)


def configure(p: argparse.ArgumentParser) -> None:
    """``gpulab bench kernels`` arguments (validated where they enter)."""
    p.add_argument("--sizes", type=int_at_least(1, "an element count"), nargs="+", metavar="N",
                   help="element counts of the main array (2-D kernels use about sqrt(N) x sqrt(N)); "
                        f"default: {DEFAULT_SIZES['gpu']} on a GPU, {DEFAULT_SIZES['simulator']} in the simulator")
    p.add_argument("--kernels", nargs="+", metavar="NAME", help="only these cases (default: all; see --list)")
    p.add_argument("--repeat", type=int_at_least(1), default=None,
                   help="timed runs per point (default: 5 on a GPU, 1 simulated)")
    p.add_argument("--json", type=Path, help="write the report as JSON to this file")
    p.add_argument("--html", type=Path, help="write an HTML report with plotly charts to this file")
    p.add_argument("--record", action="store_true",
                   help="store the rows in the user's recorded results (one file per device and date; gpu mode only)")
    p.add_argument("--list", action="store_true", help="list the cases and exit")


def run(ns: argparse.Namespace) -> int:
    """Measure (or list) the cases; UsageError for unknown names or unwritable outputs, before any work."""
    if ns.list:
        for c in cases():
            ok = "" if _launcher(c.launcher) else "  (launcher missing: skipped)"
            print(f"{c.name:<18} {c.metric:<8} section {c.section}{ok}")
        return 0
    if ns.record and not runtime.is_gpu():
        raise UsageError("--record needs gpu mode. Simulator timings are CPU timings, not GPU results, so they "
                         "are never recorded. Run on a machine with a CUDA GPU (GPULAB_DEVICE=gpu).")
    unknown = sorted(set(ns.kernels or []) - {c.name for c in cases()})
    if unknown:
        raise UsageError(f"unknown kernel(s) {', '.join(unknown)}; choose from {', '.join(c.name for c in cases())}.")
    for path in (ns.json, ns.html):
        if path is not None:
            check_writable(path)
    print(f"gpulab bench kernels: {device_name()} ({runtime.mode()} mode)"
          + ("" if runtime.is_gpu() else f" - {SIMULATOR_LABEL}"))
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
    print(f"{len(report['rows'])} measurements, {len(report['skipped'])} skipped. {report['label']}.")
    return 0


def main(argv: list[str] | None = None) -> int:
    """``gpulab bench kernels ...`` for callers that pass a list (the command line goes through gpulab.cli)."""
    from ..cli import main as cli_main

    return cli_main(["bench", "kernels", *(sys.argv[1:] if argv is None else argv)])


if __name__ == "__main__":
    sys.exit(main())
