"""A learner's own launch after a check whose kernel could not be stopped at its deadline
(gpulab.simulator.stopping): the simulator runs one kernel at a time (its kernel context is a module global), and
the check left running holds it. The launch from the host must wait for that kernel to be stopped and then run,
not fail as "a kernel cannot launch a kernel" (or run the kernel as a function in the host thread, numba-cuda's
path while any context is pushed); when it cannot be stopped, the error says to restart the kernel. A launch really
inside a kernel is still refused as on a GPU (tests/test_simulator_device_calls.py, and a cooperative launch's
kernel here, whose blocks run in the launching thread).

The checks' kernels run through gpulab.kernels.cooperative.launch: its blocks run in the check's worker thread,
which holds the kernel context while the kernel ignores the harness's stops (as a loaded machine can keep a worker
past the harness's tries), instead of in blocks' threads that the worker leaves behind when it is stopped."""

import threading
import time

import numpy as np
import pytest
from numba.core.errors import TypingError

from gpulab import runtime
from gpulab.exercises import run
from gpulab.kernels import cooperative
from gpulab.simulator import device_calls, stopping

pytestmark = pytest.mark.skipif(not runtime.is_simulator(), reason="the simulator's one kernel context")

from numba import cuda  # noqa: E402 - after gpulab picked the mode


@cuda.jit
def stubborn_kernel(stops, survived):
    """Ignores the harness's KernelTimeout until it has been stopped ``stops[0]`` times (read at each stop)."""
    while survived[0] < stops[0]:
        try:  # a stop may land anywhere in the loop, even in the handler (else it would end the kernel)
            try:
                time.sleep(0.01)
            except Exception:  # the harness's KernelTimeout
                survived[0] += 1
        except Exception:
            survived[0] += 1


@cuda.jit
def sleepy_kernel(seconds, done):
    time.sleep(seconds[0])
    done[0] = 1


@cuda.jit
def add_one_kernel(x, out):
    i = cuda.grid(1)
    if i < x.size:
        out[i] = x[i] + 1


@cuda.jit
def launches_add_one(x, out):
    add_one_kernel[1, 32](x, out)


@cuda.jit(device=True)
def twice(v):
    return 2 * v


@pytest.fixture
def kept(monkeypatch):
    """A fresh registry of checks left running; the harness gives up on a worker after 3 tries of 0.1 s."""
    monkeypatch.setattr(stopping, "_LEFTOVER", [])
    monkeypatch.setattr(run, "STOP_TRIES", 3)
    return stopping._LEFTOVER


def _check_left_running(stops: np.ndarray, survived: np.ndarray) -> threading.Thread:
    """A check of the stubborn kernel that runs past its deadline and that the harness cannot stop in time."""
    with pytest.raises(run.Hang):
        run.run_with_deadline(lambda: cooperative.launch(stubborn_kernel, 1, 1, stops, survived), 0.2)
    (worker,) = stopping._LEFTOVER
    from numba.cuda.simulator.kernel import _get_kernel_context

    assert worker.is_alive() and _get_kernel_context() is not None, "the check's worker still holds the context"
    assert not stopping.in_kernel(), "the main thread sees another thread's context, not its own"
    return worker


def _wait_until_it_runs() -> None:
    """Until another thread's kernel holds the context (at most 5 s)."""
    from numba.cuda.simulator.kernel import _get_kernel_context

    for _ in range(500):
        if _get_kernel_context() is not None:
            break
        time.sleep(0.01)
    assert _get_kernel_context() is not None and not stopping.in_kernel()


def _add_one(n: int = 40) -> tuple[np.ndarray, np.ndarray]:
    x = np.arange(n, dtype=np.float32)
    out = np.zeros_like(x)
    add_one_kernel[2, 32](x, out)
    return x, out


def test_a_launch_after_a_check_left_running_stops_it_then_runs(kept):
    stops, survived = np.array([15], np.int64), np.zeros(1, np.int64)
    worker = _check_left_running(stops, survived)
    x, out = _add_one()  # raised TypingError "a kernel cannot launch a kernel" before
    np.testing.assert_array_equal(out, x + 1)
    assert not worker.is_alive() and kept == [], "the check's kernel was stopped before the launch ran"
    _, again = _add_one()  # and the next launch has nothing to wait for
    np.testing.assert_array_equal(again, x + 1)


def test_a_check_that_cannot_be_stopped_gives_the_restart_message(kept, monkeypatch):
    monkeypatch.setattr(stopping, "SETTLE_SECONDS", 1.0)
    stops, survived = np.array([1 << 40], np.int64), np.zeros(1, np.int64)
    worker = _check_left_running(stops, survived)
    try:
        with pytest.raises(ValueError, match=device_calls.HOST_CALL):
            twice(3.0)  # a device function called from the host is still that, whoever holds the context
        x = np.arange(8, dtype=np.float32)
        out = np.zeros_like(x)
        with pytest.raises(RuntimeError) as err:
            add_one_kernel[1, 32](x, out)
        text = str(err.value)
        assert "still running after 1 more seconds" in text and "restart the kernel (Kernel > Restart)" in text
        assert not isinstance(err.value, TypingError) and not out.any(), "the launch did not run"
    finally:
        stops[0] = 0  # the kernel reads it at each stop: the next one ends it
        stopping.settle(timeout=30)
    assert not worker.is_alive() and kept == []
    x, out = _add_one()
    np.testing.assert_array_equal(out, x + 1)


