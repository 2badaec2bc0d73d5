"""The timed runs behind ``python -m gpulab bench cnn``: the same CNN, batches and optimizer in gpulab (any
backend, or a learner's ops) and in PyTorch, each ready to time a few training steps at a time, and the
alternation that makes both see the same load. The command itself is :mod:`gpulab.bench.cnn`.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from .. import nn, runtime
from ..nn.ops import label_range, labels_within, to_backend

__all__ = ["interleaved", "measure_gpulab", "measure_torch"]


def _batches(n: int, batch: int, size: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.random((n, batch, 1, size, size), dtype=np.float32)
    y = rng.integers(0, 10, (n, batch)).astype(np.int64)
    return x, y


class _GpulabRun:
    """A gpulab model, optimizer and batches, ready to time ``steps(k)`` at a time."""

    def __init__(
        self,
        backend: str,
        *,
        batch: int,
        size: int,
        channels: tuple[int, int],
        hidden: int,
        batches: int,
        seed: int = 0,
        workers: int = 1,
        ops: Any = None,
    ) -> None:
        self.backend = backend
        self.model = nn.mnist_cnn(seed=seed, image_size=size, channels=channels, hidden=hidden, backend=backend)
        if ops is not None:
            self.model.use_ops(ops)
        self.parallel = nn.DataParallel(self.model, workers, seed=seed) if workers > 1 else None
        self.opt, self.loss_fn = nn.Adam(self.model), nn.SoftmaxCrossEntropy()
        x, y = _batches(batches, batch, size, seed)
        self.x, self.y = to_backend(x, backend), to_backend(y, backend)  # the one rule for where arrays live
        self.labels = (*label_range(self.y), "the benchmark's labels")  # read once, not in every step
        self.i = 0

    def steps(self, k: int) -> float:
        """Seconds for ``k`` training steps (synchronized before and after). No step reads anything back from a GPU
        (the labels' range is known, the loss stays on the device), as PyTorch's steps here read nothing either."""
        with _blas_threads(1 if self.parallel is not None else None), labels_within(*self.labels):
            runtime.synchronize()
            t0 = time.perf_counter()
            for _ in range(k):
                j = self.i % len(self.x)
                nn.train_step(self.model, self.loss_fn, self.opt, self.x[j], self.y[j], self.parallel)
                self.i += 1
            runtime.synchronize()
            return time.perf_counter() - t0

    def close(self) -> None:
        if self.parallel is not None:
            self.parallel.close()


def _full_fp32(torch: Any) -> None:
    """Full FP32 products in PyTorch, as gpulab's kernels and CuPy compute here: PyTorch's cuDNN convolutions
    default to TF32 tensor cores on Ampere and newer (``torch.backends.cudnn.allow_tf32`` is True by default).
    PyTorch 2.9 and newer name this ``fp32_precision = "ieee"`` (the ``allow_tf32`` flags are deprecated there, and
    the two APIs are not to be mixed); older versions have only the flags."""
    cudnn_conv = getattr(torch.backends.cudnn, "conv", None)
    if cudnn_conv is not None and hasattr(cudnn_conv, "fp32_precision"):
        cudnn_conv.fp32_precision = "ieee"
        torch.backends.cuda.matmul.fp32_precision = "ieee"
    else:
        torch.backends.cudnn.allow_tf32 = False
        torch.backends.cuda.matmul.allow_tf32 = False


class _TorchRun:
    """The same model, batches and optimizer in PyTorch (eager mode), ready to time ``steps(k)``."""

    def __init__(
        self,
        *,
        batch: int,
        size: int,
        channels: tuple[int, int],
        hidden: int,
        batches: int,
        threads: int,
        device: str = "cpu",
        seed: int = 0,
    ) -> None:
        import torch

        self.torch, self.threads = torch, threads
        torch.set_num_threads(threads)
        _full_fp32(torch)
        torch.manual_seed(seed)
        c1, c2 = channels
        s = size // 4
        self.model = torch.nn.Sequential(
            torch.nn.Conv2d(1, c1, 3, padding=1),
            torch.nn.ReLU(),
            torch.nn.MaxPool2d(2),
            torch.nn.Conv2d(c1, c2, 3, padding=1),
            torch.nn.ReLU(),
            torch.nn.MaxPool2d(2),
            torch.nn.Flatten(),
            torch.nn.Linear(c2 * s * s, hidden),
            torch.nn.ReLU(),
            torch.nn.Dropout(0.25),
            torch.nn.Linear(hidden, 10),
        ).to(device)
        self.opt = torch.optim.Adam(self.model.parameters(), lr=1e-3)
        self.loss_fn = torch.nn.CrossEntropyLoss()
        xs, ys = _batches(batches, batch, size, seed)
        self.x, self.y = torch.from_numpy(xs).to(device), torch.from_numpy(ys).to(device)
        self.sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
        self.i = 0

    def steps(self, k: int) -> float:
        self.torch.set_num_threads(self.threads)  # as set for this run, whatever ran in between
        self.sync()
        t0 = time.perf_counter()
        for _ in range(k):
            j = self.i % len(self.x)
            self.opt.zero_grad(set_to_none=True)
            self.loss_fn(self.model(self.x[j]), self.y[j]).backward()
            self.opt.step()
            self.i += 1
        self.sync()
        return time.perf_counter() - t0

    def close(self) -> None:
        pass


def _blas_threads(n: int | None) -> Any:
    """Cap NumPy's BLAS (only: PyTorch's OpenMP pool is left alone) at ``n`` threads inside a ``with``."""
    import contextlib

    if not n:
        return contextlib.nullcontext()
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:
        return contextlib.nullcontext()
    return threadpool_limits(limits=n, user_api="blas")


def measure_gpulab(
    backend: str,
    *,
    batch: int,
    steps: int,
    warmup: int,
    size: int,
    channels: tuple[int, int],
    hidden: int,
    seed: int = 0,
    workers: int = 1,
    ops: Any = None,
) -> dict[str, Any]:
    """Images/s of ``steps`` training steps (forward, backward, Adam) after ``warmup`` steps.

    ``ops`` (an :class:`gpulab.nn.ops.Ops`, e.g. a learner's from :mod:`gpulab.capstone`) replaces the
    backend's own ops; arrays still live where ``backend`` puts them.
    ``workers > 1`` (numpy) splits each batch over that many threads with one BLAS thread each.
    """
    run = _GpulabRun(
        backend,
        batch=batch,
        size=size,
        channels=channels,
        hidden=hidden,
        batches=warmup + steps,
        seed=seed,
        workers=workers,
        ops=ops,
    )
    try:
        return {"name": f"gpulab-{backend}", **_timed(run, warmup, steps, batch), "workers": workers}
    finally:
        run.close()


def measure_torch(
    *,
    batch: int,
    steps: int,
    warmup: int,
    size: int,
    channels: tuple[int, int],
    hidden: int,
    threads: int,
    device: str = "cpu",
    seed: int = 0,
) -> dict[str, Any]:
    """The same model, batches and optimizer in PyTorch (eager mode)."""
    run = _TorchRun(
        batch=batch,
        size=size,
        channels=channels,
        hidden=hidden,
        batches=warmup + steps,
        threads=threads,
        device=device,
        seed=seed,
    )
    return {"name": f"torch-{device}", **_timed(run, warmup, steps, batch), "torch_version": run.torch.__version__}


def _timed(run: Any, warmup: int, steps: int, batch: int) -> dict[str, float]:
    """``warmup`` untimed steps, then ``steps`` timed ones: images per second and seconds."""
    run.steps(warmup)
    seconds = run.steps(steps)
    return {"images_per_second": steps * batch / seconds, "seconds": seconds}


def interleaved(ours: Any, theirs: Any, *, steps: int, warmup: int, chunk: int) -> tuple[float, float]:
    """Seconds of ``steps`` steps each of two runs timed in alternating chunks of ``chunk`` steps.

    On a shared machine the load from other programs changes within seconds; alternating every few
    steps makes both sides see the same load (rounds of a whole measurement each do not).
    """
    ours.steps(warmup)
    theirs.steps(warmup)
    a = b = 0.0
    done = 0
    while done < steps:
        k = min(chunk, steps - done)
        a += ours.steps(k)
        b += theirs.steps(k)
        done += k
    return a, b
