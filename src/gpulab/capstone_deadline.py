"""The capstone's training deadline (lab 09, simulator mode): each launch of a learner op gets a time limit.

A kernel can pass its check at the check's small sizes and still hang, or crawl, at training's sizes (a loop
bound taken from a size only training uses, a grid-stride index that never advances). Without a limit the
notebook would stall with no message. :class:`gpulab.capstone.LearnerOps` runs each learner op through
:func:`gpulab.exercises.run.run_with_deadline` (a worker thread; stuck simulator threads are stopped) with
a limit of :data:`FACTOR` times the course kernel's time at the same sizes, plus :data:`SLACK` seconds. The
course kernel runs once per op, on the op's first training inputs (copies), launched the same way (a matmul
in your blocks runs the course's in those blocks); other sizes scale that time by the op's work (:data:`WORK`:
a matmul's M*K*N, an elementwise op's elements), so the evaluation's bigger batches cost no second run. When
the limit passes, training stops with :class:`CapstoneError` naming the op, the launch, the sizes, and the
check to run at those sizes.

Only in simulator mode: on a GPU a launch returns before the kernel ends, so a limit would need a
synchronisation after every launch (and a GPU kernel cannot be stopped from Python anyway).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from .source import py_func

__all__ = ["FACTOR", "SLACK", "WORK", "Recorder", "copies", "hang_message"]

# The limit of one op's launch in training: FACTOR x the course kernel's time at the same sizes + SLACK s.
# Measured 2026-12-02 in simulator mode on the shared 2-core machine (load 2-14): lab 09's solution kernels,
# trained as the lab does (380 launches of your ops), used at most 8.6% of their limit; the course kernels'
# runs (one per op) took 0.3-0.5 s of the ~28 s of training. 20x leaves room for a slower correct kernel and
# for load that changes between the two runs; SLACK covers the smallest launches and the first launch's set-up.
FACTOR = 20.0
SLACK = 5.0


class Recorder:
    """A learner kernel that notes its last launch shape (``kernel[grid, block]``) and is otherwise the kernel."""

    def __init__(self, kernel: Any) -> None:
        self.kernel, self.last = kernel, None
        self.py_func = py_func(kernel)  # what gpulab.source.py_func and the cooperative launch read

    def __getitem__(self, config: Any) -> Any:
        self.last = config
        return self.kernel[config]

    def __getattr__(self, name: str) -> Any:
        return getattr(self.kernel, name)


def copies(value: Any) -> Any:
    """Arguments for the course kernel's run: arrays copied, since some ops update them in place (Adam)."""
    if hasattr(value, "shape") and hasattr(value, "copy"):
        return value.copy()
    if isinstance(value, tuple):
        return tuple(copies(v) for v in value)
    return value


def _shape(a: Any) -> tuple[int, ...]:
    return tuple(int(s) for s in a.shape)


def _n(shape: Any) -> int:
    return int(np.prod([int(v) for v in shape]))


# op -> its work for its training arguments, to which a launch's time is taken as proportional (the elements its
# grid-stride loop covers times the inner loop's length; a matmul's M*K*N).
WORK: dict[str, Callable[..., int]] = {
    "matmul": lambda a, b: int(a.shape[0]) * int(a.shape[1]) * int(b.shape[1]),
    "im2col": lambda x, kh, kw, s, p: _n(x.shape) * kh * kw,
    "col2im": lambda d, xs, kh, kw, s, p: _n(xs) * kh * kw,
    "relu": lambda x: int(x.size),
    "relu_backward": lambda d, y: int(d.size),
    "maxpool": lambda x, k, s: _n(x.shape),
    "maxpool_backward": lambda d, c, xs, k, s: _n(xs) * k * k,
    "softmax_xent": lambda z, y: int(z.size),
    "adam_update": lambda p, *_: int(p.size),
    "dropout_forward": lambda x, p, st: int(x.size) + int(st.size),  # every thread runs, with or without elements
    "dropout_backward": lambda d, p, st: int(d.size) + int(st.size),
}

# op -> the ``sizes=`` entry of its check (gpulab.capstone_problems) for the op's training arguments.
CHECK_SIZES: dict[str, Callable[..., Any]] = {
    "matmul": lambda a, b: (int(a.shape[0]), int(a.shape[1]), int(b.shape[1])),
    "im2col": lambda x, kh, kw, s, p: (*_shape(x), int(kh), int(s), int(p)),
    "col2im": lambda d, xs, kh, kw, s, p: (*(int(v) for v in xs), int(kh), int(s), int(p)),
    "relu": lambda x: int(x.size),
    "relu_backward": lambda d, y: int(d.size),
    "maxpool": lambda x, k, s: (*_shape(x), int(k), int(s)),
    "maxpool_backward": lambda d, c, xs, k, s: (*(int(v) for v in xs), int(k), int(s)),
    "softmax_xent": lambda z, y: _shape(z),
    "adam_update": lambda p, *_: int(p.size),
    "dropout_forward": lambda x, p, st: (int(x.size), float(p), int(st.size) // 2),
    "dropout_backward": lambda d, p, st: (int(d.size), float(p), int(st.size) // 2),
}


def _sizes(args: tuple) -> str:
    parts = []
    for a in args:
        if hasattr(a, "shape") and hasattr(a, "dtype"):
            parts.append(f"{_shape(a)}")
        elif isinstance(a, tuple) and a and hasattr(a[0], "shape"):
            parts.append(f"({', '.join(str(_shape(v)) for v in a)},)")
        elif isinstance(a, (int, np.integer, tuple)):
            parts.append(str(a))
    return ", ".join(parts)


def hang_message(
    op: str, kernel: Any, args: tuple, launch: str, limit: float, reference: float, block: tuple | None
) -> str:
    """The verdict when ``op``'s launch ran past ``limit`` seconds (``reference``: the course kernel's time,
    measured or scaled to these sizes)."""
    name = getattr(py_func(kernel), "__name__", "your kernel")
    size = CHECK_SIZES[op](*args)
    blocks = f", block={block}" if block else ""
    return (
        f"op {op!r}: your kernel {name} did not finish within {limit:.1f} s during training, so training stopped. "
        f"Launch: {launch}; arguments (shapes and sizes): {op}({_sizes(args)}). The course's kernel "
        f"takes about {reference:.2g} s at these sizes (the limit is {FACTOR:g} times that plus {SLACK:g} s). "
        "Its check passed at the check's smaller sizes, so look for a loop that does not end, or that runs far longer "
        "at these sizes: a grid-stride index that never advances (`i += cuda.gridsize(1)` missing), a `while` whose "
        "condition never changes, a loop bound taken from the wrong size. Run its check at this size, which names "
        f"the stuck threads: check_kernel({name}, **{{**cap.problem({op!r}, {name}{blocks}), 'sizes': [{size!r}]}}); "
        "fix the kernel, re-run its check cell, then this cell. (A correct kernel that is just this slow: "
        "cap.ops(deadline=False) trains without the limit.)"
    )
