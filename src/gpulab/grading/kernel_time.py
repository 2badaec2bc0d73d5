"""A check's time per launch, kept below the grader's time per cell.

The harness gives each launch of a check ``timeout`` seconds (30 by default, :class:`gpulab.exercises.Problem`);
an endless kernel then gets the verdict "timeout" with an actionable hint ("an infinite loop? Check that every
loop variable advances ..."). ``labs grade --timeout S`` stops a whole cell after S seconds; with S under the
harness's limit the cell was stopped first and the row said only "ran past the S s limit per cell". The runner
therefore calls :func:`cap_kernel_time` with :attr:`gpulab.grading.sandbox.Limits.kernel_timeout` (0.8 x S) before
any student code runs, so the check's own verdict arrives first at any ``--timeout``.

A test cell often checks the same kernel twice (the visible check, then the hidden one), and an endless kernel hangs
in both: once a check of the cell has timed out, the later ones get what is left of the 0.8 x S (at least a
sixteenth of it), so the cell still ends before S with the first verdict's hint. A cell whose checks never time out
keeps the full limit per launch, as before.
"""

from __future__ import annotations

import dataclasses
import functools
import time
from collections.abc import Callable
from typing import Any

__all__ = ["cap_kernel_time", "grader_advice"]


def grader_advice(limit: float, own: float) -> str:
    """What lengthens a race check's logged run that the grader's limit stopped: ``labs grade --timeout S`` gives
    each run of a check 0.8 x S (``limit``, less after a check of the cell timed out); the exercise's own ``timeout``
    (``own``) and the check's most for that run (:data:`gpulab.exercises.run.EXTRA_RUN_S`) still bound it."""
    from gpulab.exercises import run

    most = min(own, run.EXTRA_RUN_S)
    return (
        f"The grader's limit set it (labs grade --timeout S gives each run of a check 0.8 x S, here {limit:g} s): a "
        f"larger --timeout gives that run up to {most:g} s."
    )


def cap_kernel_time(seconds: float) -> Callable[[], None]:
    """Make every check (``check_kernel`` and ``Problem.check``, both through
    :func:`gpulab.exercises.check.run_problem`) wait at most ``seconds`` for one launch. Returns the function the
    runner calls when a test cell starts (it restarts the cell's clock)."""
    from gpulab.exercises import check
    from gpulab.exercises.races import readvise

    run_problem = check.run_problem
    cell = {"start": time.monotonic(), "hung": False}

    def new_cell() -> None:
        cell.update(start=time.monotonic(), hung=False)

    @functools.wraps(run_problem)
    def capped(p: Any, kernel: Any, name: str | None = None, *, trusted: bool = False) -> Any:
        limit = seconds
        if cell["hung"]:  # an earlier check of this cell timed out: the same kernel will hang again here
            limit = max(seconds - (time.monotonic() - float(cell["start"])), seconds / 16)
        own = p.timeout
        if own > limit:
            p = dataclasses.replace(p, timeout=max(0.1, round(limit, 1)))  # never 0: no time at all
        result = run_problem(p, kernel, name, trusted=trusted)
        if own > p.timeout:  # a race check's logged run stopped at the lowered limit: the grader's to lengthen
            readvise(result, grader_advice(p.timeout, own))
        if getattr(result, "status", "") == "timeout":
            cell["hung"] = True
        return result

    check.run_problem = capped
    return new_cell
