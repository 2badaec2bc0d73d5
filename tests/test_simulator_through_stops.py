"""``stopping.through_stops``: the one retry loop of :func:`gpulab.simulator.stopping.leaving` and
:func:`gpulab.simulator.blocks._abort` (a function cut short by a stop runs again). That stops landing at random
moments never leave a lock held is measured by tests/storm_stops.py (tests/test_simulator_stops.py)."""

import threading

import pytest

from gpulab import runtime

pytestmark = pytest.mark.skipif(not runtime.is_simulator(), reason="the simulator's stops")

from gpulab.simulator import blocks, stopping  # noqa: E402 - after gpulab picked the mode


def test_a_function_cut_short_runs_again_with_its_lock_free_and_the_stop_dropped():
    lock = threading.Lock()
    calls = []

    @stopping.through_stops(5)
    def take(n: int) -> None:
        with lock:
            calls.append(n)
            if len(calls) < 3:
                raise stopping.KernelTimeout("a stop landed here")

    take(7)
    assert calls == [7, 7, 7]
    assert lock.acquire(blocking=False), "a stop left the lock held"
    lock.release()


def test_it_gives_up_after_its_tries_without_raising():
    calls = []

    @stopping.through_stops(4)
    def always_stopped() -> None:
        calls.append(1)
        raise stopping.KernelTimeout("a stop landed here")

    always_stopped()
    assert len(calls) == 4


def test_leaving_and_abort_are_the_ones_it_wraps():
    assert stopping.leaving.__wrapped__.__name__ == "leaving"  # type: ignore[attr-defined]
    assert blocks._abort.__wrapped__.__name__ == "_abort"  # type: ignore[attr-defined]
