"""The simulator's block threads a test started: waiting for them to end. Threads that were alive before the test
(another test's launch left them, e.g. on a loaded machine) are not this test's, so they neither fail nor hide it."""

from __future__ import annotations

import threading
import time


def alive() -> set[threading.Thread]:
    """Every simulator block thread now running."""
    return {th for th in threading.enumerate() if type(th).__name__ == "BlockThread" and th.is_alive()}


def wait_ended(before: set[threading.Thread], seconds: float, what: str) -> None:
    """Wait up to ``seconds`` for the block threads started since ``before`` (a snapshot of :func:`alive`) to end."""
    deadline = time.monotonic() + seconds
    while left := alive() - before:
        if time.monotonic() >= deadline:
            where = sorted(
                f"{th.name} block {getattr(th, 'blockIdx', '?')} thread {getattr(th, 'threadIdx', '?')}" for th in left
            )
            raise AssertionError(f"{what}: {len(left)} still running after {seconds} s: {where[:4]}")
        time.sleep(0.05)
