"""gpu-check's tests stage: every test's outcome written to a file the moment it is known.

``pytest -p gpulab.gpucheck_pytest --gpucheck-log FILE`` appends one JSON line per test to ``FILE`` as each one
ends (``nodeid``, ``outcome``, ``when``, ``seconds``, and the failure's text), and a last line ``{"done": ...}``
when the session ends. Pytest prints its failures only in the summary at the end, so when gpu-check stops a
tests stage at its budget (SIGTERM, then SIGKILL) the log kept only the progress dots: which tests failed on the
GPU, and why, was lost. With this file it is not, and :func:`summary_lines` puts it in gpu-check's summary.

Under pytest-xdist only the controller writes (the workers' reports reach it one by one, as they end).
Standard library only: gpu-check's summary reads the file with the system Python.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

__all__ = ["summary_lines"]

_KEY = "gpucheck_log"
ERROR_CHARS = 3000  # of a failure's text: its end, where the assertion or the CUDA error is


def pytest_addoption(parser: Any) -> None:
    parser.addoption("--gpucheck-log", dest=_KEY, default=None, help="append each test's outcome here (JSON lines)")


def _path(config: Any) -> Path | None:
    if hasattr(config, "workerinput"):  # an xdist worker: its reports reach the controller, which writes them
        return None
    value = config.getoption(_KEY, None)
    return Path(value) if value else None


_LOG: list[Path] = []  # this process's file, set by pytest_configure (an xdist controller's reports carry no config)


def pytest_configure(config: Any) -> None:
    path = _path(config)
    if path is not None:  # this run's outcomes only (gpu-check may be run again into the same --out)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("", encoding="utf-8")
        _LOG[:] = [path]


def _write(row: dict[str, Any]) -> None:
    for path in _LOG:
        with open(path, "a", encoding="utf-8") as f:
            f.write(json.dumps(row) + "\n")


def pytest_runtest_logreport(report: Any) -> None:
    # the call's outcome; setup and teardown only when they fail, or skip the test
    if report.when != "call" and not report.failed and not (report.when == "setup" and report.skipped):
        return
    row = {"nodeid": report.nodeid, "outcome": report.outcome, "when": report.when, "seconds": report.duration}
    if report.failed:
        row["error"] = str(getattr(report, "longreprtext", "") or report.longrepr)[-ERROR_CHARS:]
    _write(row)


def pytest_collectreport(report: Any) -> None:
    if report.failed:  # a file that cannot be imported on the GPU image: its tests never run
        row = {"nodeid": report.nodeid, "outcome": "failed", "when": "collect", "seconds": 0.0}
        row["error"] = str(report.longrepr)[-ERROR_CHARS:]
        _write(row)


def pytest_sessionfinish(session: Any, exitstatus: Any) -> None:
    _write({"done": True, "exitstatus": int(exitstatus)})


def summary_lines(path: Path, failures: int = 12) -> list[str]:
    """gpu-check's summary of ``path``: counts, whether pytest finished, and the first ``failures`` failed tests
    with the last line of their error."""
    rows: list[dict[str, Any]] = []
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        try:
            rows.append(json.loads(line))
        except ValueError:  # a line cut off by a kill
            continue
    tests = [r for r in rows if "nodeid" in r]
    done = [r for r in rows if r.get("done")]
    counts: dict[str, int] = {}
    for r in tests:
        counts[r["outcome"]] = counts.get(r["outcome"], 0) + 1
    told = ", ".join(f"{n} {k}" for k, n in sorted(counts.items())) or "no test ended"
    end = f"pytest ended (exit {done[-1]['exitstatus']})" if done else "pytest was stopped before it ended"
    lines = [f"  tests: {told}; {end}"]
    failed = [r for r in tests if r["outcome"] == "failed"]
    for r in failed[:failures]:
        text = [x.strip() for x in str(r.get("error", "")).splitlines() if x.strip()]
        said = [x for x in text if x.startswith("E ")][:1] or text[-1:] or [""]  # pytest's "E   Error: message"
        lines.append(f"    FAILED {r['nodeid']} ({r['when']}): {said[0].removeprefix('E').strip()[:150]}")
    if len(failed) > failures:
        lines.append(f"    (+{len(failed) - failures} more failed; all in {path.name})")
    return lines
