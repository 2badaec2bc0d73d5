"""gpu-check's stage processes: run one with its output logged, stop it in time, fit nbexec's timeouts.

Run with the system Python too (``python3 src/gpulab/gpucheck.py`` imports it from its own folder).
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

try:
    from .nbexec import die_with_parent
except ImportError:  # run as a script: its folder is on sys.path
    from nbexec import die_with_parent  # type: ignore[no-redef,import-not-found]

__all__ = ["fit", "run_one", "stop"]


def stop(proc: subprocess.Popen[str]) -> None:
    """SIGTERM to the stage's process group (nbexec then stops its notebooks), SIGKILL 5 s later."""
    for sig, wait in ((signal.SIGTERM, 5.0), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            proc.wait(wait)
            return
        except subprocess.TimeoutExpired:
            continue


def run_one(
    cmd: list[str], env: dict[str, str], timeout: float, logfile: Path, log: Any, *, cwd: Path, signalled: list[int]
) -> int:
    """Run ``cmd``, its output both to ``log`` and to ``logfile``; 124 when it ran past ``timeout``,
    128 + the signal when one came (the first in ``signalled``, which a signal handler fills).
    It dies with this process, even by SIGKILL."""
    with open(logfile, "w") as f:
        proc = subprocess.Popen(
            cmd,
            cwd=cwd,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
            preexec_fn=die_with_parent,
        )

        def pump() -> None:
            assert proc.stdout is not None
            for line in proc.stdout:
                f.write(line)
                f.flush()
                log(line.rstrip("\n"))

        t = threading.Thread(target=pump, daemon=True)
        t.start()
        end = time.monotonic() + timeout
        while True:
            try:  # in short waits, to see a signal soon
                rc = proc.wait(max(min(end - time.monotonic(), 0.5), 0.0))
                break
            except subprocess.TimeoutExpired:
                if signalled or time.monotonic() >= end:
                    stop(proc)
                    rc = 128 + signalled[0] if signalled else 124
                    break
        t.join(2)
    return rc


def fit(cmd: list[str], limit: float) -> list[str]:
    """``cmd`` with nbexec's own ``--timeout`` / ``--cell-timeout`` cut to 10 s under the stage's ``limit``.

    They are set from the stage's budget when the commands are made; when the deadline leaves the stage less
    than that, nbexec must still stop its notebooks (and write their report) before the stage is stopped."""
    if "gpulab.nbexec" not in cmd:
        return cmd
    out = list(cmd)
    for flag in ("--timeout", "--cell-timeout"):
        if flag in out[:-1]:
            k = out.index(flag) + 1
            try:
                out[k] = str(max(1, min(int(float(out[k])), int(limit) - 10)))
            except ValueError:
                continue
    return out
