"""``python -m gpulab bench cnn``: CNN training throughput (images/s) of a gpulab backend vs PyTorch.

Both train the same architecture (:func:`gpulab.nn.mnist_cnn`) on the same random batches with
the same batch size and thread count, in one process, alternating every few steps (``--chunk``) so
that load from other programs hits both alike; the ratio is the median of ``--rounds`` rounds.
This module is the command (arguments, checks, report); the timed runs are :mod:`gpulab.bench.cnn_runs`.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
from typing import Any

from .. import nn, runtime
from ..errors import GpulabError, UsageError, int_at_least
from ..nn.io import prepare_output_file
from .cnn_runs import (
    _GpulabRun,
    _TorchRun,
    interleaved as interleaved,
    measure_gpulab as measure_gpulab,
    measure_torch as measure_torch,
)

__all__ = ["configure", "interleaved", "main", "measure_gpulab", "measure_torch", "run"]


def _threads() -> int:
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        if os.environ.get(var, "").isdigit():
            return int(os.environ[var])
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def configure(p: argparse.ArgumentParser) -> None:
    """Add ``bench cnn``'s arguments to ``p`` (values are checked where they enter)."""
    from ..train import channels_pair

    p.add_argument("--backend", default=None, choices=nn.BACKENDS, help="default: cupy in gpu mode, numpy otherwise")
    p.add_argument(
        "--compare",
        choices=["torch", "none"],
        default="none",
        help="also time PyTorch on the same model (default: %(default)s)",
    )
    p.add_argument("--batch-size", type=int_at_least(1), default=128, help="images per step (default: %(default)s)")
    p.add_argument("--steps", type=int_at_least(1), default=30, help="timed steps per round (default: %(default)s)")
    p.add_argument("--warmup", type=int_at_least(0), default=3, help="untimed steps first (default: %(default)s)")
    p.add_argument(
        "--rounds",
        type=int_at_least(1),
        default=3,
        help="measure gpulab and PyTorch this many times; report the median (default: %(default)s)",
    )
    p.add_argument(
        "--chunk",
        type=int_at_least(1),
        default=5,
        help="within a round, alternate gpulab and PyTorch every this many steps, so that both "
        "see the same load from other programs (default: %(default)s)",
    )
    p.add_argument(
        "--channels", type=channels_pair, default=(32, 64), help="conv channels, e.g. 32,64 (default: 32,64)"
    )
    p.add_argument("--hidden", type=int_at_least(1), default=128, help="hidden units (default: %(default)s)")
    p.add_argument(
        "--threads",
        type=int_at_least(1),
        default=None,
        help="threads for both NumPy's BLAS and PyTorch (default: all cores)",
    )
    p.add_argument(
        "--workers",
        type=int_at_least(1),
        default=None,
        help="numpy backend: data-parallel CPU threads (default: --threads, each with 1 BLAS thread)",
    )
    p.add_argument(
        "--per-op",
        action="store_true",
        help="then time every op of a few more steps (nn.OpTimes) and print where a step's time goes",
    )
    p.add_argument("--json", default=None, help="write the results to this JSON file")
    p.add_argument(
        "--record",
        action="store_true",
        help="store the results as section 'cnn' in the user's recorded results (gpu mode only)",
    )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m gpulab bench cnn", description=__doc__)
    configure(p)
    args = p.parse_args(argv)
    try:
        return run(args)
    except GpulabError as e:
        print(f"gpulab bench cnn: {e}", file=sys.stderr)
        return 2


