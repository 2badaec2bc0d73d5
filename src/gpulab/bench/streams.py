"""Section ``streams`` of ``python -m gpulab bench lessons`` (lesson 02, "Feeding the GPU"): copies and streams.

In gpu mode :func:`streams_rows` measures what lesson 02's measure cell measures: host-to-device bandwidth from a
pageable and from a pinned array and device-to-host into a pinned array (each copy into an array allocated before the
timing, so only the copy is timed), and the reference :func:`gpulab.lessons.pipelined.pipelined_saxpy` on pinned
arrays with 1 and with 4 streams (each stream's device buffers allocated once, before its loop), plus the same
pipeline allocating its device arrays inside the loop (:func:`_allocating`, the pattern the lesson warns against:
CUDA's "implicit synchronization" keeps two streams' commands from running concurrently when a device allocation is
issued between them, and the arrays the loop drops are freed, which waits for the GPU; the rows side by side show
what that costs on the GPU measured). It also times one chunk's copy in, kernel and copy out (:func:`chunk_times`)
and gives what the model (:func:`gpulab.streams.pipeline_timeline`) predicts from those times
(:func:`model_seconds`): rows of kind ``"model"``, predictions, never measurements; :func:`compare_rows` sets the
measured pipelines against them. A row of kind ``"overlap"`` (:func:`copies_at_once`) times one chunk's copy in and
copy out issued together on two streams, against the two alone: whether the machine runs both directions at once.
``--record`` stores the rows; lesson 02 shows them in simulator mode. ``bench lessons`` skips the section in
simulator mode (the simulator runs every call at once and times nothing); :func:`streams_rows` still runs there (the
tests), its labels saying so.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .. import runtime, timing

__all__ = ["SIZES", "chunk_times", "compare_rows", "copies_at_once", "model_seconds", "overlap_line", "streams_rows"]

# float32 elements: 64 MB per array and 8 chunks of 8 MB on a GPU (a few seconds in all, most of it the kernel's
# compilation and the pinned allocations); the simulator sizes only exercise the code.
SIZES: dict[str, dict[str, int]] = {
    "gpu": {"n": 1 << 24, "chunk": 1 << 21, "streams": 4, "repeat": 5},
    "simulator": {"n": 1024, "chunk": 256, "streams": 4, "repeat": 1},
}
TPB = 128  # threads per block, as pipelined_saxpy launches saxpy


def _copy_engines() -> int | None:
    """The GPU's copy engines (``ASYNC_ENGINE_COUNT``), None in simulator mode."""
    if not runtime.is_gpu():
        return None
    from numba import cuda

    return int(cuda.get_current_device().ASYNC_ENGINE_COUNT)


def _allocating(alpha: Any, x_h: np.ndarray, y_h: np.ndarray, out_h: np.ndarray, chunk: int, n_streams: int) -> None:
    """``pipelined_saxpy`` as lesson 02 no longer teaches it: every chunk allocates its device arrays inside the
    loop (``cuda.to_device`` and ``cuda.device_array``: ``cuMemAlloc`` between the streams' commands) and drops them
    for numba to free (``x_h.size`` a multiple of ``chunk``)."""
    from numba import cuda

    from ..kernels._launch import ceil_div
    from ..kernels.elementwise import saxpy_kernel

    streams = [cuda.stream() for _ in range(n_streams)]
    for k, start in enumerate(range(0, x_h.size, chunk)):
        s = streams[k % n_streams]
        part = slice(start, start + chunk)
        x_d = cuda.to_device(x_h[part], stream=s)
        y_d = cuda.to_device(y_h[part], stream=s)
        out_d = cuda.device_array(chunk, x_h.dtype, stream=s)
        saxpy_kernel[ceil_div(chunk, TPB), TPB, s](alpha, x_d, y_d, out_d)
        out_d.copy_to_host(out_h[part], stream=s)
    cuda.synchronize()


def _row(label: str, kind: str, seconds: float, nbytes: int, **more: Any) -> dict[str, Any]:
    return {
        "label": label,
        "kind": kind,
        "seconds": seconds,
        "bytes": nbytes,
        "gbps": timing.gbps(nbytes, seconds),
        **more,
    }


