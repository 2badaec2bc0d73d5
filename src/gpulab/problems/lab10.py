"""Lab 10 · scaling up: a memory budget with mixed precision, dynamic loss scaling (a kernel that unscales and
clips the gradients, and the scaler's rule), a ring all-reduce in two phases over uneven chunks with every
device's bytes counted, and a hierarchical all-reduce whose bytes over the slow link between machines are counted.

Most exercises are plain functions (``host=`` adapters turn them into checks); the unscale kernel is a real
kernel, compiled to PTX. The references are the course's own models: :func:`gpulab.scaling.memory_budget` and
:func:`gpulab.scaling.max_batch_size` for memory, :func:`ring_sim` for the ring's schedule. The ring and the
hierarchical all-reduce are defined in :mod:`.lab10_ring` and re-exported here.

Its problems are checked at gpu sizes by tests/test_gpu_sizes_lab10.py (their host adapters take other
arguments than tests/test_gpu_sizes.py's emulations).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from .. import runtime, scaling
from ..errors import UsageError
from ..exercises import Problem
from ._common import launch_1d
from .lab10_ring import (
    HIERARCHICAL,
    RING,
    all_gather,
    as_host_later,
    chunk_bounds,
    first_different,
    hierarchical_allreduce,
    hierarchical_host,
    hierarchical_spec,
    needs_functions,
    reduce_scatter,
    returned_none,
    ring_host,
    ring_sim,
    ring_spec,
)

__all__ = [
    "BUDGET",
    "HIERARCHICAL",
    "PARTS",
    "RING",
    "SCALER",
    "TPB",
    "UNSCALE",
    "all_gather",
    "budget_host",
    "budget_spec",
    "chunk_bounds",
    "hierarchical_allreduce",
    "hierarchical_host",
    "hierarchical_spec",
    "reduce_scatter",
    "ring_host",
    "ring_sim",
    "ring_spec",
    "scaler_host",
    "scaler_sim",
    "scaler_spec",
    "unscale_spec",
]

TPB = 128  # threads per block of the unscale kernel's launches
PARTS = ("weights", "master weights (fp32)", "gradients", "optimizer state", "activations")


# ---------------------------------------------------------------------------------------------- memory


def _budget_inputs(n: int, rng: np.random.Generator) -> np.ndarray:
    """Rows of (parameters, activation values per sample, batch, mixed 0/1, GPU memory in GB)."""
    params = np.round(10 ** rng.uniform(5, 9.3, n))
    acts = np.round(10 ** rng.uniform(3, 7, n))
    batch = rng.integers(1, 4097, n).astype(np.float64)
    mixed = (np.arange(n) % 2).astype(np.float64)  # both precisions in every case of two rows or more
    gb = rng.choice([16.0, 24.0, 40.0, 80.0, 141.0], n)
    if n > 1:  # a model whose weights, gradients and Adam state alone (16 B per parameter) exceed the memory
        params[1] = np.ceil(gb[1] * 1e9 / 16) + 1
    return np.stack([params, acts, batch, mixed, gb], axis=1)


def budget_spec(x: np.ndarray, gib: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """Each row's bytes by part (:data:`PARTS`, Adam) and the largest batch that fits its GPU, from
    :func:`gpulab.scaling.memory_budget` and :func:`gpulab.scaling.max_batch_size`."""
    parts, best = np.zeros((len(x), len(PARTS))), np.zeros(len(x))
    for r, (p, a, b, m, gb) in enumerate(x):
        fp, precision = scaling.Footprint(int(p), int(a), 0), "mixed" if m else "fp32"
        budget = scaling.memory_budget(fp, int(b), optimizer="adam", precision=precision)
        parts[r] = [budget[k] for k in PARTS]
        best[r] = scaling.max_batch_size(fp, gb * (2**30 if gib else 1e9), optimizer="adam", precision=precision)
    return parts, best


def _budget_wrong(master: int = 4, moments: int = 2, state_bytes: int = 4, act_mixed: int = 2, fixed: bool = True):
    def wrong(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        parts, best = np.zeros((len(x), len(PARTS))), np.zeros(len(x))
        for r, (p, a, b, m, gb) in enumerate(x):
            w, act = (2, act_mixed) if m else (4, 4)
            parts[r] = [w * p, master * p if m else 0, w * p, state_bytes * moments * p, act * a * b]
            per_sample, static = act * a, parts[r, :4].sum() if fixed else 0.0
            best[r] = max(0.0, (gb * 1e9 - static) // per_sample) if static + per_sample <= gb * 1e9 else 0
        return parts, best

    return wrong


_BUDGET_MISTAKES = {
    "mixed precision keeps an FP32 master copy of the weights for the update: 4 more bytes per parameter "
    "(the FP16 weights are only for the arithmetic).": first_different(budget_spec, _budget_wrong(master=0)),
    "Adam keeps two moments per parameter, m and v (8 bytes in FP32), not one.": first_different(
        budget_spec, _budget_wrong(moments=1)
    ),
    "the optimizer state stays FP32 in mixed precision (4 bytes per moment): only weights, gradients and "
    "activations are FP16.": lambda x: np.where(x[:, 3:4] > 0, _budget_wrong(state_bytes=2)(x)[0], budget_spec(x)[0]),
    "mixed precision stores the activations in FP16 (2 bytes each): that is where it saves memory.": first_different(
        budget_spec, _budget_wrong(act_mixed=4)
    ),
    "when not even one sample fits (the weights, gradients and optimizer state alone exceed the memory), the "
    "largest batch is 0, not a negative number.": lambda x: _negative_batch(x),
    "memory_gb is in GB as spec sheets give it, 10**9 bytes, not GiB (2**30).": lambda x: budget_spec(x, gib=True)[1],
    "the weights, gradients and optimizer state take their share before any sample: subtract them from the "
    "memory, then divide by the bytes per sample.": lambda x: _budget_wrong(fixed=False)(x)[1],
}


def _negative_batch(x: np.ndarray) -> np.ndarray:
    parts, best = budget_spec(x)
    fixed, per_sample = parts[:, :4].sum(axis=1), parts[:, 4] / x[:, 2]
    raw = np.floor((x[:, 4] * 1e9 - fixed) / per_sample)
    if not (raw < 0).any():
        raise ValueError("every row fits at least one sample")  # _named_mistake skips it
    return raw


def budget_host(training_bytes: Callable[..., Any], largest_batch: Callable[..., Any]) -> Callable[..., None]:
    """The check's ``host=``: the learner's two functions called on every row of the inputs."""
    needs_functions(
        "budget_host(training_bytes, largest_batch)", training_bytes=training_bytes, largest_batch=largest_batch
    )

    def call(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        parts, best = [], []
        for p, a, b, m, gb in x:
            got = training_bytes(int(p), int(a), int(b), bool(m))
            if got is None:
                raise returned_none("training_bytes")
            if len(got) != len(PARTS):
                raise UsageError(f"training_bytes must return {len(PARTS)} numbers, {PARTS}; it returned {len(got)}.")
            parts.append([float(v) for v in got])
            one = largest_batch(int(p), int(a), float(gb), bool(m))
            if one is None:
                raise returned_none("largest_batch")
            best.append(float(one))
        return np.array(parts), np.array(best)

    return as_host_later(call, 1, "training_bytes")


BUDGET = Problem(
    "lab10.budget",
    usage="L10.BUDGET.check(host=L10.budget_host(training_bytes, largest_batch))",
    spec=budget_spec,
    inputs=_budget_inputs,
    sizes=[1, 2, 40],
    gpu_sizes=[1, 2, 40],  # integer arithmetic on the host: nothing grows with the GPU
    host=budget_host(
        lambda p, a, b, m: budget_spec(np.array([[p, a, b, m, 1.0]]))[0][0],
        lambda p, a, gb, m: budget_spec(np.array([[p, a, 1, m, gb]]))[1][0],
    ),
    out_names=["parts", "batch"],
    rtol=1e-12,
    atol=0.5,
    mistakes=_BUDGET_MISTAKES,
    race_check=False,
    points=2,
)

# ------------------------------------------------------------------------------------ loss scaling


def _unscale_inputs(n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.float32, np.float32]:
    """Scaled gradients (about a third of them beyond the clip once unscaled), inv_scale and clip."""
    g = (rng.standard_normal(n) * 1e3).astype(np.float32)
    if 10 < n < 100:  # a backward pass that produced a nan and no inf (inf - inf, 0 * inf upstream)
        g[n // 3] = np.nan
    elif n >= 100:  # an overflowed FP16 backward pass: a few inf and nan, one in the last partial block
        g[[1, n // 2]] = np.inf, -np.inf
        g[n - 1] = np.nan
    return g, np.float32(2.0**-12), np.float32(0.25)


def _unscaled_clipped(g: np.ndarray, inv: np.float32, low: Any, high: Any) -> np.ndarray:
    """g * inv in float32, its finite values clipped to [low, high]; inf and nan kept as they are."""
    out = (g * inv).astype(np.float32)
    return np.where(np.isfinite(out), np.clip(out, low, high), out).astype(np.float32)


def unscale_spec(g: np.ndarray, inv: np.float32, clip: np.float32) -> tuple[np.ndarray, np.ndarray]:
    """The gradients unscaled (float32) with each finite one clipped to [-clip, clip], an inf or nan left as it
    is; and the flag: 1 if any is inf or nan, else 0."""
    out = _unscaled_clipped(g, inv, -clip, clip)
    return out, np.array([int(not np.isfinite(out).all())], np.int32)


def _unscale_not_clipped(g: np.ndarray, inv: np.float32, clip: np.float32) -> np.ndarray:
    """A known mistake, lesson 10's kernel made in place: unscaled, not clipped."""
    out = (g * inv).astype(np.float32)
    if not (np.abs(out[np.isfinite(out)]) > clip).any():
        raise ValueError("no gradient beyond the clip: the same as the right answer")
    return out


