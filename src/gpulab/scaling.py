"""Scaling up (lesson 10): memory budgets, mixed precision, data parallelism, pipeline schedules.

* :func:`cnn_footprint` counts, without allocating anything, the parameters, the activations kept for
  the backward pass and the im2col workspace of the course CNN (:func:`gpulab.nn.mnist_cnn`) at any
  width; :func:`measure_footprint` measures the same on a real model, so the two can be checked.
* :func:`memory_budget` turns a footprint, a batch size, an optimizer and a precision into bytes.
* :func:`fp16_flush_fraction` shows why mixed precision needs loss scaling.
* :func:`data_parallel_gradients` splits a batch over N devices, computes each shard's gradient and
  averages them with a ring all-reduce (:func:`ring_allreduce`, simulated on one device), which gives
  the gradient of the whole batch. :func:`nccl_data_parallel_gradients` does it for real over
  several GPUs with NCCL (``cupy.cuda.nccl``).
* :func:`pipeline_schedule` lays out a GPipe schedule, whose idle "bubble" is
  :func:`bubble_fraction`.

This module holds the memory models, mixed precision's flush fraction and the pipeline schedule. Data parallelism
(the shards' gradients, the ring all-reduce, NCCL) lives in :mod:`gpulab.scaling_data_parallel` and is re-exported
here: this module is the learners' API (``from gpulab import scaling``; ``scaling.ring_steps``,
``scaling.data_parallel_gradients``, ...).
"""

from __future__ import annotations

import numbers
from dataclasses import dataclass, field
from typing import Any
from collections.abc import Sequence

import numpy as np

from . import runtime
from .errors import UsageError, whole_number
from .scaling_data_parallel import (  # re-exported: scaling.<name> is the learners' API
    allreduce_mean as allreduce_mean,
    data_parallel_gradients as data_parallel_gradients,
    flat_gradients as flat_gradients,
    full_batch_gradients as full_batch_gradients,
    nccl_allreduce_mean as nccl_allreduce_mean,
    nccl_data_parallel_gradients as nccl_data_parallel_gradients,
    ring_allreduce as ring_allreduce,
    ring_steps as ring_steps,
)

__all__ = [
    "BYTES",
    "OPTIMIZER_SLOTS",
    "Footprint",
    "allreduce_mean",
    "bubble_fraction",
    "cnn_footprint",
    "data_parallel_gradients",
    "flat_gradients",
    "fp16_flush_fraction",
    "full_batch_gradients",
    "max_batch_size",
    "measure_footprint",
    "memory_budget",
    "nccl_allreduce_mean",
    "nccl_data_parallel_gradients",
    "pipeline_schedule",
    "ring_allreduce",
    "ring_steps",
]

BYTES = {"fp32": 4, "fp16": 2}
# Extra float32 values an optimizer keeps per parameter: momentum keeps a velocity, Adam m and v.
OPTIMIZER_SLOTS = {"sgd": 0, "momentum": 1, "adam": 2}
TRAINING_PRECISIONS = ("fp32", "mixed")

# ------------------------------------------------------------------------------------------ memory


@dataclass(frozen=True)
class Footprint:
    """What one model needs, in numbers of values: ``params`` (weights and biases),
    ``activations`` per sample (every layer output kept for the backward pass, plus the input), and
    ``workspace`` per sample (the im2col column matrices of the convolutions)."""

    params: int
    activations: int
    workspace: int
    layers: tuple[tuple[str, int], ...] = field(default=())  # (layer, activation values per sample)


