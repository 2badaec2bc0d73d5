"""Lab 10 · scaling up: a memory budget with mixed precision, dynamic loss scaling (a kernel and the scaler's
rule), a ring all-reduce in two phases over uneven chunks with every device's bytes counted, and a
hierarchical all-reduce whose bytes over the slow link between machines are counted.

Most exercises are plain functions (``host=`` adapters below turn them into checks); the unscale kernel is
a real kernel, compiled to PTX. The ring's simulated devices are arrays of the current mode (CuPy in gpu
mode), as in lesson 10. The references here are the course's own models: :func:`gpulab.scaling.memory_budget`
and :func:`gpulab.scaling.max_batch_size` for memory, :func:`ring_sim` for the ring's schedule.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from .. import runtime, scaling
from ..errors import UsageError
from ..exercises import Problem
from ._common import launch_1d

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


def _first_different(spec: Callable[..., tuple], wrong: Callable[..., tuple]) -> Callable[..., Any]:
    """A ``mistakes=`` entry: the first output of ``wrong`` (a whole wrong spec) that differs from ``spec``'s,
    so the hint is found whichever output the learner's mistake shows in first."""

    def first(*inputs: Any) -> Any:
        for good, bad in zip(spec(*inputs), wrong(*inputs)):
            good, bad = np.asarray(good, np.float64), np.asarray(bad, np.float64)
            if good.shape != bad.shape or not np.allclose(good, bad, rtol=1e-5, atol=1e-4, equal_nan=True):
                return bad
        raise ValueError("this mistake gives the right answer on this input")  # _named_mistake skips it

    return first


def _as_host(call: Callable[..., tuple], n_inputs: int, name: str) -> Callable[..., None]:
    """:func:`gpulab.lessons.exercise.as_host`, imported when the check runs (gpulab.lessons imports this
    package, so importing it here at import time would be circular)."""

    def host(*args: Any) -> None:
        from ..lessons.exercise import as_host

        as_host(call, n_inputs, name)(*args)

    host.__name__ = name
    return host


def _none(name: str) -> UsageError:
    return UsageError(f"{name} returned None: it must return its result; is the `return` statement missing?")


# ---------------------------------------------------------------------------------------------- memory


def _budget_inputs(n: int, rng: np.random.Generator) -> np.ndarray:
    """Rows of (parameters, activation values per sample, batch, mixed 0/1, GPU memory in GB)."""
    params = np.round(10 ** rng.uniform(5, 9.3, n))
    acts = np.round(10 ** rng.uniform(3, 7, n))
    batch = rng.integers(1, 4097, n).astype(np.float64)
    mixed = (np.arange(n) % 2).astype(np.float64)  # both precisions in every case of two rows or more
    gb = rng.choice([16.0, 24.0, 40.0, 80.0, 141.0], n)
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
    "(the FP16 weights are only for the arithmetic).": _first_different(budget_spec, _budget_wrong(master=0)),
    "Adam keeps two moments per parameter, m and v (8 bytes in FP32), not one.": _first_different(
        budget_spec, _budget_wrong(moments=1)
    ),
    "the optimizer state stays FP32 in mixed precision (4 bytes per moment): only weights, gradients and "
    "activations are FP16.": lambda x: np.where(x[:, 3:4] > 0, _budget_wrong(state_bytes=2)(x)[0], budget_spec(x)[0]),
    "mixed precision stores the activations in FP16 (2 bytes each): that is where it saves memory.": _first_different(
        budget_spec, _budget_wrong(act_mixed=4)
    ),
    "memory_gb is in GB as spec sheets give it, 10**9 bytes, not GiB (2**30).": lambda x: budget_spec(x, gib=True)[1],
    "the weights, gradients and optimizer state take their share before any sample: subtract them from the "
    "memory, then divide by the bytes per sample.": lambda x: _budget_wrong(fixed=False)(x)[1],
}


