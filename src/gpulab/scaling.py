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
"""

from __future__ import annotations

import numbers
from dataclasses import dataclass, field
from typing import Any
from collections.abc import Callable, Sequence

import numpy as np

from . import runtime
from .errors import UsageError, whole_number

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


# ----------------------------------------------------------------------------- data parallelism


def full_batch_gradients(model: Any, loss_fn: Any, x: Any, y: Any) -> tuple[float, dict[str, Any]]:
    """Loss and ``{name: gradient}`` (copies) of one forward + backward on the batch ``(x, y)``."""
    from .nn.loss import check_loss
    from .nn.step import forward_backward

    loss, _ = forward_backward(model, loss_fn, x, y)  # the engine's one training step, without the update
    value = float(loss)  # read (on a GPU: a wait), as the number this returns
    check_loss(value, model.ops)
    return value, {name: g.copy() for name, _, g in model.parameters()}


def flat_gradients(grads: dict[str, Any]) -> Any:
    """All gradients as one float32 vector (the buffer an all-reduce sends), in the dict's order."""
    xp = runtime.array_module(*grads.values())
    return xp.concatenate([g.ravel() for g in grads.values()]).astype(np.float32)


def _unflatten(vec: Any, like: dict[str, Any]) -> dict[str, Any]:
    out, start = {}, 0
    for name, g in like.items():
        out[name] = vec[start : start + g.size].reshape(g.shape)
        start += g.size
    return out


def ring_allreduce(buffers: Sequence[np.ndarray]) -> tuple[list[np.ndarray], int]:
    """Sum equal-shaped 1-D buffers held by N simulated devices with the ring algorithm (:func:`ring_steps`),
    after checking that they are N >= 1 buffers of one length.

    Each device sends 2(N-1)/N times the buffer size (plus at most one chunk when N does not divide it).
    That approaches twice the buffer but never exceeds it, so the bandwidth cost per device is nearly flat
    in N. The number of steps, 2(N-1), does grow with N, and each step pays one link latency: for small
    buffers or many devices the ring is latency-bound (NCCL then switches to tree algorithms).
    """
    if len(buffers) == 0:
        raise ValueError("ring_allreduce needs at least one buffer (one per device).")
    shapes = {tuple(b.shape) for b in buffers}
    if len(shapes) != 1 or len(next(iter(shapes))) != 1:
        raise ValueError(f"every device must hold a 1-D buffer of the same length, got shapes {sorted(shapes)}.")
    return ring_steps(buffers)


def ring_steps(buffers: Sequence[np.ndarray]) -> tuple[list[np.ndarray], int]:
    """The ring all-reduce itself (lesson 10's exercise): every device's sum, and the bytes device 0 sent.

    Each buffer is cut into N chunks. Reduce-scatter: in N-1 steps every device passes one chunk to its
    right-hand neighbour, which adds it to its own; then device i holds the full sum of chunk i+1.
    All-gather: in N-1 more steps the summed chunks travel round the ring, each overwriting a neighbour's.
    """
    n = len(buffers)
    bufs = [np.array(b, dtype=np.float32) for b in buffers]  # each device's own copy
    bounds = np.linspace(0, bufs[0].size, n + 1).astype(int)
    chunk = [slice(bounds[k], bounds[k + 1]) for k in range(n)]  # n chunks, as even as they can be
    sent = 0
    for step in range(n - 1):  # reduce-scatter: device i passes chunk (i - step) to device i + 1, which adds it
        msgs = [bufs[i][chunk[(i - step) % n]].copy() for i in range(n)]  # every device sends at the same time
        for i in range(n):
            bufs[(i + 1) % n][chunk[(i - step) % n]] += msgs[i]
        sent += msgs[0].nbytes  # what device 0 sent
    for step in range(n - 1):  # all-gather: device i holds the sum of chunk i + 1 and passes it on
        msgs = [bufs[i][chunk[(i + 1 - step) % n]].copy() for i in range(n)]
        for i in range(n):
            bufs[(i + 1) % n][chunk[(i + 1 - step) % n]] = msgs[i]
        sent += msgs[0].nbytes
    return bufs, sent


def allreduce_mean(per_device: Sequence[dict[str, Any]]) -> tuple[dict[str, np.ndarray], int]:
    """Average gradient dicts from N simulated devices with :func:`ring_allreduce`; returns the mean
    (identical on every device, so device 0's copy) and the bytes each device sent."""
    flats = [runtime.to_host(flat_gradients(g)) for g in per_device]
    summed, sent = ring_allreduce(flats)
    for b in summed[1:]:
        if not np.array_equal(b, summed[0]):  # the ring leaves every device with the same bits
            raise AssertionError("ring all-reduce left devices with different results")
    return _unflatten(summed[0] / np.float32(len(per_device)), per_device[0]), sent


