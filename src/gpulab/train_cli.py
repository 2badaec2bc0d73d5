"""The ``python -m gpulab train`` command: its arguments, the checks made before any long work
(output paths, backend, the simulator time estimate for the ``kernels`` backend), and the run.

The loop itself is :func:`gpulab.train_loop.fit`; both are importable from :mod:`gpulab.train`.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

from . import data as _data
from . import nn, runtime
from .kernels._launch import ceil_div
from .errors import GpulabError, UsageError, int_at_least, positive_float
from .nn.io import prepare_output_file, write_atomically
from .train_loop import History, fit, limit_threads, tune_allocator

__all__ = [
    "build_parser",
    "channels_pair",
    "configure",
    "estimate_kernel_seconds",
    "main",
    "refuse_existing_file",
    "run",
]


def channels_pair(text: str) -> tuple[int, int]:
    """An argparse ``type=``: two whole numbers >= 1 separated by a comma, e.g. ``32,64``."""
    parts = text.split(",")
    try:
        values = tuple(int(p) for p in parts)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected two channel counts like 32,64, got {text!r}") from None
    if len(values) != 2 or min(values) < 1:
        raise argparse.ArgumentTypeError(f"expected two channel counts >= 1 like 32,64, got {text!r}")
    return values


def refuse_existing_file(given: str, target: Path, what: str) -> None:
    """Raise :class:`UsageError` now, before any long work, if ``target`` (the file ``what`` writes after training,
    for the argument ``given``) exists: training never ends by replacing a file the user made."""
    if target.exists():
        raise UsageError(
            f"{what} {given}: {target} already exists and would be replaced after training. Choose another path, "
            "or move the old file away first."
        )


def estimate_kernel_seconds(
    image_shape: tuple[int, ...],
    n_train: int,
    n_test: int,
    *,
    epochs: int,
    batch_size: int,
    channels: tuple[int, int] = (32, 64),
    hidden: int = 128,
) -> float:
    """Seconds the ``kernels`` backend would need in the simulator, from counted work and a measured cost.

    The work: one training step and one evaluation of a single image with :class:`gpulab.nn.cost.WorkMeter`
    (kernel loop iterations per op). The cost: this process's measured seconds per loop iteration of a
    grid-stride kernel and per launch (:func:`gpulab.kernels.nn_ops.simulator_cost`).
    """
    from .kernels import nn_ops
    from .nn.cost import WorkMeter

    size = int(image_shape[-1])
    model = nn.mnist_cnn(image_size=size, channels=channels, hidden=hidden, dropout=0.0)
    meter = WorkMeter()
    model.use_ops(meter)
    x, y = np.zeros((1, *image_shape), np.float32), np.zeros(1, np.int64)
    nn.train_step(model, nn.SoftmaxCrossEntropy(), nn.Adam(model), x, y)
    train_work = meter.total
    meter.work.clear()
    model.eval()
    model.forward(x)
    test_work = meter.total
    launches_per_step = 4 * len(model.layers) + 2 * len(model.parameters())  # forward, backward, update (rough)
    cost = nn_ops.simulator_cost(per_thread=False)
    steps = epochs * ceil_div(n_train, batch_size) + ceil_div(n_test, 256)
    return (
        cost["grid_stride"] * (epochs * n_train * train_work + epochs * n_test * test_work)
        + cost["launch"] * steps * launches_per_step
    )


def configure(p: argparse.ArgumentParser) -> None:
    """Add ``train``'s arguments to ``p`` (values are checked where they enter)."""
    p.add_argument(
        "--dataset", default="mnist", choices=(*_data.DATASETS, "fashion"), help="dataset (default: %(default)s)"
    )
    p.add_argument(
        "--data-dir",
        default=None,
        help="folder with the IDX .gz files (default: GPULAB_DATA_DIR, cache, system folders, download)",
    )
    p.add_argument(
        "--epochs", type=int_at_least(1), default=2, help="passes over the training data (default: %(default)s)"
    )
    p.add_argument(
        "--backend", default="numpy", choices=nn.BACKENDS, help="who does the array work (default: %(default)s)"
    )
    p.add_argument("--batch-size", type=int_at_least(1), default=128, help="images per step (default: %(default)s)")
    p.add_argument("--lr", type=positive_float, default=1e-3, help="Adam learning rate (default: %(default)s)")
    p.add_argument("--seed", type=int_at_least(0), default=0, help="random seed (default: %(default)s)")
    p.add_argument("--limit", type=int_at_least(1), default=None, help="train on the first N training images only")
    p.add_argument("--test-limit", type=int_at_least(1), default=None, help="evaluate on the first N test images only")
    p.add_argument(
        "--digits-size",
        type=int,
        default=28,
        choices=(8, 28),
        help="digits only: native 8x8 images, or upsampled to 28x28 like MNIST (default: %(default)s)",
    )
    p.add_argument(
        "--channels",
        type=channels_pair,
        default=(32, 64),
        help="channels of the two convolutions, e.g. 32,64 (default: 32,64)",
    )
    p.add_argument(
        "--hidden",
        type=int_at_least(1),
        default=128,
        help="hidden units of the first linear layer (default: %(default)s)",
    )
    p.add_argument("--no-download", action="store_true", help="never download; fail if the files are not found")
    p.add_argument(
        "--save", default=None, help="save the trained model and its optimizer's state to this new .npz file"
    )
    p.add_argument("--json", default=None, help="write history and results to this new JSON file")
    p.add_argument("--progress", action="store_true", help="show a tqdm progress bar per epoch")
    p.add_argument(
        "--threads", type=int_at_least(1), default=None, help="cap NumPy's BLAS threads (default: BLAS decides)"
    )
    p.add_argument(
        "--workers",
        type=int_at_least(1),
        default=None,
        help="numpy backend: split each batch over this many CPU threads (data parallel, 1 BLAS thread "
        "each; default: one per available core, at most 8; results depend slightly on this number)",
    )
    p.add_argument(
        "--max-minutes",
        type=positive_float,
        default=10.0,
        help="kernels backend in the simulator: refuse runs estimated to take longer (default: %(default)s)",
    )


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m gpulab train", description="Train the lab's CNN and report test accuracy."
    )
    configure(p)
    return p


