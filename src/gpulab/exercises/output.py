"""What a kernel prints while the harness runs it: kept aside, and summed up in a few lines.

In the simulator every thread of every launch runs ``print(...)``: a check launches a kernel many times
(each case, both orientations, race re-runs), so a kernel that prints buries the verdict under hundreds
of lines. :func:`captured` replaces ``sys.stdout`` while the check runs (the simulator's threads and the
harness's worker thread print through it), keeps the first lines and counts the rest; the ``finally``
puts the previous ``sys.stdout`` back (Jupyter's stream included), on a timeout or an exception too.
``sys.stdout`` is one for the whole process: what a thread that was already running when the check began
prints (the learner's own background thread, a timer) is not the kernel's and goes on to the previous stream.
Two captures that end out of order (checks run from two threads) leave no finished capture in place.

On a GPU, ``print`` in a kernel is CUDA's printf: the driver writes it with C's stdio to the process's file
descriptor 1 when the device synchronises, bypassing ``sys.stdout`` (ipykernel >= 6 forwards fd 1 to the
notebook; in a terminal it is the console). In gpu mode :func:`captured` therefore also points fd 1 at a
temporary file while the check runs: C stdio and Python's streams are flushed first, and at the end the device
is synchronised (at most :data:`SYNC_SECONDS`, and not again while a device that never finished is waited for),
C stdio flushed again and fd 1 put back before the file is read into the same note, after the lines printed
through ``sys.stdout`` (a host function's). Only fd 1: CUDA's printf writes there, and fd 2 carries errors that
must not be hidden. What any thread writes to fd 1 below Python meanwhile (C code, ``os.write(1, ...)``, a child
process) is counted as the kernel's, as it cannot be told apart; a ``print`` of a thread already running, whose
stream writes to fd 1 (a terminal), still goes to the original fd 1. fd 1 is put back however the check ends (an
interrupt during the swap itself is held back until it is done); captures that end out of order hand down what
they found, so the last one to end puts back the original fd 1. Where fd-level capture is impossible (Windows,
no fd 1, no C library found) only ``sys.stdout`` is captured, as in the simulator, and ``Printed.fd_level`` is
False.
"""

from __future__ import annotations

import codecs
import ctypes
import ctypes.util
import functools
import io
import os
import queue
import signal
import sys
import tempfile
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import IO, Any

from .. import runtime

__all__ = ["SHOWN", "SYNC_SECONDS", "Printed", "captured"]

SHOWN = 5  # lines of a kernel's output shown under a verdict
SYNC_SECONDS = 5.0  # longest wait for the GPU before fd 1 is put back (a kernel that never ends: the check said so)
_LINE_CHARS = 200  # a longer line is cut
_FD = 1  # CUDA's printf writes to C's stdout


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
        self._divert = -1  # fd 1 as it was (a dup), while fd 1 is captured and ``stream`` writes to fd 1
        self.fd_level = False  # fd 1 was captured too (gpu mode: CUDA's printf)

    def _passes(self) -> bool:
        return self._stream is not None and (self._ended or threading.current_thread() in self._passing)

    def write(self, text: str) -> int:
        if self._passes():
            if self._divert >= 0:
                with self._lock:
                    if self._divert >= 0 and not self._ended:  # a thread already running, in a terminal
                        _write_all(self._divert, str(text).encode(self.encoding, "replace"))
                        return len(text)
            return self._stream.write(text)  # type: ignore[no-any-return]
        self._keep(str(text))
        return len(text)

    def _keep(self, text: str) -> None:
        with self._lock:
            *done, self._partial = (self._partial + text).split("\n")
            if len(self._partial) > 10_000:  # no newline for long: a line of its own
                done.append(self._partial)
                self._partial = ""
            for line in done:
                self.count += 1
                if len(self.lines) < self.keep:
                    self.lines.append(line[:_LINE_CHARS])

    def _end(self) -> None:
        with self._lock:
            self._ended = True
            if self._divert >= 0:
                os.close(self._divert)
                self._divert = -1

    def flush(self) -> None:
        if self._passes():
            self._stream.flush()

    def fileno(self) -> int:
        """The replaced stream's file descriptor (what is written to it directly is kept aside only at fd level)."""
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