def budget_host(training_bytes: Callable[..., Any], largest_batch: Callable[..., Any]) -> Callable[..., None]:
    """The check's ``host=``: the learner's two functions called on every row of the inputs."""

    def call(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        parts, best = [], []
        for p, a, b, m, gb in x:
            got = training_bytes(int(p), int(a), int(b), bool(m))
            if got is None:
                raise _none("training_bytes")
            if len(got) != len(PARTS):
                raise UsageError(f"training_bytes must return {len(PARTS)} numbers, {PARTS}; it returned {len(got)}.")
            parts.append([float(v) for v in got])
            one = largest_batch(int(p), int(a), float(gb), bool(m))
            if one is None:
                raise _none("largest_batch")
            best.append(float(one))
        return np.array(parts), np.array(best)

    return _as_host(call, 1, "training_bytes")


BUDGET = Problem(
    "lab10.budget",
    spec=budget_spec,
    inputs=_budget_inputs,
    sizes=[1, 2, 40],
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


def _unscale_inputs(n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.float32]:
    g = (rng.standard_normal(n) * 1e3).astype(np.float32)
    if n > 10:  # an overflowed FP16 backward pass: a few inf and nan, one in the last partial block
        g[[1, n // 2]] = np.inf, -np.inf
        g[n - 1] = np.nan
    return g, np.float32(2.0**-12)


def unscale_spec(g: np.ndarray, inv: np.float32) -> tuple[np.ndarray, np.ndarray]:
    """The gradients unscaled (float32) and the flag: 1 if any is inf or nan, else 0."""
    out = (g * inv).astype(np.float32)
    return out, np.array([int(not np.isfinite(out).all())], np.int32)


def _in_place(ins: tuple, outs: tuple) -> tuple:
    outs[0][...] = ins[0]  # the kernel works on the gradients in place: the output starts as the input
    return outs[0], ins[1], outs[1]


UNSCALE = Problem(
    "lab10.unscale",
    spec=unscale_spec,
    inputs=_unscale_inputs,
    sizes=[1, 100, 300],
    gpu_sizes=[1, 100, 300, (1 << 22) + 3],
    launch=launch_1d(TPB, arg=0),
    args=_in_place,
    out_init=0,
    out_names=["grads", "found_inf"],
    rtol=0,
    atol=0,  # a multiplication by a power of two is exact
    mistakes={
        "found_inf is a flag, 0 or 1, not a count: set it with cuda.atomic.max(found_inf, 0, 1).": lambda g, inv: (
            np.array([np.count_nonzero(~np.isfinite(g))], np.int32)
        ),
        "multiply by inv_scale (1 / scale): the gradients come out of the backward pass scaled up.": lambda g, inv: (
            g / inv
        ).astype(np.float32),
        "the gradients are unchanged: write grads[i] * inv_scale back into grads[i] (in place).": lambda g, inv: g,
    },
    ptx="void(float32[:], float32, int32[:])",
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
        used.append(scale)
        applied.append(0 if found and skip else 1)
        if applied[-1]:
            total += out
        if found:
            scale, good = scale * backoff, 0 if reset_good else good
        else:
            good += 1
            if good >= grow_every:
                scale, good = scale * 2, 0
    return np.array(used), np.array(applied, np.float64), total


def scaler_spec(batches: np.ndarray, params: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    return scaler_sim(batches, params)


def _scaler_mistake(**kw: Any) -> Callable[..., Any]:
    return _first_different(scaler_spec, lambda b, p: scaler_sim(b, p, **kw))


def scaler_host(run: Callable[..., Any]) -> Callable[..., None]:
    """The check's ``host=``: ``run(batches, scale, growth_interval)`` with the batches on the device."""

    def call(batches: np.ndarray, params: np.ndarray) -> tuple[np.ndarray, ...]:
        got = run(runtime.to_device(batches), float(params[0]), int(params[1]))
        if got is None:
            raise _none("run_with_loss_scaling")
        if not isinstance(got, tuple) or len(got) != 3:
            raise UsageError("run_with_loss_scaling must return (scales, applied, total): three results.")
        scales, applied, total = got
        return (
            np.asarray(scales, np.float64),
            np.asarray(applied, np.float64).astype(bool).astype(np.float64),
            np.asarray(runtime.to_host(total), np.float32),
        )

    return _as_host(call, 2, "run_with_loss_scaling")


SCALER = Problem(
    "lab10.scaler",
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
    },
    race_check=False,
    points=1,
)

# --------------------------------------------------------------------------------------------- ring


def chunk_bounds(length: int, p: int) -> np.ndarray:
    """``p + 1`` boundaries cutting ``length`` values into ``p`` chunks as even as can be, the first
    ``length % p`` one longer (``np.array_split``'s rule): chunk ``k`` is ``bounds[k]:bounds[k + 1]``."""
    sizes = [length // p + (k < length % p) for k in range(p)]
    return np.concatenate([[0], np.cumsum(sizes)]).astype(int)


def ring_sim(
    x: np.ndarray,
    *,
    owner: int = 0,
    rs_steps: int | None = None,
    gather_adds: bool = False,
    bounds: Sequence[int] | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The ring on the rows of ``x`` (one per device), in float32: (each device's own chunk after the reduce-
    scatter, laid end to end; the bytes each sent in it; every buffer after the all-gather; the bytes each sent
    in all). Device i owns chunk (i + owner) % p (the keywords make the usual mistakes)."""
    p, n = x.shape
    b = chunk_bounds(n, p) if bounds is None else bounds
    bufs, sent = x.astype(np.float32), np.zeros(p)
    for s in range(p - 1 if rs_steps is None else rs_steps):
        ks = [(i - s - 1 + owner) % p for i in range(p)]
        msgs = [bufs[i, b[k] : b[k + 1]].copy() for i, k in enumerate(ks)]  # all devices send at once
        for i, (k, m) in enumerate(zip(ks, msgs)):
            bufs[(i + 1) % p, b[k] : b[k + 1]] += m
            sent[i] += m.nbytes
    c = chunk_bounds(n, p)  # what device i must own, whichever chunks it used
    own = np.concatenate([bufs[i, c[i] : c[i + 1]] for i in range(p)])
    rs_sent = sent.copy()
    for s in range(p - 1):
        ks = [(i - s + owner) % p for i in range(p)]
        msgs = [bufs[i, b[k] : b[k + 1]].copy() for i, k in enumerate(ks)]
        for i, (k, m) in enumerate(zip(ks, msgs)):
            dst = bufs[(i + 1) % p, b[k] : b[k + 1]]
            dst[...] = dst + m if gather_adds else m
            sent[i] += m.nbytes
    return own, rs_sent, bufs, sent


def ring_spec(x: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    return ring_sim(x)


def reduce_scatter(bufs: list) -> list[int]:
    """Reference: the ring's first phase in place on ``bufs`` (device i ends with the sum of chunk i); the
    bytes each device sent."""
    p = len(bufs)
    b, sent = chunk_bounds(bufs[0].size, p), [0] * p
    for s in range(p - 1):
        ks = [(i - s - 1) % p for i in range(p)]
        msgs = [bufs[i][b[k] : b[k + 1]].copy() for i, k in enumerate(ks)]
        for i, (k, m) in enumerate(zip(ks, msgs)):
            bufs[(i + 1) % p][b[k] : b[k + 1]] += m
            sent[i] += m.nbytes
    return sent


def all_gather(bufs: list) -> list[int]:
    """Reference: the ring's second phase in place (device i starts with chunk i); the bytes each sent."""
    p = len(bufs)
    b, sent = chunk_bounds(bufs[0].size, p), [0] * p
    for s in range(p - 1):
        ks = [(i - s) % p for i in range(p)]
        msgs = [bufs[i][b[k] : b[k + 1]].copy() for i, k in enumerate(ks)]
        for i, (k, m) in enumerate(zip(ks, msgs)):
            bufs[(i + 1) % p][b[k] : b[k + 1]] = m
            sent[i] += m.nbytes
    return sent


def _device_buffers(x: np.ndarray) -> list:
    xp = runtime.xp()
    return [xp.asarray(runtime.to_device(np.ascontiguousarray(row))) for row in x]  # one array per device


def _stack(bufs: Sequence[Any], name: str, shape: tuple[int, ...]) -> np.ndarray:
    out = np.stack([np.asarray(runtime.to_host(b), np.float32).ravel() for b in bufs]) if len(bufs) else None
    if out is None or out.shape != shape:
        raise UsageError(
            f"{name} must leave every device's whole buffer in place: expected {shape}, found "
            f"{None if out is None else out.shape}."
        )
    return out


def _bytes(sent: Any, p: int, name: str) -> np.ndarray:
    if sent is None:
        raise UsageError(f"{name} returned None: return the list of bytes each device sent.")
    arr = np.asarray([float(v) for v in sent])
    if arr.shape != (p,):
        raise UsageError(f"{name} must return one byte count per device ({p}), got {arr.shape[0]} values.")
    return arr


def ring_host(rs: Callable[[list], Any], ag: Callable[[list], Any]) -> Callable[..., None]:
    """The check's ``host=``: the learner's reduce_scatter, then all_gather, on device buffers."""

    def call(x: np.ndarray) -> tuple[np.ndarray, ...]:
        p, n = x.shape
        bufs = _device_buffers(x)
        rs_sent = _bytes(rs(bufs), p, "reduce_scatter")
        b, mid = chunk_bounds(n, p), _stack(bufs, "reduce_scatter", x.shape)
        own = np.concatenate([mid[i, b[i] : b[i + 1]] for i in range(p)])
        ag_sent = _bytes(ag(bufs), p, "all_gather")
        return own, rs_sent, _stack(bufs, "all_gather", x.shape), rs_sent + ag_sent

    return _as_host(call, 1, "reduce_scatter")


def _ring_inputs(size: tuple[int, int], rng: np.random.Generator) -> np.ndarray:
    return rng.standard_normal(size).astype(np.float32)


def _ring_mistake(**kw: Any) -> Callable[..., Any]:
    return _first_different(ring_spec, lambda x: ring_sim(x, **kw))


def _values_not_bytes(x: np.ndarray) -> tuple:
    own, rs_sent, bufs, sent = ring_spec(x)
    return own, rs_sent / 4, bufs, sent / 4


def _floor_chunks(x: np.ndarray) -> tuple:
    p, n = x.shape
    return ring_sim(x, bounds=[k * (n // p) for k in range(p)] + [n])  # the last chunk takes the remainder


RING = Problem(
    "lab10.ring",
    spec=ring_spec,
    inputs=_ring_inputs,
    sizes=[(1, 5), (2, 7), (3, 10), (4, 30), (5, 3), (8, 203)],
    gpu_sizes=[(1, 5), (2, 7), (3, 10), (4, 30), (5, 3), (8, (1 << 20) + 3)],
    host=ring_host(reduce_scatter, all_gather),
    out_names=["own_chunks", "reduce_scatter_sent", "buffers", "sent"],
    rtol=1e-5,
    atol=1e-4,  # sums of at most 8 standard normals: float32 rounding stays far below
    mistakes={
        "device i must end the reduce-scatter with the sum of chunk i: in step s it sends chunk (i - s - 1) % p "
        "(lesson 10's ring leaves chunk i + 1 there).": _ring_mistake(owner=1),
        "the reduce-scatter takes p - 1 steps: after them every chunk's sum is complete.": lambda x: _first_different(
            ring_spec, lambda y: ring_sim(y, rs_steps=y.shape[0])
        )(x),
        "the all-gather overwrites the neighbour's chunk with the sum (bufs[dst][...] = msg); adding counts the "
        "neighbour's partial sum again.": _ring_mistake(gather_adds=True),
        "sent is in bytes (msg.nbytes, 4 per float32), not values.": _first_different(ring_spec, _values_not_bytes),
        "chunks come from chunk_bounds(length, p): the first length % p chunks are one longer, so no chunk is "
        "more than one value longer than another.": _first_different(ring_spec, _floor_chunks),
    },
    race_check=False,
    points=3,
)

# ------------------------------------------------------------------------------------- hierarchical


def hierarchical_allreduce(buffers: list, gpus_per_node: int, rs: Callable, ag: Callable) -> tuple[list, list, list]:
    """Reference: reduce-scatter in each node, a ring across nodes per local rank on its chunk, all-gather in
    each node. Returns (buffers, bytes each GPU sent inside its node, bytes each GPU sent between nodes)."""
    g, n_gpus = gpus_per_node, len(buffers)
    nodes = n_gpus // g
    fast, slow = [0] * n_gpus, [0] * n_gpus
    for node in range(nodes):
        ranks = range(node * g, node * g + g)
        for r, s in zip(ranks, rs([buffers[r] for r in ranks])):
            fast[r] += s
    b = chunk_bounds(buffers[0].size, g)
    for local in range(g):  # one ring across the nodes per local rank, on the chunk that rank owns
        ranks = range(local, n_gpus, g)
        group = [buffers[r][b[local] : b[local + 1]] for r in ranks]  # views: the rings work in place
        sent = [a + c for a, c in zip(rs(group), ag(group))]
        for r, s in zip(ranks, sent):
            slow[r] += s
    for node in range(nodes):
        ranks = range(node * g, node * g + g)
        for r, s in zip(ranks, ag([buffers[r] for r in ranks])):
            fast[r] += s
    return buffers, fast, slow


def _hier_inputs(size: tuple[int, int, int], rng: np.random.Generator) -> tuple[np.ndarray, int]:
    nodes, g, n = size
    return rng.standard_normal((nodes * g, n)).astype(np.float32), np.array([g])


def hierarchical_spec(x: np.ndarray, g: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    bufs, fast, slow = hierarchical_allreduce(list(x.astype(np.float32).copy()), int(g[0]), reduce_scatter, all_gather)
    return np.stack(bufs), np.array(fast, np.float64), np.array(slow, np.float64)


def _hier_flat(x: np.ndarray, g: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One flat ring over every GPU, all its bytes counted as crossing between nodes."""
    _, _, bufs, sent = ring_sim(x)
    return bufs, np.zeros(len(x)), sent


def _hier_whole(x: np.ndarray, g: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The ring across nodes on each GPU's whole buffer instead of its chunk."""
    bufs, fast, _ = hierarchical_spec(x, g)
    k = len(x) // int(g[0])
    per_node = ring_sim(np.zeros((k, x.shape[1]), np.float32))[3]  # a ring of k over the whole buffer
    return bufs, fast, per_node[np.arange(len(x)) // int(g[0])]


def _hier_swapped(x: np.ndarray, g: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    bufs, fast, slow = hierarchical_spec(x, g)
    return bufs, slow, fast


def hierarchical_host(fn: Callable[..., Any], rs: Callable = reduce_scatter, ag: Callable = all_gather) -> Callable:
    """The check's ``host=``: ``fn(buffers, gpus_per_node, reduce_scatter, all_gather)`` on device buffers, given
    the reference phases (so this check does not depend on Exercise 3)."""

    def call(x: np.ndarray, g: np.ndarray) -> tuple[np.ndarray, ...]:
        bufs = _device_buffers(x)
        got = fn(bufs, int(g[0]), rs, ag)
        if got is None:
            raise _none("hierarchical_allreduce")
        if not isinstance(got, tuple) or len(got) != 3:
            raise UsageError("hierarchical_allreduce must return (buffers, fast_sent, slow_sent): three results.")
        out, fast, slow = got
        p = len(x)
        return (
            _stack(out, "hierarchical_allreduce", x.shape),
            _bytes(fast, p, "fast_sent"),
            _bytes(slow, p, "slow_sent"),
        )

    return _as_host(call, 2, "hierarchical_allreduce")


HIERARCHICAL = Problem(
    "lab10.hierarchical",
    spec=hierarchical_spec,
    inputs=_hier_inputs,
    # the first case tells the mistakes apart (with one node, a flat ring looks like fast and slow swapped)
    sizes=[(2, 2, 11), (1, 2, 9), (2, 1, 7), (3, 4, 101), (2, 4, 3)],
    gpu_sizes=[(2, 2, 11), (1, 2, 9), (2, 1, 7), (3, 4, 101), (2, 4, 3), (4, 8, (1 << 18) + 7)],
    host=hierarchical_host(hierarchical_allreduce),
    out_names=["buffers", "fast_sent", "slow_sent"],
    rtol=1e-5,
    atol=1e-4,
    mistakes={
        "that is one flat ring over every GPU: its every step crosses the slow link. Reduce-scatter inside each "
        "node first, so only each GPU's 1/gpus_per_node chunk crosses between nodes.": _first_different(
            hierarchical_spec, _hier_flat
        ),
        "between nodes each GPU all-reduces only the chunk it owns after the node's reduce-scatter (a ring over "
        "the GPUs of the same local rank), not its whole buffer.": _first_different(hierarchical_spec, _hier_whole),
        "the bytes inside a node (fast) and between nodes (slow) are swapped.": _first_different(
            hierarchical_spec, _hier_swapped
        ),
    },
    race_check=False,
    points=4,
)
