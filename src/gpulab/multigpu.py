"""Napkin model of data-parallel training across GPUs (lesson 11, building on lesson 10's ring all-reduce).

The time of a ring all-reduce over a link of a given bandwidth and latency, one training step's compute and
communication against the number of GPUs, and the point where communication outweighs compute. Link figures
come from :data:`gpulab.hardware.INTERCONNECTS` (spec sheets); every result here is a model, not a measurement.
"""

from __future__ import annotations

from .errors import UsageError

__all__ = ["allreduce_seconds", "crossover_gpus", "step_seconds"]


def allreduce_seconds(nbytes: float, n_gpus: int, link_gbps: float, latency_us: float = 0.0) -> float:
    """Time of lesson 10's ring all-reduce of ``nbytes`` over ``n_gpus`` joined by a ``link_gbps`` link.

    Each GPU sends 2 (N-1)/N x nbytes (what :func:`gpulab.scaling.ring_allreduce` counts) in 2 (N-1)
    steps, each paying the link's latency: 2 (N-1)/N x nbytes / bandwidth + 2 (N-1) x latency. 0 for one GPU.
    """
    if n_gpus < 1 or nbytes < 0 or link_gbps <= 0 or latency_us < 0:
        raise UsageError(
            f"allreduce_seconds needs n_gpus >= 1, nbytes >= 0, link_gbps > 0, latency >= 0; got "
            f"n_gpus={n_gpus}, nbytes={nbytes}, link_gbps={link_gbps}, latency_us={latency_us}."
        )
    if n_gpus == 1:
        return 0.0
    return 2 * (n_gpus - 1) / n_gpus * nbytes / (link_gbps * 1e9) + 2 * (n_gpus - 1) * latency_us * 1e-6


def step_seconds(
    compute_1gpu_s: float,
    grad_bytes: float,
    n_gpus: int,
    link_gbps: float,
    *,
    latency_us: float = 0.0,
    fixed_global_batch: bool = True,
    overlap: bool = False,
) -> dict[str, float]:
    """One data-parallel training step on ``n_gpus``: ``{"compute", "communication", "step"}`` seconds.

    ``compute_1gpu_s`` is one GPU's time for the batch. With a fixed global batch (strong scaling) each GPU
    computes 1/N of it; with a fixed per-GPU batch (weak scaling) compute stays the same. The gradients
    (``grad_bytes``) are all-reduced after the backward pass; ``overlap=True`` hides communication behind
    compute (step = max) instead of adding it (step = sum). A model, not a measurement.
    """
    compute = compute_1gpu_s / n_gpus if fixed_global_batch else compute_1gpu_s
    comm = allreduce_seconds(grad_bytes, n_gpus, link_gbps, latency_us)
    return {"compute": compute, "communication": comm, "step": max(compute, comm) if overlap else compute + comm}


def crossover_gpus(
    compute_1gpu_s: float, grad_bytes: float, link_gbps: float, *, latency_us: float = 0.0, max_gpus: int = 4096
) -> int | None:
    """The smallest N (fixed global batch) at which communication takes longer than compute, or None
    up to ``max_gpus``."""
    for n in range(2, max_gpus + 1):
        t = step_seconds(compute_1gpu_s, grad_bytes, n, link_gbps, latency_us=latency_us)
        if t["communication"] > t["compute"]:
            return n
    return None
