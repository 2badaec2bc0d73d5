"""The race check's line when its run that logs every access gave no verdict: stopped at its limit (which limit, and
advice that works where the check runs: check_kernel / Problem.check, lessons.check), or failed with an error. It
says "not checked", never "no unsynchronised accesses", and keeps a race that the log up to an error shows."""

from __future__ import annotations

import dataclasses

import pytest
from numba import cuda

from gpulab import lessons
from gpulab.exercises import check_kernel, races, run
from gpulab.exercises.races import RACES_NOT_CHECKED
from gpulab.lessons import problems

from test_exercises_extra_runs import LOGGED, _inputs, copy_stuck_when_logged, logged_flag  # noqa: F401


@cuda.jit
def copy_fails_when_logged(x, out):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = x[i]
    if LOGGED[0] == 1:
        out[0] = 1 // (i - i)  # ZeroDivisionError, in the logged run only


@cuda.jit
def all_store_then_fail_when_logged(x, out):
    i = cuda.grid(1)
    out[0] = x[0]  # every thread stores: a race the log shows before the error
    cuda.syncthreads()  # every thread has stored
    if LOGGED[0] == 1 and i == 0:
        out[0] = 1 // (i - i)


@cuda.jit
def add_stuck_when_logged(a, b, out):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = a[i] + b[i]
    while LOGGED[0] == 1:  # never ends while the run is logged: plain runs pass
        pass


def _races(res):
    return next(c for c in res.checks if c.name == "races").message


@pytest.mark.usefixtures("logged_flag")
def test_above_the_60_s_cap_the_message_names_the_cap_and_gives_no_timeout_advice(monkeypatch):
    monkeypatch.setattr(run, "EXTRA_RUN_S", 1.0)  # stands in for the 60 s cap; timeout=5 is above it
    res = check_kernel(copy_stuck_when_logged, lambda x: x.copy(), inputs=_inputs, sizes=[5, 40], threads=32, timeout=5)
    assert res.status == "passed", res
    msg = _races(res)
    assert msg.startswith(RACES_NOT_CHECKED), msg
    # before: "within 1 s, this check's limit per run. A longer limit (timeout=, or labs grade --timeout) lets it ..."
    assert "within 1 s, the most the check gives that run, whatever its timeout" in msg, msg
    advice = msg.splitlines()[1]
    assert "sizes=" in advice and "larger timeout" not in advice and "labs grade" not in advice, advice


@pytest.mark.usefixtures("logged_flag")
def test_in_a_lesson_the_advice_is_a_call_the_learner_can_make(monkeypatch):
    ex = lessons.exercise("01", "add")
    quick = dataclasses.replace(ex, problem=dataclasses.replace(ex.problem, timeout=2.0))
    monkeypatch.setitem(problems.EXERCISES, (ex.lesson, ex.name), quick)
    res = lessons.check("01", "add", add_stuck_when_logged)
    assert res.status == "passed", res
    advice = _races(res).splitlines()[1]  # before: "timeout=" (lessons.check takes none) or "labs grade --timeout"
    assert advice.startswith("lessons.check gives that run no more time"), advice
    assert f'lessons.exercise("01", "add").problem.check({ex.problem.name}, timeout=60)' in advice, advice


def test_an_error_in_the_logged_run_says_not_checked_and_why(monkeypatch):
    def broken(*args, **kwargs):
        raise TypeError("stand-in for any error of the logged run")

    monkeypatch.setattr(races, "race_verdict", broken)
    res = check_kernel(copy_fails_when_logged, lambda x: x.copy(), inputs=_inputs, sizes=[5, 40], threads=32)
    assert res.status == "passed", res
    msg = _races(res)
    assert "no unsynchronised" not in msg and "every barrier reached" not in msg, msg  # before: both
    assert msg.startswith(RACES_NOT_CHECKED), msg
    assert "failed (TypeError: stand-in for any error of the logged run)" in msg, msg


@pytest.mark.usefixtures("logged_flag")
def test_a_logged_run_cut_short_by_an_arithmetic_error_checked_nothing_past_it():
    res = check_kernel(copy_fails_when_logged, lambda x: x.copy(), inputs=_inputs, sizes=[5, 40], threads=32)
    assert res.status == "passed", res
    msg = _races(res)
    assert "no unsynchronised" not in msg and "every barrier reached" not in msg, msg  # before: both
    assert msg.startswith(RACES_NOT_CHECKED) and "failed (ZeroDivisionError" in msg, msg


@pytest.mark.usefixtures("logged_flag")
def test_a_race_in_the_log_before_the_error_is_still_a_race():
    res = check_kernel(
        all_store_then_fail_when_logged, lambda x: x[:1].copy(), inputs=_inputs, sizes=[5, 40], threads=32
    )
    assert res.status == "failed", res
    assert "both wrote out[0]" in res.message and res.hint == races.FLAG_STORE_HINT, res


def test_readvise_touches_only_a_stopped_races_line():
    from gpulab.exercises.result import Check, CheckResult

    stopped = Check("races", True, f"{RACES_NOT_CHECKED}: stopped\nold advice")
    found_none = Check("races", True, "same result with different thread schedules, no unsynchronised accesses")
    res = CheckResult("k", "passed", 1, 1, "ok", checks=[stopped])
    races.readvise(res, "new advice")
    assert stopped.message == f"{RACES_NOT_CHECKED}: stopped\nnew advice"
    other = CheckResult("k", "passed", 1, 1, "ok", checks=[found_none])
    races.readvise(other, "new advice")
    assert "new advice" not in found_none.message
