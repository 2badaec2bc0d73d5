"""Run by tests/test_simulator_stops.py in a process of its own: ``python storm_stops.py N`` launches a block of
16 Python threads (one per CUDA thread) passing barriers in a loop N times, and stops each launch with a storm of
the harness's stops (KernelTimeout) at random moments, at the block's threads and at the launching thread. Prints
"N launches stopped" when every launch ended within 20 s of its first stop, with its lock free; exits 1 (saying
which launch) otherwise."""

from __future__ import annotations

import random
import sys
import threading
import time

import numpy as np

import gpulab  # noqa: F401 - picks the mode and hardens the simulator
from gpulab.simulator import blocks, stopping
from numba import cuda

from block_threads import alive, wait_ended


@cuda.jit
def barriers_in_a_loop(rounds, out):
    t = cuda.threadIdx.x
    for _ in range(rounds[0]):  # the threads spend their time at the barrier, taking and leaving the block's lock
        cuda.syncthreads()
    out[t] = rounds[0]


def main(launches: int) -> int:
    blocks.plan = lambda fn: None  # every block on Numba's threads
    made: list = []
    original = blocks.Block.__init__

    def keep(self, *args, **kwargs):
        original(self, *args, **kwargs)
        made.append(self)

    blocks.Block.__init__ = keep
    rng = random.Random(7)
    before = alive()
    for launch in range(launches):
        made.clear()
        ended = threading.Event()
        raised: list = []

        def launcher(ended: threading.Event = ended, raised: list = raised) -> None:
            try:
                barriers_in_a_loop[1, 16](np.array([100000]), np.zeros(16, np.float32))
            except BaseException as exc:  # noqa: BLE001 - the stop, or the block's failure it caused
                raised.append(exc)
            finally:
                ended.set()

        worker = threading.Thread(target=launcher, name="gpulab-check", daemon=True)
        worker.start()
        while not made and not ended.is_set():
            time.sleep(0.001)
        if not made:
            print(f"launch {launch} ended before its block began: {raised!r}")
            return 1
        time.sleep(rng.random() * 0.01)  # the block is passing barriers
        deadline = time.monotonic() + 20
        while worker.is_alive():  # not `ended`: a stop may land inside ended.set()
            if time.monotonic() > deadline:
                print(f"launch {launch} still running 20 s after its first stop")
                return 1
            stopping.stop_threads(stopping.KernelTimeout)
            if rng.random() < 0.3 and not ended.is_set():
                stopping.stop_thread(worker, stopping.KernelTimeout)
            time.sleep(rng.random() * 0.002)
        (block,) = made
        if not block.lock.acquire(timeout=5):
            print(f"launch {launch}: a thread that ended left the block's lock held")
            return 1
        block.lock.release()
        try:
            wait_ended(before, 5, f"the threads of launch {launch}")
        except AssertionError as exc:
            print(exc)
            return 1
    wait_ended(before, 10, "simulator threads of the stopped launches")
    print(f"{launches} launches stopped")
    return 0


if __name__ == "__main__":
    sys.exit(main(int(sys.argv[1])))
