"""The process that runs one submission, inside the sandbox (started by :mod:`gpulab.grading.grader`).

It never reads the lab from disk: the grader sends one cell at a time over a control pipe and reads
one record per cell from a result pipe, in lock step, so a record the submission writes itself is
out of order and caught. Before a test cell it puts back what the submission may have patched
(every function, class and module that was loaded before any student code ran, ``__code__`` of
gpulab's and NumPy's functions, warning filters, trace hooks: :class:`~gpulab.grading.snapshot.Snapshot`;
and the names the lab's own cells bound), refuses to go on if the submission left threads or processes
running, and runs the test from the lab's source. After it, it checks that nothing the checker uses changed
while the check ran (a simulator kernel is Python, so it could try); if something did, the exercise scores 0.

This is defence in depth inside the one process that must run student code; the sandbox around it
(bubblewrap or an unprivileged user, read-only package, limits) is what protects files and other
submissions.
"""

from __future__ import annotations

import io
import json
import os
import sys
import time
from typing import Any

from gpulab.grading.snapshot import Snapshot, load_checker

EXIT_INSPECTED = 87  # the submission asked for every frame or object in the process: stop trusting it
FORBIDDEN = ("sys._current_frames", "gc.get_objects", "gc.get_referrers", "gc.get_referents")
EXIT_CHANNEL = 86  # the result pipe was replaced: stop rather than write where the grader is not


def _threads() -> int:
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:  # pragma: no cover - not Linux
        return 1


def _processes() -> int:
    """Processes this one can see besides itself: its children, or everything in a pid namespace."""
    me = os.getpid()
    try:
        if me <= 3:  # bubblewrap's pid namespace: pid 1 is bwrap's init, we are 2
            return sum(1 for d in os.listdir("/proc") if d.isdigit() and int(d) not in (1, me))
        kids = 0
        for t in os.listdir(f"/proc/{me}/task"):
            with open(f"/proc/{me}/task/{t}/children") as fh:
                kids += len(fh.read().split())
        return kids
    except OSError:  # pragma: no cover
        return 0


def _error(result: Any) -> list[str] | None:
    exc = result.error_in_exec or result.error_before_exec
    if exc is None:
        return None
    # a subclass (the capstone's NotReadyToTrain) is still "not implemented" to the grader
    name = "NotImplementedError" if isinstance(exc, NotImplementedError) else type(exc).__name__
    return [name, str(exc)[:4000]]


def _results_of(ns: dict, before: Any) -> list[dict]:
    import gpulab.grading as g

    found = list(g._reported)
    res = ns.get("result")
    if not found and res is not before and hasattr(res, "to_dict") and hasattr(res, "max_score"):
        found = [res]
    out = []
    for r in found:
        try:
            d = r.to_dict()
            kept = {k: d[k] for k in ("name", "status", "score", "max_score", "message", "hint")}
            flags = {k: bool(d.get(k)) for k in ("ptx_not_checked", "races_not_checked")}  # the grade table says
            out.append({**kept, **flags})
        except Exception:  # a result the checker did not make
            out.append(
                {
                    "name": "?",
                    "status": "failed",
                    "score": 0,
                    "max_score": 0,
                    "message": "the check's result could not be read",
                    "hint": "",
                    "ptx_not_checked": False,
                    "races_not_checked": False,
                }
            )
    return out


def _guard(event: str, args: tuple) -> None:
    """Audit hook (cannot be removed): the grader's own state lives only in the main thread's frames,
    which no cell can reach except through these calls, which nothing in a lab needs."""
    if event in FORBIDDEN:
        os._exit(EXIT_INSPECTED)


def _run(shell: Any, source: str) -> Any:
    """Run a cell in a fresh thread, so that no frame of the grader is on the cell's stack."""
    import threading

    box: list = []
    worker = threading.Thread(target=lambda: box.append(shell.run_cell(source, store_history=False)), daemon=True)
    worker.start()
    worker.join()
    return box[0] if box else None


