"""Data parallelism on CPU threads: each thread runs forward and backward on its share of the batch.

The same idea as data-parallel training on several GPUs, shrunk to one machine: every worker has
a *replica* of the model that shares the weights but keeps its own activations and gradients; after
backward the gradients are averaged (weighted by each share's size) into the main model, and one
optimizer step updates the shared weights. NumPy releases the GIL inside its array operations, so
the workers really run at the same time; BLAS is kept to one thread per worker.

Dropout: the model itself is worker 0 and draws from its Dropout layers' own states. At each step, worker ``i``'s
Dropout layer draws from the model's states *as they are before the step*, jumped ``(1000 s + i) * streams``
subsequences (``xoroshiro.jump``: each state 2**64 draws from the next, as numba's ``create_xoroshiro128p_states(
streams, seed, subsequence_start)`` spaces them) for a ``DataParallel(..., seed=s)``, so no two workers share a stream
and no worker's draws depend on another's share. Worker 0 takes a largest share, so the model's states advance at
least as far as any worker's draws: the next step's jumped states start past every number drawn before. The model's
states (saved by ``nn.save``, moved by ``Sequential.to``) are therefore the whole random state of a data-parallel
run: a run that is saved, loaded and continued with a new ``DataParallel`` draws what the uninterrupted run draws.
A run with several workers drops other elements than a run with one (each share is masked from its own streams, not
cut out of one batch-wide mask), equally at random; with the same ``workers`` and seed it is the same every time.
"""

from __future__ import annotations

import copy
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from .. import xoroshiro
from ..errors import UsageError
from ..runtime import array_module
from .layers import Dropout
from .loss import SoftmaxCrossEntropy
from .sequential import Sequential
from .step import forward_backward

__all__ = ["DataParallel"]


def _replica(model: Sequential) -> Sequential:
    """A model that shares ``model``'s weights but has its own gradients, caches and dropout states (set from the
    model's before each step: :meth:`DataParallel.step`)."""
    rep = copy.copy(model)
    rep.layers = []
    for layer in model.layers:
        new = copy.copy(layer)  # shares the params dict (same weight arrays)
        new.grads = {k: array_module(g).zeros_like(g) for k, g in layer.grads.items()}
        new.buffers = dict(layer.buffers)
        rep.layers.append(new)
    return rep


def _shares(n: int, workers: int) -> list[tuple[int, int]]:
    """``(start, stop)`` of each worker's rows: ``min(workers, n)`` shares whose sizes differ by at most one, the
    larger ones first (worker 0, the model, advances its dropout states at least as far as any worker)."""
    k = min(workers, n)
    sizes = [n // k + (1 if i < n % k else 0) for i in range(k)]
    stops = np.cumsum(sizes).tolist()
    return list(zip([0, *stops[:-1]], stops))


class DataParallel:
    """``step(x, y)`` = forward + backward of a batch split over ``workers`` threads; grads land in ``model``."""

    def __init__(self, model: Sequential, workers: int = 2, *, seed: int = 0) -> None:
        if workers < 1:
            raise ValueError(f"workers must be at least 1, got {workers}.")
        if model.backend != "numpy":
            raise ValueError("DataParallel splits work over CPU threads: use it with backend='numpy'.")
        self.model, self.workers, self.seed = model, workers, seed
        self.replicas = [model] + [_replica(model) for _ in range(1, workers)]
        self.dropouts = [i for i, layer in enumerate(model.layers) if isinstance(layer, Dropout)]
        for j in self.dropouts:  # what the first step draws from (each step sets them again: step)
            for i in range(1, workers):  # and the jump matrices, cached before the threads need them
                self.replicas[i].layers[j].buffers["states"] = self._jumped(i, model.layers[j].buffers["states"], j)
        self.pool = ThreadPoolExecutor(workers)

    def _jumped(self, i: int, words: Any, j: int) -> Any:
        """Worker ``i``'s states for Dropout layer ``j``: the model's ``words`` jumped (module docstring)."""
        count = (1000 * self.seed + i) * self.model.layers[j].streams
        return xoroshiro.jump(words.view(xoroshiro.DTYPE), count).view(np.uint64)

    def _work(self, i: int, x: Any, y: Any, words: dict[int, Any]) -> tuple[Any, Any]:
        rep = self.replicas[i]
        if i:
            for j, w in words.items():  # jumped here, in this worker's thread (NumPy releases the GIL)
                rep.layers[j].buffers["states"] = self._jumped(i, w, j)
        return forward_backward(rep, SoftmaxCrossEntropy(), x, y)  # this share's mean loss

    def step(self, x: Any, y: Any) -> tuple[float, Any]:
        """Mean loss and logits (N, classes) of the whole batch; ``model``'s grads hold the batch gradient."""
        if self.model.backend != "numpy":
            raise UsageError(
                f"DataParallel splits work over CPU threads, but its model was moved to backend "
                f"{self.model.backend!r} after it was made. Move it back with model.to('numpy'), or train without "
                "DataParallel on that backend."
            )
        n = x.shape[0]
        bounds = _shares(n, self.workers)
        words = {j: self.model.layers[j].buffers["states"].copy() for j in self.dropouts}  # before worker 0 draws
        shares = [(i, x[a:b], y[a:b], words) for i, (a, b) in enumerate(bounds)]
        results = list(self.pool.map(lambda s: self._work(*s), shares))
        weights = [(b - a) / n for a, b in bounds]  # mean over the batch = weighted means
        for (_name, _, g), *others in zip(
            self.model.parameters(), *(r.parameters() for r in self.replicas[1 : len(shares)])
        ):
            g *= weights[0]
            for w, (_, _, gi) in zip(weights[1:], others):
                g += w * gi
        loss = sum(w * float(r[0]) for w, r in zip(weights, results))  # host numbers (NumPy): read for free
        return loss, np.concatenate([r[1] for r in results])

    def train(self, mode: bool = True) -> None:
        for r in self.replicas:
            r.train(mode)

    def close(self) -> None:
        """End the worker threads: shares not started are cancelled, running ones finish first."""
        self.pool.shutdown(wait=True, cancel_futures=True)
