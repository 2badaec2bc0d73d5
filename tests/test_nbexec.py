"""gpulab.nbexec: notebooks run each in a process of its own, saved after every cell, one report row each."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_notebook

from gpulab import nbexec
from nbrun import stdout_text
from procs import live_with

ROOT = Path(__file__).resolve().parents[1]


def _write(path: Path, *sources: str) -> Path:
    nbformat.write(new_notebook(cells=[new_code_cell(s) for s in sources]), str(path))
    return path


def _env() -> dict[str, str]:
    return dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")]))


def test_ok_failed_and_timeout_rows_and_the_saved_outputs(tmp_path):
    good = _write(tmp_path / "good.ipynb", "x = 6", "print(x * 7)")
    bad = _write(tmp_path / "bad.ipynb", "print('before')", "1/0", "print('never')")
    slow = _write(tmp_path / "slow.ipynb", "print('going to sleep', flush=True)", "import time; time.sleep(120)")
    out = tmp_path / "out"
    t0 = time.monotonic()
    r = subprocess.run(
        # all three at once (the default is one per CPU): on a loaded 2-core machine the slow one still
        # reaches its second cell well before the 30 s are up
        [sys.executable, "-m", "gpulab.nbexec", str(good), str(bad), str(slow), "--out", str(out), "--timeout", "30"]
        + ["--jobs", "3"],
        capture_output=True,
        text=True,
        env=_env(),
        timeout=120,
    )
    assert time.monotonic() - t0 < 60 and r.returncode == 1
    rows = {Path(row["path"]).name: row for row in json.loads((out / "notebooks.json").read_text())}
    assert rows["good.ipynb"]["status"] == "ok"
    assert rows["bad.ipynb"]["status"] == "failed" and rows["bad.ipynb"]["cell"] == 1
    assert rows["bad.ipynb"]["error"].startswith("ZeroDivisionError: division by zero")
    assert "\x1b[" not in rows["bad.ipynb"]["error"]  # no terminal colours in the report
    assert rows["slow.ipynb"]["status"] == "timeout" and rows["slow.ipynb"]["cell"] == 1
    # what each printed is kept, up to where it stopped (the killed one too: it was saved after each cell)
    bad_nb = nbformat.read(str(out / "bad.ipynb"), as_version=4)
    assert stdout_text(bad_nb.cells[0]) == "before\n" and bad_nb.cells[2].outputs == []
    good_nb = nbformat.read(str(out / "good.ipynb"), as_version=4)
    assert stdout_text(good_nb.cells[1]) == "42\n"
    slow_nb = nbformat.read(str(out / "slow.ipynb"), as_version=4)
    assert stdout_text(slow_nb.cells[0]) == "going to sleep\n"
    assert "1 of 3 notebooks ran without an error" in r.stdout


def test_sigterm_stops_every_notebook_and_keeps_the_report(tmp_path):
    slow = _write(tmp_path / "slow.ipynb", "import time; time.sleep(120)")
    out = tmp_path / "out"
    proc = subprocess.Popen(
        [sys.executable, "-m", "gpulab.nbexec", str(slow), "--out", str(out), "--timeout", "300"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env=_env(),
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not (out / "slow.status.json").exists():
        time.sleep(0.2)
    time.sleep(1)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(30) == 1
    (row,) = json.loads((out / "notebooks.json").read_text())
    assert row["status"] == "timeout"


def test_large_rich_outputs_are_replaced_by_a_note():
    big = {"data": [{"y": list(range(50_000))}]}
    nb = new_notebook(cells=[new_code_cell("fig")])
    nb.cells[0].outputs = [
        nbformat.v4.new_output("display_data", data={"application/vnd.plotly.v1+json": big, "text/plain": "Figure"}),
        nbformat.v4.new_output("display_data", data={"text/html": "<b>small</b>"}),
    ]
    assert nbexec.trim_outputs(nb, limit=10_000) == 1
    first, second = nb.cells[0].outputs
    assert "application/vnd.plotly.v1+json" not in first["data"]
    assert (
        "Figure" in first["data"]["text/plain"] and "MB application/vnd.plotly.v1+json" in first["data"]["text/plain"]
    )
    assert second["data"] == {"text/html": "<b>small</b>"}


def test_bad_arguments(tmp_path):
    r = subprocess.run(
        [sys.executable, "-m", "gpulab.nbexec", str(tmp_path / "missing.ipynb"), "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        env=_env(),
        timeout=60,
    )
    assert r.returncode == 2 and "no such notebook" in r.stderr and "Traceback" not in r.stderr


def test_a_notebook_that_ended_by_itself_keeps_its_status_after_the_deadline(tmp_path, monkeypatch):
    """A notebook whose process ended between two looks, the second one past the deadline, is not a timeout."""
    nb, out = tmp_path / "done.ipynb", tmp_path / "out"
    out.mkdir()
    row = {"path": str(nb), "status": "ok", "seconds": 0.1, "cell": 1, "error": ""}
    (out / "done.status.json").write_text(json.dumps(row))

    class Ended:  # the notebook's process, already ended with status 0
        pid, returncode = 0, 0

        def __init__(self, *args: object, **kwargs: object) -> None:
            pass

        def poll(self) -> int:
            return 0

    monkeypatch.setattr(nbexec.subprocess, "Popen", Ended)
    (got,) = nbexec.run_many([nb], out, timeout_s=0.05, log=lambda line: None)  # looked at 0.2 s later
    assert got["status"] == "ok" and got["error"] == ""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's; reads /proc")
def test_the_notebooks_and_their_kernels_die_with_nbexec_even_by_sigkill(tmp_path):
    slow = _write(tmp_path / "slow.ipynb", "import time; time.sleep(120)")
    out, marker = tmp_path / "out", f"NBEXEC_TEST={tmp_path}"
    env = dict(_env(), NBEXEC_TEST=str(tmp_path))
    proc = subprocess.Popen(
        [sys.executable, "-m", "gpulab.nbexec", str(slow), "--out", str(out), "--timeout", "300"],
        stdout=subprocess.DEVNULL,
        env=env,
    )
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not (out / "slow.status.json").exists():
            time.sleep(0.2)
        assert len(live_with(marker)) >= 3  # nbexec, the notebook's process, its kernel
        proc.kill()
        proc.wait(30)
        deadline = time.monotonic() + 10  # the kernel notices within a second that its parent is gone
        while live_with(marker) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert live_with(marker) == {}
    finally:
        proc.kill()
        for pid in live_with(marker):
            os.kill(pid, signal.SIGKILL)


def test_a_notebook_process_that_dies_before_reporting_says_why(tmp_path):
    broken = tmp_path / "broken.ipynb"
    broken.write_text("{ not json")
    out = tmp_path / "out"
    (row,) = nbexec.run_many([broken], out, timeout_s=120, log=lambda line: None)
    assert row["status"] == "failed" and "before reporting" in row["error"]
    assert row["error"].endswith("NotJSONError: Notebook does not appear to be JSON: '{ not json'")  # from its log
    assert json.loads((out / "notebooks.json").read_text()) == [row] and not (out / "notebooks.json.part").exists()


def test_the_alone_notebooks_run_one_at_a_time_after_the_others_with_all_the_cpus(tmp_path):
    """Timings of notebooks sharing one GPU include each other's work (the H200 run of 2026-12-04): --alone runs
    the matching notebooks afterwards, one at a time, and every notebook's BLAS gets the CPUs divided by the
    notebooks running at once. Each notebook writes when it started and ended and the thread cap it saw."""
    code = (
        "import os, time, json, pathlib; t0 = time.time(); time.sleep(1.5)\n"
        "pathlib.Path({out!r}).write_text(json.dumps([t0, time.time(), os.environ.get('OPENBLAS_NUM_THREADS')]))"
    )
    nbs = [_write(tmp_path / f"{name}.ipynb", code.format(out=str(tmp_path / f"{name}.json"))) for name in "abcd"]
    env = _env()
    for var in nbexec.THREAD_VARS:
        env.pop(var, None)
    out = tmp_path / "out"
    r = subprocess.run(
        [sys.executable, "-m", "gpulab.nbexec", *map(str, nbs), "--out", str(out), "--jobs", "2", "--alone", "c,d"]
        + ["--timeout", "100"],
        capture_output=True,
        text=True,
        env=env,
        timeout=150,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    spans = {n: json.loads((tmp_path / f"{n}.json").read_text()) for n in "abcd"}
    assert max(spans["a"][1], spans["b"][1]) <= min(spans["c"][0], spans["d"][0])  # the shared ones first
    assert spans["c"][1] <= spans["d"][0] or spans["d"][1] <= spans["c"][0]  # then one at a time
    cpus = os.cpu_count() or 1
    assert spans["a"][2] == str(max(1, cpus // 2)) and spans["c"][2] == str(cpus)
    rows = {Path(row["path"]).stem: row for row in json.loads((out / "notebooks.json").read_text())}
    assert [n for n in "abcd" if rows[n].get("alone")] == ["c", "d"]


def test_a_thread_cap_set_by_the_user_is_kept():
    env = nbexec.child_env(8, cpus=16, base={"OMP_NUM_THREADS": "3"})
    assert env["OMP_NUM_THREADS"] == "3" and env["OPENBLAS_NUM_THREADS"] == "2" and env["MKL_NUM_THREADS"] == "2"
    assert nbexec.child_env(8, cpus=2, base={})["OPENBLAS_NUM_THREADS"] == "1"
    shared, lone = nbexec.split_alone(
        [Path("notebooks/02_memory.ipynb"), Path("labs/solutions/lab05_x.ipynb")], ["lab05", ""]
    )
    assert shared == [Path("notebooks/02_memory.ipynb")] and lone == [Path("labs/solutions/lab05_x.ipynb")]
