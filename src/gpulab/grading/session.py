"""Running one assembled submission in the sandbox: the runner process, its result channel, limits.

:func:`run` starts the runner (``gpulab.grading.runner``) in the sandbox, sends it one cell at a
time and reads one record per cell from a channel the submission cannot write. When a cell kills
the runner (timeout, crash, memory, output) the scores earned before it are kept, that cell is
skipped and the submission runs again from the start without it (at most ``MAX_RESTARTS`` times,
within the submission's total time). A submission that writes into, replaces or closes the channel,
or inspects the grader's memory, is trusted no further.

A runner that does not get ready (it died at start, or a loaded machine kept it past ``STARTUP_TIMEOUT``) had
run none of the submission's code: it is started once more (``START_TRIES``), and when that fails too
:class:`RunnerDidNotStart` says so, with what the earlier sessions recorded.
"""

from __future__ import annotations

import json
import os
import queue
import signal
import threading
import time
from dataclasses import asdict, dataclass
from typing import Any

from gpulab.errors import GpulabError

from .assemble import Assembled, Cell
from .audience import FOR_TEACHER
from .sandbox import Sandbox

__all__ = ["MAX_RESTARTS", "STARTUP_TIMEOUT", "START_TRIES", "RunnerDidNotStart", "run"]

MAX_RESTARTS = 3
STARTUP_TIMEOUT = 180.0
START_TRIES = 2


class RunnerDidNotStart(GpulabError):
    """The runner did not get ready in ``START_TRIES`` tries; no code of the submission ran in those tries.

    ``records`` and ``skipped`` are what the sessions before (when a cell had stopped one) found."""

    def __init__(self, message: str, records: dict[int, dict], skipped: dict[int, str]) -> None:
        super().__init__(message)
        self.records, self.skipped = records, skipped


class _OutOfTime(Exception):
    """The submission's total time ran out while a runner was starting (after a stopped cell)."""


class _NotReady(Exception):
    """One try at starting the runner failed: why, and the runner's last output."""

    def __init__(self, why: str, tail: str) -> None:
        super().__init__(why)
        self.why, self.tail = why, tail


@dataclass
class _Stop:
    index: int
    reason: str
    final: bool = False  # no point in running again (the submission attacked the result channel)


def _signal_name(code: int) -> str:
    """``-11`` (killed by a signal) or ``139`` (a shell's or bubblewrap's 128 + 11): "SIGSEGV"."""
    sig = -code if code < 0 else (code - 128 if 128 < code < 160 else 0)
    try:
        return signal.Signals(sig).name if sig else f"exit code {code}"
    except ValueError:
        return f"exit code {code}"