def streams_rows(n: int, chunk: int, *, streams: int = 4, repeat: int = 5) -> list[dict[str, Any]]:
    """Section ``streams``: rows ``{"label", "kind", "seconds", "bytes", "gbps", ...}``, ``kind`` one of ``"copy"``
    (``n`` float32 between host and device), ``"pipeline"`` (saxpy over ``n`` elements in chunks of ``chunk``:
    ``bytes`` is the 3 arrays moved) or ``"model"`` (the model's prediction from the measured chunk times).

    Times are medians of ``repeat`` calls by :func:`gpulab.timing.benchmark`; every result is checked first.
    Raises ValueError unless ``chunk`` divides ``n`` (the model assumes equal chunks)."""
    from numba import cuda

    from ..lessons.pipelined import pipelined_saxpy

    if chunk < 1 or n < chunk or n % chunk:
        raise ValueError(f"streams_rows needs n a multiple of chunk (equal chunks), got n={n}, chunk={chunk}.")
    pre = "" if runtime.is_gpu() else "simulator mode: "
    bench = timing.benchmark
    alpha, chunks = np.float32(3), n // chunk
    x_h, y_h, out_h = (cuda.pinned_array(n, np.float32) for _ in range(3))
    rng = np.random.default_rng(0)
    x_h[:], y_h[:] = rng.uniform(-1, 1, n), rng.uniform(-1, 1, n)
    x_page = np.array(x_h)  # the same values in ordinary (pageable) memory
    x_d = cuda.device_array(n, np.float32)
    page = bench(x_d.copy_to_device, x_page, repeat=repeat, label="pageable -> device")
    pin = bench(x_d.copy_to_device, x_h, repeat=repeat, label="pinned -> device")
    back = bench(x_d.copy_to_host, out_h, repeat=repeat, label="device -> pinned")
    if not np.array_equal(out_h, x_h):
        raise AssertionError("streams: the copy there and back changed the data")
    nbytes = int(x_h.nbytes)
    rows = [
        _row(f"{pre}pageable -> device", "copy", page.median, nbytes),
        _row(f"{pre}pinned -> device", "copy", pin.median, nbytes),
        _row(f"{pre}device -> pinned", "copy", back.median, nbytes),
    ]

    h2d, kern, d2h = chunk_times(x_h, y_h, out_h, chunk, repeat=repeat)
    # no copy engine: no copy runs beside anything, so neither the overlap row nor the model applies
    both = copies_at_once(x_h, out_h, chunk, repeat=repeat) if _copy_engines() != 0 else None

    moved = 3 * nbytes
    cases = [
        ("pipelined saxpy, 1 stream", pipelined_saxpy, 1),
        (f"pipelined saxpy, {streams} streams", pipelined_saxpy, streams),
        (f"pipelined saxpy, {streams} streams, device arrays allocated inside the loop", _allocating, streams),
    ]
    for label, fn, k in cases:
        out_h[:] = np.nan
        res = bench(fn, alpha, x_h, y_h, out_h, chunk, k, repeat=repeat, label=label)
        if not np.allclose(out_h, alpha * x_h + y_h, rtol=1e-6, atol=1e-6):
            raise AssertionError(f"streams: {label} computed a wrong result")
        more: dict[str, Any] = {
            "streams": k,
            "chunks": chunks,
            "chunk_bytes": chunk * 4,
            "allocating": fn is _allocating,
        }
        rows.append(_row(pre + label, "pipeline", res.median, moved, **more))

    if both is not None:
        rows.append(
            _row(
                f"{pre}one chunk's copy in and copy out at once, on two streams",
                "overlap",
                both.median,
                3 * chunk * 4,
                alone_seconds=h2d.median + d2h.median,
                chunk_h2d_seconds=h2d.median,
                chunk_d2h_seconds=d2h.median,
            )
        )
    model = model_seconds(chunks, h2d.median, kern.median, d2h.median, (1, streams))
    engines = _copy_engines()
    per_chunk = {"chunk_h2d_seconds": h2d.median, "chunk_kernel_seconds": kern.median, "chunk_d2h_seconds": d2h.median}
    used = 2 if engines is None or engines >= 2 else 1
    for k, seconds in model.items():
        label = f"{pre}model (gpulab.streams) from the measured chunk times: {k} stream{'s' if k > 1 else ''}"
        more = {"streams": k, "chunks": chunks, "copy_engines": used, "async_engine_count": engines, **per_chunk}
        rows.append(_row(label, "model", seconds, moved, **more))
    return rows


def chunk_times(
    x_h: np.ndarray, y_h: np.ndarray, out_h: np.ndarray, chunk: int, *, repeat: int = 5
) -> tuple[timing.BenchResult, timing.BenchResult, timing.BenchResult]:
    """One chunk of a pipelined saxpy timed one operation at a time, nothing else running: the copy in of its
    ``x`` and ``y`` (the first ``chunk`` elements of the pinned ``x_h``, ``y_h``), the library's ``saxpy_kernel``
    on it, and the copy out into ``out_h`` (checked). The model's inputs (:func:`model_seconds`)."""
    from numba import cuda

    from ..kernels._launch import ceil_div
    from ..kernels.elementwise import saxpy_kernel

    alpha = np.float32(3)
    cx, cy, cout = (cuda.device_array(chunk, np.float32) for _ in range(3))

    def copy_in() -> None:
        cx.copy_to_device(x_h[:chunk])
        cy.copy_to_device(y_h[:chunk])

    bench = timing.benchmark
    h2d = bench(copy_in, repeat=repeat, label="chunk copy in")
    kern = bench(saxpy_kernel[ceil_div(chunk, TPB), TPB], alpha, cx, cy, cout, repeat=repeat, label="chunk kernel")
    d2h = bench(cout.copy_to_host, out_h[:chunk], repeat=repeat, label="chunk copy out")
    if not np.allclose(out_h[:chunk], alpha * x_h[:chunk] + y_h[:chunk], rtol=1e-6, atol=1e-6):
        raise AssertionError("streams: saxpy on one chunk is wrong")
    return h2d, kern, d2h


