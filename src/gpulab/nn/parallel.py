"""Data parallelism on CPU threads: each thread runs forward and backward on its share of the batch.

The same idea as data-parallel training on several GPUs, shrunk to one machine: every worker has
a *replica* of the model that shares the weights but keeps its own activations and gradients; after
backward the gradients are averaged (weighted by each share's size) into the main model, and one
optimizer step updates the shared weights. NumPy releases the GIL inside its array operations, so
the workers really run at the same time; BLAS is kept to one thread per worker.

Dropout: each replica's Dropout layer draws from its own generator states, the layer's seed jumped to another
subsequence (numba's ``create_xoroshiro128p_states(streams, seed, subsequence_start)``: worker ``i`` of a
``DataParallel(..., seed=s)`` starts ``(1000 s + i) * streams`` states in, each state 2**64 draws from the next), so
no two workers share a stream and no worker's draws depend on another's share. The model itself is worker 0 and
keeps its own states (subsequence 0). A run with several
workers therefore drops other elements than a run with one (each share is masked from its own streams, not cut
out of one batch-wide mask), equally at random; with the same ``workers`` and seed it is the same every time.
"""

from __future__ import annotations

import copy
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from ..runtime import array_module
from .dropout import new_states
from .layers import Dropout
from .loss import SoftmaxCrossEntropy
from .sequential import Sequential
from .step import forward_backward

__all__ = ["DataParallel"]


def _replica(model: Sequential, index: int) -> Sequential:
    """A model that shares ``model``'s weights but has its own gradients, caches and dropout streams (worker
    from subsequence ``index * streams`` of each Dropout layer's generator: module docstring)."""
    rep = copy.copy(model)
    rep.layers = []
    for layer in model.layers:
        new = copy.copy(layer)  # shares the params dict (same weight arrays)
        new.grads = {k: array_module(g).zeros_like(g) for k, g in layer.grads.items()}
        new.buffers = dict(layer.buffers)
        if isinstance(new, Dropout):
            new.buffers["states"] = new_states(new.streams, new.seed, subsequence_start=index * new.streams)
        rep.layers.append(new)
    return rep


class DataParallel:
    """``step(x, y)`` = forward + backward of a batch split over ``workers`` threads; grads land in ``model``."""

    def __init__(self, model: Sequential, workers: int = 2, *, seed: int = 0) -> None:
        if workers < 1:
            raise ValueError(f"workers must be at least 1, got {workers}.")
        if model.backend != "numpy":
            raise ValueError("DataParallel splits work over CPU threads: use it with backend='numpy'.")
        self.model, self.workers = model, workers
        self.replicas = [model] + [_replica(model, seed * 1000 + i) for i in range(1, workers)]
        self.pool = ThreadPoolExecutor(workers)

    def _work(self, i: int, x: Any, y: Any) -> tuple[float, Any]:
        return forward_backward(self.replicas[i], SoftmaxCrossEntropy(), x, y)  # this share's mean loss

    def step(self, x: Any, y: Any) -> tuple[float, Any]:
        """Mean loss and logits (N, classes) of the whole batch; ``model``'s grads hold the batch gradient."""
        n = x.shape[0]
        bounds = np.linspace(0, n, min(self.workers, n) + 1).astype(int)  # equal shares
        shares = [(i, x[a:b], y[a:b]) for i, (a, b) in enumerate(zip(bounds[:-1], bounds[1:]))]
        results = list(self.pool.map(lambda s: self._work(*s), shares))
        weights = [(b - a) / n for a, b in zip(bounds[:-1], bounds[1:])]  # mean over the batch = weighted means
        for (_name, _, g), *others in zip(
            self.model.parameters(), *(r.parameters() for r in self.replicas[1 : len(shares)])
        ):
            g *= weights[0]
            for w, (_, _, gi) in zip(weights[1:], others):
                g += w * gi
        loss = sum(w * r[0] for w, r in zip(weights, results))
        return loss, np.concatenate([r[1] for r in results])

    def train(self, mode: bool = True) -> None:
        for r in self.replicas:
            r.train(mode)

    def close(self) -> None:
        self.pool.shutdown()