def _shards(x: Any, y: Any, n_devices: int) -> list[tuple[Any, Any]]:
    b = x.shape[0]
    if n_devices < 1 or b % n_devices:
        raise ValueError(
            f"a batch of {b} cannot be split evenly over {n_devices} devices; use a batch size that is a "
            "multiple of the number of devices (each device must see the same number of samples for "
            "the average of shard gradients to equal the full-batch gradient)."
        )
    s = b // n_devices
    return [(x[i * s : (i + 1) * s], y[i * s : (i + 1) * s]) for i in range(n_devices)]


def data_parallel_gradients(model: Any, loss_fn: Any, x: Any, y: Any, n_devices: int) -> dict[str, Any]:
    """Simulated data parallelism on one device: each of ``n_devices`` replicas (here the same model,
    one after another) computes the gradient of its shard of the batch; a ring all-reduce averages them.

    Returns ``{"grads", "shard_losses", "bytes_sent_per_device", "n_devices"}``. With equal shards and
    a mean loss, ``grads`` equals :func:`full_batch_gradients` up to float32 rounding.
    """
    per_device, losses = [], []
    for xs, ys in _shards(x, y, n_devices):
        loss, g = full_batch_gradients(model, loss_fn, xs, ys)
        per_device.append({k: runtime.to_host(v) for k, v in g.items()})
        losses.append(loss)
    grads, sent = allreduce_mean(per_device)
    return {"grads": grads, "shard_losses": losses, "bytes_sent_per_device": sent, "n_devices": n_devices}


def nccl_allreduce_mean(arrays: Sequence[Any]) -> list[Any]:
    """Average one float32 CuPy array per GPU in place of a copy, with NCCL's all-reduce (sum) then a
    division. ``arrays[i]`` must live on a different GPU each. Needs CuPy built with NCCL."""
    from .interop import require_cupy, require_nccl

    cupy = require_cupy()
    nccl = require_nccl()  # CuPy's wheels do not include NCCL: the message says which wheel to install
    devices = [int(a.device.id) for a in arrays]
    if len(set(devices)) != len(devices):
        raise ValueError(f"each array must be on its own GPU, got devices {devices}.")
    comms = nccl.NcclCommunicator.initAll(devices)
    outs = []
    for d, a in zip(devices, arrays):
        with cupy.cuda.Device(d):
            outs.append(cupy.empty_like(a))
    nccl.groupStart()  # one collective call per GPU, issued together
    for comm, a, out in zip(comms, arrays, outs):
        with cupy.cuda.Device(comm.device_id()):
            comm.allReduce(
                a.data.ptr, out.data.ptr, a.size, nccl.NCCL_FLOAT32, nccl.NCCL_SUM, cupy.cuda.get_current_stream().ptr
            )
    nccl.groupEnd()
    for d, out in zip(devices, outs):
        with cupy.cuda.Device(d):
            out /= len(arrays)
            cupy.cuda.get_current_stream().synchronize()
    for comm in comms:
        comm.destroy()
    return outs


def nccl_data_parallel_gradients(
    make_model: Callable[[], Any], loss_fn_factory: Callable[[], Any], x: np.ndarray, y: np.ndarray, n_devices: int
) -> dict[str, Any]:
    """Real data parallelism over ``n_devices`` GPUs: one model replica per GPU (``make_model()``, same
    seed, so the same weights), one shard each, gradients averaged with NCCL. Returns ``{"grads",
    "shard_losses"}`` with the gradients as NumPy arrays (from GPU 0)."""
    from .interop import require_cupy

    cupy = require_cupy()
    available = cupy.cuda.runtime.getDeviceCount()
    if n_devices > available:
        raise RuntimeError(f"asked for {n_devices} GPUs but this machine has {available}.")
    flats, losses, like = [], [], None
    for d, (xs, ys) in enumerate(_shards(x, y, n_devices)):
        with cupy.cuda.Device(d):
            model = make_model().to("cupy")
            loss, g = full_batch_gradients(model, loss_fn_factory(), cupy.asarray(xs), cupy.asarray(ys))
            flats.append(flat_gradients(g))
            losses.append(loss)
            like = like or {k: runtime.to_host(v) for k, v in g.items()}
    avg = nccl_allreduce_mean(flats)
    with cupy.cuda.Device(0):
        host = cupy.asnumpy(avg[0])
    return {"grads": _unflatten(host, like), "shard_losses": losses}


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
