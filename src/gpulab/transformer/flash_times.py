"""What lesson 12's attention timings say: bytes per second against the memory's peak, and how much of the GPU
the fused kernel's blocks can fill.

The fused kernel moves a fraction of the unfused path's bytes (counted: :func:`gpulab.transformer.flash.
predicted_bytes`), yet on the first GPU it ran on (an H200, 2026-12-04) it took 2.4 ms against the unfused
kernels' 1.3-1.9 ms. Fewer bytes pay only when bytes are what a kernel waits for. :func:`explain` turns measured
times into the figures that show whether they were: each path's counted bytes over its time, as a share of the
device's memory bandwidth (spec sheet), and the fused kernel's threads as a share of what the GPU's
multiprocessors hold at once (read from the device).
"""

from __future__ import annotations

from typing import Any

from .flash import BK, launch_config, predicted_bytes

__all__ = ["explain", "explain_recording", "gpu_slots"]


def gpu_slots() -> tuple[int, int] | str:
    """``(multiprocessors, threads each can hold)`` of the current GPU: its SM count as numba-cuda reads it
    (:func:`gpulab.occupancy.read_device_sms`) and its architecture's threads per SM
    (:func:`gpulab.occupancy.sm_limits`); where either cannot be had, one line saying which and why (what could
    not be read, the error), which :func:`explain` prints in place of the occupancy line. Never raises."""
    from ..errors import one_line
    from ..occupancy import read_device_sms, sm_limits

    sms = read_device_sms()
    if isinstance(sms, str):
        return sms
    try:
        from numba import cuda

        cc = cuda.get_current_device().compute_capability
    except Exception as exc:  # noqa: BLE001 - no device to ask: the line says so instead of the figure
        return f"numba-cuda could not read the GPU's compute capability ({one_line(exc)})"
    try:
        return sms, sm_limits(cc).max_threads_per_sm
    except ValueError as exc:  # an architecture the limits table lacks
        return f"the GPU's threads per SM are unknown: {exc}"


def _find(times: dict[str, float], start: str) -> float | None:
    return next((t for name, t in times.items() if name.lower().startswith(start)), None)


def _bandwidth(device: str) -> tuple[float, str] | None:
    from ..timing import lookup_peak

    peak = lookup_peak(device)
    return None if peak is None else (peak.dram_gbps, peak.name)


def explain(
    times: dict[str, float],
    n: int,
    d: int,
    *,
    device: str,
    causal: bool = True,
    slots: tuple[int, int] | str | None = None,
) -> list[str]:
    """Lines reading measured ``times`` (seconds by path: a name starting with "unfused" or "naive", one starting
    with "fused") for causal attention of ``n`` tokens of width ``d``, float32, on ``device`` (its name as the GPU
    reports it). ``slots``: :func:`gpu_slots`'s answer: the pair gives the occupancy line, a text (why the GPU's
    slots could not be read) is printed in its place; None leaves the line out."""
    pred = predicted_bytes(n, n, d, causal=causal)
    unfused, fused = _find(times, "unfused") or _find(times, "naive"), _find(times, "fused")
    if unfused is None or fused is None or unfused <= 0 or fused <= 0:
        raise ValueError(f"explain needs an unfused (or naive) and a fused time in seconds; got {sorted(times)}.")
    bw = _bandwidth(device)
    lines = []
    rates = {}
    for name, nbytes, t in (("unfused kernels", pred.naive_total, unfused), ("fused kernel", pred.fused, fused)):
        rates[name] = nbytes / t / 1e9
        share = f" = {100 * rates[name] / bw[0]:.0f}% of the {bw[1]}'s {bw[0]:,.0f} GB/s (spec sheet)" if bw else ""
        lines.append(
            f"{name:>16}: {nbytes / 1e6:,.0f} MB (counted) in {t * 1e3:.2f} ms (measured) = {rates[name]:,.0f} GB/s"
            + share
        )
    if bw is None:
        from ..hardware import missing_row_note

        lines.append(f"no share of the memory's bandwidth: {missing_row_note(device)}")
    blocks, (bx, by) = launch_config(n)
    threads = blocks * bx * by
    if isinstance(slots, str):
        lines.append(
            f"fused kernel: {blocks:,} blocks of {bx * by} threads = {threads:,} threads; how many this GPU holds at "
            f"once is not shown: {slots}"
        )
    elif slots is not None:
        sms, per_sm = slots
        lines.append(
            f"fused kernel: {blocks:,} blocks of {bx * by} threads = {threads:,} threads; this GPU's {sms} "
            f"multiprocessors hold {sms * per_sm:,} at once: {100 * threads / (sms * per_sm):.0f}% of them busy at best"
        )
    if causal:
        lines.append(
            f"with the causal mask, block b walks b + 1 tiles of {BK} keys: the last block {blocks} times the first's"
        )
    if fused > unfused:
        worst = max(rates.values()) / bw[0] if bw else None
        lines.append(
            f"-> the fused kernel moved {pred.naive_total / pred.fused:.1f}x fewer bytes and took "
            f"{fused / unfused:.2f}x the time: bytes were not what it waited for"
            + (f" (neither path used more than {100 * worst:.0f}% of the bandwidth)." if worst is not None else ".")
            + " What else can hold it back is counted above and in the kernel: few threads in flight, the diagonal's "
            f"blocks finishing last, each row's {BK} threads computing the same {BK} exponentials per tile, three "
            "barriers per tile. Fewer bytes speed up a kernel that waits on memory."
        )
    else:
        lines.append(
            f"-> the fused kernel moved {pred.naive_total / pred.fused:.1f}x fewer bytes and took "
            f"{fused / unfused:.2f}x the unfused path's time (measured)."
        )
    return lines


def explain_recording(rows: list[dict[str, Any]], device: str) -> list[str]:
    """:func:`explain` for the ``attention`` section of a recording (``python -m gpulab bench lessons``): rows with
    ``label``, ``seconds``, ``n``, ``d`` and, from 2026-12-04 on, ``sms`` and ``threads_per_sm``, or ``slots_unread``
    (why the recording run could not read them). A recording with none of these says it has no SM count."""
    if not rows:
        return []
    first = rows[0]
    slots: tuple[int, int] | str
    if first.get("sms"):
        slots = (int(first["sms"]), int(first["threads_per_sm"]))
    else:
        slots = str(first.get("slots_unread") or "the recording has no SM count (recorded before gpulab read it)")
    times = {str(r["label"]): float(r["seconds"]) for r in rows}
    return explain(times, int(first["n"]), int(first["d"]), device=device, causal=True, slots=slots)
