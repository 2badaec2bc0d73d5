"""Lab 02 · exercise 3: ``pipelined_add``, a host function that feeds the GPU chunk by chunk on streams.

The learner writes ``pipelined_add(x_h, y_h, out_h, chunk, n_streams)``: ``out_h = x_h + y_h`` with the library's
``add_kernel``, each stream's device buffers allocated before the loop, chunk ``k`` copied into stream
``k % n_streams``'s buffers, computed and copied back on that stream, then one synchronize.
Lesson 02's check (:func:`gpulab.lessons.pipelined.check_pipelined`, its named mistakes included) judges it; this
module turns its verdict into points, as a budget does for a kernel:

* **full points**: every ``out_h`` right and, in simulator mode, the recorded calls pipeline (pinned copies, each
  chunk's three operations on its stream, the streams used, one synchronize at the end);
* **half the points** ("over budget"): ``out_h`` right, but the calls cannot overlap (:func:`is_slow`: a copy or
  the kernel on the default stream, pageable memory, host arrays given to the kernel, one stream for every chunk,
  a synchronize or a device allocation inside the loop): correct but slow, like an uncoalesced kernel;
* **zero**: a wrong ``out_h``, an error, or right values that only the simulator guarantees (:data:`UNSAFE`: one
  chunk's operations on different streams, or a return before the copies into ``out_h`` have finished; on a GPU
  the function then reads or returns data before it is there).

In gpu mode CUDA keeps no log of the calls: the results alone decide, and the verdict says so.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import UsageError
from ..exercises import CheckResult, Problem

__all__ = ["PIPELINED_ADD", "UNSAFE", "PipelineProblem", "credit", "is_slow"]

# gpulab.lessons.pipelined is imported where it is used: gpulab.lessons imports gpulab.problems
UNSAFE = frozenset({"cross_stream", "no_final_sync"})  # right in the simulator, a race on a GPU: no points
_OPTIONS = {"sizes", "seed", "host", "name", "race_check", "ptx", "trusted"}  # what Problem.check's callers may pass


def is_slow(mistake: str) -> bool:
    """One of lesson 02's named mistakes that leaves the result right everywhere but stops the overlap (a copy or
    the kernel on the default stream, pageable memory, host arrays given to the kernel, one stream for every chunk,
    a synchronize or a device allocation inside the loop): half the points."""
    from ..lessons.pipelined import MISTAKES

    return mistake in MISTAKES and mistake not in UNSAFE


def credit(res: CheckResult, points: float) -> CheckResult:
    """``res`` (a :func:`check_pipelined` verdict, scored 0 or 1) scored out of ``points`` by the rule above."""
    from ..lessons.pipelined import hint

    mistake = res.details.get("mistake", "")
    if res.passed:
        return dataclasses.replace(res, score=float(points), max_score=float(points))
    if is_slow(mistake) and not res.details.get("unfinished"):
        message = f"{res.message} Half the points: right results, but nothing can overlap."
        return dataclasses.replace(
            res, status="over budget", score=points / 2, max_score=float(points), message=message
        )
    if is_slow(mistake):  # also returned with copies into out_h still queued: unsafe, whatever was named first
        message = (
            f"{res.message} It also returned with copies into out_h still queued: on a GPU out_h may not be written "
            "yet (no points)."
        )
        return dataclasses.replace(
            res, score=0.0, max_score=float(points), message=message, hint=f"{res.hint} And: {hint('no_final_sync')}"
        )
    return dataclasses.replace(res, score=0.0, max_score=float(points))


@dataclass
class PipelineProblem(Problem):
    """A Problem whose answer is lab 02's host function ``pipelined_add``: ``check(fn)`` runs lesson 02's check on
    the ``(n, chunk, n_streams)`` cases in ``sizes`` (``gpu_sizes`` in gpu mode) and scores it with :func:`credit`.
    ``check(host=fn)`` (the emulated gpu-size tests) checks ``fn`` the same way."""

    def check(self, kernel: Any = None, *, scale: str | None = None, **overrides: Any) -> Any:
        unknown = set(overrides) - _OPTIONS
        if unknown:
            raise TypeError(f"{self.name}.check: unknown option(s) {sorted(unknown)}; valid: {sorted(_OPTIONS)}")
        fn = kernel if kernel is not None else overrides.get("host") or self.host
        if not callable(fn):
            raise UsageError(
                f"{self.name}.check takes your function itself, e.g. check(pipelined_add) (no parentheses); it was "
                f"given {type(fn).__name__}."
            )
        from ..lessons.pipelined import ADD, check_pipelined

        cases = overrides.get("sizes") or self.sizes_for(scale)
        res = check_pipelined(
            fn, cases, op=ADD, seed=overrides.get("seed", self.seed), trusted=bool(overrides.get("trusted"))
        )
        return credit(res, self.points)


def _inputs(size: tuple[int, int, int], rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """The two float32 inputs of one ``(n, chunk, n_streams)`` case (as check_pipelined draws them)."""
    n = size[0]
    return rng.uniform(-1, 1, n).astype(np.float32), rng.uniform(-1, 1, n).astype(np.float32)


PIPELINED_ADD = PipelineProblem(
    "lab02.pipelined_add",
    spec=lambda x, y: x + y,
    inputs=_inputs,
    # (n, chunk, n_streams): n not a multiple of chunk, one stream asked for, a chunk over 1024 elements
    sizes=[(1000, 256, 4), (7, 4, 2), (130, 64, 1), (3000, 1500, 2)],
    gpu_sizes=[(1000, 256, 4), (7, 4, 2), (3000, 1500, 2), ((1 << 22) + 3, 1 << 20, 4)],
    points=3,
    seed=4,
)
