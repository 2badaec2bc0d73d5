"""Section ``energy`` of ``python -m gpulab bench lessons`` (lesson 11): joules for a matmul and a training epoch.

In gpu mode the GPU's NVML energy counter (or integrated power samples) is read around a CuPy matmul
and one epoch of lesson 09's CNN; ``--record`` stores the rows, which lesson 11 shows in simulator mode.
In simulator mode the same code runs on the CPU at small sizes, with RAPL when readable and otherwise a
labelled estimate (``measured: False``); such rows are never recorded.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .. import energy, runtime

__all__ = ["SIZES", "energy_rows"]

SIZES: dict[str, dict[str, Any]] = {
    "gpu": {"matmul_n": 8192, "min_seconds": 3.0, "cnn_train": 10000, "batch": 128},
    "simulator": {"matmul_n": 128, "min_seconds": 0.2, "cnn_train": 64, "batch": 32},
}


def _row(workload: str, reading: energy.EnergyReading, *, images: int = 0, flops: float = 0.0) -> dict[str, Any]:
    eff = energy.efficiency(reading, images=images or None, flops=flops or None)
    return {
        "workload": workload,
        "joules": reading.joules,
        "seconds": reading.seconds,
        "watts": reading.watts,
        "method": reading.method,
        "measured": reading.measured,
        "calls": reading.calls,
        "images": images * reading.calls,
        "flops": flops * reading.calls,
        "joules_per_image": eff.get("joules_per_image"),
        "images_per_joule": eff.get("images_per_joule"),
        "gflops_per_watt": eff.get("gflops_per_watt"),
    }


def energy_rows(
    matmul_n: int | None = None, cnn_train: int | None = None, *, min_seconds: float | None = None, dataset: Any = None
) -> list[dict[str, Any]]:
    """Two rows: an n x n FP32 matmul repeated for ``min_seconds``, and one training epoch of the course CNN.

    Rows ``{"workload", "joules", "seconds", "watts", "method", "measured", ...}`` plus per-work figures
    (``gflops_per_watt`` for the matmul, ``joules_per_image`` / ``images_per_joule`` for the epoch).
    """
    from .. import nn, train
    from .lessons import _dataset

    sz = SIZES[runtime.mode()]
    n = matmul_n or sz["matmul_n"]
    secs = sz["min_seconds"] if min_seconds is None else min_seconds
    xp = runtime.xp()
    rng = np.random.default_rng(0)
    a = xp.asarray(rng.standard_normal((n, n)), dtype=xp.float32)
    b = xp.asarray(rng.standard_normal((n, n)), dtype=xp.float32)
    c, reading = energy.measure(xp.matmul, a, b, min_seconds=secs, warmup=1)  # cuBLAS set-up outside the window
    m = min(n, 32)
    ref = runtime.to_host(a[:m]).astype(np.float64) @ runtime.to_host(b[:, :m]).astype(np.float64)
    if not np.allclose(runtime.to_host(c[:m, :m]), ref, rtol=1e-3, atol=1e-2):
        raise AssertionError("energy: the matmul disagrees with a float64 reference")
    lib = "cuBLAS" if runtime.is_gpu() else "NumPy, CPU"
    rows = [_row(f"{n}x{n} FP32 matmul ({lib})", reading, flops=2.0 * n**3)]

    ds, why = (dataset, "") if dataset is not None else _dataset()
    if ds is None:  # offline without scikit-learn: the matmul row stands, the epoch is skipped with the reason
        print(f"  energy: the CNN epoch is skipped: {why}")
        return rows
    data = ds.subset(min(cnn_train or sz["cnn_train"], len(ds.y_train)), min(64, len(ds.y_test)))
    if runtime.is_gpu():
        data = data.to_device()  # moved once, so the epoch's energy is training, not the copy
    size = int(data.x_train.shape[-1])
    gpu = runtime.is_gpu()
    model = nn.mnist_cnn(
        seed=0,
        image_size=size,
        channels=(32, 64) if gpu else (4, 8),
        hidden=128 if gpu else 16,
        backend="cupy" if gpu else "numpy",
    )
    train.fit(
        model, data.subset(min(256, len(data.y_train)), 16), epochs=1, batch_size=sz["batch"], progress=False
    )  # warm-up: compile kernels and fill caches before the measured epoch

    def epoch() -> object:
        return train.fit(model, data, epochs=1, batch_size=sz["batch"], progress=False, evaluate_each_epoch=False)

    _, reading = energy.measure(epoch, min_seconds=0)
    rows.append(
        _row(
            f"one epoch of the course CNN ({len(data.y_train)} images, {'cupy' if gpu else 'numpy'} backend)",
            reading,
            images=int(len(data.y_train)),
        )
    )
    return rows