def copies_at_once(x_h: np.ndarray, out_h: np.ndarray, chunk: int, *, repeat: int = 5) -> timing.BenchResult:
    """One chunk's copy in (its ``x`` and ``y``: two copies from the pinned ``x_h``) on one stream and a copy out
    (into the pinned ``out_h``) on another, issued together: whether this machine runs the two directions at the
    same time, which is most of what the pipeline's streams can save when the kernel is short (the H200 of
    2026-12-04: 4 streams no faster than 1, cause unmeasured). Compare with the two timed alone
    (:func:`chunk_times`): at once about their sum means they did not overlap."""
    from numba import cuda

    cx, cy, cout = (cuda.device_array(chunk, np.float32) for _ in range(3))
    cout.copy_to_device(x_h[:chunk])
    s_in, s_out = cuda.stream(), cuda.stream()

    def both() -> None:
        cx.copy_to_device(x_h[:chunk], stream=s_in)
        cy.copy_to_device(x_h[:chunk], stream=s_in)
        cout.copy_to_host(out_h[:chunk], stream=s_out)

    res = timing.benchmark(both, repeat=repeat, label="copy in and copy out at once")
    if not np.array_equal(out_h[:chunk], x_h[:chunk]):
        raise AssertionError("streams: the copy out at the same time as a copy in changed the data")
    return res


def overlap_line(row: dict[str, Any], tolerance: float = 0.15) -> str:
    """What an ``"overlap"`` row says: one chunk's copy in and copy out at once against the two alone."""
    both, alone = float(row["seconds"]), float(row["alone_seconds"])
    longer = max(float(row["chunk_h2d_seconds"]), float(row["chunk_d2h_seconds"]))
    head = (
        f"one chunk's copy in and copy out: {alone * 1e3:.3f} ms one after the other (each timed alone), "
        f"{both * 1e3:.3f} ms issued together on two streams"
    )
    if both >= (1 - tolerance) * alone:
        return head + ": about their sum, so on this machine the two directions did not run at the same time."
    if both <= (1 + tolerance) * longer:
        return head + ": about the longer one alone, so the two directions ran at the same time."
    return head + ": between the longer one and their sum, so the two directions overlapped in part."


def model_seconds(
    chunks: int, h2d_s: float, kernel_s: float, d2h_s: float, stream_counts: tuple[int, ...] = (1, 4)
) -> dict[int, float]:
    """What the model (:func:`gpulab.streams.pipeline_timeline`) predicts for ``chunks`` equal chunks on each of
    ``stream_counts``, with this GPU's copy engines (2 in simulator mode); empty on a GPU without a copy engine,
    where copies cannot overlap kernels and the model does not apply."""
    from ..streams import pipeline_timeline

    engines = _copy_engines()
    if engines == 0:
        return {}
    used = 2 if engines is None or engines >= 2 else 1  # the model knows 1 or 2 copy engines
    return {
        k: pipeline_timeline(chunks, h2d_s, kernel_s, d2h_s, streams=k, copy_engines=used).total for k in stream_counts
    }


def compare_rows(rows: list[dict[str, Any]]) -> list[str]:
    """:func:`gpulab.streams.compare_with_model` on rows of this section (measured now or recorded): the pipeline
    with buffers allocated before the loop against the model, per stream count. Recordings made before rows had
    ``"allocating"`` are read by their label. Empty when the rows have no model."""
    from ..streams import compare_with_model

    def allocating(r: dict[str, Any]) -> bool:
        return bool(r.get("allocating", "allocated inside the loop" in r["label"]))

    measured = {r["streams"]: r["seconds"] for r in rows if r["kind"] == "pipeline" and not allocating(r)}
    models = [r for r in rows if r["kind"] == "model"]
    if len(models) < 2:
        return []
    m = models[0]
    chunk = (m["chunk_h2d_seconds"], m["chunk_kernel_seconds"], m["chunk_d2h_seconds"])
    lines = compare_with_model(measured, {r["streams"]: r["seconds"] for r in models}, chunk_s=chunk)
    return lines + [overlap_line(r) for r in rows if r["kind"] == "overlap"]  # recorded from 2026-12-04 on