def test_a_launch_waits_for_a_kernel_of_another_thread(kept):
    seconds, done = np.array([0.3]), np.zeros(1, np.int64)
    other = threading.Thread(target=cooperative.launch, args=(sleepy_kernel, 1, 1, seconds, done), daemon=True)
    other.start()
    _wait_until_it_runs()
    x, out = _add_one()
    np.testing.assert_array_equal(out, x + 1)
    assert done[0] == 1, "the other thread's kernel had ended"
    other.join(5)


def test_a_kernel_of_another_thread_that_never_ends_is_named(kept, monkeypatch):
    monkeypatch.setattr(stopping, "SETTLE_SECONDS", 0.3)
    seconds, done = np.array([1.5]), np.zeros(1, np.int64)
    other = threading.Thread(
        target=cooperative.launch, args=(sleepy_kernel, 1, 1, seconds, done), name="my-worker", daemon=True
    )
    other.start()
    try:
        _wait_until_it_runs()
        with pytest.raises(
            RuntimeError, match=r"thread 'my-worker' is still running a simulated kernel after 0.3 more"
        ):
            _add_one()
    finally:
        other.join(10)
    assert done[0] == 1


def test_a_launch_inside_a_cooperative_launch_is_still_refused():
    """Its blocks run in the launching thread, not in blocks' threads: the context is that thread's own."""
    x = np.arange(8, dtype=np.float32)
    out = np.zeros_like(x)
    with pytest.raises(TypingError, match=device_calls.LAUNCH_IN_KERNEL.replace("(", r"\(").replace(")", r"\)")):
        cooperative.launch(launches_add_one, 1, 1, x, out)
    assert not out.any()


@cuda.jit
def waits_twice_kernel(out):
    """Real block threads (syncthreads_count keeps numba-cuda's threads): one thread arrives late."""
    t = cuda.threadIdx.x
    if t == 3:
        x = 0
        for j in range(200):
            x += j
    cuda.syncthreads_count(1)
    cuda.syncthreads_count(1)
    out[t] = 1


def test_a_thread_that_ends_without_reporting_fails_the_launch_instead_of_hanging_it(monkeypatch):
    """A stop that lands in a leaving thread's bookkeeping (Block.finished) ends it unseen (CI run 21: block threads
    outlived their tests): its block's other threads waited at a barrier for ever and the launch never returned.
    Now the launcher counts such a thread as failed (Block.reap) and the launch raises the harness's KernelTimeout.
    Here thread 3's bookkeeping fails as such a stop would make it. With the old blocks.py: the launch still waited
    after 20 s (measured)."""
    from gpulab.simulator import blocks

    finished = blocks.Block.finished

    def lost(self, th):
        if tuple(th.threadIdx) == (3, 0, 0):
            raise stopping.KernelTimeout()
        return finished(self, th)

    monkeypatch.setattr(blocks.Block, "finished", lost)

    @cuda.jit
    def thread3_returns_early(out):
        t = cuda.threadIdx.x
        if t == 3:
            return
        cuda.syncthreads_count(1)  # the others wait here for thread 3, which has gone
        out[t] = 1

    box: dict = {}

    def launch():
        try:
            thread3_returns_early[1, 8](np.zeros(8, np.int32))
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            box["error"] = exc

    th = threading.Thread(target=launch, daemon=True)
    th.start()
    th.join(20)
    assert not th.is_alive(), "the launch waited for ever for a thread that had ended"
    assert isinstance(box.get("error"), stopping.KernelTimeout), box
    deadline = time.monotonic() + 10
    while [t for t in threading.enumerate() if type(t).__name__ == "BlockThread" and t.is_alive()]:
        assert time.monotonic() < deadline, "block threads still running after their launch failed"
        time.sleep(0.05)


def test_stop_threads_spares_a_thread_before_its_kernel_and_once_it_is_leaving(monkeypatch):
    """A stop before ``run``'s try (stopping.started) or inside the bookkeeping (after stopping.leaving) would end a
    thread unseen: stop_threads skips such a thread, and stops it in between."""
    sent = []
    monkeypatch.setattr(
        stopping, "_SET_ASYNC_EXC", lambda ident, exc: sent.append((ident.value, getattr(exc, "value", exc)))
    )
    go = threading.Event()

    class BlockThread(threading.Thread):  # the name stop_threads looks for; guarded as harden marks numba's class
        _gpulab_guarded = True
        threadIdx = blockIdx = (0, 0, 0)

        def run(self):
            go.wait(10)

    th = BlockThread(daemon=True)
    th.start()
    try:
        assert stopping.stop_threads(stopping.KernelTimeout) == [] and sent == []  # not yet in its kernel
        stopping.started(th)
        assert len(stopping.stop_threads(stopping.KernelTimeout)) == 1 and sent == [(th.ident, stopping.KernelTimeout)]
        sent.clear()
        stopping.leaving(th)  # (called by the thread itself; here only its marks matter)
        assert sent == [(th.ident, None)]  # a pending stop withdrawn
        sent.clear()
        assert stopping.stop_threads(stopping.KernelTimeout) == [] and sent == []  # leaving: spared
    finally:
        go.set()
        th.join(10)


def test_launches_with_a_thread_arriving_late_at_barriers_still_run():
    """The kernel of the two tests above runs as before without stops (real block threads, two barriers)."""
    out = np.zeros(16, np.int32)
    waits_twice_kernel[1, 16](out)
    assert out.tolist() == [1] * 16
