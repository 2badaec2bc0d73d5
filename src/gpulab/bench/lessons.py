"""``python -m gpulab bench lessons``: the GPU figures lessons 00, 02, 06, 07, 09, 11 and 12 show from a recording.

In simulator mode those lessons cannot measure a GPU, so they read ``gpulab.results.latest(section)`` for the
sections ``why_gpus``, ``streams``, ``matmul_precision``, ``conv``, ``cnn_training``, ``gemm_shapes``, ``energy`` and
``attention``.
This suite measures each one with the same code paths the lessons use in gpu mode and, with ``--record``
(gpu mode only), stores the rows in the schema :data:`gpulab.results.SECTIONS` declares. ``make gpu-check`` runs it.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any
from collections.abc import Callable

import numpy as np

from .. import runtime, timing
from ..errors import UsageError
from ..nn.io import prepare_output_file
from ..timing import device_name
from . import failure
from .kernels import SIMULATOR_LABEL

__all__ = ["attention_rows", "cnn_training_rows", "conv_rows", "main", "measure", "why_gpus_rows"]

# Sizes per mode: gpu sizes fit the gpu-check budget; simulator sizes only exercise the code.
SIZES: dict[str, dict[str, Any]] = {
    "gpu": {
        "why_gpus_n": 4096,
        "precision_n": 8192,
        "conv": (64, 32, 28, 28, 64),
        "cnn_train": 10000,
        "cnn_cpu_train": 2000,
        "cnn_test": 2000,
        "cnn_epochs": 2,
        "attention": (4096, 64),
        "repeat": 10,
    },
    "simulator": {
        "why_gpus_n": 64,
        "precision_n": 0,
        "conv": (1, 2, 6, 6, 2),
        "cnn_train": 128,
        "cnn_cpu_train": 128,
        "cnn_test": 64,
        "cnn_epochs": 1,
        "attention": (16, 8),
        "repeat": 1,
    },
}


def why_gpus_rows(n: int, *, repeat: int = 10, xp: Any = None) -> list[dict[str, Any]]:
    """Section ``why_gpus`` (lesson 00's GPU bars): an n x n float32 and float16 matmul, ``{"label", "gflops"}``.

    ``xp`` defaults to CuPy (cuBLAS; FP16 runs on tensor cores). With ``xp=numpy`` the rows are labelled as
    CPU NumPy figures (used by the tests; never recorded). Each product is checked before it is timed.
    """
    if xp is None:
        from ..interop import require_cupy

        xp = require_cupy()
    on_gpu = xp.__name__ == "cupy"
    names = ("GPU FP32 cuBLAS", "GPU FP16 tensor cores") if on_gpu else ("NumPy FP32 (CPU)", "NumPy FP16 (CPU)")
    rng = np.random.default_rng(0)
    a = xp.asarray(rng.standard_normal((n, n)), dtype=xp.float32)
    b = xp.asarray(rng.standard_normal((n, n)), dtype=xp.float32)
    c32 = a @ b
    m = min(n, 64)
    ref = a[:m].astype(xp.float64) @ b[:, :m].astype(xp.float64)
    if not bool(xp.allclose(c32[:m, :m], ref, rtol=1e-3, atol=1e-2)):
        raise AssertionError("why_gpus: the FP32 product disagrees with a float64 reference")
    a16, b16 = a.astype(xp.float16), b.astype(xp.float16)
    rel = float(xp.linalg.norm((a16 @ b16).astype(xp.float32) - c32) / xp.linalg.norm(c32))
    if rel > 5e-2:
        raise AssertionError(f"why_gpus: the FP16 product is off by {rel:.2e} (relative); expected under 5e-2")
    rows = []
    for name, (x, y) in zip(names, ((a, b), (a16, b16))):
        res = timing.benchmark(xp.matmul, x, y, warmup=1, repeat=repeat, label=name)
        rows.append(
            {
                "label": f"{name} (n={n})",
                "gflops": 2.0 * n**3 / res.median / 1e9,
                "n": n,
                "seconds": res.median,
                "dtype": str(x.dtype),
            }
        )
    rows[1]["rel_error_vs_fp32"] = rel
    return rows


def conv_rows(
    shape: tuple[int, int, int, int, int], *, k: int = 3, stride: int = 1, pad: int = 1, repeat: int = 10
) -> list[dict[str, Any]]:
    """Section ``conv`` (lesson 07): direct kernel vs im2col + the lab GEMM vs im2col + the library matmul.

    ``shape`` is ``(N, C, H, W, F)``. Rows ``{"name", "gflops", "seconds", ...}``; every output is checked
    against :func:`gpulab.kernels.conv.conv2d_reference` first.
    """
    from ..kernels import conv, nn_ops

    n, c, h, w, f = shape
    rng = np.random.default_rng(0)
    x_h = rng.standard_normal((n, c, h, w)).astype(np.float32)
    w_h = (rng.standard_normal((f, c, k, k)) / np.sqrt(c * k * k)).astype(np.float32)
    b_h = rng.standard_normal(f).astype(np.float32)
    x, wt, b = runtime.to_device(x_h), runtime.to_device(w_h), runtime.to_device(b_h)
    wmat = runtime.to_device(np.ascontiguousarray(w_h.transpose(0, 2, 3, 1).reshape(f, -1).T))  # (k*k*C, F)
    ref = conv.conv2d_reference(x_h, w_h, b_h, stride, pad)
    flops = conv.conv2d_flops(x_h.shape, w_h.shape, stride, pad)
    xp = runtime.array_module(x)

    def im2col_gemm(gemm: Callable[[Any, Any], Any]) -> Any:
        cols, _, _ = nn_ops.im2col(x, k, k, stride, pad)
        return gemm(cols, wmat)

    def as_nchw(y: Any) -> np.ndarray:
        ho, wo = ref.shape[2:]
        return runtime.to_host(y).reshape(n, ho, wo, f).transpose(0, 3, 1, 2) + b_h[None, :, None, None]

    library = "im2col + cuBLAS" if runtime.is_gpu() else "im2col + NumPy matmul (CPU)"
    cases = [
        ("direct kernel", lambda: conv.conv2d_direct(x, wt, b, stride=stride, pad=pad), runtime.to_host),
        ("im2col + lab GEMM", lambda: im2col_gemm(nn_ops.gemm), as_nchw),
        (library, lambda: im2col_gemm(xp.matmul), as_nchw),
    ]
    rows = []
    for name, fn, out in cases:
        np.testing.assert_allclose(out(fn()), ref, rtol=1e-3, atol=1e-3, err_msg=f"conv: {name} is wrong")
        res = timing.benchmark(fn, warmup=1, repeat=repeat, label=name)
        rows.append(
            {
                "name": name,
                "gflops": flops / res.median / 1e9,
                "seconds": res.median,
                "shape": [n, c, h, w, f],
                "k": k,
                "flops": flops,
            }
        )
    return rows


def attention_rows(n: int, d: int, *, repeat: int = 10) -> list[dict[str, Any]]:
    """Section ``attention`` (lesson 12): causal self-attention of ``n`` tokens of width ``d``, float32, timed by
    :func:`gpulab.transformer.flash.benchmark_attention` (the fused kernel, the unfused kernels and CuPy; each
    checked against the float64 reference first). Rows ``{"label", "seconds", "gflops", "n", "d"}`` and, in gpu
    mode, ``sms`` and ``threads_per_sm`` where the GPU's can be read, else ``slots_unread`` (why not, from
    :func:`gpu_slots`); GFLOP/s count the work a causal mask leaves (:func:`gpulab.transformer.attention.
    attention_costs`, fused path)."""
    from ..transformer import attention, flash
    from ..transformer.flash_times import gpu_slots

    flops = attention.attention_costs(n, d, causal=True).total("fused")[0]
    rows = flash.benchmark_attention(n, d, causal=True, repeat=repeat)
    extra: dict[str, Any] = {}  # for lesson 12's reading of a recording: how full the GPU was, or why that is unknown
    if runtime.is_gpu():
        slots = gpu_slots()
        extra = {"slots_unread": slots} if isinstance(slots, str) else {"sms": slots[0], "threads_per_sm": slots[1]}
    return [
        {
            "label": r["path"] if runtime.is_gpu() else f"simulator mode: {r['path']}",
            "seconds": r["seconds"],
            "gflops": flops / r["seconds"] / 1e9,
            "n": n,
            "d": d,
            **extra,
        }
        for r in rows
    ]


_BACKEND_LABELS = {"numpy": "CPU (NumPy)", "cupy": "GPU (cupy)", "kernels": "GPU (kernels)"}


def cnn_training_rows(
    dataset: Any,
    backends: list[str],
    *,
    n_train: int,
    n_test: int,
    epochs: int,
    batch_size: int = 128,
    channels: tuple[int, int] = (32, 64),
    hidden: int = 128,
    cpu_train: int | None = None,
) -> list[dict[str, Any]]:
    """Section ``cnn_training`` (lesson 09): a short real training run of lesson 09's CNN per backend.

    Rows ``{"backend", "images_per_second", "test_accuracy", ...}``; images/s is the median of the last
    two epochs, as lesson 09 reports it. ``cpu_train`` images (default ``n_train``) for the numpy backend.
    """
    from .. import nn, train

    rows = []
    size = int(dataset.x_train.shape[-1])
    for backend in backends:
        nt = min(cpu_train or n_train, n_train) if backend == "numpy" else n_train
        data = dataset.subset(min(nt, len(dataset.y_train)), min(n_test, len(dataset.y_test)))
        model = nn.mnist_cnn(seed=0, image_size=size, channels=channels, hidden=hidden, backend=backend)
        h = train.fit(model, data, epochs=epochs, batch_size=batch_size, progress=False)
        label = _BACKEND_LABELS[backend] if runtime.is_gpu() or backend == "numpy" else f"simulator ({backend})"
        rows.append(
            {
                "backend": label,
                "images_per_second": float(np.median(h.images_per_second[-2:])),
                "test_accuracy": float(h.test_accuracy[-1]),
                "epochs": epochs,
                "n_train": int(len(data.y_train)),
                "batch_size": batch_size,
                "dataset": data.name,
            }
        )
    return rows


def _dataset(log: Callable[[str], None] = print) -> tuple[Any, str]:
    """Lesson 09's data and, when there is none, why: MNIST from disk (GPULAB_DATA_DIR, the cache, system
    folders), else MNIST downloaded (bounded in time), else scikit-learn's bundled digits.

    Returns ``(dataset, "")`` or ``(None, reason)``: offline and without scikit-learn there is no data,
    and the caller skips the section with that reason instead of failing the whole suite.
    """
    from .. import data

    reasons = []
    for what, load in (
        ("MNIST on disk", lambda: data.load("mnist", download=False)),
        ("MNIST download", lambda: data.load("mnist", download=True)),
        ("digits (scikit-learn)", lambda: data.load("digits", size=28)),
    ):
        try:
            return load(), ""
        except data.DatasetError as exc:
            reasons.append(f"{what}: {str(exc).splitlines()[-1] if what != 'MNIST on disk' else 'not found'}")
            if what == "MNIST on disk":
                log("  cnn_training: MNIST not found on disk; trying to download it")
    return None, (
        "no data: " + "; ".join(reasons) + ". Set GPULAB_DATA_DIR to a folder with the MNIST IDX "
        "files, or install scikit-learn (pip install scikit-learn)."
    )


def measure(
    only: list[str] | None = None,
    log: Callable[[str], None] = print,
    *,
    on_section: Callable[[str, list[dict[str, Any]]], None] | None = None,
    failed: dict[str, str] | None = None,
) -> dict[str, list[dict[str, Any]]]:
    """Every section of this suite (or ``only`` those), sized for the current mode; ``{section: rows}``.

    A section that raises is left out and its error goes into ``failed`` (``{section: "Error: message"}``);
    the other sections still run. ``on_section(section, rows)`` is called as each one is done, so a run cut
    off later (gpu-check's stage limit) keeps what it measured."""
    gpu = runtime.is_gpu()
    sz = SIZES[runtime.mode()]
    out: dict[str, list[dict[str, Any]]] = {}
    want = only or list(SECTIONS)

    def section(name: str, make: Callable[[], list[dict[str, Any]]]) -> None:
        try:
            rows = make()
        except Exception as exc:  # noqa: BLE001 - one failing section must not lose the others
            error = failure(exc)
            if failed is not None:
                failed[name] = error
            log(f"  {name:<17} FAILED: {error.splitlines()[0] if error else ''}")
            return
        out[name] = rows
        for r in rows:
            log(
                f"  {name:<17} "
                + ", ".join(
                    f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}"
                    for k, v in r.items()
                    if not isinstance(v, list)
                )
            )
        if on_section is not None:
            on_section(name, rows)

    for name in ("why_gpus", "matmul_precision"):
        if name in want and not gpu:
            log(f"  {name:<17} skipped: it times cuBLAS through CuPy, which needs gpu mode")
    if "why_gpus" in want and gpu:
        section("why_gpus", lambda: why_gpus_rows(sz["why_gpus_n"], repeat=sz["repeat"]))
    if "matmul_precision" in want and gpu:
        from ..interop import precision_benchmark

        section("matmul_precision", lambda: precision_benchmark(sz["precision_n"]))
    if "streams" in want and not gpu:
        log(
            "  streams           skipped: the simulator runs every copy and kernel at once and times nothing; "
            "pinned copies and streams need gpu mode"
        )
    elif "streams" in want:  # lesson 02: pageable vs pinned copies, 1 vs 4 streams (gpulab.bench.streams)
        from .streams import SIZES as STREAM_SIZES
        from .streams import streams_rows

        section("streams", lambda: streams_rows(**STREAM_SIZES["gpu"]))
    if "conv" in want:
        section("conv", lambda: conv_rows(sz["conv"], repeat=sz["repeat"]))
    dataset, why = _dataset(log) if "cnn_training" in want else (None, "")
    if "cnn_training" in want and dataset is None:
        log(f"  cnn_training      skipped: {why}")
    elif "cnn_training" in want:
        channels, hidden, batch = ((32, 64), 128, 128) if gpu else ((4, 8), 16, 32)
        section(
            "cnn_training",
            lambda: cnn_training_rows(
                dataset,
                ["numpy", "cupy", "kernels"] if gpu else ["numpy"],
                n_train=sz["cnn_train"],
                n_test=sz["cnn_test"],
                epochs=sz["cnn_epochs"],
                batch_size=batch,
                channels=channels,
                hidden=hidden,
                cpu_train=sz["cnn_cpu_train"],
            ),
        )
    if "gemm_shapes" in want:  # lesson 09: the weight gradients' products per kernel (gpulab.bench.gemm_shapes)
        from .gemm_shapes import gemm_shapes_rows

        section("gemm_shapes", gemm_shapes_rows)
    if "energy" in want:  # lesson 11: NVML joules in gpu mode (gpulab.bench.energy)
        from .energy import energy_rows

        section("energy", lambda: energy_rows(dataset=dataset))
    if "attention" in want:  # lesson 12
        section("attention", lambda: attention_rows(*sz["attention"], repeat=sz["repeat"]))
    return out


