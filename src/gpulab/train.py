"""Training loop, evaluation and the ``python -m gpulab train`` command.

>>> from gpulab import data, nn, train
>>> ds = data.load("mnist")
>>> model = nn.mnist_cnn(seed=0)
>>> history = train.fit(model, ds, epochs=2)
>>> train.evaluate(model, ds.x_test, ds.y_test)["accuracy"]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Callable

import numpy as np

from . import data as _data
from . import nn, runtime

__all__ = ["History", "evaluate", "fit", "limit_threads", "main", "predict", "tune_allocator"]


def tune_allocator() -> bool:
    """Let glibc keep freed memory for reuse instead of returning it to the OS (Linux only).

    Each training step allocates and frees the same large arrays (im2col buffers of tens of MB). By
    default glibc hands blocks that large straight back to the kernel, so every step pays for fresh
    zeroed pages: measured here, ~20 ms of system time per MNIST batch of 128 (about a fifth of the
    step). Raising the mmap and trim thresholds keeps those pages mapped; peak memory is unchanged.
    Returns whether the setting was applied.
    """
    if not sys.platform.startswith("linux"):
        return False
    try:
        import ctypes

        libc = ctypes.CDLL("libc.so.6")
        M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3
        return bool(libc.mallopt(M_MMAP_THRESHOLD, 256 << 20)) and bool(libc.mallopt(M_TRIM_THRESHOLD, 512 << 20))
    except (OSError, AttributeError):  # not glibc (e.g. musl): keep the defaults
        return False


def limit_threads(n: int | None) -> Any:
    """Cap the BLAS/OpenMP threads NumPy uses at ``n`` (needs threadpoolctl; a no-op without it).

    On a busy machine, fewer BLAS threads than cores can be much faster: a BLAS call waits for its
    slowest thread, and a thread that loses its core stalls the whole GEMM.
    """
    if not n:
        return None
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:
        print("threadpoolctl is not installed (pip install threadpoolctl): --threads is ignored for NumPy.", file=sys.stderr)
        return None
    return threadpool_limits(limits=int(n))


@dataclass
class History:
    """Per-epoch numbers from :func:`fit` (lists of equal length) and the run's settings."""

    epoch: list[int] = field(default_factory=list)
    train_loss: list[float] = field(default_factory=list)
    train_accuracy: list[float] = field(default_factory=list)
    test_loss: list[float] = field(default_factory=list)
    test_accuracy: list[float] = field(default_factory=list)
    seconds: list[float] = field(default_factory=list)
    images_per_second: list[float] = field(default_factory=list)

    def as_dict(self) -> dict[str, list]:
        return asdict(self)


def predict(model: nn.Sequential, x: Any, *, batch_size: int = 256) -> Any:
    """Logits (N, classes) in evaluation mode (dropout off), in batches."""
    was = model.training
    model.eval()
    try:
        outs = [model.forward(x[s : s + batch_size]) for s in range(0, x.shape[0], batch_size)]
    finally:
        model.train(was)
    xp = runtime.array_module(*outs) if outs else np
    return xp.concatenate(outs) if outs else np.zeros((0, 0), np.float32)


def evaluate(model: nn.Sequential, x: Any, y: Any, *, batch_size: int = 256) -> dict[str, Any]:
    """``{"loss", "accuracy", "predictions"}`` on (x, y); predictions come back as NumPy."""
    _data.check_images(x, y)
    logits = predict(model, x, batch_size=batch_size)
    loss = nn.SoftmaxCrossEntropy()(logits, y)
    pred = runtime.to_host(logits.argmax(axis=1))
    return {"loss": loss, "accuracy": float((pred == runtime.to_host(y)).mean()), "predictions": pred}


def _to_backend(x: Any, backend: str) -> Any:
    on_device = backend == "cupy" or (backend == "kernels" and runtime.is_gpu())
    return runtime.to_device(x) if on_device else runtime.to_host(x)


