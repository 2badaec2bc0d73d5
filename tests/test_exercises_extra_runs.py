"""The check's own extra runs of a kernel (the race check's run that logs every access, explain's run on copies of
the inputs) wait at most the caller's limit per launch (``timeout``, which ``labs grade --timeout S`` lowers to
0.8 x S), not a fixed 60 s: a kernel stuck in one of them cannot hold a graded cell past its limit."""

from __future__ import annotations

import time
from contextlib import contextmanager

import numpy as np
import pytest
from numba import cuda

from gpulab import simulator
from gpulab.exercises import Problem, check, check_kernel
from gpulab.exercises.cases import Failure, State, build_cases
from gpulab.exercises.diagnose import Judge
from gpulab.exercises.explain import input_written
from gpulab.exercises.races import LOGGED_RUN_STOPPED, RACES_NOT_CHECKED
from gpulab.exercises.run import EXTRA_RUN_S, Launch, Runner, extra_run_limit

LOGGED = np.zeros(1, np.int32)  # 1 while the race check's logged run is on (set by the fixture below)
SLACK_S = 10.0  # stopping the stuck threads, the other runs of the check: far below the 60 s it waited before


@cuda.jit
def copy_stuck_when_logged(x, out):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = x[i]
    while LOGGED[0] == 1:  # never ends while the run is logged: plain runs pass
        pass


@cuda.jit
def copy_stuck(x, out):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = x[i]
    while i >= 0:  # never ends
        pass


def _inputs(n, rng):
    return (rng.standard_normal(n).astype(np.float32),)


@pytest.fixture
def logged_flag(monkeypatch):
    """LOGGED[0] is 1 inside ``simulator.instrument(watch_shared=True)``: the race check's logged run."""
    real = simulator.instrument

    @contextmanager
    def flagged(watch_shared=False):
        with real(watch_shared) as ins:
            LOGGED[0] = int(watch_shared)
            try:
                yield ins
            finally:
                LOGGED[0] = 0

    monkeypatch.setattr(simulator, "instrument", flagged)
    yield
    LOGGED[0] = 0


def test_the_limit_is_the_callers_per_launch_limit_up_to_60_s():
    p = Problem("k", lambda x: x.copy(), _inputs, [8], threads=32)
    assert extra_run_limit(p) == min(EXTRA_RUN_S, p.timeout) == 30.0
    assert extra_run_limit(Problem("k", lambda x: x.copy(), _inputs, [8], threads=32, timeout=2.0)) == 2.0
    assert extra_run_limit(Problem("k", lambda x: x.copy(), _inputs, [8], threads=32, timeout=600.0)) == EXTRA_RUN_S


def test_a_kernel_stuck_in_the_logged_run_ends_at_the_checks_limit_and_says_races_were_not_checked(logged_flag):
    start = time.perf_counter()
    res = check_kernel(copy_stuck_when_logged, lambda x: x.copy(), inputs=_inputs, sizes=[5, 40], threads=32, timeout=2)
    elapsed = time.perf_counter() - start
    assert elapsed < 2 + SLACK_S, f"{elapsed:.1f} s"  # before: 60 s for the logged run alone
    assert res.status == "passed", res
    races = next(c for c in res.checks if c.name == "races")
    assert races.message.startswith(RACES_NOT_CHECKED), races.message  # before: "no unsynchronised ..."
    assert LOGGED_RUN_STOPPED.format(s=2) + ", the check's limit per run (its timeout)" in races.message
    advice = races.message.splitlines()[1]  # before: "timeout=, or labs grade --timeout" (which only lowers it)
    assert "larger timeout= on this check_kernel or Problem.check call" in advice and "labs grade" not in advice
    assert "no unsynchronised" not in races.message


def test_under_a_grading_timeout_the_logged_run_gets_the_cells_share(logged_flag, monkeypatch):
    """``labs grade --timeout 2`` caps each launch at 1.6 s (gpulab.grading.kernel_time): the logged run too."""
    from gpulab.grading.kernel_time import cap_kernel_time

    monkeypatch.setattr(check, "run_problem", check.run_problem)  # put back after the test
    cap_kernel_time(1.6)()
    start = time.perf_counter()
    res = check_kernel(copy_stuck_when_logged, lambda x: x.copy(), inputs=_inputs, sizes=[5, 40], threads=32)
    elapsed = time.perf_counter() - start
    assert elapsed < 1.6 + SLACK_S, f"{elapsed:.1f} s"
    races = next(c for c in res.checks if c.name == "races")
    assert "did not finish within 1.6 s" in races.message, races.message
    advice = races.message.splitlines()[1]  # the grader's limit, not the check's timeout=: --timeout lengthens it
    assert "a larger --timeout gives that run up to 30 s" in advice and "timeout=" not in advice, advice


def test_the_run_on_copies_of_the_inputs_ends_at_the_checks_limit():
    """explain's input_written (a result that changes between runs: did the kernel write its input?) runs the kernel
    once more: a kernel that never ends there gives no finding after the check's limit, not after 60 s."""
    p = Problem("copy_stuck", lambda x: x.copy(), _inputs, [40], threads=32, timeout=1.0)
    cases = build_cases(p)
    st = State(p, Runner(p, copy_stuck, "copy_stuck", ["out"]), cases, Judge(p.spec, p.rtol, ["x"]))
    start = time.perf_counter()
    assert input_written(st, Failure("failed", 0, Launch(), output=0)) is None
    elapsed = time.perf_counter() - start
    assert elapsed < 1 + SLACK_S, f"{elapsed:.1f} s"  # before: 60 s
