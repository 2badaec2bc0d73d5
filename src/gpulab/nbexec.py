"""Run notebooks and keep what they printed: ``python -m gpulab.nbexec NB ... --out DIR``.

``make gpu-check`` runs every lesson and lab solution this way on a GPU machine, where what the
notebooks print (accuracies, timings, the figures' numbers) is the point of the run, not only whether
they pass. Each notebook runs in a process of its own (a crash or a hang stops that notebook only),
``--jobs`` at a time, with the kernel of this Python (``sys.executable``, so ``PYTHONPATH`` reaches
it). After every cell the notebook is written to ``DIR/<name>.ipynb`` with its outputs so far, large
rich outputs (plotly figures, HTML, images over ``--max-output`` bytes) replaced by a short note, so
even a run that is killed shows how far each notebook got and what it printed.

``--alone PATTERN,...`` runs the notebooks whose paths contain a pattern one at a time, after the others: their
timings are the point (a notebook that predicts which kernel is faster, or divides two timings), and CUDA events on a
GPU that 8 notebooks share also count the other notebooks' work (2026-12-04, an H200: a strided copy measured faster
than the contiguous one, an FP16/FP32 speed-up of 34.7x against 13.9x alone). Each notebook's BLAS and OpenMP get
the CPUs divided by the notebooks running at once (NumPy's 16 threads in each of 8 notebooks on 16 cores made lesson
09's CPU training 20x slower than alone), unless the environment already sets them.

``DIR/notebooks.json`` has one row per notebook, rewritten as each one ends: ``path``, ``status``
(``ok``, ``failed``, ``timeout`` or ``not run``), ``seconds``, ``cell`` (the cell that failed or was
running) and ``error`` (``Name: message`` and the end of the traceback). Exit status: 0 when every
notebook ran without an error, 1 otherwise.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any
from collections.abc import Iterator

__all__ = [
    "SIGNALS",
    "THREAD_VARS",
    "child_env",
    "die_with_parent",
    "execute_one",
    "main",
    "recording_signals",
    "run_many",
    "split_alone",
    "stop_kernel",
    "this_python_kernel_manager",
    "trim_outputs",
]

RICH = ("application/vnd.plotly.v1+json", "text/html", "image/png", "image/svg+xml", "application/javascript")
MAX_OUTPUT = 100_000  # bytes of one rich output kept as it is


def trim_outputs(nb: Any, limit: int = MAX_OUTPUT) -> int:
    """Replace each rich output larger than ``limit`` bytes with a text note; returns how many."""
    dropped = 0
    for cell in nb.get("cells", []):
        for out in cell.get("outputs", []):
            data = out.get("data")
            if not data:
                continue
            for mime in RICH:
                if mime in data and len(json.dumps(data[mime])) > limit:
                    size = len(json.dumps(data[mime]))
                    del data[mime]
                    note = f"[nbexec: a {size / 1e6:.1f} MB {mime} output was dropped to keep this file small]"
                    data["text/plain"] = (str(data.get("text/plain", "")) + "\n" + note).strip()
                    dropped += 1
    return dropped


def die_with_parent() -> None:
    """``preexec_fn`` for a child in a session of its own: on Linux it gets SIGKILL when its parent dies.

    A child that starts a new session outlives a parent killed with SIGKILL, and runs on (on a lent GPU
    machine, until the machine goes back, holding the GPU through a second run); this ties it to its parent."""
    if sys.platform.startswith("linux"):
        _LIBC.prctl(1, signal.SIGKILL, 0, 0, 0)  # 1: PR_SET_PDEATHSIG


_LIBC: Any = ctypes.CDLL(None, use_errno=True) if sys.platform.startswith("linux") else None


SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


@contextlib.contextmanager
def recording_signals(into: list[int]) -> Iterator[list[int]]:
    """While inside, SIGTERM, SIGINT and SIGHUP only append their number to ``into`` (the caller stops its
    children and keeps its report); the previous handlers come back afterwards. Outside the main thread,
    where handlers cannot be set, nothing changes."""
    main = threading.current_thread() is threading.main_thread()
    previous = {sig: signal.signal(sig, lambda signum, frame: into.append(signum)) for sig in SIGNALS} if main else {}
    try:
        yield into
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _status_path(out: Path, nb_path: Path) -> Path:
    return out / f"{nb_path.stem}.status.json"


ANSI = re.compile(r"\x1b\[[0-9;]*m")


def _error_text(exc: BaseException) -> str:
    """``Name: message`` first, then the end of the traceback, without terminal colours."""
    ename = getattr(exc, "ename", type(exc).__name__)
    evalue = str(getattr(exc, "evalue", "") or "")
    tail = [line for line in ANSI.sub("", str(exc)).strip().splitlines() if line.strip()][-12:]
    return "\n".join([f"{ename}: {evalue}", *tail])


def this_python_kernel_manager() -> Any:
    """A kernel manager for nbclient whose kernel runs this Python (``sys.executable``, whatever kernelspecs are
    installed, so ``PYTHONPATH`` and the venv reach it), over unix sockets, polled in slices
    (:class:`gpulab.grading.sliced.SlicedKernelManager`)."""
    import ipykernel.kernelspec
    from jupyter_client.kernelspec import KernelSpecManager

    from .grading.sliced import SlicedKernelManager

    class ThisPython(KernelSpecManager):
        def get_kernel_spec(self, kernel_name: str) -> Any:
            return self.kernel_spec_class(
                resource_dir=ipykernel.kernelspec.RESOURCES, **ipykernel.kernelspec.get_kernel_dict()
            )

    return SlicedKernelManager(kernel_name="python3", kernel_spec_manager=ThisPython())


def stop_kernel(km: Any) -> None:
    """Stop ``km``'s kernel if it is still running: nbclient leaves running a kernel whose manager it was given
    (and with the kernel, anything it started: a GPU context, gpulab's PTX compiler)."""
    from jupyter_core.utils import run_sync

    try:
        if km.has_kernel:
            run_sync(km.shutdown_kernel)(now=True)
    except Exception:  # noqa: BLE001 - a kernel already gone: nothing to stop
        pass


def execute_one(nb_path: Path, out: Path, cell_timeout: int, max_output: int = MAX_OUTPUT) -> dict[str, Any]:
    """Run one notebook in a kernel of this Python, saving it after every cell; its status row."""
    import nbformat
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError, CellTimeoutError

    out.mkdir(parents=True, exist_ok=True)
    nb = nbformat.read(str(nb_path), as_version=4)
    target, status_file = out / nb_path.name, _status_path(out, nb_path)
    t0 = time.monotonic()
    row: dict[str, Any] = {"path": str(nb_path), "status": "running", "seconds": 0.0, "cell": None, "error": ""}

    def mark(cell_index: int | None) -> None:  # the status row: which cell, how long so far
        row["seconds"] = round(time.monotonic() - t0, 1)
        row["cell"] = cell_index
        status_file.write_text(json.dumps(row) + "\n")

    def save(cell_index: int | None) -> None:  # the notebook with its outputs so far, then the row
        copy = nbformat.from_dict(json.loads(json.dumps(nb)))
        trim_outputs(copy, max_output)
        nbformat.write(copy, str(target))
        mark(cell_index)

    def started(cell: Any, cell_index: int, **_: Any) -> None:
        mark(cell_index)

    def executed(cell: Any, cell_index: int, **_: Any) -> None:
        save(cell_index)

    km = this_python_kernel_manager()
    client = NotebookClient(
        nb,
        km=km,
        timeout=cell_timeout,
        resources={"metadata": {"path": str(nb_path.parent)}},
        on_cell_execute=started,
        on_cell_executed=executed,
    )
    try:
        client.execute()
        row["status"] = "ok"
    except (CellExecutionError, CellTimeoutError) as exc:
        row["status"], row["error"] = "failed", _error_text(exc)
    except Exception as exc:  # a kernel that died, could not start, ...: still a row, never a lost run
        row["status"], row["error"] = "failed", f"{type(exc).__name__}: {exc}"
    finally:  # now, not when it notices this process has gone: on a GPU its memory goes back at once
        stop_kernel(km)
    save(row["cell"])
    return row


def _final_row(nb_path: Path, out: Path, rc: int | None, seconds: float, timed_out: bool) -> dict[str, Any]:
    try:
        row = json.loads(_status_path(out, nb_path).read_text())
    except (OSError, ValueError):
        row = {"path": str(nb_path), "cell": None, "error": ""}
    row["seconds"] = round(seconds, 1)
    if timed_out:
        row["status"] = "timeout"
        row["error"] = f"stopped after {seconds:.0f} s, in cell {row.get('cell')}"
    elif row.get("status") not in ("ok", "failed"):
        row["status"] = "failed"
        row["error"] = row.get("error") or (
            f"the notebook's process ended with status {rc} before reporting" + _log_tail(out, nb_path)
        )
    return row


def _log_tail(out: Path, nb_path: Path) -> str:
    """``: <last line of its log>`` (the error that stopped the notebook's process), or nothing."""
    try:
        lines = [
            line for line in (out / f"{nb_path.stem}.log").read_text(errors="replace").splitlines() if line.strip()
        ]
    except OSError:
        return ""
    return f": {lines[-1].strip()[:300]}" if lines else ""


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError, AttributeError):
        proc.kill()
    proc.wait()