SECTIONS = ("why_gpus", "matmul_precision", "streams", "conv", "cnn_training", "gemm_shapes", "energy", "attention")


def configure(p: argparse.ArgumentParser) -> None:
    """``gpulab bench lessons`` arguments."""
    p.add_argument(
        "--only",
        nargs="+",
        choices=SECTIONS,
        help="only these sections (default: all; why_gpus, matmul_precision and streams need gpu mode)",
    )
    p.add_argument("--json", type=Path, help="write {section: rows} as JSON to this file")
    p.add_argument(
        "--record", action="store_true", help="store the sections in the user's recorded results (gpu mode only)"
    )


def run(ns: argparse.Namespace) -> int:
    """Measure the lessons' sections; UsageError for --record outside gpu mode or an unwritable --json."""
    if ns.record and not runtime.is_gpu():
        raise UsageError(
            "--record needs gpu mode. Simulator timings are CPU timings, not GPU results, so they "
            "are never recorded. Run on a machine with a CUDA GPU (GPULAB_DEVICE=gpu)."
        )
    if ns.json is not None:
        prepare_output_file(ns.json, "--json", example="lessons.json")
    dev = device_name()
    print(
        f"gpulab bench lessons: {dev} ({runtime.mode()} mode)" + ("" if runtime.is_gpu() else f" - {SIMULATOR_LABEL}")
    )
    done: dict[str, list[dict[str, Any]]] = {}
    failed: dict[str, str] = {}

    def keep(section: str, rows: list[dict[str, Any]]) -> None:
        """Write and record each section as soon as it is measured: a run stopped later keeps it."""
        done[section] = rows
        if ns.json:
            _write_json(ns.json, {"device": dev, "mode": runtime.mode(), "sections": done, "failed": failed})
        if ns.record:
            from .. import results

            print(f"recorded {results.record(section, rows, dev, source='gpulab bench lessons')}")

    measure(ns.only, on_section=keep, failed=failed)
    if ns.json:
        _write_json(ns.json, {"device": dev, "mode": runtime.mode(), "sections": done, "failed": failed})
        print(f"wrote {ns.json}")
    if failed:
        print(f"gpulab bench lessons: {len(failed)} section(s) FAILED: {', '.join(failed)}")
        return 1
    return 0


def _write_json(path: Path, doc: dict[str, Any]) -> None:
    """Write ``doc`` beside ``path`` and rename it over ``path``: a run stopped mid-write (gpu-check's deadline)
    leaves the previous complete file, never half of one."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(doc, indent=1) + "\n")
    os.replace(tmp, path)


def main(argv: list[str] | None = None) -> int:
    """``gpulab bench lessons ...`` for callers that pass a list."""
    from ..cli import main as cli_main

    return cli_main(["bench", "lessons", *(sys.argv[1:] if argv is None else argv)])


if __name__ == "__main__":
    sys.exit(main())