def _unscale_clipped_overflow(g: np.ndarray, inv: np.float32, clip: np.float32) -> list[np.ndarray]:
    """A known mistake: every value clipped, an inf as well (it becomes +-clip and no longer shows). A nan stays nan
    through ``min(max(g, -clip), clip)`` but becomes clip through ``max(-clip, min(clip, g))`` and -clip through
    ``min(clip, max(-clip, g))`` (Python's min and max, which Numba follows, keep their first argument when a
    comparison with nan is false): the outputs the mistake can give."""
    out = (g * inv).astype(np.float32)
    if np.isfinite(out).all():
        raise ValueError("no inf or nan to clip: the same as the right answer")
    clipped = np.clip(out, -clip, clip)  # nan kept
    made = [np.where(np.isnan(out), v, clipped).astype(np.float32) for v in (clip, -clip)]
    return made + [clipped] if np.isinf(out).any() else made  # nan kept and no inf: that is the right answer


def _in_place(ins: tuple, outs: tuple) -> tuple:
    outs[0][...] = ins[0]  # the kernel works on the gradients in place: the output starts as the input
    return outs[0], ins[1], ins[2], outs[1]


UNSCALE = Problem(
    "lab10.unscale",
    spec=unscale_spec,
    inputs=_unscale_inputs,
    sizes=[1, 50, 100, 300],
    gpu_sizes=[1, 50, 100, 300, (1 << 22) + 3],
    launch=launch_1d(TPB, arg=0),
    args=_in_place,
    out_init=0,
    out_names=["grads", "found_inf"],
    rtol=0,
    atol=0,  # a multiplication by a power of two and a clip are exact
    mistakes={
        "this is lesson 10's unscale, which does not clip. This lab's kernel also clips each finite gradient, "
        "once unscaled, to [-clip, clip]: `grads[i] = min(max(g, -clip), clip)`.": _unscale_not_clipped,
        "an inf or nan was clipped to +-clip, which hides the overflow (the step would look clean): test the "
        "unscaled value first, and if it is inf or nan set the flag and store it as it is; clip only finite "
        "values.": _unscale_clipped_overflow,
        "an inf or nan was replaced: store it as it is (the flag makes the scaler skip the step, and the value "
        "shows the overflow to whoever looks at the gradients); clip only finite values.": (
            lambda g, inv, clip: np.where(np.isfinite(g), _unscaled_clipped(g, inv, -clip, clip), 0).astype(np.float32)
        ),
        "negative gradients lost their sign: clipping keeps it, `min(max(g, -clip), clip)` (not `min(abs(g), "
        "clip)`).": lambda g, inv, clip: np.abs(_unscaled_clipped(g, inv, -clip, clip)),
        "only the upper bound was applied: clip to [-clip, clip], `min(max(g, -clip), clip)`, so that large "
        "negative gradients are limited too.": lambda g, inv, clip: _unscaled_clipped(g, inv, None, clip),
        "only the lower bound was applied: clip to [-clip, clip], `min(max(g, -clip), clip)`, so that large "
        "positive gradients are limited too.": lambda g, inv, clip: _unscaled_clipped(g, inv, -clip, None),
        "found_inf is a flag, 0 or 1, not a count: set it with cuda.atomic.max(found_inf, 0, 1).": (
            lambda g, inv, clip: np.array([np.count_nonzero(~np.isfinite(g))], np.int32)
        ),
        "multiply by inv_scale (1 / scale): the gradients come out of the backward pass scaled up.": (
            lambda g, inv, clip: _unscaled_clipped(g, np.float32(1) / inv, -clip, clip)
        ),
        "the gradients are unchanged: write the unscaled, clipped value back into grads[i] (in place).": (
            lambda g, inv, clip: g
        ),
        "found_inf stayed 0 though a gradient is nan: set the flag for nan as well as inf, `if math.isinf(g) or "
        "math.isnan(g):` (or `not math.isfinite(g)`). A nan gradient would poison the update as surely as an inf.": (
            lambda g, inv, clip: np.array([int(np.isinf(g).any())], np.int32)
        ),
    },
    ptx="void(float32[:], float32, float32, int32[:])",
    points=2,
)