THREAD_VARS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")


def child_env(jobs: int, cpus: int | None = None, base: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of a notebook's process when ``jobs`` run at once: BLAS and OpenMP threads = the CPUs divided
    by ``jobs`` (at least 1), where ``base`` (default: this process's environment) does not set them itself."""
    env = dict(os.environ if base is None else base)
    share = str(max(1, (cpus or os.cpu_count() or 1) // max(1, jobs)))
    for var in THREAD_VARS:
        env.setdefault(var, share)
    return env


def split_alone(paths: list[Path], alone: list[str] | None) -> tuple[list[Path], list[Path]]:
    """``(shared, alone)``: the notebooks whose path contains one of the ``alone`` patterns run one at a time."""
    pats = [a for a in (alone or []) if a]
    lone = [p for p in paths if any(a in str(p) for a in pats)]
    return [p for p in paths if p not in lone], lone


def run_many(
    paths: list[Path],
    out: Path,
    jobs: int = 4,
    timeout_s: float = 600,
    cell_timeout: int = 600,
    max_output: int = MAX_OUTPUT,
    log: Any = print,
    alone: list[str] | None = None,
) -> list[dict[str, Any]]:
    """Run ``paths`` ``jobs`` at a time, each in its own process, within ``timeout_s`` for all of them; those
    matching ``alone`` afterwards, one at a time (their rows say ``"alone": true``).

    SIGTERM (gpu-check's stage limit), SIGINT or SIGHUP stop every notebook at once and keep the report."""
    out.mkdir(parents=True, exist_ok=True)
    rows: dict[str, dict[str, Any]] = {str(p): {"path": str(p), "status": "not run", "seconds": 0.0} for p in paths}
    shared, lone = split_alone(paths, alone)
    deadline = time.monotonic() + timeout_s
    extra = ["--cell-timeout", str(cell_timeout), "--max-output", str(max_output)]
    with recording_signals([]) as stopped:
        for batch, n in ((shared, jobs), (lone, 1)):
            if batch and not stopped:
                _run_all(batch, rows, out, n, deadline, stopped, log, extra)
    for p in lone:
        rows[str(p)]["alone"] = True
    _write(out, rows)
    return list(rows.values())


def _write(out: Path, rows: dict[str, dict[str, Any]]) -> None:
    """``notebooks.json``, replaced whole (a reader never sees half of it, even if this process is killed)."""
    tmp = out / "notebooks.json.part"
    tmp.write_text(json.dumps(list(rows.values()), indent=1) + "\n")
    tmp.replace(out / "notebooks.json")


def _run_all(
    paths: list[Path],
    rows: dict[str, dict[str, Any]],
    out: Path,
    jobs: int,
    deadline: float,
    stopped: list[int],
    log: Any,
    extra: list[str],
) -> None:
    waiting = list(paths)
    running: dict[Path, tuple[subprocess.Popen[bytes], float]] = {}
    env = child_env(jobs)
    _write(out, rows)
    while waiting or running:
        if stopped:
            deadline = time.monotonic() - 1
        while waiting and len(running) < max(1, jobs) and time.monotonic() < deadline:
            p = waiting.pop(0)
            cmd = [sys.executable, "-m", "gpulab.nbexec", "--one", str(p), "--out", str(out), *extra]
            # its own session, killed as a group; its kernel (a session of its own too) ends within a
            # second of it (ipykernel watches its parent), and it dies with this process
            with open(out / f"{p.stem}.log", "wb") as err:
                proc = subprocess.Popen(
                    cmd,
                    stdout=err,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                    preexec_fn=die_with_parent,
                    env=env,
                )
            running[p] = (proc, time.monotonic())
        if not running:
            break  # out of time with notebooks still waiting: they stay "not run"
        time.sleep(0.2)
        for p, (proc, t0) in list(running.items()):
            if proc.poll() is not None:
                late = False  # it ended by itself (perhaps just after the deadline): its own status stands
            elif time.monotonic() > deadline:
                _kill_group(proc)
                late = True
            else:
                continue
            row = _final_row(p, out, proc.returncode, time.monotonic() - t0, timed_out=late)
            rows[str(p)] = row
            del running[p]
            first = row["error"].splitlines()[0] if row.get("error") else ""
            log(
                f"{row['status']:>7} {row['seconds']:7.1f} s  {p}"
                + (f"  (cell {row['cell']}: {first})" if first else "")
            )
            _write(out, rows)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m gpulab.nbexec", description=__doc__.split("\n\n")[0])
    ap.add_argument("notebooks", nargs="*", type=Path, help="notebooks to run")
    ap.add_argument("--out", type=Path, required=True, help="folder for the executed notebooks and notebooks.json")
    ap.add_argument("--jobs", type=int, default=min(8, os.cpu_count() or 1), help="notebooks at a time")
    ap.add_argument("--timeout", type=float, default=600, help="seconds for all of them together")
    ap.add_argument("--cell-timeout", type=int, default=600, help="seconds for one cell")
    ap.add_argument("--max-output", type=int, default=MAX_OUTPUT, help="bytes of one rich output kept")
    ap.add_argument(
        "--alone",
        default="",
        help="comma-separated parts of notebook paths to run one at a time, after the others (their timings matter)",
    )
    ap.add_argument("--one", type=Path, help=argparse.SUPPRESS)  # the per-notebook process
    ns = ap.parse_args(argv)
    if ns.one is not None:
        return 0 if execute_one(ns.one, ns.out, ns.cell_timeout, ns.max_output)["status"] == "ok" else 1
    missing = [str(p) for p in ns.notebooks if not p.is_file()]
    if not ns.notebooks or missing:
        ap.error(f"no such notebook: {', '.join(missing)}" if missing else "name at least one notebook")
    rows = run_many(
        ns.notebooks, ns.out, ns.jobs, ns.timeout, ns.cell_timeout, ns.max_output, alone=ns.alone.split(",")
    )
    bad = [r for r in rows if r["status"] != "ok"]
    print(f"nbexec: {len(rows) - len(bad)} of {len(rows)} notebooks ran without an error; report in {ns.out}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