def cnn_footprint(
    *,
    image_size: int = 28,
    channels: tuple[int, int] = (32, 64),
    hidden: int = 128,
    classes: int = 10,
    dropout: float = 0.25,
) -> Footprint:
    """The footprint of ``gpulab.nn.mnist_cnn`` with these arguments, counted by formula (checked as
    ``mnist_cnn`` checks them)."""
    from .nn.models import check_cnn_arguments

    s, (c1, c2), hidden, classes = check_cnn_arguments(image_size, channels, hidden, classes, who="cnn_footprint")
    h, q = s // 2, s // 4
    params = (c1 * 9 + c1) + (c2 * c1 * 9 + c2) + (c2 * q * q * hidden + hidden) + (hidden * classes + classes)
    layers = [
        ("input", s * s),
        ("conv1", c1 * s * s),
        ("relu1", c1 * s * s),
        ("pool1", c1 * h * h),
        ("conv2", c2 * h * h),
        ("relu2", c2 * h * h),
        ("pool2", c2 * q * q),
        ("flatten", c2 * q * q),  # a copy in gpulab.nn: the pooled array is not contiguous
        ("linear1", hidden),
        ("relu3", hidden),
    ]
    if dropout > 0:
        layers.append(("dropout", hidden))
    layers.append(("linear2", classes))
    workspace = s * s * 9 + h * h * c1 * 9  # im2col: (Ho*Wo, C*k*k) per image for each conv
    return Footprint(params, sum(n for _, n in layers), workspace, tuple(layers))


def measure_footprint(model: Any, image_shape: Sequence[int]) -> Footprint:
    """Measure a ``gpulab.nn.Sequential``'s footprint by running one sample through it layer by layer.

    A layer's output counts as an activation unless it shares memory with its input (a view, like
    Flatten); a convolution's cached im2col matrix counts as workspace.
    """
    from .nn.ops import to_backend

    x = to_backend(np.zeros((1, *image_shape), dtype=np.float32), getattr(model, "backend", "numpy"))
    xp = runtime.array_module(x)
    layers: list[tuple[str, int]] = [("input", int(x.size))]
    workspace = 0
    for i, layer in enumerate(model.layers):
        y = layer.forward(x)
        if not xp.shares_memory(y, x):  # on the arrays themselves (host copies would never share memory)
            layers.append((f"{i}:{type(layer).__name__}", int(y.size)))
        if type(layer).__name__ == "Conv2d":  # its cache is (input shape, im2col columns)
            workspace += int(layer.cache[1].size)
        x = y
    return Footprint(int(model.num_parameters()), sum(n for _, n in layers), workspace, tuple(layers))


def memory_budget(
    fp: Footprint, batch_size: int, *, optimizer: str = "adam", precision: str = "fp32"
) -> dict[str, int]:
    """Bytes needed to train ``fp`` at ``batch_size``, by component.

    ``precision="fp32"``: everything in float32. ``"mixed"``: float16 weights, gradients, activations
    and workspace for the arithmetic, plus a float32 master copy of the weights for the update (the
    optimizer state stays float32).
    """
    _check_footprint(fp, "memory_budget(fp, batch_size)")
    if optimizer not in OPTIMIZER_SLOTS:
        raise ValueError(f"optimizer must be one of {tuple(OPTIMIZER_SLOTS)}, got {optimizer!r}.")
    if precision not in TRAINING_PRECISIONS:
        raise ValueError(f"precision must be 'fp32' or 'mixed', got {precision!r}.")
    if batch_size < 1:
        raise ValueError(f"batch_size must be at least 1, got {batch_size}.")
    p = fp.params
    w = BYTES["fp32"] if precision == "fp32" else BYTES["fp16"]
    out = {
        "weights": w * p,
        "master weights (fp32)": 0 if precision == "fp32" else BYTES["fp32"] * p,
        "gradients": w * p,
        "optimizer state": BYTES["fp32"] * OPTIMIZER_SLOTS[optimizer] * p,
        "activations": w * fp.activations * batch_size,
        "im2col workspace": w * fp.workspace * batch_size,
    }
    return out


def _check_footprint(fp: Any, call: str) -> None:
    if not isinstance(fp, Footprint):
        raise UsageError(
            f"{call}: fp must be a Footprint, e.g. fp = scaling.cnn_footprint(channels=(32, 64)) or "
            f"scaling.measure_footprint(model, (1, 28, 28)); got {fp!r} ({type(fp).__name__}). Are the arguments "
            "swapped?"
        )


# A memory size below this many bytes that holds nothing is taken for gigabytes (16 for a 16 GB GPU) given as bytes.
_LIKELY_GIGABYTES = 1e4


