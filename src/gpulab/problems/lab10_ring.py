"""Lab 10's collectives: a ring all-reduce in two phases over uneven chunks, every device's bytes counted, and a
hierarchical all-reduce (inside nodes, then across them) whose bytes over the slow link are counted.

The simulated devices are arrays of the current mode (CuPy in gpu mode), one per device, as in lesson 10. The
checks' shared helpers (``first_different``, ``as_host_later``, ``returned_none``) live here too; :mod:`.lab10`
re-exports the problems.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from .. import runtime
from ..errors import UsageError
from ..exercises import Problem

__all__ = [
    "HIERARCHICAL",
    "RING",
    "all_gather",
    "as_host_later",
    "chunk_bounds",
    "first_different",
    "hierarchical_allreduce",
    "hierarchical_host",
    "hierarchical_spec",
    "needs_functions",
    "reduce_scatter",
    "returned_none",
    "ring_host",
    "ring_sim",
    "ring_spec",
]


def first_different(spec: Callable[..., tuple], wrong: Callable[..., tuple]) -> Callable[..., Any]:
    """A ``mistakes=`` entry: the first output of ``wrong`` (a whole wrong spec) that differs from ``spec``'s,
    so the hint is found whichever output the learner's mistake shows in first."""

    def first(*inputs: Any) -> Any:
        for good, bad in zip(spec(*inputs), wrong(*inputs)):
            good, bad = np.asarray(good, np.float64), np.asarray(bad, np.float64)
            if good.shape != bad.shape or not np.allclose(good, bad, rtol=1e-5, atol=1e-4, equal_nan=True):
                return bad
        raise ValueError("this mistake gives the right answer on this input")  # _named_mistake skips it

    return first


def as_host_later(call: Callable[..., tuple], n_inputs: int, name: str) -> Callable[..., None]:
    """:func:`gpulab.lessons.exercise.as_host`, imported when the check runs (gpulab.lessons imports this
    package, so importing it here at import time would be circular)."""

    def host(*args: Any) -> None:
        from ..lessons.exercise import as_host

        as_host(call, n_inputs, name)(*args)

    host.__name__ = name
    return host


def needs_functions(call: str, **functions: Any) -> None:
    """Refuse an adapter's argument that is not a function (None, a number, what the function returned): the check
    would fail inside the adapter instead. ``call`` is how the notebook writes the adapter's call."""
    for name, fn in functions.items():
        if not callable(fn):
            what = "None" if fn is None else f"a {type(fn).__name__}"
            raise UsageError(
                f"{call} takes your functions themselves; {name} is {what}. Pass the function by its name, without "
                f"parentheses ({name}, not {name}(...)), after running the cell that defines it."
            )


def returned_none(name: str) -> UsageError:
    """:func:`gpulab.lessons.exercise.returned_none`'s verdict as an error (imported when raised, as above)."""
    from ..lessons.exercise import returned_none as verdict

    return UsageError(verdict(name))


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
    needs_functions("ring_host(reduce_scatter, all_gather)", reduce_scatter=rs, all_gather=ag)

    def call(x: np.ndarray) -> tuple[np.ndarray, ...]:
        p, n = x.shape
        bufs = _device_buffers(x)
        rs_sent = _bytes(rs(bufs), p, "reduce_scatter")
        b, mid = chunk_bounds(n, p), _stack(bufs, "reduce_scatter", x.shape)
        own = np.concatenate([mid[i, b[i] : b[i + 1]] for i in range(p)])
        ag_sent = _bytes(ag(bufs), p, "all_gather")
        return own, rs_sent, _stack(bufs, "all_gather", x.shape), rs_sent + ag_sent

    return as_host_later(call, 1, "reduce_scatter")


def _ring_inputs(size: tuple[int, int], rng: np.random.Generator) -> np.ndarray:
    return rng.standard_normal(size).astype(np.float32)


def _ring_mistake(**kw: Any) -> Callable[..., Any]:
    return first_different(ring_spec, lambda x: ring_sim(x, **kw))


def _values_not_bytes(x: np.ndarray) -> tuple:
    own, rs_sent, bufs, sent = ring_spec(x)
    return own, rs_sent / 4, bufs, sent / 4


def _received(x: np.ndarray) -> tuple:
    """Each message's bytes counted on the device that receives it, (i + 1) % p, not on the sender."""
    own, rs_sent, bufs, sent = ring_spec(x)
    return own, np.roll(rs_sent, 1), bufs, np.roll(sent, 1)


