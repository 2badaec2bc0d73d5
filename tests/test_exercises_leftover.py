"""A kernel that an earlier check could not stop within its 5 s (a loaded machine) is stopped again and waited for
before the next check runs: the simulator runs one kernel at a time (its kernel context is a module global), and
one still running made every later launch fail as "a kernel cannot launch a kernel" (seen once in CI, 9 tests on one
worker). The registry and the wait are gpulab.simulator.stopping's; a learner's own launch after such a check is
tests/test_simulator_leftover.py."""

import threading
import time

import pytest

from gpulab.exercises import run
from gpulab.simulator import stopping


def _worker(stops_needed, done):
    """A thread that survives ``stops_needed`` KernelTimeouts (as a busy loop between bytecodes might), then ends;
    with ``stops_needed`` None it ends only when ``done`` is set."""

    survived = [0]

    def survive() -> bool:  # True when it has survived enough stops
        survived[0] += 1
        return stops_needed is not None and survived[0] >= stops_needed

    def target():
        while True:
            try:  # a stop lands anywhere in the loop, not only in the sleep (else it would end the thread)
                try:
                    if done.is_set():
                        return
                    time.sleep(0.01)
                except run.KernelTimeout:
                    if survive():
                        return
            except run.KernelTimeout:  # a second stop, inside the handler above
                if survive():
                    return

    th = threading.Thread(target=target, daemon=True)
    th.start()
    return th


def test_a_leftover_worker_is_stopped_before_the_next_run(monkeypatch):
    done = threading.Event()
    leftover = _worker(3, done)
    monkeypatch.setattr(stopping, "_LEFTOVER", [leftover])
    assert run.run_with_deadline(lambda: 42, 10) == 42
    assert not leftover.is_alive() and stopping._LEFTOVER == []


def test_one_that_never_stops_is_reported_with_what_to_do(monkeypatch):
    done = threading.Event()
    stubborn = _worker(None, done)
    monkeypatch.setattr(stopping, "_LEFTOVER", [stubborn])
    try:
        with pytest.raises(RuntimeError, match=r"restart the kernel \(Kernel > Restart\)"):
            stopping.settle(timeout=1.0)
    finally:
        done.set()
        stubborn.join(5)
    assert not stubborn.is_alive()


def test_a_stop_that_runs_out_of_time_leaves_the_worker_for_the_next_run(monkeypatch):
    done = threading.Event()
    stubborn = _worker(None, done)
    monkeypatch.setattr(stopping, "_LEFTOVER", [])
    monkeypatch.setattr(run, "STOP_TRIES", 3)
    try:
        run._stop(stubborn)  # STOP_TRIES tries of 0.1 s, then it gives up on this thread
        assert stopping._LEFTOVER == [stubborn]
    finally:
        done.set()
        stubborn.join(5)
