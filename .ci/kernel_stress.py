#!/usr/bin/env python3
"""Start many Jupyter kernels at the same moment from several processes and count the ones that die at start.

The race it measures: over TCP, jupyter_client picks a kernel's five ports (bind port 0, close) a second or so
before the kernel binds them, and a kernel started by another process in between can be handed the same port;
one of the two then dies with ``ZMQError: Address already in use`` (jupyter/jupyter_client#487). CI starts
kernels from parallel pytest workers and from `make test` and `make test-oldest` side by side.

Each round, ``--processes`` worker processes wait at a barrier, then each starts ``--kernels`` kernels at once
and waits for every one to answer ``kernel_info``. Per round it counts kernels that did not start (and how many
of them said "Address already in use" on stderr) and TCP ports that two live kernels were given.

    python .ci/kernel_stress.py --manager tcp --rounds 20   # jupyter_client's KernelManager, as nbval uses it
    python .ci/kernel_stress.py --manager ipc --rounds 20   # gpulab.grading.ipc.IpcKernelManager (unix sockets)

Run it with the Python of the venv under test (gpulab importable for ``--manager ipc``). Exit status 1 when a
kernel failed to start.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import sys
import tempfile
import time
from collections import Counter


def _manager(kind: str):
    if kind == "ipc":
        from gpulab.grading.ipc import IpcKernelManager

        return IpcKernelManager
    from jupyter_client.manager import KernelManager

    return KernelManager


def _worker(kind: str, kernels: int, rounds: int, timeout: float, barrier, results, logs: str) -> None:
    cls = _manager(kind)
    for r in range(rounds):
        barrier.wait()
        started = []
        for k in range(kernels):
            km = cls(kernel_name="python3")
            err_path = os.path.join(logs, f"r{r}-p{os.getpid()}-k{k}.err")
            err = open(err_path, "w")
            try:
                km.start_kernel(stderr=err)
                started.append((km, err, err_path, ""))
            except Exception as exc:  # the launch itself failed
                started.append((km, err, err_path, f"{type(exc).__name__}: {exc}"))
        rows = []
        for km, err, err_path, why in started:
            kc = None
            if not why:
                kc = km.client()
                kc.start_channels()
                try:
                    kc.wait_for_ready(timeout=timeout)
                except Exception as exc:
                    why = f"{type(exc).__name__}: {exc}"
            ports = (
                []
                if km.transport != "tcp"
                else [getattr(km, f"{c}_port") for c in ("shell", "iopub", "stdin", "control", "hb")]
            )
            if kc is not None:
                kc.stop_channels()
            try:
                km.shutdown_kernel(now=True)
            except Exception:
                pass
            err.close()
            with open(err_path, errors="replace") as fh:
                text = fh.read()
            os.remove(err_path)
            rows.append({"ok": not why, "why": why, "in_use": "Address already in use" in text, "ports": ports})
        results.put((r, rows))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--manager", choices=("tcp", "ipc"), default="ipc")
    ap.add_argument("--processes", type=int, default=8)
    ap.add_argument("--kernels", type=int, default=2, help="kernels each process starts at once")
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--timeout", type=float, default=120.0, help="seconds a kernel may take to answer")
    ap.add_argument("--json", default=None, help="write the summary here")
    ns = ap.parse_args(argv)
    ctx = mp.get_context("spawn")  # no zmq context inherited through fork
    barrier, results = ctx.Barrier(ns.processes), ctx.Queue()
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="kernel-stress-") as logs:
        procs = [
            ctx.Process(target=_worker, args=(ns.manager, ns.kernels, ns.rounds, ns.timeout, barrier, results, logs))
            for _ in range(ns.processes)
        ]
        for p in procs:
            p.start()
        by_round: dict[int, list[dict]] = {}
        for _ in range(ns.processes * ns.rounds):
            r, rows = results.get()
            by_round.setdefault(r, []).extend(rows)
        for p in procs:
            p.join()
    total = failed = in_use = shared = 0
    reasons: Counter[str] = Counter()
    for r in sorted(by_round):
        rows = by_round[r]
        counts = Counter(port for row in rows for port in row["ports"])
        dup = sum(1 for n in counts.values() if n > 1)
        bad = [row for row in rows if not row["ok"]]
        total, failed, shared = total + len(rows), failed + len(bad), shared + dup
        in_use += sum(1 for row in bad if row["in_use"])
        reasons.update(row["why"].split(":")[0] for row in bad)
        if bad or dup:
            print(f"round {r}: {len(bad)} of {len(rows)} kernels did not start; {dup} port(s) given to two kernels")
    summary = {
        "manager": ns.manager,
        "processes": ns.processes,
        "kernels_per_process": ns.kernels,
        "rounds": ns.rounds,
        "kernels": total,
        "failed": failed,
        "failed_address_in_use": in_use,
        "ports_given_twice": shared,
        "reasons": dict(reasons),
        "seconds": round(time.monotonic() - t0, 1),
    }
    print(json.dumps(summary))
    if ns.json:
        with open(ns.json, "w") as fh:
            json.dump(summary, fh)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