def _floor_chunks(x: np.ndarray) -> tuple:
    p, n = x.shape
    return ring_sim(x, bounds=[k * (n // p) for k in range(p)] + [n])  # the last chunk takes the remainder


RING = Problem(
    "lab10.ring",
    usage="L10.RING.check(host=L10.ring_host(reduce_scatter, all_gather))",
    spec=ring_spec,
    inputs=_ring_inputs,
    sizes=[(1, 5), (2, 7), (3, 10), (4, 30), (5, 3), (8, 203)],
    gpu_sizes=[(1, 5), (2, 7), (3, 10), (4, 30), (5, 3), (8, (1 << 20) + 3)],
    host=ring_host(reduce_scatter, all_gather),
    out_names=["own_chunks", "reduce_scatter_sent", "buffers", "sent"],
    updated_inputs=(0,),  # the simulator's device buffers are views of x, which the rings sum in place
    rtol=1e-5,
    atol=1e-4,  # sums of at most 8 standard normals: float32 rounding stays far below
    mistakes={
        "device i must end the reduce-scatter with the sum of chunk i: in step s it sends chunk (i - s - 1) % p "
        "(lesson 10's ring leaves chunk i + 1 there).": _ring_mistake(owner=1),
        "the reduce-scatter takes p - 1 steps: after them every chunk's sum is complete.": lambda x: first_different(
            ring_spec, lambda y: ring_sim(y, rs_steps=y.shape[0])
        )(x),
        "the all-gather overwrites the neighbour's chunk with the sum (bufs[dst][...] = msg); adding counts the "
        "neighbour's partial sum again.": _ring_mistake(gather_adds=True),
        "sent is in bytes (msg.nbytes, 4 per float32), not values.": first_different(ring_spec, _values_not_bytes),
        "these are the bytes each device received: count msg.nbytes on the sender, device i, not on (i + 1) % p.": (
            first_different(ring_spec, _received)
        ),
        "chunks come from chunk_bounds(length, p): the first length % p chunks are one longer, so no chunk is "
        "more than one value longer than another.": first_different(ring_spec, _floor_chunks),
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


def _hier_inputs(size: tuple[int, int, int], rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
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


def _hier_one_phase(x: np.ndarray, g: np.ndarray) -> list:
    """slow_sent with one phase of each ring across nodes counted: only its reduce-scatter, or only its all-gather."""
    slow, gpus, b = hierarchical_spec(x, g)[2], int(g[0]), chunk_bounds(x.shape[1], int(g[0]))
    counts = []
    for phase in (reduce_scatter, all_gather):
        only = np.zeros(len(x))
        for local in range(gpus):
            ranks = list(range(local, len(x), gpus))
            only[ranks] = phase([np.zeros(b[local + 1] - b[local], np.float32) for _ in ranks])
        counts.append(only)
    return [c for c in counts if not np.allclose(c, slow)]


def _hier_swapped(x: np.ndarray, g: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    bufs, fast, slow = hierarchical_spec(x, g)
    return bufs, slow, fast


def hierarchical_host(fn: Callable[..., Any], rs: Callable = reduce_scatter, ag: Callable = all_gather) -> Callable:
    """The check's ``host=``: ``fn(buffers, gpus_per_node, reduce_scatter, all_gather)`` on device buffers, given
    the reference phases (so this check does not depend on Exercise 3)."""
    needs_functions("hierarchical_host(hierarchical_allreduce)", hierarchical_allreduce=fn)

    def call(x: np.ndarray, g: np.ndarray) -> tuple[np.ndarray, ...]:
        bufs = _device_buffers(x)
        got = fn(bufs, int(g[0]), rs, ag)
        if got is None:
            raise returned_none("hierarchical_allreduce")
        if not isinstance(got, tuple) or len(got) != 3:
            raise UsageError("hierarchical_allreduce must return (buffers, fast_sent, slow_sent): three results.")
        out, fast, slow = got
        p = len(x)
        return (
            _stack(out, "hierarchical_allreduce", x.shape),
            _bytes(fast, p, "fast_sent"),
            _bytes(slow, p, "slow_sent"),
        )

    return as_host_later(call, 2, "hierarchical_allreduce")


HIERARCHICAL = Problem(
    "lab10.hierarchical",
    usage="L10.HIERARCHICAL.check(host=L10.hierarchical_host(hierarchical_allreduce))",
    spec=hierarchical_spec,
    inputs=_hier_inputs,
    # the first case tells the mistakes apart (with one node, a flat ring looks like fast and slow swapped)
    sizes=[(2, 2, 11), (1, 2, 9), (2, 1, 7), (3, 4, 101), (2, 4, 3)],
    gpu_sizes=[(2, 2, 11), (1, 2, 9), (2, 1, 7), (3, 4, 101), (2, 4, 3), (4, 8, (1 << 18) + 7)],
    host=hierarchical_host(hierarchical_allreduce),
    out_names=["buffers", "fast_sent", "slow_sent"],
    updated_inputs=(0,),  # the simulator's device buffers are views of x, which the rings sum in place
    rtol=1e-5,
    atol=1e-4,
    mistakes={
        "that is one flat ring over every GPU: its every step crosses the slow link. Reduce-scatter inside each "
        "node first, so only each GPU's 1/gpus_per_node chunk crosses between nodes.": first_different(
            hierarchical_spec, _hier_flat
        ),
        "between nodes each GPU all-reduces only the chunk it owns after the node's reduce-scatter (a ring over "
        "the GPUs of the same local rank), not its whole buffer.": first_different(hierarchical_spec, _hier_whole),
        "slow_sent counts one phase of each ring across nodes: it is an all-reduce, so add what each GPU sends in "
        "its reduce_scatter and in its all_gather.": _hier_one_phase,
        "the bytes inside a node (fast) and between nodes (slow) are swapped.": first_different(
            hierarchical_spec, _hier_swapped
        ),
    },
    race_check=False,
    points=4,
)
