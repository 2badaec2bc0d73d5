"""gpu-check's tests stage keeps each test's outcome when the stage is stopped at its budget (gpulab.gpucheck_pytest).

Pytest prints failures only in its summary at the end; a tests stage stopped at its budget (SIGTERM, then SIGKILL)
left a log of progress dots and no name or error of a test that failed on the GPU. Now each outcome is a JSON line
written as the test ends, and gpu-check's summary lists the failures from it.
"""

from __future__ import annotations

import json
import os
import sys
import time

from gpulab import gpucheck, gpucheck_plan as plan, gpucheck_summary as report
from gpulab.gpucheck_pytest import summary_lines

TESTS = """
import time


def test_passes():
    pass


def test_fails_on_the_gpu():
    assert 1 + 1 == 3, "a wrong sum on the GPU"


def test_hangs():
    time.sleep(600)
"""


def _tests_stage(out, record=True):
    (cmd,) = [c for name, c in plan.stages(sys.executable, out, record=record) if name == "tests"]
    return cmd


def test_the_tests_stage_writes_each_outcome_and_fails_a_hung_test_alone(tmp_path):
    cmd = _tests_stage(tmp_path)
    k = cmd.index("-p", cmd.index("--dist"))
    assert cmd[k : k + 4] == ["-p", "gpulab.gpucheck_pytest", "--gpucheck-log", str(tmp_path / plan.TESTS_LOG)]
    assert f"timeout={plan.TEST_TIMEOUT}" in cmd and plan.TEST_TIMEOUT <= plan.BUDGET["tests"] / 2
    assert not any(c.startswith("timeout=") for c in _tests_stage(tmp_path, record=False))  # a rehearsal: pyproject's


def test_a_stopped_tests_stage_still_names_its_failures_in_the_summary(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (tmp_path / "test_on_gpu.py").write_text(TESTS)
    cmd = [c for c in _tests_stage(out) if not c.startswith("tests/")] + [str(tmp_path / "test_on_gpu.py")]
    cmd = [c if not c.startswith("timeout=") else "timeout=0" for c in cmd]  # only the stage's limit stops it
    (out / plan.TESTS_LOG).write_text('{"nodeid": "an earlier run", "outcome": "failed", "when": "call"}\n')
    env = dict(os.environ, GPULAB_DEVICE="simulator")
    t0 = time.monotonic()
    rows = gpucheck.run_stages(
        [("tests", cmd)], env, out, time.monotonic() + 200, log=lambda *a: None, budget={"tests": 40}
    )
    assert rows[0]["rc"] == 124 and time.monotonic() - t0 < 70, rows  # stopped at its budget, as on a slow GPU
    lines = [json.loads(x) for x in (out / plan.TESTS_LOG).read_text().splitlines()]
    assert [(r["nodeid"].split("::")[-1], r["outcome"]) for r in lines] == [
        ("test_passes", "passed"),
        ("test_fails_on_the_gpu", "failed"),
    ], lines  # this run's only: the earlier run's line is gone; no "done" line: pytest was stopped
    text = report.summary(rows, out)
    assert "tests: 1 failed, 1 passed; pytest was stopped before it ended" in text, text
    # pytest's node id is relative to its rootdir, which depends on where the checkout and tmp_path lie (a CI clone
    # in /tmp gives a longer path than a worktree): the line names the failing test and why, wherever it is
    failed = [ln for ln in text.splitlines() if "test_on_gpu.py::test_fails_on_the_gpu (call)" in ln]
    assert len(failed) == 1 and "FAILED " in failed[0], text
    assert failed[0].endswith("test_on_gpu.py::test_fails_on_the_gpu (call): AssertionError: a wrong sum on the GPU")


def test_summary_lines_skip_a_line_cut_off_by_a_kill_and_list_twelve_failures(tmp_path):
    log = tmp_path / plan.TESTS_LOG
    rows = [
        {"nodeid": f"t.py::test_{k}", "outcome": "failed", "when": "call", "error": f"x\nE   ValueError: {k}\nt.py:3"}
        for k in range(15)
    ]
    log.write_text("".join(json.dumps(r) + "\n" for r in rows[:1]) + '{"nodeid": "t.py::te')
    assert summary_lines(log) == ["  tests: 1 failed; pytest was stopped before it ended", *_failed([0])]
    log.write_text("".join(json.dumps(r) + "\n" for r in rows) + '{"done": true, "exitstatus": 1}\n')
    lines = summary_lines(log)
    assert lines[0] == "  tests: 15 failed; pytest ended (exit 1)" and lines[1:13] == _failed(range(12))
    assert lines[13:] == ["    (+3 more failed; all in tests.jsonl)"]


def _failed(ks):
    return [f"    FAILED t.py::test_{k} (call): ValueError: {k}" for k in ks]


def test_stages_find_pytorch_without_importing_it(tmp_path):
    """Importing PyTorch to see whether it is there took 10-20 s of the deadline on a cold GPU image before any stage
    ran; stages() now only finds it (the preflight imports it and says whether it works)."""
    fake = tmp_path / "site" / "torch"
    fake.mkdir(parents=True)
    marker = tmp_path / "imported"
    (fake / "__init__.py").write_text(f"open({str(marker)!r}, 'w').close()\n")
    wrapper = tmp_path / "python"
    wrapper.write_text(f'#!/bin/sh\nPYTHONPATH={tmp_path / "site"} exec {sys.executable} "$@"\n')
    wrapper.chmod(0o755)
    todo = dict(plan.stages(str(wrapper), tmp_path / "out"))
    assert todo["bench-cnn"][todo["bench-cnn"].index("--compare") + 1] == "torch"
    assert not marker.exists()