def _refuse_slow_kernels(ns: argparse.Namespace, ds: _data.Dataset) -> None:
    if ns.backend != "kernels" or not runtime.is_simulator():
        return
    shape = tuple(ds.x_train.shape[1:])
    seconds = estimate_kernel_seconds(
        shape,
        len(ds.x_train),
        len(ds.x_test),
        epochs=ns.epochs,
        batch_size=ns.batch_size,
        channels=ns.channels,
        hidden=ns.hidden,
    )
    if seconds <= 60 * ns.max_minutes:
        print(f"estimated time with the kernels backend in the simulator: {seconds:.0f} s")
        return
    raise UsageError(
        f"backend 'kernels' runs the course's CUDA kernels in Numba's simulator here (no GPU); training on "
        f"{len(ds.x_train):,} and testing on {len(ds.x_test):,} images of {shape} for {ns.epochs} epoch(s) would "
        f"take about {_human(seconds)} (estimated from the measured simulator cost per kernel loop iteration), "
        f"more than --max-minutes {ns.max_minutes:g}. A run that fits in about a minute: python -m gpulab train "
        "--dataset digits --digits-size 8 --channels 4,8 --hidden 32 --limit 256 --test-limit 128 --epochs 3 "
        "--batch-size 32 --lr 0.01 --backend kernels. For speed use --backend numpy."
    )


def _human(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} minutes"
    return f"{seconds / 3600:.1f} hours"