def fit(model: nn.Sequential, dataset: _data.Dataset, *, epochs: int = 2, batch_size: int = 128,
        optimizer: Any = None, seed: int = 0, progress: bool = True, live_plot: bool = False,
        evaluate_each_epoch: bool = True, workers: int = 1,
        on_epoch: Callable[[History], None] | None = None) -> History:
    """Train ``model`` on ``dataset`` with Adam (lr 1e-3) unless an optimizer is given.

    The data are moved once to where the model's backend computes (CuPy in gpu mode for ``cupy`` /
    ``kernels``) and indexed per batch there. Shuffling is seeded by ``seed``. ``workers > 1``
    (numpy backend) splits each batch over that many CPU threads (:class:`gpulab.nn.DataParallel`),
    with one BLAS thread each.
    """
    if epochs < 1:
        raise ValueError(f"epochs must be at least 1, got {epochs}.")
    if workers > 1:
        with limit_threads(1) or _nullcontext():
            return _fit(model, dataset, epochs, batch_size, optimizer, seed, progress, live_plot,
                        evaluate_each_epoch, workers, on_epoch)
    return _fit(model, dataset, epochs, batch_size, optimizer, seed, progress, live_plot, evaluate_each_epoch,
                workers, on_epoch)


class _nullcontext:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: Any) -> None:
        return None


