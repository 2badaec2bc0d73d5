"""Training loop, evaluation and the ``python -m gpulab train`` command.

>>> from gpulab import data, nn, train
>>> ds = data.load("mnist")
>>> model = nn.mnist_cnn(seed=0)
>>> history = train.fit(model, ds, epochs=2)
>>> train.evaluate(model, ds.x_test, ds.y_test)["accuracy"]

This module is the public face of two others: the loop (:func:`fit`, :func:`evaluate`,
:func:`predict`, :class:`History`, the CPU settings) lives in :mod:`gpulab.train_loop`, the command
line (:func:`configure`, :func:`run`, :func:`main`, the simulator estimate) in :mod:`gpulab.train_cli`.
"""

from __future__ import annotations

import sys

from .train_cli import (
    build_parser as build_parser,
    channels_pair as channels_pair,
    configure as configure,
    estimate_kernel_seconds as estimate_kernel_seconds,
    main as main,
    run as run,
)
from .train_loop import (
    History as History,
    evaluate as evaluate,
    fit as fit,
    limit_threads as limit_threads,
    predict as predict,
    tune_allocator as tune_allocator,
)

__all__ = [
    "History",
    "configure",
    "estimate_kernel_seconds",
    "evaluate",
    "fit",
    "limit_threads",
    "main",
    "predict",
    "run",
    "tune_allocator",
]


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
