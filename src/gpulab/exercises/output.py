"""What a kernel prints while the harness runs it: kept aside, and summed up in a few lines.

In the simulator every thread of every launch runs ``print(...)``: a check launches a kernel many times
(each case, both orientations, race re-runs), so a kernel that prints buries the verdict under hundreds
of lines. :func:`captured` replaces ``sys.stdout`` while the check runs (the simulator's threads and the
harness's worker thread print through it), keeps the first lines and counts the rest; the ``finally``
puts the previous ``sys.stdout`` back (Jupyter's stream included), on a timeout or an exception too.
``sys.stdout`` is one for the whole process: what a thread that was already running when the check began
prints (the learner's own background thread, a timer) is not the kernel's and goes on to the previous stream.
Two captures that end out of order (checks run from two threads) leave no finished capture in place.
On a GPU, ``print`` in a kernel is CUDA's printf: the driver writes it to the process's own output, not
through ``sys.stdout``, so it is not kept aside there.
"""

from __future__ import annotations

import io
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

__all__ = ["Printed", "captured"]

SHOWN = 5  # lines of a kernel's output shown under a verdict
_LINE_CHARS = 200  # a longer line is cut


class Printed:
    """A ``sys.stdout`` stand-in that keeps the first :data:`SHOWN` lines written to it and counts the rest."""

    def __init__(
        self, keep: int = SHOWN, stream: Any = None, passing: frozenset[threading.Thread] = frozenset()
    ) -> None:
        self.keep, self.count, self._partial = keep, 0, ""
        self.lines: list[str] = []
        self._lock = threading.Lock()
        self._stream = stream  # the stdout it replaces: its encoding, its fileno
        self._passing = passing  # threads whose output is not the kernel's: written on to ``stream``
        self._ended = False  # the capture is over: everything goes on to ``stream``

    def _passes(self) -> bool:
        return self._stream is not None and (self._ended or threading.current_thread() in self._passing)

    def write(self, text: str) -> int:
        if self._passes():
            return self._stream.write(text)  # type: ignore[no-any-return]
        with self._lock:
            *done, self._partial = (self._partial + str(text)).split("\n")
            if len(self._partial) > 10_000:  # no newline for long: a line of its own
                done.append(self._partial)
                self._partial = ""
            for line in done:
                self.count += 1
                if len(self.lines) < self.keep:
                    self.lines.append(line[:_LINE_CHARS])
        return len(text)

    def flush(self) -> None:
        if self._passes():
            self._stream.flush()

    def fileno(self) -> int:
        """The replaced stream's file descriptor (what is written to it directly is not kept aside)."""
        if self._stream is None:
            raise io.UnsupportedOperation("no file descriptor: gpulab keeps what is printed during a check aside")
        return int(self._stream.fileno())

    def isatty(self) -> bool:
        return False

    def writable(self) -> bool:
        return True

    @property
    def encoding(self) -> str:
        return getattr(self._stream, "encoding", None) or "utf-8"

    def total(self) -> int:
        """Lines written so far (a last line without its newline counts)."""
        return self.count + (1 if self._partial else 0)

    def note(self, who: str = "the kernel", during: str = "the check") -> str:
        """The summary for a verdict ("" when nothing was printed)."""
        with self._lock:
            lines = self.lines + (
                [self._partial[:_LINE_CHARS]] if self._partial and len(self.lines) < self.keep else []
            )
        n = self.total()
        if n == 0:
            return ""
        out = [f"{who} printed {n:,} line{'s' if n != 1 else ''} during {during}:"]
        out += ["  | " + ln for ln in lines]
        hidden = n - len(lines)
        if hidden:
            out.append(
                f"  ... {hidden:,} more line{'s' if hidden != 1 else ''} printed by {who}, hidden during {during}; "
                "run the kernel yourself (on a small input) to see them."
            )
        out.append(
            "print() in a kernel is fine for debugging, but slow: every thread of every launch prints. "
            "Remove it once the kernel works."
        )
        return "\n".join(out)


@contextmanager
def captured(keep: int = SHOWN) -> Iterator[Printed]:
    """While the block runs, what this thread and the threads started meanwhile print goes to the :class:`Printed` it
    yields (threads already running print on as before); the previous ``sys.stdout`` is put back when the block
    ends, however it ends."""
    previous = sys.stdout
    me = threading.current_thread()
    printed = Printed(keep, previous, frozenset(t for t in threading.enumerate() if t is not me))
    sys.stdout = printed  # type: ignore[assignment]
    try:
        yield printed
    finally:
        printed._ended = True
        if sys.stdout is printed:  # else a later capture (another thread's) is in place: it puts back its own
            back: Any = previous
            while isinstance(back, Printed) and back._ended:  # an earlier capture that ended meanwhile
                back = back._stream
            sys.stdout = back
