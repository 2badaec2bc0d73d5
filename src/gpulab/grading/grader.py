"""Grade one submission: assemble it from the lab's source, run it in the sandbox, score the tests.

A test cell scores the way nbgrader's autograder scores it, so the two graders agree: an error (or
text on stderr) earns 0, a number as the cell's value earns that many points (clipped to the
cell's points from the source), anything else earns full points. The verdict text (message, hint)
comes from the checks that :func:`gpulab.grading.report` saw.

When a cell kills the runner (timeout, crash, memory, output) the scores earned before it are
kept, that cell is skipped and the submission is run again from the start without it (at most
``MAX_RESTARTS`` times, within the submission's total time), so one runaway cell costs its own
exercise only; the table says which cell it was and why.
"""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from gpulab.errors import GpulabError

from .assemble import Assembled, Cell, assemble, read_submission
from .sandbox import Limits, Sandbox, bwrap_path, describe

__all__ = ["GradeRow", "Graded", "grade", "grade_notebook", "format_table"]

MAX_RESTARTS = 3
STARTUP_TIMEOUT = 180.0


@dataclass
class GradeRow:
    grade_id: str
    points: float
    score: float
    status: str
    message: str
    hint: str = ""


@dataclass
class Graded:
    """One graded submission."""

    notebook: str
    lab: str
    mode: str
    sandbox: str
    rows: list[GradeRow]
    notes: list[str]

    @property
    def score(self) -> float:
        return round(sum(r.score for r in self.rows), 3)

    @property
    def max_score(self) -> float:
        return round(sum(r.points for r in self.rows), 3)

    def to_dict(self) -> dict:
        return {
            "notebook": self.notebook,
            "lab": self.lab,
            "mode": self.mode,
            "sandbox": self.sandbox,
            "score": self.score,
            "max_score": self.max_score,
            "notes": self.notes,
            "exercises": [asdict(r) for r in self.rows],
        }


# --------------------------------------------------------------------------------------------------
# Running


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
    proc = sandbox.start((ctrl_r, res_w), out_w)
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

    def wait_record(index: int, timeout: float) -> tuple[dict | None, str]:
        end = min(time.monotonic() + timeout, deadline)
        while True:
            if output["bytes"] > limit:
                return None, f"printed more than {limit:,} bytes (the output limit)"
            if time.monotonic() >= next_rss[0]:  # RLIMIT_AS cannot apply in gpu mode: watch the resident size
                next_rss[0] = time.monotonic() + 0.5
                if _tree_rss(proc.pid) > memory:
                    return None, f"used more than {sandbox.limits.memory_mb} MB of memory (the memory limit)"
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
                try:  # the channel closed: the process is ending, or the submission closed it and went on
                    proc.wait(timeout=max(end - time.monotonic(), 0.0) + 5)
                except subprocess.TimeoutExpired:
                    return None, "closed the grader's result channel and kept running"
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
            tail = output["tail"].decode("utf-8", "replace").strip()
            raise GpulabError(
                f"the grading process did not start ({why}); its last output:\n{tail}\n"
                "Check that this Python can import gpulab, numba and IPython, or raise --memory-mb."
            )
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


def _run(assembled: Assembled, sandbox: Sandbox) -> tuple[dict[int, dict], dict[int, str], str]:
    """Records for every cell that ran, the cells skipped (and why), and a reason to stop trusting."""
    deadline = time.monotonic() + sandbox.limits.total_timeout
    skip: dict[int, str] = {}
    records: dict[int, dict] = {}
    for _ in range(MAX_RESTARTS + 1):
        records, stop = _session(assembled.cells, skip, sandbox, deadline)
        if stop is None:
            return records, skip, ""
        if stop.final:
            # scores before the first cell that could have written the channel stand
            cell = next((c for c in assembled.cells if c.index == stop.index), None)
            where = f" (cell {stop.index}" + (f", {cell.grade_id})" if cell and cell.grade_id else ")")
            return {k: v for k, v in records.items() if k < stop.index}, skip, stop.reason + where
        skip[stop.index] = stop.reason
        if time.monotonic() >= deadline:
            break
    return records, skip, "stopped: too many cells were stopped or the total time ran out"


# --------------------------------------------------------------------------------------------------
# Scoring


def _worst(results: list[dict]) -> dict | None:
    failing = [r for r in results if r.get("status") != "passed"]
    return failing[0] if failing else (results[-1] if results else None)