def _write_all(fd: int, data: bytes) -> None:
    while data:
        data = data[os.write(fd, data) :]


_NO_LIBC: Any = object()
_libc_flush: Any = None  # fflush of the process's C library (None: not looked up yet, _NO_LIBC: none)


def _c_flush() -> Callable[[], object] | None:
    """``fflush(NULL)``: every C stdio stream's buffer written out (CUDA's printf goes through C's stdout); None
    where no C library is found (then fd 1 is not captured: text left in C's buffer would land on the wrong side)."""
    global _libc_flush
    if _libc_flush is None:
        _libc_flush = _NO_LIBC
        if sys.platform != "win32":  # Windows: the CRT's stdio is per DLL; fd-level capture is not attempted
            for name in (None, ctypes.util.find_library("c")):  # None: the symbols the process has loaded
                try:
                    fflush = ctypes.CDLL(name).fflush
                except (OSError, AttributeError):
                    continue
                fflush.argtypes, fflush.restype = [ctypes.c_void_p], ctypes.c_int
                _libc_flush = functools.partial(fflush, None)
                break
    return None if _libc_flush is _NO_LIBC else _libc_flush  # type: ignore[no-any-return]


def _fd_wanted() -> bool:
    """Capture fd 1 too: in gpu mode, where a kernel's ``print`` is CUDA's printf (tests set this to take that path)."""
    return runtime.is_gpu()


_sync_requests: queue.SimpleQueue[threading.Event] = queue.SimpleQueue()
_sync_lock = threading.Lock()
_sync_worker: threading.Thread | None = None
_sync_last: threading.Event | None = None  # the latest request: set once the device has finished


def _sync_loop() -> None:
    while True:
        done = _sync_requests.get()
        try:
            runtime.synchronize()
        except Exception:  # noqa: BLE001 - a failed launch is the check's to report; only its output matters here
            pass
        finally:
            done.set()


def _drain_device(timeout: float = SYNC_SECONDS) -> None:
    """Wait (at most ``timeout`` s) for the GPU to finish, so that the driver writes out CUDA printf's buffer.
    The wait is in a helper thread: a kernel that never ends (the check's timeout) must not keep fd 1 captured,
    and while that wait is still stuck later captures do not wait again. No-op in the simulator."""
    global _sync_worker, _sync_last
    if not runtime.is_gpu():
        return
    with _sync_lock:
        if _sync_last is not None and not _sync_last.is_set():
            return  # the device has not finished an earlier request (or another thread's, still running)
        done = _sync_last = threading.Event()
        if _sync_worker is None or not _sync_worker.is_alive():
            _sync_worker = threading.Thread(target=_sync_loop, name="gpulab-print-sync", daemon=True)
            _sync_worker.start()
        _sync_requests.put(done)
    done.wait(timeout)


@contextmanager
def _held_interrupt() -> Iterator[None]:
    """In the main thread, a Ctrl-C (Jupyter's stop button) that arrives meanwhile is raised after the block."""
    if threading.current_thread() is not threading.main_thread():
        yield  # KeyboardInterrupt is raised in the main thread only
        return
    pending: list[Any] = []
    try:
        old = signal.getsignal(signal.SIGINT)
        if old is None:  # a handler installed outside Python: it could not be put back
            raise ValueError(old)
        signal.signal(signal.SIGINT, lambda *args: pending.append(args))
    except (ValueError, OSError, TypeError):  # no signals here (an embedded interpreter)
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, old)
        if pending and callable(old):
            old(*pending[0])
        elif pending and old == signal.SIG_DFL:
            raise KeyboardInterrupt


_STACK: list[_FdCapture] = []  # fd-level captures in the order they began (the last is on fd 1)
_STACK_LOCK = threading.Lock()


