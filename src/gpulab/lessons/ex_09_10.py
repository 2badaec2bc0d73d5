"""The exercises of lessons 09 (training: the network's multiply-adds, one training step, a confusion-matrix kernel) and 10
(scaling up: the ring all-reduce, unscaling mixed-precision gradients) as data, collected with the other
``ex_*`` modules by :mod:`.problems`. Reference kernels: :mod:`.answers_05_10`; the function
exercises' references are the library's own (:func:`gpulab.nn.cost.cnn_forward_macs`,
:func:`gpulab.scaling_data_parallel.ring_steps`, which learners call as ``scaling.ring_steps``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ..errors import UsageError
from ..exercises import Problem
from ..nn.cost import cnn_forward_macs
from ..problems import launch_1d
from ..scaling_data_parallel import ring_steps
from . import answers_05_10 as _a
from . import step_check
from .exercise import Exercise, as_host, returned_none

__all__ = ["EXERCISES_LIST", "confusion_spec"]

TPB = _a.TPB  # threads per block, 1-D exercises


# --- 09 · training: count the network's work, and its test results on the GPU -------------------------


def _macs_inputs(n: int, rng: np.random.Generator) -> np.ndarray:
    """Rows (image size, c1, c2, hidden, classes); the first is the course's full-width network on MNIST."""
    x = np.stack(
        [4 * rng.integers(1, 17, n), rng.integers(1, 65, n), rng.integers(1, 129, n), rng.integers(1, 513, n)]
        + [rng.integers(2, 21, n)],
        axis=1,
    )
    x[0] = (28, 32, 64, 128, 10)
    return x


def _macs(x: np.ndarray, *, pad: int = 1, pool: int = 2, in_channels: bool = True, linear: bool = True) -> np.ndarray:
    """The multiply-adds of each row of :func:`_macs_inputs`, and (with other arguments) the named mistakes."""
    s, c1, c2, hidden, classes = (x[:, i].astype(np.float64) for i in range(5))
    o1 = s + 2 * pad - 2  # a 3x3 convolution's output size (pad=0: the mistake of forgetting the padding)
    o2 = np.floor(s / pool) + 2 * pad - 2
    conv = o1 * o1 * c1 * 9 + o2 * o2 * c2 * (c1 if in_channels else 1) * 9
    return conv + (c2 * (np.floor(s / 4) ** 2) * hidden + hidden * classes if linear else 0)


def _macs_host(fn: Callable[..., Any]) -> Callable[..., None]:
    def per_row(x: np.ndarray) -> np.ndarray:
        got = [fn(int(s), (int(c1), int(c2)), int(hidden), int(classes)) for s, c1, c2, hidden, classes in x]
        if any(g is None for g in got):
            raise UsageError(returned_none("cnn_forward_macs"))
        for g in got:
            number = isinstance(g, (int, float, np.integer, np.floating)) or (
                isinstance(g, np.ndarray) and g.ndim == 0 and g.dtype.kind in "iuf"
            )
            if isinstance(g, (bool, np.bool_)) or not number:
                shown = repr(g) if len(repr(g)) <= 60 else repr(g)[:57] + "..."
                raise UsageError(
                    "cnn_forward_macs must return one number, the network's multiply-adds (e.g. `return total`); "
                    f"it returned a {type(g).__name__}: {shown}. Return the total as an int: add the layers' counts, and format only when printing."
                )
        return np.array([float(g) for g in got], dtype=np.float64)

    return as_host(per_row, 1, "cnn_forward_macs")


