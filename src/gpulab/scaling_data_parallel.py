"""Data parallelism (lesson 10): one batch split over N devices, each shard's gradient, and their average.

:func:`data_parallel_gradients` splits a batch over N simulated devices (one after another on one device), computes
each shard's gradient (:func:`full_batch_gradients`) and averages them with a ring all-reduce
(:func:`ring_allreduce`; :func:`ring_steps` is the algorithm, lesson 10's exercise; :func:`allreduce_mean` the
average), which gives the gradient of the whole batch. :func:`nccl_data_parallel_gradients` does it for real over
several GPUs with NCCL (``cupy.cuda.nccl``, :func:`nccl_allreduce_mean`).

Part of :mod:`gpulab.scaling`'s public API, which re-exports every name here: notebooks and labs use them as
``scaling.data_parallel_gradients``, ``scaling.ring_steps``, ...
"""

from __future__ import annotations

from typing import Any
from collections.abc import Callable, Sequence

import numpy as np

from . import runtime

__all__ = [
    "allreduce_mean",
    "data_parallel_gradients",
    "flat_gradients",
    "full_batch_gradients",
    "nccl_allreduce_mean",
    "nccl_data_parallel_gradients",
    "ring_allreduce",
    "ring_steps",
]


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