def score_test(cell: Cell, rec: dict | None, why_not_run: str) -> GradeRow:
    """A test cell's row, scored like nbgrader's autograder."""
    points = cell.points
    if rec is None:
        return GradeRow(cell.grade_id, points, 0.0, "not run", why_not_run)
    if rec.get("tampered"):
        return GradeRow(
            cell.grade_id,
            points,
            0.0,
            "tampered",
            f"the checker was changed while this exercise ran: {rec['tampered']}",
        )
    verdict = _worst(rec.get("results") or [])
    message = (verdict or {}).get("message", "").splitlines()[0] if (verdict or {}).get("message") else ""
    hint = (verdict or {}).get("hint", "") or ""
    err = rec.get("error")
    if err:
        ename, evalue = err
        if ename == "NotImplementedError" or (verdict or {}).get("status") == "not implemented":
            return GradeRow(cell.grade_id, points, 0.0, "not implemented", message or "not implemented yet", hint)
        status = (verdict or {}).get("status") or "failed"
        status = "failed" if status == "passed" else status
        text = message or f"{ename}: {evalue.splitlines()[0] if evalue else ''}"
        return GradeRow(cell.grade_id, points, 0.0, status, text[:500], hint)
    if rec.get("stderr"):
        first = rec["stderr"].strip().splitlines()[0][:200] if rec["stderr"].strip() else ""
        return GradeRow(
            cell.grade_id, points, 0.0, "failed", f"the cell wrote to stderr, which nbgrader scores 0: {first}", hint
        )
    value = rec.get("value")
    score = points if value is None else min(max(float(value), 0.0), points)
    score = round(score, 3)
    if score >= points:
        return GradeRow(cell.grade_id, points, points, "passed", message or "passed", "")
    status = (verdict or {}).get("status") or "partial"
    return GradeRow(cell.grade_id, points, score, "partial" if status == "passed" else status, message, hint)


def grade_notebook(
    submission: Path, source: Path, limits: Limits | None = None, device: str | None = None, data_dir: str | None = None
) -> Graded:
    """Grade ``submission`` against the lab ``source`` (a notebook in labs/solutions)."""
    limits = limits or Limits()
    device = device or os.environ.get("GPULAB_DEVICE", "simulator")
    if device not in ("gpu", "simulator"):
        device = "simulator"
    nb = read_submission(submission)
    assembled = assemble(source, nb)
    bwrap = bwrap_path()
    sandbox = Sandbox(limits, device, data_dir if data_dir is not None else os.environ.get("GPULAB_DATA_DIR"), bwrap)
    try:
        records, skipped, distrust = _run(assembled, sandbox)
    finally:
        sandbox.cleanup()
    notes = list(assembled.notes)
    rows: list[GradeRow] = []
    stopped: list[str] = []
    answer_error = ""
    for cell in assembled.cells:
        if cell.index in skipped:
            what = f"cell {cell.index}" + (f" ({cell.grade_id})" if cell.grade_id else "")
            stopped.append(f"{what} {skipped[cell.index]} and was skipped")
        if cell.kind == "answer":
            err = (records.get(cell.index) or {}).get("error")
            answer_error = ""
            if err and err[0] != "NotImplementedError":
                first = err[1].splitlines()[0][:200] if err[1] else ""
                answer_error = f"your answer cell {cell.grade_id} raised {err[0]}: {first}".rstrip(": ")
                notes.append(answer_error)
        if cell.kind != "test":
            continue
        if cell.index in skipped:
            rows.append(GradeRow(cell.grade_id, cell.points, 0.0, "stopped", f"this cell {skipped[cell.index]}"))
            continue
        row = score_test(cell, records.get(cell.index), distrust or "not run")
        if stopped and row.status != "passed" and cell.index not in skipped:
            row.message = f"{'; '.join(stopped)}. {row.message}"
        elif answer_error and row.status != "passed":
            row.message = f"{answer_error}. {row.message}"
        answer_error = ""
        rows.append(row)
    notes += [s[0].upper() + s[1:] for s in stopped]
    if distrust:
        notes.append(f"the submission {distrust}: exercises from that cell on score 0")
    return Graded(str(submission), source.stem, device, describe(bwrap), rows, notes)


def grade(
    notebook: Path,
    timeout: float = 120,
    kernel_name: str = "python3",
    source: Path | None = None,
    root: Path | None = None,
    limits: Limits | None = None,
) -> list[GradeRow]:
    """Rows for one submission (kept for ``gpulab.labs.grade`` callers)."""
    from gpulab.labs import find_root

    from .assemble import source_for

    if source is None:
        root = root or find_root()
        source = source_for(Path(notebook), root / "labs" / "solutions")
    limits = limits or Limits(cell_timeout=timeout)
    return grade_notebook(Path(notebook), Path(source), limits).rows


def format_table(rows: list[GradeRow], title: str = "") -> str:
    """A plain-text score table."""
    w = max([len("exercise")] + [len(r.grade_id) for r in rows])
    lines = [title] if title else []
    lines.append(f"{'exercise':<{w}}  {'score':>9}  {'status':<16} message")
    for r in rows:
        msg = r.message if len(r.message) <= 100 else r.message[:97] + "..."
        lines.append(f"{r.grade_id:<{w}}  {r.score:>4g}/{r.points:<4g}  {r.status:<16} {msg}")
    total, maximum = sum(r.score for r in rows), sum(r.points for r in rows)
    lines.append(f"{'total':<{w}}  {total:>4g}/{maximum:<4g}")
    return "\n".join(lines)
