"""Which recording a simulator thread's notes go to: only those of blocks started after the recording began.

A thread of an earlier launch can still be running after that launch raised: on Numba's threads, the other
threads of a failed block leave their barrier or warp call, or finish a loop, at their own pace (the launcher
joins them for at most a second), and a block whose launcher was interrupted (Ctrl-C, the harness's deadline)
goes on in the background. When such a thread ends or makes a warp call it would be noted into whatever
recording is open then (:class:`gpulab.simulator.Instruments`' barrier counts, warp calls and shared arrays,
:func:`gpulab.simulator.warps.undefined_reads`). So blocks and recordings take numbers from one counter, in the
order they start (:func:`number`), and a recording takes a note only from a thread whose block has a higher
number than its own (:func:`belongs`): by construction, not by waiting long enough.
"""

from __future__ import annotations

import itertools
import threading
from typing import Any

__all__ = ["belongs", "number"]

_NUMBERS = itertools.count(1)  # next() on it is atomic under the GIL


def number() -> int:
    """The next number, for a block that starts now or a recording that begins now."""
    return next(_NUMBERS)


def belongs(mark: int, th: Any = None) -> bool:
    """Whether a note of thread ``th`` (default: the current thread) goes to the recording numbered ``mark``: its
    block started after the recording began. A thread that runs no simulated block (the host, the caller of
    :func:`gpulab.kernels.cooperative.launch`) notes into every open recording."""
    if th is None:
        th = threading.current_thread()
    block = getattr(getattr(th, "_manager", None), "_gpulab_block", None)
    return block is None or block.number > mark
