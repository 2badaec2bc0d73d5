"""The one array view that logs element accesses made from simulator threads, and what it records.

:class:`Watched` (made by :func:`watch`) logs each element a simulated CUDA thread reads or writes as an
:class:`Access`: of kernel arguments in :func:`gpulab.trace.trace` and the exercise harness, and of shared arrays
when an :class:`~gpulab.simulator.Instruments` watches them. :func:`flat_indices` is the one rule for which
elements an index touches. Re-exported by :mod:`gpulab.simulator`.
"""

from __future__ import annotations

import re
import sys
import threading
from typing import Any, NamedTuple

import numpy as np

from .memory import Dim

__all__ = ["Access", "Watched", "flat_indices", "watch"]

_SIMULATOR_CODE = re.compile(r"[/\\](numba|numba_cuda|gpulab[/\\]simulator)[/\\]")  # frames an atomic passes through


class Access(NamedTuple):
    """One element access: which array, read or write, by which block/thread, at which element.

    ``epoch`` is how many ``cuda.syncthreads()`` the thread had passed, ``atomic`` whether it was made
    inside ``cuda.atomic.*``, ``line`` the kernel's source line (shared arrays only, else 0).
    """

    array: str
    kind: str  # "r" or "w"
    block: Dim
    thread: Dim
    index: int  # type: ignore[assignment]  # flat (C-order) element index (shadows tuple.index)
    epoch: int = 0
    atomic: bool = False
    line: int = 0


def flat_indices(idx: Any, shape: tuple[int, ...]) -> list[int]:
    """Flat (C-order) element numbers that ``array[idx]`` touches; ``[]`` for an empty array."""
    # Fast path, pure Python (this runs once per logged access, from hundreds of simulator threads):
    # an integer index per axis, as kernels write them.
    if type(idx) is not tuple:
        idx = (idx,)
    if len(idx) == len(shape):
        flat = 0
        for i, n in zip(idx, shape):
            if not isinstance(i, (int, np.integer)) or isinstance(i, bool) or n == 0:
                break
            flat = flat * n + int(i) % n
        else:
            return [flat]
    try:
        if int(np.prod(shape)) == 0:
            return []
        return np.arange(int(np.prod(shape))).reshape(shape)[idx].ravel().tolist()
    except (ValueError, IndexError, TypeError):
        return []


class Watched(np.ndarray):
    """An ndarray view that logs the element reads and writes made from simulator threads."""

    _log: list | None = None
    _name: str = "?"
    _reads: bool = True
    _lines: bool = False

    def __array_finalize__(self, obj: Any) -> None:
        self._log = getattr(obj, "_log", None)
        self._name = getattr(obj, "_name", "?")
        self._reads = getattr(obj, "_reads", True)
        self._lines = getattr(obj, "_lines", False)

    def _record(self, kind: str, idx: Any, line: int) -> None:
        th = threading.current_thread()
        block = getattr(th, "blockIdx", None)
        if self._log is None or block is None:
            return  # not inside a simulated kernel thread
        t = th.threadIdx  # type: ignore[attr-defined]  # set by the simulator on its threads
        b, tt = (block.x, block.y, block.z), (t.x, t.y, t.z)
        epoch, atomic = getattr(th, "_gpulab_epoch", 0), getattr(th, "_gpulab_atomic", False)
        self._log.extend(Access(self._name, kind, b, tt, f, epoch, atomic, line) for f in flat_indices(idx, self.shape))

    def _line(self) -> int:
        """The kernel's source line of this access (0 unless lines are logged): the caller's, or for an access made
        inside ``cuda.atomic.*`` the first caller outside numba's and gpulab's simulator (the atomic's own line)."""
        if not self._lines:
            return 0
        frame = sys._getframe(2)
        if getattr(threading.current_thread(), "_gpulab_atomic", False):
            while frame.f_back is not None and _SIMULATOR_CODE.search(frame.f_code.co_filename):
                frame = frame.f_back
        return frame.f_lineno

    def __getitem__(self, idx: Any) -> Any:
        out = np.ndarray.__getitem__(self, idx)
        if self._log is not None and getattr(threading.current_thread(), "blockIdx", None) is not None:
            if self._reads:
                self._record("r", idx, self._line())
            if isinstance(out, Watched):  # a slice taken inside a kernel: plain data from here on
                return out.view(np.ndarray)
        return out

    def __setitem__(self, idx: Any, value: Any) -> None:
        np.ndarray.__setitem__(self, idx, value)  # an invalid index raises before anything is logged
        if self._log is not None:
            self._record("w", idx, self._line())


def watch(array: np.ndarray, name: str, log: list, reads: bool = True, lines: bool = False) -> Watched:
    """A view of ``array`` that appends an :class:`Access` to ``log`` for each element touched."""
    view = array.view(Watched)
    view._log, view._name, view._reads, view._lines = log, name, reads, lines
    return view
