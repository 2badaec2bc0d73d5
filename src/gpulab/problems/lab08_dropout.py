"""Lab 08 · exercise 4: a dropout backward that regenerates its mask from the forward's generator states.

Lesson 08's dropout forward stored its mask, one byte per element. Here nothing is stored: the learner writes
``dropout_backward_kernel(dy, states, p, dx)``, which replays the forward's draws (the same fixed grid of
:data:`THREADS` threads, the same grid-stride order, one ``xoroshiro128p_uniform_float32(states, tid)`` per element)
and writes ``dx = dy / (1 - p)`` where ``u >= p``, else 0; and ``dropout_step(x, dy, words, p, y, dx)``, a host
function that runs the lab's forward kernel and then that backward, giving the backward the states **as they were
before the forward** (a draw advances its state, so after the forward each stream has moved on).

Two problems, graded in one cell (3 points, as lab 10's loss scaling does): :data:`DROPOUT_BACKWARD` (2 points) checks
the kernel alone on fresh states against :func:`gpulab.problems._dropout.apply` (the replay lesson 08's check uses),
with lesson 08's named mistakes in the backward's words; :data:`DROPOUT_STEP` (1 point) checks the host function's
``y`` and ``dx`` and names the state mistakes: the backward given the states the forward advanced (its mask is a
different one), or the forward run after the backward on the same states. The step runs with the lab's backward in
place of the learner's (:func:`with_lab_backward`), so its point measures only the states handling: a wrong backward
costs the backward's 2 points, not the step's too. The masks are compared exactly (the same draws, bit for bit); the
values to float32 rounding (the default rtol 1e-5): ``dy / (1 - p)`` is float32 on the host, but a kernel may compute
it otherwise (numba types ``dy[i] / (1 - p)`` as float64 on a GPU, then rounds it to float32: 1 ulp apart at times).
"""

from __future__ import annotations

import dataclasses
import types
from typing import Any

import numpy as np

from ..exercises import Problem
from ..source import rebound
from ._dropout import BLOCKS, THREADS, TPB, apply, as_states, launch, named_mistakes, new_states

__all__ = [
    "ADVANCED_HINT",
    "DROPOUT_BACKWARD",
    "DROPOUT_BLOCKS",
    "DROPOUT_STEP",
    "DROPOUT_TPB",
    "REVERSED_HINT",
    "THREADS",
    "as_states",
    "dropout_backward_spec",
    "dropout_step_spec",
    "new_states",
    "with_lab_backward",
]

DROPOUT_BLOCKS, DROPOUT_TPB = BLOCKS, TPB  # a fixed grid of 3 blocks of 32 threads: one generator state per thread

SCALING_HINT = (
    "dx is dy where kept, not dy / (1 - p): the forward scaled the kept values, y = x / (1 - p), so its derivative "
    "there is 1 / (1 - p): dx = dy / (1 - p) where kept, 0 where dropped."
)
ADVANCED_HINT = (
    "y is right but dx used another mask: the backward drew from the states the forward had already advanced (each "
    "draw moves its thread's state on, so the backward got each stream's next numbers, not the forward's). Keep a "
    "copy of the states as they were before the forward, `saved = words.copy()` (an alias, `saved = words`, or a "
    "slice, `words[:]`, is a view of the same memory, not a copy: the forward advances it too), and give that copy, "
    "not words, to the backward kernel (through as_states, as the forward gets words)."
)
REVERSED_HINT = (
    "y was dropped with the numbers that follow the backward's: the backward ran first on the same states and "
    "advanced them, then the forward drew the next numbers. Run the forward first, on a copy of the states "
    "(`saved = words.copy()` before either launch), and the backward on the other."
)


def _inputs(size: tuple[int, float], rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, np.float32]:
    """size = (elements, p) -> dy (never 0, so a dropped element shows), the states' words, p (float32)."""
    n, p = size
    dy = rng.uniform(0.5, 1.5, n).astype(np.float32) * rng.choice(np.array([-1, 1], np.float32), n)
    return dy, new_states(THREADS, int(rng.integers(1 << 62))), np.float32(p)