def _scaler_inputs(size: tuple[int, int], rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """(steps, n) scaled gradients with inf or nan in some steps, and (initial scale, growth interval)."""
    steps, n = size
    g = (rng.standard_normal((steps, n)) * 50).astype(np.float32)
    bad = [t for t in range(steps) if t in (2, 3) or (t > 7 and rng.random() < 0.3)]  # two overflows in a row
    for t in bad:
        g[t, rng.integers(0, n)] = rng.choice([np.inf, -np.inf, np.nan])
    return g, np.array([2.0**16, 2.0 if steps < 6 else 3.0])


def scaler_sim(
    batches: np.ndarray,
    params: np.ndarray,
    *,
    reset_found: bool = True,
    skip: bool = True,
    reset_good: bool = True,
    grow_every: int | None = None,
    grow_late: bool = False,
    backoff: float = 0.5,
    record_late: bool = False,
    add_scaled: bool = False,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Dynamic loss scaling over the steps: the scale each step used, whether its update was applied, and the
    float32 sum of the applied unscaled gradients (the keywords make the usual mistakes)."""
    scale, interval = float(params[0]), int(params[1])
    grow_every = (interval + grow_late) if grow_every is None else grow_every
    used, applied, total = [], [], np.zeros(batches.shape[1], np.float32)
    found, good = 0, 0
    for g in batches:
        found = 0 if reset_found else found
        out = (g * np.float32(1 / scale)).astype(np.float32)
        found = found or int(not np.isfinite(out).all())
        if not record_late:
            used.append(scale)
        applied.append(0 if found and skip else 1)
        if applied[-1]:
            total += g if add_scaled else out
        if found:
            scale, good = scale * backoff, 0 if reset_good else good
        else:
            good += 1
            if good >= grow_every:
                scale, good = scale * 2, 0
        if record_late:
            used.append(scale)
    return np.array(used), np.array(applied, np.float64), total


def scaler_spec(batches: np.ndarray, params: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    return scaler_sim(batches, params)


def _scaler_mistake(**kw: Any) -> Callable[..., Any]:
    return first_different(scaler_spec, lambda b, p: scaler_sim(b, p, **kw))


def scaler_host(run: Callable[..., Any]) -> Callable[..., None]:
    """The check's ``host=``: ``run(batches, scale, growth_interval)`` with the batches on the device."""
    needs_functions("scaler_host(run_with_loss_scaling)", run_with_loss_scaling=run)

    def call(batches: np.ndarray, params: np.ndarray) -> tuple[np.ndarray, ...]:
        got = run(runtime.to_device(batches), float(params[0]), int(params[1]))
        if got is None:
            raise returned_none("run_with_loss_scaling")
        if not isinstance(got, tuple) or len(got) != 3:
            raise UsageError("run_with_loss_scaling must return (scales, applied, total): three results.")
        scales, applied, total = got
        try:  # a learner's values may be 0-d device arrays (found_inf[0] == 0 in gpu mode): float() reads each
            scales, applied = [float(s) for s in scales], [float(bool(a)) for a in applied]
        except (TypeError, ValueError):
            raise UsageError(
                "run_with_loss_scaling must return scales and applied as lists of numbers and of True/False."
            ) from None
        return (
            np.asarray(scales, np.float64),
            np.asarray(applied, np.float64),
            np.asarray(runtime.to_host(total), np.float32),
        )

    return as_host_later(call, 2, "run_with_loss_scaling")


SCALER = Problem(
    "lab10.scaler",
    usage="L10.SCALER.check(host=L10.scaler_host(run_with_loss_scaling))",
    spec=scaler_spec,
    inputs=_scaler_inputs,
    sizes=[(1, 10), (5, 37), (12, 130)],
    gpu_sizes=[(1, 10), (5, 37), (12, 130), (16, (1 << 20) + 5)],
    host=scaler_host(lambda b, s, k: scaler_sim(runtime.to_host(b), np.array([s, k]))),
    out_names=["scales", "applied", "total"],
    rtol=1e-6,
    atol=1e-6,
    mistakes={
        "found_inf must start at 0 before every step's launch (a fresh zeros(1), or found_inf[0] = 0): the kernel "
        "only ever sets it, so after one overflow every later step would be skipped.": _scaler_mistake(
            reset_found=False
        ),
        "an overflowed step's update must be skipped: its gradients are inf or nan.": _scaler_mistake(skip=False),
        "after an overflow the count of clean steps starts again from 0.": _scaler_mistake(reset_good=False),
        "the scale doubles after growth_interval clean steps in a row, not after every clean step.": _scaler_mistake(
            grow_every=1
        ),
        "the scale doubles after growth_interval clean steps, not growth_interval + 1 (count the step first, "
        "then compare).": _scaler_mistake(grow_late=True),
        "on overflow the scale halves (scale / 2): it was too large.": _scaler_mistake(backoff=2.0),
        "scales[t] is the scale step t ran with: record it before the rule changes it (this looks like the scale "
        "after each step's update).": _scaler_mistake(record_late=True),
        "total holds the scaled gradients (about scale times too large): add the copy your kernel unscaled, not "
        "batches[t].": _scaler_mistake(add_scaled=True),
    },
    race_check=False,
    points=1,
)