def run(args: argparse.Namespace) -> int:
    """Time the CNN as ``args`` says; raises :class:`UsageError` for bad input found after parsing."""
    if args.json:
        prepare_output_file(args.json, "--json", example="cnn.json")
    if args.record and not runtime.is_gpu():
        raise UsageError("--record needs gpu mode; simulator-mode runs are never recorded. Drop --record.")
    backend = args.backend or ("cupy" if runtime.is_gpu() else "numpy")
    if backend == "kernels" and runtime.is_simulator():
        raise UsageError(
            "the kernels backend runs in the CUDA simulator here; its speed means nothing. "
            "Use --backend numpy, or run on a GPU."
        )
    if backend == "cupy" and not runtime.is_gpu():
        raise UsageError("--backend cupy needs a CUDA GPU (simulator mode here); use --backend numpy.")
    if (args.workers or 1) > 1 and backend != "numpy":
        raise UsageError(f"--workers splits batches over CPU threads and needs --backend numpy, not {backend}.")
    channels = tuple(args.channels)
    common = dict(
        batch=args.batch_size, steps=args.steps, warmup=args.warmup, size=28, channels=channels, hidden=args.hidden
    )
    threads = args.threads or _threads()
    results: dict[str, Any] = {}
    from ..train import limit_threads, tune_allocator

    limit_threads(threads)
    results["allocator_tuned"] = tune_allocator()  # one process: PyTorch's CPU allocator gets the same glibc setting
    results |= {
        "backend": backend,
        "mode": runtime.mode(),
        "threads": threads,
        "machine": platform.machine(),
        "batch_size": args.batch_size,
        "steps": args.steps,
        "channels": list(channels),
    }
    torch_ok = False
    if args.compare == "torch":
        try:
            import torch  # noqa: F401

            torch_ok = True
        except ImportError:
            print("PyTorch is not installed (pip install torch); timing gpulab only.", file=sys.stderr)
    workers = args.workers or (threads if backend == "numpy" else 1)
    results["workers"] = workers
    ours, theirs = [], []
    device = "cuda" if runtime.is_gpu() else "cpu"
    shape = dict(
        batch=args.batch_size, size=28, channels=channels, hidden=args.hidden, batches=args.warmup + args.steps
    )
    for _ in range(args.rounds):
        if not torch_ok:
            ours.append(measure_gpulab(backend, workers=workers, **common))
            continue
        a_run, b_run = _GpulabRun(backend, workers=workers, **shape), _TorchRun(threads=threads, device=device, **shape)
        a, b = interleaved(a_run, b_run, steps=args.steps, warmup=args.warmup, chunk=args.chunk)
        a_run.close()
        images = args.steps * args.batch_size
        ours.append({"name": f"gpulab-{backend}", "images_per_second": images / a, "seconds": a, "workers": workers})
        theirs.append(
            {
                "name": f"torch-{device}",
                "images_per_second": images / b,
                "seconds": b,
                "torch_version": b_run.torch.__version__,
            }
        )
    best = sorted(ours, key=lambda r: r["images_per_second"])[len(ours) // 2]  # the median round
    results["gpulab"] = best | {"all_images_per_second": [r["images_per_second"] for r in ours]}
    print(
        f"gpulab ({backend}): {best['images_per_second']:.0f} images/s "
        f"(median of {args.rounds}; batch {args.batch_size}, "
        f"{threads} threads, {workers} data-parallel workers)"
    )
    if theirs:
        tbest = sorted(theirs, key=lambda r: r["images_per_second"])[len(theirs) // 2]
        results["torch"] = tbest | {"all_images_per_second": [r["images_per_second"] for r in theirs]}
        ratios = sorted(o["images_per_second"] / t["images_per_second"] for o, t in zip(ours, theirs))
        results["ratio"] = ratios[len(ratios) // 2]  # median of the per-round ratios (same load on both)
        results["ratios"] = ratios
        print(f"{tbest['name']} {tbest['torch_version']}: {tbest['images_per_second']:.0f} images/s")
        print(
            f"ratio gpulab/torch: {results['ratio']:.2f} (median of per-round ratios "
            f"{', '.join(f'{r:.2f}' for r in ratios)})"
        )
    if args.per_op:
        timed = nn.OpTimes(nn.ops.get(backend))  # one worker: the data-parallel path splits each op over threads
        measure_gpulab(backend, ops=timed, **dict(common, steps=3, warmup=0))  # compiled and warm from the rounds
        print(timed.report(top=10))
        results["per_op"] = timed.table()
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)
    if args.record:
        from .. import results as _results
        from ..timing import device_name

        print("recorded", _results.record("cnn", results, device_name(), source="python -m gpulab bench cnn"))
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