def _fit(model: nn.Sequential, dataset: _data.Dataset, epochs: int, batch_size: int, optimizer: Any, seed: int,
         progress: bool, live_plot: bool, evaluate_each_epoch: bool, workers: int,
         on_epoch: Callable[[History], None] | None) -> History:
    _data.check_images(dataset.x_train, dataset.y_train)
    optimizer = optimizer or nn.Adam(model, lr=1e-3)
    loss_fn = nn.SoftmaxCrossEntropy()
    loss_fn.ops = model.ops
    rng = np.random.default_rng(seed)
    xtr, ytr = _to_backend(dataset.x_train, model.backend), _to_backend(dataset.y_train, model.backend)
    xte, yte = _to_backend(dataset.x_test, model.backend), _to_backend(dataset.y_test, model.backend)
    history = History()
    fig = handle = None
    if live_plot:
        from .viz.training import training_curves

        fig = training_curves(history)
        try:
            from IPython.display import display

            handle = display(fig, display_id=True)  # redrawn in place after each epoch
        except ImportError:  # pragma: no cover - plain Python: no live figure
            fig = None
    parallel = nn.DataParallel(model, workers, seed=seed) if workers > 1 else None
    n = xtr.shape[0]
    steps = -(-n // batch_size)
    for epoch in range(1, epochs + 1):
        model.train()
        t0 = time.perf_counter()
        total_loss = 0.0
        correct = 0
        bar = _progress(steps, f"epoch {epoch}/{epochs}", progress)
        if parallel is not None:
            parallel.train()
        for xb, yb in _data.batches(xtr, ytr, batch_size, shuffle=True, rng=rng):
            if parallel is not None:
                loss, logits = parallel.step(xb, yb)  # forward + backward, batch split over threads
            else:
                logits = model.forward(xb)  # (B, classes)
                loss = loss_fn(logits, yb)
                model.backward(loss_fn.backward())
            optimizer.step()
            total_loss += loss * xb.shape[0]
            correct += int((logits.argmax(axis=1) == yb).sum())
            if bar is not None:
                bar.update(1)
                bar.set_postfix(loss=f"{loss:.4f}", refresh=False)
        runtime.synchronize()
        seconds = time.perf_counter() - t0
        if bar is not None:
            bar.close()
        history.epoch.append(epoch)
        history.train_loss.append(total_loss / n)
        history.train_accuracy.append(correct / n)
        history.seconds.append(seconds)
        history.images_per_second.append(n / seconds)
        if evaluate_each_epoch:
            ev = evaluate(model, xte, yte)
            history.test_loss.append(ev["loss"])
            history.test_accuracy.append(ev["accuracy"])
        if fig is not None:
            from .viz.training import update_training_curves

            update_training_curves(fig, history)
            if handle is not None:
                handle.update(fig)
        if on_epoch is not None:
            on_epoch(history)
    if parallel is not None:
        parallel.close()
    return history


def _progress(total: int, desc: str, enabled: bool):
    if not enabled:
        return None
    from tqdm.auto import tqdm

    return tqdm(total=total, desc=desc, unit="batch", leave=False)


# ------------------------------------------------------------------------------------------- CLI


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m gpulab train", description="Train the lab's CNN and report test accuracy.")
    p.add_argument("--dataset", default="mnist", help="mnist, fashion-mnist or digits (default mnist)")
    p.add_argument("--data-dir", default=None, help="folder with the IDX .gz files (else GPULAB_DATA_DIR, cache, system, download)")
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--backend", default="numpy", choices=nn.BACKENDS)
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--lr", type=float, default=1e-3, help="Adam learning rate")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--limit", type=int, default=None, help="train on the first N training images only")
    p.add_argument("--digits-size", type=int, default=28, choices=(8, 28),
                   help="digits only: native 8x8 images, or upsampled to 28x28 like MNIST (default)")
    p.add_argument("--test-limit", type=int, default=None, help="evaluate on the first N test images only")
    p.add_argument("--no-download", action="store_true", help="never download; fail if the files are not found")
    p.add_argument("--save", default=None, help="save the trained parameters to this .npz file")
    p.add_argument("--json", default=None, help="write history and results to this JSON file")
    p.add_argument("--progress", action="store_true", help="show a tqdm progress bar per epoch")
    p.add_argument("--threads", type=int, default=None, help="cap NumPy's BLAS threads (default: BLAS decides)")
    p.add_argument("--workers", type=int, default=None,
                   help="numpy backend: split each batch over this many CPU threads (data parallel, 1 BLAS thread "
                        "each; default: one per available core, at most 8; results depend slightly on this number)")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    limit_threads(args.threads)
    tune_allocator()
    try:
        ds = _data.load(args.dataset, data_dir=args.data_dir, download=not args.no_download, seed=args.seed,
                        size=args.digits_size)
    except (ValueError, _data.DatasetError) as e:
        print(f"gpulab train: {e}", file=sys.stderr)
        return 2
    if args.limit or args.test_limit:
        ds = ds.subset(args.limit, args.test_limit)
    if args.backend == "kernels" and runtime.is_simulator() and max(len(ds.x_train), len(ds.x_test)) > 256:
        print(f"gpulab train: backend 'kernels' runs the lab's CUDA kernels in the simulator here (no GPU), about "
              f"10,000x slower than a GPU; {len(ds.x_train)} training and {len(ds.x_test)} test images would take "
              "hours. For a correctness run use e.g. --dataset digits --digits-size 8 --limit 16 --test-limit 16; "
              "for speed use --backend numpy.", file=sys.stderr)
        return 2
    try:
        model = nn.mnist_cnn(seed=args.seed, image_size=ds.x_train.shape[-1], backend=args.backend)
    except (ValueError, RuntimeError) as e:
        print(f"gpulab train: {e}", file=sys.stderr)
        return 2
    if args.workers is None:
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
        args.workers = min(cores, 8) if args.backend == "numpy" and not args.threads else 1
    if args.workers > 1 and args.backend != "numpy":
        print(f"gpulab train: --workers splits batches over CPU threads and needs --backend numpy, not {args.backend}.",
              file=sys.stderr)
        return 2
    print(f"{ds}; backend {args.backend}; {model.num_parameters():,} parameters; batch {args.batch_size}; "
          f"workers {args.workers}; mode {runtime.mode()}")
    t0 = time.perf_counter()

    def report(h: History) -> None:
        i = -1
        print(f"epoch {h.epoch[i]}: train loss {h.train_loss[i]:.4f}, train accuracy {h.train_accuracy[i]:.4f}, "
              f"test accuracy {h.test_accuracy[i]:.4f}, {h.seconds[i]:.1f} s ({h.images_per_second[i]:.0f} images/s)",
              flush=True)

    history = fit(model, ds, epochs=args.epochs, batch_size=args.batch_size, optimizer=nn.Adam(model, lr=args.lr),
                  seed=args.seed, progress=args.progress, workers=args.workers, on_epoch=report)
    wall = time.perf_counter() - t0
    acc = history.test_accuracy[-1]
    if args.save:
        print(f"saved parameters to {nn.save(model, args.save)}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"dataset": ds.name, "backend": args.backend, "epochs": args.epochs, "batch_size": args.batch_size,
                       "seed": args.seed, "mode": runtime.mode(), "workers": args.workers, "threads": args.threads,
                       "cpu_count": os.cpu_count(), "wall_seconds": wall,
                       "test_accuracy": acc, "history": history.as_dict()}, f, indent=2)
    print(f"training time: {wall:.1f} s")
    print(f"test accuracy: {acc:.4f}")
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
