"""Where :func:`gpulab.train.fit` left off with a model: epochs done, the shuffle seed and the shuffle generator's
state, and the Adam that fit made when given no optimizer.

A model keeps one (``model.fit_state``), so a second ``fit`` call continues the data order of the first (two calls
of one epoch shuffle as one call of two), and :func:`gpulab.nn.save` / :func:`gpulab.nn.load` carry it in the file
(keys ``"fit.<name>"``: :data:`FIT_PREFIX`), so a run resumed from a checkpoint sees the batches the uninterrupted
run would have seen. ``Sequential.state_dict`` does not hold it: it is the training run's, not the network's.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..errors import UsageError

__all__ = ["FIT_PREFIX", "FitState"]

FIT_PREFIX = "fit."  # a fit state's key in a checkpoint: "fit.epoch", "fit.seed", "fit.shuffle"
_MASK = (1 << 64) - 1


def _words(rng: np.random.Generator) -> np.ndarray:
    """A PCG64 generator's whole state as 6 uint64 words: state (high, low), increment (high, low), has_uint32,
    uinteger (what ``np.savez`` keeps bit for bit; 128-bit Python ints it cannot)."""
    st = rng.bit_generator.state
    s, inc = st["state"]["state"], st["state"]["inc"]
    words = [s >> 64, s & _MASK, inc >> 64, inc & _MASK, st["has_uint32"], st["uinteger"]]
    return np.array(words, dtype=np.uint64)


def _generator(words: np.ndarray) -> np.random.Generator:
    """The generator :func:`_words` describes."""
    w = [int(x) for x in words]
    bg = np.random.PCG64()
    bg.state = {
        "bit_generator": "PCG64",
        "state": {"state": (w[0] << 64) | w[1], "inc": (w[2] << 64) | w[3]},
        "has_uint32": w[4],
        "uinteger": w[5],
    }
    return np.random.Generator(bg)


def _words_problem(words: np.ndarray) -> str:
    """What makes :func:`_words` output impossible ('' if nothing): has_uint32 is 0 or 1, uinteger a 32-bit number,
    and the increment odd (PCG64 makes it ``2 * stream + 1``)."""
    inc_low, has_uint32, uinteger = (int(w) for w in words[3:])
    if has_uint32 not in (0, 1):
        return f"fit.shuffle[4] (has_uint32) must be 0 or 1, got {has_uint32}"
    if uinteger >= 1 << 32:
        return f"fit.shuffle[5] (uinteger) must be below 2**32, got {uinteger}"
    if inc_low % 2 == 0:
        return f"fit.shuffle[3] (the increment's low 64 bits) must be odd, got {inc_low}"
    return ""


class FitState:
    """``epoch``: epochs :func:`fit` finished with this model (one it was interrupted in after drawing its shuffle
    counts: the weights moved on; see :func:`gpulab.train.fit`); ``seed`` and ``rng``: the shuffle's seed and its
    generator (None before the first fit); ``optimizer``: the Adam fit made when given none (kept in memory for
    the next call, not saved: pass your own optimizer to fit and to ``nn.save`` to keep its state in a file;
    forgotten when a call trains with another optimizer or ``nn.load`` replaces the weights); ``history``: the
    :class:`gpulab.train.History` of the latest fit call, filled in as its epochs finish, so the numbers of the
    epochs a call finished before it was interrupted or failed are kept (in memory only, not saved)."""

    def __init__(self) -> None:
        self.epoch = 0
        self.seed: int | None = None
        self.rng: np.random.Generator | None = None
        self.optimizer: Any = None
        self.history: Any = None

    def shuffle_rng(self, seed: int) -> np.random.Generator:
        """The generator fit shuffles with: the one the last call left, if it had the same ``seed``; else a new one
        from ``seed`` (another seed starts another order)."""
        if self.rng is None or self.seed != seed:
            self.rng, self.seed = np.random.default_rng(seed), seed
        return self.rng

    def state_dict(self) -> dict[str, np.ndarray]:
        """``{"epoch", "seed", "shuffle"}`` as arrays, or ``{}`` before the first fit (nothing to continue)."""
        if self.rng is None or self.seed is None:
            return {}
        epoch, seed = np.array(self.epoch, np.int64), np.array(self.seed, np.int64)
        return {"epoch": epoch, "seed": seed, "shuffle": _words(self.rng)}

    @staticmethod
    def check_state(state: dict[str, Any]) -> dict[str, Any]:
        """The checked values of a :meth:`state_dict` (``{}``: a fresh state); :class:`UsageError` if it misfits."""
        if not state:
            return {}
        keys = {"epoch", "seed", "shuffle"}
        if set(state) != keys:
            raise UsageError(
                f"fit state: expected the keys {sorted(FIT_PREFIX + k for k in keys)}, got "
                f"{sorted(FIT_PREFIX + k for k in state)}. Load a file written by gpulab.nn.save."
            )
        checked: dict[str, Any] = {}
        for k in ("epoch", "seed"):
            v = np.asarray(state[k])
            if v.shape != () or not np.issubdtype(v.dtype, np.integer) or int(v) < 0:
                raise UsageError(f"fit state {k!r}: expected a whole number >= 0, got {v!r}.")
            checked[k] = int(v)
        words = np.asarray(state["shuffle"])
        if words.dtype != np.uint64 or words.shape != (6,):
            raise UsageError(
                f"fit state 'shuffle': expected a PCG64 generator state as 6 uint64 words, got {words.dtype.name} of "
                f"shape {words.shape}. Load a file written by gpulab.nn.save."
            )
        problem = _words_problem(words)
        if problem:
            raise UsageError(
                f"fit state 'shuffle': {problem}; no PCG64 generator has that state, so the file was changed after "
                "gpulab.nn.save wrote it. Load a file as nn.save wrote it, or save one again from the model (or "
                "delete its 'fit.*' arrays to start fit's shuffle afresh from the seed)."
            )
        checked["rng"] = _generator(words)
        return checked

    def apply(self, checked: dict[str, Any], keep_optimizer: bool = False) -> None:
        """Take a :meth:`check_state` result (``{}``: start fresh); the Adam fit made is forgotten unless
        ``keep_optimizer`` (its state belongs to the weights the load replaced)."""
        self.epoch = checked.get("epoch", 0)
        self.seed = checked.get("seed")
        self.rng = checked.get("rng")
        if not keep_optimizer:
            self.optimizer = None