def main() -> None:
    ctrl_fd, result_fd = int(sys.argv[1]), int(sys.argv[2])
    write, fstat = os.write, os.fstat
    channel = fstat(result_fd)
    ctrl = os.fdopen(ctrl_fd, "r", encoding="utf-8")

    def send(record: dict) -> None:
        now = fstat(result_fd)
        if (now.st_ino, now.st_dev) != (channel.st_ino, channel.st_dev):
            os._exit(EXIT_CHANNEL)
        data = (json.dumps(record) + "\n").encode()
        while data:
            data = data[write(result_fd, data) :]

    from IPython.core.interactiveshell import InteractiveShell
    from traitlets.config import Config

    import gpulab
    import gpulab.grading as grading

    load_checker()
    new_cell = None
    if len(sys.argv) > 4:  # before the snapshot, so the capped check is the one put back before each test
        from gpulab.grading.kernel_time import cap_kernel_time

        new_cell = cap_kernel_time(float(sys.argv[4]))
    grading.quiet_warnings()
    cfg = Config()
    cfg.HistoryManager.enabled = False
    cfg.InteractiveShell.colors = "NoColor"
    shell = InteractiveShell.instance(config=cfg)
    ns = shell.user_ns
    import builtins as builtins_module

    snap = Snapshot(os.path.dirname(os.path.dirname(os.path.abspath(gpulab.__file__))))
    base_threads, base_procs = _threads(), _processes()
    trusted: dict[str, Any] = {}
    sys.addaudithook(_guard)
    send({"ready": True, "device": gpulab.runtime.mode() if hasattr(gpulab.runtime, "mode") else ""})

    for line in ctrl:
        cell = json.loads(line)
        if cell.get("quit"):
            break
        kind, t0 = cell["kind"], time.perf_counter()
        record: dict[str, Any] = {"index": cell["index"], "kind": kind}
        if kind == "test":
            replaced = snap.changes()  # by the cells since the last check: named in the notes, then put back
            if replaced:
                record["replaced"] = replaced
            snap.restore()
            ns.update(trusted)
            ns["__builtins__"] = builtins_module
            busy = ""
            for _ in range(20):
                extra_t, extra_p = _threads() - base_threads, _processes() - base_procs
                if extra_t <= 0 and extra_p <= 0:
                    break
                time.sleep(0.05)
            else:
                busy = (
                    f"the submission left {max(extra_t, 0)} thread(s) and {max(extra_p, 0)} process(es) "
                    "running, so the check could not run safely"
                )
            if busy:
                record.update(error=["RuntimeError", busy], tampered=busy, results=[], value=None, stderr="")
                send(record)
                continue
            grading._reported.clear()
            if new_cell is not None:
                new_cell()
            before = ns.get("result")
            err_buf, real_err = io.StringIO(), sys.stderr
            sys.stderr = err_buf
            try:
                res = _run(shell, cell["source"])
            finally:
                sys.stderr = real_err
            if res is None or _threads() > base_threads or _processes() > base_procs:
                time.sleep(0.2)
            if res is None or _threads() > base_threads or _processes() > base_procs:
                record.update(
                    error=["RuntimeError", "the check left threads or processes running"],
                    tampered="threads or processes were started during the check",
                    results=[],
                    value=None,
                    stderr="",
                )
                send(record)
                continue
            record["tampered"] = snap.changed()
            value = res.result
            record["value"] = float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None
            record["stderr"] = err_buf.getvalue()[-2000:]
            record["error"] = _error(res)
            record["results"] = _results_of(ns, before)
        else:
            names_before = {k: id(v) for k, v in ns.items()}
            res = _run(shell, cell["source"])
            record["error"] = _error(res) if res is not None else ["RuntimeError", "the cell did not finish"]
            if kind == "code":  # the lab's own cell: what it binds is the lab's, put back before tests
                for k, v in ns.items():
                    if not k.startswith("_") and names_before.get(k) != id(v):
                        trusted[k] = v
        record["seconds"] = round(time.perf_counter() - t0, 3)
        sys.stdout.flush()
        send(record)
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