def run(ns: argparse.Namespace) -> int:
    """Train as ``ns`` says; raises :class:`UsageError` for inputs found bad after parsing."""
    if ns.save and ns.json and nn.checkpoint_path(ns.save).resolve() == Path(ns.json).resolve():
        raise UsageError(
            f"--save {ns.save} and --json {ns.json} name the same file, {Path(ns.json)}; give them different paths."
        )
    for given, what, target, example in (
        (ns.save, "--save", nn.checkpoint_path, "model.npz"),
        (ns.json, "--json", Path, "history.json"),
    ):
        if given:
            prepare_output_file(given, what, example=example)
            refuse_existing_file(given, target(given), what)
    if ns.workers is not None and ns.workers > 1 and ns.backend != "numpy":
        raise UsageError(
            f"--workers {ns.workers} splits batches over CPU threads and needs --backend numpy, "
            f"not {ns.backend}; drop --workers or use --backend numpy."
        )
    if ns.backend == "cupy" and not runtime.is_gpu():
        raise UsageError(
            "--backend cupy needs a CUDA GPU (gpulab is in simulator mode). Use --backend numpy, or "
            "--backend kernels for the course's kernels in the simulator."
        )
    limit_threads(ns.threads)
    tune_allocator()
    try:
        ds = _data.load(
            ns.dataset, data_dir=ns.data_dir, download=not ns.no_download, seed=ns.seed, size=ns.digits_size
        )
    except _data.DatasetError as e:
        raise UsageError(str(e)) from None
    if ns.limit or ns.test_limit:
        ds = ds.subset(ns.limit, ns.test_limit)
    _refuse_slow_kernels(ns, ds)
    model = nn.mnist_cnn(
        seed=ns.seed, image_size=ds.x_train.shape[-1], channels=ns.channels, hidden=ns.hidden, backend=ns.backend
    )
    workers = ns.workers
    if workers is None:
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
        workers = min(cores, 8) if ns.backend == "numpy" and not ns.threads else 1
    print(
        f"{ds}; backend {ns.backend}; {model.num_parameters():,} parameters; batch {ns.batch_size}; "
        f"workers {workers}; mode {runtime.mode()}"
    )
    t0 = time.perf_counter()

    def report(h: History) -> None:
        i = -1
        print(
            f"epoch {h.epoch[i]}: train loss {h.train_loss[i]:.4f}, train accuracy {h.train_accuracy[i]:.4f}, "
            f"test accuracy {h.test_accuracy[i]:.4f}, {h.seconds[i]:.1f} s ({h.images_per_second[i]:.0f} images/s)",
            flush=True,
        )

    optimizer = nn.Adam(model, lr=ns.lr)
    history = fit(
        model,
        ds,
        epochs=ns.epochs,
        batch_size=ns.batch_size,
        optimizer=optimizer,
        seed=ns.seed,
        progress=ns.progress,
        workers=workers,
        on_epoch=report,
    )
    wall = time.perf_counter() - t0
    acc = history.test_accuracy[-1]
    if ns.save:
        print(f"saved the model and Adam's state to {nn.save(model, ns.save, optimizer)}")
    if ns.json:
        results = {
            "dataset": ds.name,
            "backend": ns.backend,
            "epochs": ns.epochs,
            "batch_size": ns.batch_size,
            "seed": ns.seed,
            "mode": runtime.mode(),
            "workers": workers,
            "threads": ns.threads,
            "channels": list(ns.channels),
            "hidden": ns.hidden,
            "cpu_count": os.cpu_count(),
            "wall_seconds": wall,
            "test_accuracy": acc,
            "history": history.as_dict(),
        }
        try:  # whole or not at all (an interrupt or error leaves no half file), never over a file that appeared
            write_atomically(ns.json, lambda f: json.dump(results, f, indent=2), text=True)
        except FileExistsError as e:
            if e.filename != str(Path(ns.json)):
                raise
            raise UsageError(
                f"--json {ns.json}: the file appeared while training and is kept; the run's results are not written "
                "(the model is saved if --save was given). Run again with another --json path."
            ) from None
    print(f"training time: {wall:.1f} s")
    print(f"test accuracy: {acc:.4f}")
    return 0


def main(argv: list[str] | None = None) -> int:
    ns = build_parser().parse_args(argv)
    try:
        return run(ns)
    except GpulabError as e:
        print(f"gpulab train: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