class _FdCapture:
    """fd 1 pointed at a temporary file (:func:`captured` in gpu mode)."""

    def __init__(self) -> None:
        self.saved = -1  # a dup of fd 1 as this capture found it: put back when it ends
        self.divert = -1  # another dup of it, handed to Printed (closed there)
        self.file: IO[bytes] | None = None

    def start(self, streams: tuple[Any, ...], divert: bool = False) -> bool:
        """Point fd 1 at a new temporary file, after flushing ``streams``; False (nothing changed) where that is
        impossible. With ``divert``, ``self.divert`` is another copy of fd 1 as it was (for :class:`Printed`)."""
        fflush = _c_flush()
        if fflush is None:
            return False
        try:
            os.fstat(_FD)
            tmp = tempfile.TemporaryFile()  # noqa: SIM115 - closed by read_into
        except OSError:  # no fd 1 (pythonw, a service), no temporary directory
            return False
        for s in streams:  # what Python holds for fd 1 goes out before it is captured
            try:
                s.flush()
            except (AttributeError, OSError, ValueError):
                pass
        with _held_interrupt(), _STACK_LOCK:
            fflush()
            try:
                saved = os.dup(_FD)
                try:
                    os.dup2(tmp.fileno(), _FD)
                except OSError:
                    os.close(saved)
                    raise
            except OSError:
                tmp.close()
                return False
            self.saved, self.file = saved, tmp
            _STACK.append(self)
            if divert:
                try:
                    self.divert = os.dup(saved)
                except OSError:  # no descriptor left: those threads' prints are counted as the kernel's
                    pass
        return True

    def stop(self) -> None:
        """Put back fd 1 as this capture found it; when a later capture still runs (another thread's), hand it what
        this one found instead, so that the last to end puts back the original."""
        with _held_interrupt(), _STACK_LOCK:
            if self not in _STACK:
                return
            k = _STACK.index(self)
            if k == len(_STACK) - 1:
                fflush = _c_flush()
                if fflush is not None:
                    fflush()  # C's buffer (CUDA's printf) into the file, before fd 1 changes
                os.dup2(self.saved, _FD)
                os.close(self.saved)
            else:
                later = _STACK[k + 1]
                os.close(later.saved)
                later.saved = self.saved
            del _STACK[k]
            self.saved = -1

    def read_into(self, printed: Printed) -> None:
        """What was written to fd 1 meanwhile, into ``printed`` (then the file is closed)."""
        f, self.file = self.file, None
        if f is None:
            return
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        if printed._partial:  # a line printed through sys.stdout without its newline: not joined to fd 1's text
            printed._keep("\n")
        try:
            f.seek(0)
            while chunk := f.read(1 << 20):
                printed._keep(decoder.decode(chunk))
            printed._keep(decoder.decode(b"", final=True))
        except (OSError, ValueError):
            pass
        finally:
            f.close()


def _writes_to_fd1(stream: Any) -> bool:
    if isinstance(stream, Printed):
        return False  # an outer capture: it passes its own threads' output on
    try:
        return int(stream.fileno()) == _FD  # a terminal's sys.stdout (ipykernel's names its own copy)
    except (AttributeError, OSError, ValueError):
        return False


@contextmanager
def captured(keep: int = SHOWN, fd: bool | None = None) -> Iterator[Printed]:
    """While the block runs, what this thread and the threads started meanwhile print goes to the :class:`Printed` it
    yields (threads already running print on as before); the previous ``sys.stdout`` is put back when the block
    ends, however it ends. With ``fd`` (default: in gpu mode) what is written to fd 1 meanwhile, CUDA's printf
    included, is kept there too, and fd 1 is put back when the block ends (see the module's text)."""
    previous = sys.stdout
    me = threading.current_thread()
    printed = Printed(keep, previous, frozenset(t for t in threading.enumerate() if t is not me))
    cap = _FdCapture() if (_fd_wanted() if fd is None else fd) else None
    sys.stdout = printed  # type: ignore[assignment]
    try:
        if cap is not None and cap.start((previous, sys.__stdout__), divert=_writes_to_fd1(previous)):
            printed.fd_level, printed._divert, cap.divert = True, cap.divert, -1
        yield printed
    finally:
        try:
            if cap is not None:
                try:
                    _drain_device()
                finally:
                    cap.stop()
        finally:
            printed._end()
            if sys.stdout is printed:  # else a later capture (another thread's) is in place: it puts back its own
                back: Any = previous
                while isinstance(back, Printed) and back._ended:  # an earlier capture that ended meanwhile
                    back = back._stream
                sys.stdout = back
            if cap is not None:
                cap.read_into(printed)
                if cap.divert >= 0:  # a Ctrl-C re-raised at the end of start(): the dup never reached printed
                    os.close(cap.divert)
                    cap.divert = -1