def _step_inputs(size: tuple[int, float], rng: np.random.Generator) -> tuple:
    """size = (elements, p) -> x, dy, the states' words, p."""
    dy, words, p = _inputs(size, rng)
    x = rng.uniform(0.5, 1.5, size[0]).astype(np.float32) * rng.choice(np.array([-1, 1], np.float32), size[0])
    return x, dy, words, p


def dropout_backward_spec(dy: np.ndarray, words: np.ndarray, p: np.float32) -> np.ndarray:
    """dx = dy / (1 - p) where the forward kept the element (its draw from ``words``, grid-stride order, >= p)."""
    return apply(dy, words, p)


def dropout_step_spec(x: np.ndarray, dy: np.ndarray, words: np.ndarray, p: np.float32) -> tuple:
    """(y, dx) of one training step: the forward and the backward with the same mask, drawn from ``words``."""
    return apply(x, words, p), apply(dy, words, p)


def _advanced(x: np.ndarray, dy: np.ndarray, words: np.ndarray, p: np.float32) -> np.ndarray:
    """dx when the backward drew from the states the forward left: each stream's draws after the forward's."""
    return apply(dy, words, p, "after")


def _reversed(x: np.ndarray, dy: np.ndarray, words: np.ndarray, p: np.float32) -> np.ndarray:
    """y when the forward drew after the backward, on the same states."""
    return apply(x, words, p, "after")


def _args(ins: tuple, outs: tuple) -> tuple:
    dy, words, p = ins
    return (dy, as_states(words), p, *outs)


# (elements, p): fewer elements than the 96 threads, then more, not multiples of the block or the grid
SIZES = [(1, 0.5), (50, 0.25), (250, 0.5), (1001, 0.1)]
GPU_SIZES = [*SIZES, ((1 << 20) + 3, 0.5)]

DROPOUT_BACKWARD = Problem(
    "dropout_backward_kernel",
    spec=dropout_backward_spec,
    inputs=_inputs,
    sizes=SIZES,
    gpu_sizes=GPU_SIZES,
    launch=launch,
    args=_args,
    out_names=["dx"],
    mistakes=named_mistakes("dy", SCALING_HINT),
    ptx="void(float32[:], Record.make_c_struct([('s0', uint64), ('s1', uint64)])[:], float32, float32[:])",
    points=2,
)


def with_lab_backward(step: Any) -> Any:
    """``step`` (the learner's ``dropout_step``) run with the lab's kernel as its ``dropout_backward_kernel``: the
    same code with a copy of its globals where that name is :func:`._stand_ins.dropout_kernel`, so a wrong
    backward, graded by :data:`DROPOUT_BACKWARD`, does not also cost the step's point. ``step`` is returned as it
    is when it is not a plain function or does not name ``dropout_backward_kernel`` itself (a helper launches it)."""
    if not isinstance(step, types.FunctionType) or "dropout_backward_kernel" not in step.__code__.co_names:
        return step
    from ._stand_ins import dropout_kernel

    return rebound(step, {"dropout_backward_kernel": dropout_kernel})


@dataclasses.dataclass
class StepProblem(Problem):
    """A Problem whose ``check(host=step)`` runs ``step`` with the lab's backward (:func:`with_lab_backward`)."""

    def check(self, kernel: Any = None, *, scale: str | None = None, **overrides: Any) -> Any:
        if overrides.get("host") is not None:
            overrides["host"] = with_lab_backward(overrides["host"])
        return super().check(kernel, scale=scale, **overrides)


DROPOUT_STEP = StepProblem(
    "lab08.dropout_step",
    usage="problems.lab08.DROPOUT_STEP.check(host=dropout_step)",
    spec=dropout_step_spec,
    inputs=_step_inputs,
    sizes=[(50, 0.25), (250, 0.5)],
    gpu_sizes=[(50, 0.25), (250, 0.5), ((1 << 20) + 3, 0.5)],
    out_names=["y", "dx"],
    updated_inputs=(2,),  # the forward advances words: the lab's point (the backward replays a copy)
    mistakes={ADVANCED_HINT: _advanced, REVERSED_HINT: _reversed},
    points=1,
)