def _tree_rss(pid: int) -> int:
    """Resident bytes of ``pid`` and all its descendants (0 where /proc cannot tell)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as fh:
                ppid = int(fh.read().rsplit(b")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        children.setdefault(ppid, []).append(int(entry))
    total, todo, page = 0, [pid], os.sysconf("SC_PAGE_SIZE")
    while todo:
        p = todo.pop()
        todo += children.get(p, [])
        try:
            with open(f"/proc/{p}/statm") as fh:
                total += int(fh.read().split()[1]) * page
        except (OSError, ValueError, IndexError):
            pass
    return total


def _session(cells: list[Cell], skip: dict[int, str], sandbox: Sandbox, deadline: float) -> tuple[dict, _Stop | None]:
    """Run the cells once; returns the records by cell index and why it stopped early (or None)."""
    ctrl_r, ctrl_w = os.pipe()
    res_r, res_w = os.pipe()
    out_r, out_w = os.pipe()
    try:
        proc = sandbox.start((ctrl_r, res_w), out_w)
    except OSError as exc:  # the sandbox's command could not be run at all
        for fd in (ctrl_r, ctrl_w, res_r, res_w, out_r, out_w):
            os.close(fd)
        raise _NotReady(f"{type(exc).__name__}: {exc}", "") from None
    for fd in (ctrl_r, res_w, out_w):
        os.close(fd)
    ctrl = os.fdopen(ctrl_w, "w", encoding="utf-8")
    lines: queue.Queue = queue.Queue()
    output: dict[str, Any] = {"bytes": 0, "tail": b""}
    limit = sandbox.limits.output_bytes

    def read_results() -> None:
        with os.fdopen(res_r, "rb") as fh:
            while True:
                line = fh.readline(1 << 20)
                if not line:
                    break
                lines.put(line)
        lines.put(None)

    def drain_output() -> None:
        with os.fdopen(out_r, "rb") as fh:
            while chunk := fh.read1(1 << 16):
                output["bytes"] += len(chunk)
                output["tail"] = (output["tail"] + chunk)[-4000:]

    threads = [threading.Thread(target=read_results, daemon=True), threading.Thread(target=drain_output, daemon=True)]
    for t in threads:
        t.start()

    def _tail() -> str:
        return output["tail"].decode("utf-8", "replace")

    memory = sandbox.limits.memory_mb * 1024 * 1024
    next_rss = [0.0]

    def over_limits() -> str:
        if output["bytes"] > limit:
            return f"printed more than {limit:,} bytes (the output limit)"
        if time.monotonic() >= next_rss[0]:  # RLIMIT_AS cannot apply in gpu mode: watch the resident size
            next_rss[0] = time.monotonic() + 0.5
            if _tree_rss(proc.pid) > memory:
                return f"used more than {sandbox.limits.memory_mb} MB of memory (the memory limit)"
        return ""

    def wait_record(index: int, timeout: float) -> tuple[dict | None, str]:
        end = min(time.monotonic() + timeout, deadline)
        while True:
            if why := over_limits():
                return None, why
            left = end - time.monotonic()
            if left <= 0:
                if end >= deadline:
                    return None, "ran past the submission's total time limit"
                return None, f"ran past the {timeout:g} s limit per cell"
            try:
                line = lines.get(timeout=min(left, 0.2))
            except queue.Empty:
                continue
            if line is None:
                # the channel closed: the process is ending, or the submission closed it and went on
                # (still within the cell's time, output and memory limits)
                while proc.poll() is None:
                    if time.monotonic() > end + 5:
                        return None, "closed the grader's result channel and kept running"
                    if why := over_limits():
                        return None, f"closed the grader's result channel and {why}"
                    time.sleep(0.1)
                code = proc.returncode
                mem = " (perhaps out of memory)" if code in (-9, 137) or "MemoryError" in _tail() else ""
                if code == 86:
                    return None, "replaced the grader's result channel"
                if code == 87:
                    return None, (
                        "inspected the grader's memory (gc / sys._current_frames), which the grading channel forbids"
                    )
                return None, f"the kernel died ({_signal_name(code)}){mem}"
            try:
                rec = json.loads(line)
            except ValueError:
                return None, "wrote into the grader's result channel"
            if not isinstance(rec, dict) or rec.get("index") != index:
                return None, "wrote into the grader's result channel"
            return rec, ""

    records: dict[int, dict] = {}
    stop: _Stop | None = None
    try:
        ready, why = wait_record(None, STARTUP_TIMEOUT)  # type: ignore[arg-type]
        if ready is None or not ready.get("ready"):
            if "limit per cell" in why:  # wait_record's words for a cell
                why = f"it was not ready within {STARTUP_TIMEOUT:g} s"
            raise _NotReady(why or "it sent no ready record", _tail().strip())
        for cell in cells:
            if cell.index in skip:
                continue
            try:
                ctrl.write(json.dumps(asdict(cell)) + "\n")
                ctrl.flush()
            except BrokenPipeError:
                pass
            rec, why = wait_record(cell.index, sandbox.limits.cell_timeout)
            if rec is None:
                stop = _Stop(cell.index, why, final="channel" in why or "grader's memory" in why)
                break
            if rec.get("kind") != cell.kind:
                stop = _Stop(cell.index, "wrote into the grader's result channel", final=True)
                break
            records[cell.index] = rec
        if stop is None:
            try:
                ctrl.write(json.dumps({"quit": True}) + "\n")
                ctrl.flush()
            except BrokenPipeError:
                pass
            try:
                proc.wait(timeout=10)
            except Exception:
                pass
            # a record after the last one: written by the submission, not the runner
            time.sleep(0.05)
            while True:
                try:
                    extra = lines.get_nowait()
                except queue.Empty:
                    break
                if extra is not None:
                    stop = _Stop(cells[-1].index, "wrote into the grader's result channel", final=True)
    finally:
        Sandbox.kill(proc)
        try:
            ctrl.close()
        except OSError:
            pass
        for t in threads:
            t.join(timeout=5)
    return records, stop


def _started_session(
    cells: list[Cell], skip: dict[int, str], sandbox: Sandbox, deadline: float, earlier: dict[int, dict], notes: list
) -> tuple[dict, _Stop | None]:
    """:func:`_session`, started once more when the runner does not get ready."""
    failed: list[_NotReady] = []
    for _ in range(START_TRIES):
        try:
            result = _session(cells, skip, sandbox, deadline)
        except _NotReady as exc:
            if time.monotonic() >= deadline:  # a restart after a stopped cell, with no time left: not a start failure
                raise _OutOfTime from None
            failed.append(exc)
            continue
        if failed:
            notes.append(
                f"{FOR_TEACHER}the grading process did not start at first ({failed[0].why}); it did on try "
                f"{len(failed) + 1}"
            )
        return result
    tail = failed[-1].tail
    raise RunnerDidNotStart(
        f"the grading process did not start in {START_TRIES} tries, before any code of the submission ran. "
        f"{FOR_TEACHER}it failed with {'; '.join(e.why for e in failed)}"
        + (f"; its last output:\n{tail}\n" if tail else "; ")
        + "Grade this notebook again; if it fails again, check that this Python can import gpulab, numba and IPython, "
        "or raise --memory-mb.",
        dict(earlier),  # the session before stopped at the cell now skipped: what it recorded stands
        dict(skip),
    )


def run(assembled: Assembled, sandbox: Sandbox) -> tuple[dict[int, dict], dict[int, str], str, list[str]]:
    """Records for every cell that ran, the cells skipped (and why), a reason to stop trusting, and notes for the
    teacher (a runner that started only on its second try). Raises :class:`RunnerDidNotStart`."""
    deadline = time.monotonic() + sandbox.limits.total_timeout
    skip: dict[int, str] = {}
    records: dict[int, dict] = {}
    notes: list[str] = []
    for _ in range(MAX_RESTARTS + 1):
        try:
            records, stop = _started_session(assembled.cells, skip, sandbox, deadline, records, notes)
        except _OutOfTime:
            break  # grading again would meet the same limit: the cells not reached are not graded, as below
        if stop is None:
            return records, skip, "", notes
        if stop.final:
            # scores before the first cell that could have written the channel stand
            cell = next((c for c in assembled.cells if c.index == stop.index), None)
            where = f" (cell {stop.index + 1}" + (f", {cell.grade_id})" if cell and cell.grade_id else ")")  # from 1
            return {k: v for k, v in records.items() if k < stop.index}, skip, stop.reason + where, notes
        skip[stop.index] = stop.reason
        if time.monotonic() >= deadline:
            break
    return records, skip, "stopped: too many cells were stopped or the total time ran out", notes