def confusion_spec(logits: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """Counts m[true label, predicted label] (int32, classes x classes); the prediction is np.argmax's."""
    m = np.zeros((logits.shape[1],) * 2, np.int32)
    np.add.at(m, (labels, logits.argmax(axis=1)), 1)
    return m


def _confusion_inputs(n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    # whole-number logits in a small range: many rows tie for the largest, as untrained networks' do
    return rng.integers(-2, 3, (n, 10)).astype(np.float32), rng.integers(0, 10, n).astype(np.int64)


def _last_max(logits: np.ndarray, labels: np.ndarray) -> np.ndarray:
    k = logits.shape[1]
    m = np.zeros((k, k), np.int32)
    np.add.at(m, (labels, k - 1 - logits[:, ::-1].argmax(axis=1)), 1)
    return m


def _lesson09() -> list[Exercise]:
    return [
        Exercise(
            "09",
            "cnn_forward_macs",
            Problem(
                "cnn_forward_macs",
                _macs,
                lambda n, rng: (_macs_inputs(n, rng),),
                sizes=[1, 5, 40],
                host=_macs_host(cnn_forward_macs),  # no PTX check: host arithmetic, no kernel
                rtol=0,
                race_check=False,  # a plain function: no threads whose schedule could matter
                atol=0.5,
                mistakes={
                    "the 3x3 convolutions have padding=1: every pixel gets a window, so the output is S x S, not "
                    "(S-2) x (S-2).": lambda x: _macs(x, pad=0),
                    "the second convolution runs after the first 2x2 max-pool: on (S/2) x (S/2) images.": lambda x: (
                        _macs(x, pool=1)
                    ),
                    "each output of the second convolution sums over all c1 input channels: c1 x 3 x 3 "
                    "multiply-adds, not 3 x 3.": lambda x: _macs(x, in_channels=False),
                    "that counts FLOPs, 2 per multiply-add: count multiply-adds.": lambda x: 2 * _macs(x),
                    "that is in millions: return the count itself (format it only when you print it).": lambda x: (
                        _macs(x) / 1e6
                    ),
                    "add the two linear layers: (c2 x S/4 x S/4) x hidden, then hidden x classes.": lambda x: _macs(
                        x, linear=False
                    ),
                },
            ),
            cnn_forward_macs,
            adapt=_macs_host,
        ),
        Exercise(
            "09",
            "train_step",
            Problem(
                "train_step",
                step_check.step_spec,
                step_check.step_inputs,
                sizes=step_check.SIZES,
                host=step_check.step_host(_a.train_step),  # no PTX check: host code (the nn engine), no kernel
                out_names=["weights", "losses"],
                rtol=1e-5,
                atol=1e-6,
                race_check=False,  # a plain function: no threads whose schedule could matter
                mistakes=step_check.MISTAKES,
            ),
            _a.train_step,
            adapt=step_check.step_host,
        ),
        Exercise(
            "09",
            "confusion",
            Problem(
                "confusion_kernel",
                confusion_spec,
                _confusion_inputs,
                sizes=[1, 100, 300],
                launch=launch_1d(TPB, arg=1),  # one thread per image (per label)
                ptx="auto",  # a GPU must compile it too (NVVM, ptxas; sm_75), for the first case's argument types
                out_init=0,
                out_names=["m"],
                rtol=0,
                atol=0,
                mistakes={
                    "on a tie the prediction is the first of the largest logits (as np.argmax): compare with >, "
                    "not >=.": _last_max,
                    "rows are the true labels and columns the predictions: m[labels[r], best].": lambda lg, lb: (
                        confusion_spec(lg, lb).T.copy()
                    ),
                },
            ),
            _a.confusion_kernel,
        ),
    ]


def _unscale_inputs(n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.float32]:
    g = (rng.standard_normal(n) * 1e3).astype(np.float32)
    if n > 10:  # what an overflowed FP16 backward hands over: 3 infs and 2 NaNs, so that the counts of a kernel
        g[[1, 3, 5]] = np.inf, np.inf, -np.inf  # that misses one kind (3 or 2) or sets a flag (1) tell them apart
        g[[n - 3, n - 1]] = np.nan
    return g, np.float32(1 / 1024)


def _unscale_spec(g: np.ndarray, inv: np.float32) -> tuple[np.ndarray, np.ndarray]:
    out = (g * inv).astype(np.float32)
    return out, np.array([np.count_nonzero(~np.isfinite(out))], np.int32)


def _unscale_counting(test: Any) -> Any:
    """found_inf of a kernel that counts the elements of out for which ``test`` holds (one kind of non-finite)."""
    return lambda g, inv: np.array([np.count_nonzero(test((g * inv).astype(np.float32)))], np.int32)


def _unscale_flag(g: np.ndarray, inv: np.float32) -> np.ndarray:
    """found_inf of a kernel that sets it to 1 (a flag) in place of counting."""
    return np.array([min(1, int(_unscale_spec(g, inv)[1][0]))], np.int32)


UNSCALE_MISTAKES = {
    "found_inf counted the infs only: a NaN is not inf (math.isinf(nan) is False), and it poisons the update as "
    "much. Count NaN too: `if math.isinf(v) or math.isnan(v):`.": _unscale_counting(np.isinf),
    "found_inf counted the NaNs only: an overflowed gradient is inf, which math.isnan does not see. Count both: "
    "`if math.isinf(v) or math.isnan(v):`.": _unscale_counting(np.isnan),
    "found_inf is 1, a flag, where it counts the elements of out that are inf or nan: add 1 for each with "
    "`cuda.atomic.add(found_inf, 0, 1)` (many threads find one at once).": _unscale_flag,
}


def _ring_inputs(size: tuple[int, int], rng: np.random.Generator) -> tuple[np.ndarray]:
    n, length = size
    return (rng.standard_normal((n, length)).astype(np.float32),)


def _ring_spec(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Every device ends with the sum; device 0 sent 2(N-1)/N of its buffer (the sizes' N divides the length)."""
    n = x.shape[0]
    return np.tile(x.sum(axis=0, dtype=np.float32), (n, 1)), _ring_sent(x)


def _ring_sent(x: np.ndarray, factor: float = 1.0) -> np.ndarray:
    n = x.shape[0]
    return np.array([2 * (n - 1) / n * x[0].nbytes * factor])


def _reduce_scatter_only(x: np.ndarray, steps: int | None = None) -> np.ndarray:
    """The buffers after the first half of the ring: device i holds the whole sum of chunk i + 1 only
    (``steps``: that many reduce-scatter steps instead of N - 1, a mistake)."""
    n, length = x.shape
    out = x.astype(np.float32)
    bounds = np.linspace(0, length, n + 1).astype(int)
    for step in range(n - 1 if steps is None else steps):
        sent = [(i - step) % n for i in range(n)]  # the chunk device i passes on
        msgs = [out[i, bounds[k] : bounds[k + 1]].copy() for i, k in enumerate(sent)]
        for i, (k, msg) in enumerate(zip(sent, msgs)):
            out[(i + 1) % n, bounds[k] : bounds[k + 1]] += msg
    return out


def _ring_mistake(x: np.ndarray, steps: int | None = None, add: bool = False) -> np.ndarray:
    """The whole ring with a mistake: ``steps`` reduce-scatter steps, or an all-gather that adds (``add``)."""
    n, length = x.shape
    out = _reduce_scatter_only(x, steps)
    bounds = np.linspace(0, length, n + 1).astype(int)
    for step in range(n - 1):
        sent = [(i + 1 - step) % n for i in range(n)]  # the summed chunk device i passes on
        msgs = [out[i, bounds[k] : bounds[k + 1]].copy() for i, k in enumerate(sent)]
        for i, (k, msg) in enumerate(zip(sent, msgs)):
            dst = out[(i + 1) % n, bounds[k] : bounds[k + 1]]
            dst[...] = dst + msg if add else msg
    return out


def _ring_host(fn: Callable[..., Any]) -> Callable[..., None]:
    def call(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        got = fn([row.copy() for row in x])  # one 1-D float32 buffer per device
        if got is None:
            raise UsageError(returned_none("ring_allreduce"))
        if not isinstance(got, tuple) or len(got) != 2:
            given = f"a {type(got).__name__}" + (f" of {len(got)}" if isinstance(got, (list, tuple)) else "")
            raise UsageError(
                "ring_allreduce must return a pair: the list of every device's buffer and the bytes device 0 sent, "
                f"as `return bufs, sent`; it returned {given}."
            )
        bufs, sent = got
        try:
            out = np.stack([np.asarray(b, dtype=np.float32).ravel() for b in bufs])
        except (TypeError, ValueError) as e:
            raise UsageError(f"ring_allreduce's first result must be a list of equal-length buffers: {e}") from e
        if out.shape != x.shape:
            raise UsageError(
                f"ring_allreduce returned buffers of shape {out.shape} for {x.shape[0]} devices of {x.shape[1]} "
                "values: return every device's whole buffer."
            )
        return out, np.array([sent], dtype=np.float64)

    return as_host(call, 1, "ring_allreduce")


def _lesson10() -> list[Exercise]:
    return [
        Exercise(
            "10",
            "ring_allreduce",
            Problem(
                "ring_allreduce",
                _ring_spec,
                _ring_inputs,
                sizes=[(1, 8), (2, 10), (3, 12), (4, 64), (8, 64)],
                host=_ring_host(ring_steps),  # no PTX check: host NumPy (the ring's steps), no kernel
                out_names=["buffers", "sent"],
                rtol=1e-5,
                race_check=False,  # a plain function: no threads whose schedule could matter
                atol=1e-5,
                mistakes={  # each names one wrong output: the buffers, or sent
                    # N x the ring's count is 2(N-1) whole buffers, at every N: counting all N devices' messages and
                    # passing whole buffers (or summing directly and counting that) give the same number, so both
                    "sent is 2(N-1) whole buffers, N times what device 0 sends in a ring (2(N-1) chunks of 1/N of "
                    "its buffer). Either sent adds up the messages of all N devices (count device 0's only), or "
                    "each step passes a whole buffer (or the sum is taken directly): cut each buffer into N chunks "
                    "and pass one chunk per step.": lambda x: _ring_sent(x, x.shape[0]),
                    "sent is in bytes, 4 per float32 value: count msg.nbytes, not msg.size.": lambda x: _ring_sent(
                        x, 0.25
                    ),
                    "every device must end with the sum; the mean (dividing by N) is the caller's step.": lambda x: (
                        np.tile(x.sum(axis=0, dtype=np.float32) / x.shape[0], (x.shape[0], 1))
                    ),
                    "that is only the reduce-scatter: each device holds the full sum of one chunk. The all-gather's "
                    "N-1 steps pass those sums round the ring, each overwriting the neighbour's chunk.": (
                        _reduce_scatter_only
                    ),
                    "the all-gather copies the summed chunk over the neighbour's (bufs[...] = msg): adding it counts "
                    "the neighbour's partial sum twice.": lambda x: _ring_mistake(x, add=True),
                    "the reduce-scatter takes N-1 steps, not N: after N-1 every chunk's sum is complete, and one more "
                    "adds a device's contribution again.": lambda x: _ring_mistake(x, steps=x.shape[0]),
                },
            ),
            ring_steps,
            adapt=_ring_host,
        ),
        Exercise(
            "10",
            "unscale",
            Problem(
                "unscale_kernel",
                _unscale_spec,
                _unscale_inputs,
                sizes=[1, 100, 300, 1000],
                launch=launch_1d(TPB, arg=2),
                ptx="auto",
                out_init=0,
                out_names=["out", "found_inf"],
                mistakes=UNSCALE_MISTAKES,
            ),
            _a.unscale_kernel,
        ),
    ]


EXERCISES_LIST: list[Exercise] = _lesson09() + _lesson10()
