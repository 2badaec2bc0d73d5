"""The launch floor of ``bench kernels``: what one timed call costs when the kernel does nothing.

Every case of ``bench kernels`` is one launch from Python, timed between CUDA events: the host's work of that launch
(numba reading each argument, a CuPy array through its ``__cuda_array_interface__``; the launcher's checks) falls
inside the window, because the GPU waits for it. On an H200 (2026-12-04) an empty kernel given one CuPy array took
about 130 us that way, and 64 us given a Numba device array, while a copy of 2**20 floats takes a few us of GPU time:
at such sizes the figures measure the launch. :func:`measure_floor` times three calls that do no work, the same way
the cases are timed (:func:`gpulab.timing.benchmark`), and :func:`floor_line` says below how many elements a
copy's time is mostly launch on this machine.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numba import cuda

from .. import runtime, timing

__all__ = ["empty_kernel", "floor_line", "launch_rows", "measure_floor", "measured_note", "recorded_note"]


@cuda.jit
def empty_kernel(a):
    pass  # no work: its time between CUDA events is the launch's alone


def measure_floor(*, repeat: int | None = None) -> dict[str, Any]:
    """``{"rows": [...], "seconds": floor}``: the median time of an empty kernel given a CuPy array (in gpu mode; a
    NumPy array in the simulator), given a Numba device array, and of ``kernels.copy`` on one element (a launcher's
    checks and its launch); ``seconds`` is the last: the cases' own path (a launcher's checks, ``device_args`` and the
    launch), so it is the floor of every case. Timed inside :func:`gpulab.timing.benchmark`'s window, where numba's
    per-argument stream sync is off: the gap between the first two rows is numba reading a CuPy array's
    ``__cuda_array_interface__`` at each launch (135 vs 68 us on the H200), which ``device_args`` pays too."""
    from ..kernels import memory

    gpu = runtime.is_gpu()
    repeat = repeat or (20 if gpu else 2)
    x = runtime.xp().ones(1, dtype=np.float32)
    y = runtime.xp().empty(1, dtype=np.float32)
    x_numba = cuda.as_cuda_array(x, sync=False) if gpu else cuda.to_device(np.ones(1, dtype=np.float32))
    world = "CuPy" if gpu else "NumPy"
    calls = [
        (f"empty kernel, a {world} array argument", "array", lambda: empty_kernel[1, 32](x)),
        ("empty kernel, a Numba device array argument", "numba", lambda: empty_kernel[1, 32](x_numba)),
        (f"kernels.copy of 1 element ({world} arrays)", "launcher", lambda: memory.copy(x, y)),
    ]
    rows = []
    for label, kind, fn in calls:
        res = timing.benchmark(fn, warmup=2, repeat=repeat, label=label)
        rows.append({"label": label, "kind": kind, "seconds": res.median, "spread": res.spread, "clock": res.clock})
    return {"rows": rows, "seconds": rows[-1]["seconds"], "mode": runtime.mode()}


def _floor_rows(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {r["kind"]: r for r in (report.get("launch") or {}).get("rows", [])}


def floor_line(report: dict[str, Any]) -> str:
    """One sentence: each launch's cost on this machine, and below how many elements a copy is mostly launch.

    The element count is where the floor equals the time to move a copy's 8 bytes per element at the best copy
    bandwidth the report measured at its largest size (the copy kernel's or the library's), else the spec sheet's.
    """
    rows = _floor_rows(report)
    first = "launcher" if "launcher" in rows else "array"
    if first not in rows:
        return ""
    us = {k: r["seconds"] * 1e6 for k, r in rows.items()}
    world = "CuPy" if report.get("mode") == "gpu" else "NumPy"
    line = (
        f"each call costs about {us[first]:,.0f} us on this machine before any work, timed as the cases are ("
        + ("kernels.copy of 1 element; " if first == "launcher" else "")
        + (f"an empty kernel given a {world} array {us['array']:,.0f} us" if "array" in us else "")
        + (f", given a Numba device array {us['numba']:,.0f} us" if "numba" in us else "")
        + ")"
    )
    if report.get("mode") != "gpu":
        return line + ": simulator timings, not a GPU's"
    copies = [r for r in report.get("rows", []) if r["kernel"] == "copy"]
    gbps, where = 0.0, ""
    if copies:
        big = max(copies, key=lambda r: r["size"])
        gbps, where = max(big["value"], big["baseline_value"]), f"the best copy rate measured at n={big['size']:,}"
    elif report.get("peak"):
        gbps, where = float(report["peak"]["dram_gbps"]), "the spec sheet's DRAM bandwidth"
    if gbps <= 0:
        return line
    n = rows[first]["seconds"] * gbps * 1e9 / 8
    return line + f": below about {n:,.0f} elements a copy's time is mostly launch ({gbps:,.0f} GB/s, {where})"


def launch_rows(report: dict[str, Any]) -> list[dict[str, Any]]:
    """Section ``launch`` (lessons 02 and 05 say it next to recorded figures): ``{"label", "seconds", "kind"}``."""
    return [{"label": r["label"], "seconds": r["seconds"], "kind": r["kind"]} for r in _floor_rows(report).values()]


def measured_note() -> str:
    """For a lesson that times kernels in this run (gpu mode): what one launch costs here, which every time includes."""
    floor = measure_floor()
    if not runtime.is_gpu():
        return "(Simulator: these timings are the CPU's, launch included.)"
    return (
        f"Every time includes its launches from Python: a launcher's call on one element (kernels.copy) takes about "
        f"{floor['seconds'] * 1e6:,.0f} us here, so at small n the figures mostly measure the launch."
    )


def _seconds(row: dict[str, Any]) -> float:
    return float(row["seconds"]) if "seconds" in row else float(row["work"]) / (float(row["value"]) * 1e9)


def recorded_note(rec: Any) -> str:
    """For a lesson that shows a recording of ``bench kernels`` (:class:`gpulab.results.Recording`): one sentence on
    what one launch cost on that machine, from its ``launch`` section, or else estimated from its copy kernel's
    times at its smallest and largest size (time = fixed cost + bytes / bandwidth)."""
    head = "Each figure is the bytes moved over the time of one call, its launch included: "
    floor = {r["kind"]: r["seconds"] for r in rec.sections.get("launch", [])}
    kind = "launcher" if "launcher" in floor else "array"
    if kind in floor:
        what = "a launcher's call on one element (kernels.copy)" if kind == "launcher" else "an empty kernel"
        return head + (
            f"{what} took about {floor[kind] * 1e6:,.0f} us per call there, so a figure at small n mostly measures "
            "the launch."
        )
    copies = sorted((r for r in rec.sections.get("kernels", []) if r.get("kernel") == "copy"), key=lambda r: r["size"])
    if len(copies) >= 2 and copies[-1]["size"] > copies[0]["size"]:
        small, big = copies[0], copies[-1]
        t_small, t_big = _seconds(small), _seconds(big)
        per_element = max(t_big - t_small, 0.0) / (big["size"] - small["size"])
        fixed = max(t_small - per_element * small["size"], 0.0)
        share = "most" if fixed > t_big / 2 else "part"
        return head + (
            f"there the copy kernel took {t_small * 1e6:,.0f} us at n={small['size']:,} and {t_big * 1e6:,.0f} us at "
            f"n={big['size']:,}, {big['size'] // small['size']}x the bytes, so {share} of each call (about "
            f"{fixed * 1e6:,.0f} us) was the launch's fixed cost, not memory traffic."
        )
    return head + "at small n a figure mostly measures the launch."