def max_batch_size(fp: Footprint, memory_bytes: float, *, optimizer: str = "adam", precision: str = "fp32") -> int:
    """The largest batch whose budget fits in ``memory_bytes`` bytes (0 if even the weights do not fit).

    ``memory_bytes`` is in bytes: ``16e9`` for a 16 GB GPU. A size too small to train one sample that is also under
    10,000 (``16``: gigabytes, surely) is refused with a :class:`UsageError`, not answered 0.
    """
    _check_footprint(fp, "max_batch_size(fp, memory_bytes)")
    if isinstance(memory_bytes, bool) or not isinstance(memory_bytes, numbers.Real) or not memory_bytes > 0:
        raise UsageError(
            f"memory_bytes must be a number of bytes > 0, e.g. 16e9 for a 16 GB GPU; got {memory_bytes!r}."
        )
    budget = memory_budget(fp, 1, optimizer=optimizer, precision=precision)
    per_sample = (fp.activations + fp.workspace) * (BYTES["fp32"] if precision == "fp32" else BYTES["fp16"])
    fixed = sum(budget.values()) - per_sample
    fits = 0 if fixed + per_sample > memory_bytes else int((memory_bytes - fixed) // per_sample)
    if fits == 0 and memory_bytes < _LIKELY_GIGABYTES:
        holds = (
            "even the weights, gradients and optimizer state" if fixed > memory_bytes else "one sample's activations"
        )
        raise UsageError(
            f"max_batch_size: {memory_bytes:g} bytes cannot hold {holds} ({fixed + per_sample:,.0f} bytes for a batch "
            f"of 1). memory_bytes is in bytes, not gigabytes: for a {memory_bytes:g} GB GPU pass "
            f"{memory_bytes:g}e9 (or gb * 1e9)."
        )
    return fits


def fp16_flush_fraction(values: Any, scale: float = 1.0) -> float:
    """Fraction of the nonzero ``values`` that become exactly 0 when ``values * scale`` is stored in
    float16 (smaller than half of float16's smallest subnormal, about 3e-8)."""
    v = np.asarray(runtime.to_host(values), dtype=np.float32).ravel()
    v = v[v != 0]
    if v.size == 0:
        return 0.0
    with np.errstate(over="ignore"):  # values above 65504 become inf, not 0: not counted here
        return float(np.mean((v * np.float32(scale)).astype(np.float16) == 0))


# ------------------------------------------------------------------------------------- pipeline


def pipeline_schedule(stages: int, microbatches: int) -> list[dict[str, Any]]:
    """A GPipe schedule: every micro-batch runs forward through the stages (one per device), then all
    run backward in reverse. One time slot per stage and micro-batch pass (a simplification: a backward
    pass really takes about twice a forward). Returns ``{stage, start, kind, microbatch}`` per slot."""
    stages, microbatches = _pipeline_counts(stages, microbatches, "pipeline_schedule")
    out = []
    t_forward = microbatches + stages - 1  # slots until the last micro-batch leaves the last stage
    for s in range(stages):
        for j in range(microbatches):
            out.append({"stage": s, "start": s + j, "kind": "forward", "microbatch": j})
            out.append(
                {
                    "stage": s,
                    "start": t_forward + (stages - 1 - s) + (microbatches - 1 - j),
                    "kind": "backward",
                    "microbatch": j,
                }
            )
    return out


def bubble_fraction(stages: int, microbatches: int) -> float:
    """Idle share of a GPipe schedule: (p - 1) / (m + p - 1) for p stages and m micro-batches."""
    stages, microbatches = _pipeline_counts(stages, microbatches, "bubble_fraction")
    return (stages - 1) / (microbatches + stages - 1)


def _pipeline_counts(stages: Any, microbatches: Any, call: str) -> tuple[int, int]:
    """``stages`` and ``microbatches`` as whole numbers >= 1 (a pipeline has at least one of each)."""
    example = f"For example, {call}(4, 8) is for 4 pipeline stages (one per device) and 8 micro-batches per batch."
    return whole_number("stages", stages, example=example), whole_number("microbatches", microbatches, example=example)
