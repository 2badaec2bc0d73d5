"""``make gpu-check`` without a GPU: it stops at once with a clear message and touches nothing; its
rehearsal runs the same flow in simulator mode; stage limits, the deadline, the bundle and unpack."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest

from gpulab import gpucheck, gpucheck_files as files, gpucheck_plan as plan, gpucheck_summary as report
from procs import alive, live_with

ROOT = Path(__file__).resolve().parents[1]


def test_no_gpu_fails_fast_with_a_clear_message(tmp_path):
    venv = tmp_path / "venv"
    env = dict(os.environ, GPULAB_GPUCHECK_FAKE_NO_GPU="1")
    t0 = time.monotonic()
    r = subprocess.run(
        [
            sys.executable,
            str(ROOT / "src" / "gpulab" / "gpucheck.py"),
            "--venv",
            str(venv),
            "--out",
            str(tmp_path / "out"),
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert r.returncode == gpucheck.NO_GPU_EXIT == 3
    assert time.monotonic() - t0 < 30
    assert "no CUDA GPU here" in r.stderr and "nvidia-smi" in r.stderr and "make test" in r.stderr
    assert not venv.exists() and not (tmp_path / "out").exists()  # nothing set up, nothing written


def test_real_probe_on_this_machine_agrees_with_runtime():
    from gpulab import runtime

    found, reason = gpucheck.probe()
    assert (found, reason) == (runtime.probe_driver().found, runtime.probe_driver().reason)


def test_offline_pip_uses_only_the_wheelhouse():
    assert files.pip_args("/wheels") == ["--no-index", "--find-links", "/wheels"]
    assert files.pip_args(None) == []


# gpu-check runs from a checkout; where gpulab is installed as a package (make test-oldest), the module's
# REPO is site-packages' folder, with no notebooks beside it.
needs_checkout = pytest.mark.skipif(
    plan.REPO != ROOT, reason="gpulab is installed, not this checkout: gpu-check's notebook list needs the checkout"
)


@needs_checkout
def test_stages_run_notebooks_and_benchmarks_in_order(tmp_path):
    todo = dict(plan.stages(Path("/venv/bin/python"), tmp_path))
    assert list(todo) == list(plan.STAGES)
    assert "--record" in todo["bench-kernels"] and "--record" in todo["bench-cnn"]
    assert "--record" not in todo["cnn-kernels"] and "kernels" in todo["cnn-kernels"]
    nbs = plan.notebook_paths()
    cmd = todo["notebooks"]
    assert cmd[1:3] == ["-m", "gpulab.nbexec"] and all(nb in cmd for nb in nbs)
    # the MNIST trainers start first (they take longest), each notebook once
    every = list((ROOT / "notebooks").glob("*.ipynb")) + list((ROOT / "labs" / "solutions").glob("*.ipynb"))
    assert Path(nbs[0]).name.startswith(("lab09", "09_")) and len(set(nbs)) == len(nbs) == len(every)
    # nbexec stops its notebooks 10 s before the stage limit
    assert cmd[cmd.index("--timeout") + 1] == str(int(plan.BUDGET["notebooks"]) - 10)
    # the unit tests: each notebook-free test file exists, one xdist worker per file
    assert all((ROOT / t).is_file() for t in plan.GPU_TESTS)
    assert "loadfile" in todo["tests"] and all(t in todo["tests"] for t in plan.GPU_TESTS)
    # a rehearsal records nothing, and leaves out the kernels backend (refused in the simulator)
    rehearsal = plan.stages("py", tmp_path, record=False)
    assert not any("--record" in c for _, c in rehearsal) and "cnn-kernels" not in dict(rehearsal)
    # about 7 minutes on a GPU machine: a lent one's 15 minutes leave time to start it and run again
    assert plan.DEADLINE <= 7 * 60 and max(plan.BUDGET.values()) < plan.DEADLINE


@needs_checkout
def test_notebook_patterns_select_and_order():
    assert plan.notebook_paths(["lab01", "01_threads"]) == [
        "notebooks/01_threads_blocks_grids.ipynb",
        "labs/solutions/lab01_threads.ipynb",
    ]
    assert plan.notebook_paths(["no-such-notebook"]) == []


def _gpucheck(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(ROOT / "src" / "gpulab" / "gpucheck.py"), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
    )


@pytest.mark.parametrize(
    "args, says",
    [
        (["--only", "doctor,bogus"], "no stage bogus; the stages are preflight, doctor"),
        (["--wheels", "w"], "--wheels goes with --python"),
        (["--python", "no-such-python-here"], "not found"),
        (["--budget", "notebooks=soon"], "expected STAGE=SECONDS"),
        (["--notebooks", "no-such-notebook"], "matches no notebook"),
        (["--unpack", "missing.tar.gz"], "no such file"),
        (["--data", "no-such-folder"], "no such folder"),
        (["--python", sys.executable, "--wheels", "tests"], "no .whl files there"),
    ],
)
def test_bad_arguments_say_what_to_do(args, says, tmp_path):
    r = _gpucheck(*args, "--rehearse", "--out", str(tmp_path / "out"), timeout=60)
    assert r.returncode == 2 and says in r.stderr and "Traceback" not in r.stderr
    assert not (tmp_path / "out").exists()


def test_rehearsal_runs_the_stages_and_brings_back_one_bundle(tmp_path):
    """The whole flow without a GPU: the Python as it is, a notebook run through nbexec, the bundle, unpack."""
    out, bundle = tmp_path / "out", tmp_path / "back" / "gpu-check.tar.gz"
    r = _gpucheck(
        "--rehearse",
        "--python",
        sys.executable,
        "--only",
        "preflight,notebooks",
        "--notebooks",
        "lab01",
        "--out",
        str(out),
        "--bundle",
        str(bundle),
    )
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "gpulab mode      simulator" in r.stdout and "notebooks: 1 of 1 ran without an error" in r.stdout
    summary = json.loads((out / "summary.json").read_text())
    assert [s["stage"] for s in summary["stages"]] == ["preflight", "notebooks"] and summary["rehearsal"]
    with tarfile.open(bundle) as tar:
        names = tar.getnames()
    assert "gpu-check/notebooks/lab01_threads.ipynb" in names and "gpu-check/summary.txt" in names
    assert not any(n.startswith("results/") for n in names)  # a rehearsal records nothing
    repo = tmp_path / "repo"
    written = files.unpack(bundle, repo)
    nb = json.loads((repo / "artifacts/gpu-check/notebooks/lab01_threads.ipynb").read_text())
    outputs = [o for c in nb["cells"] if c["cell_type"] == "code" for o in c.get("outputs", [])]
    assert outputs and "artifacts/gpu-check/summary.json" in written


def test_stage_limits_and_the_deadline(tmp_path):
    sleep = [sys.executable, "-c", "import time; print('started', flush=True); time.sleep(60)"]
    quick = [sys.executable, "-c", "print('quick')"]
    seen: list[str] = []
    t0 = time.monotonic()
    rows = gpucheck.run_stages(
        [("doctor", quick), ("bench-kernels", sleep), ("bench-cnn", quick)],
        dict(os.environ),
        tmp_path,
        deadline=time.monotonic() + 45,
        log=seen.append,
        budget={"doctor": 30, "bench-kernels": 3, "bench-cnn": 30},
    )
    assert [r["rc"] for r in rows] == [0, 124, 0]
    assert time.monotonic() - t0 < 20 and "started" in (tmp_path / "bench-kernels.log").read_text()
    assert any("ran past its 3 s" in line for line in seen)
    rows = gpucheck.run_stages([("doctor", quick)], dict(os.environ), tmp_path, deadline=time.monotonic() + 8)
    assert rows == [{"stage": "doctor", "rc": None, "seconds": 0.0}]  # skipped: no time left
    assert "skipped" in report.summary(rows, tmp_path)


def test_bundle_holds_only_new_recordings_and_unpack_refuses_strange_paths(tmp_path):
    results, out = tmp_path / "results", tmp_path / "out"
    results.mkdir()
    out.mkdir()
    (results / "old.json").write_text("{}")
    (results / "changed.json").write_text("{}")
    before = files.snapshot(results)
    (results / "changed.json").write_text('{"a": 1}')
    (results / "new.json").write_text("{}")
    (out / "summary.json").write_text("{}")
    names = files.write_bundle(tmp_path / "b.tar.gz", out, results, before)
    assert sorted(names) == ["gpu-check/summary.json", "results/changed.json", "results/new.json"]

    evil = tmp_path / "evil.tar.gz"
    with tarfile.open(evil, "w:gz") as tar:
        tar.add(out / "summary.json", arcname="results/ok.json")
        tar.add(out / "summary.json", arcname="results/../../../etc/evil.json")
    repo = tmp_path / "repo"
    with pytest.raises(ValueError, match="not a gpu-check report or recording"):
        files.unpack(evil, repo)
    assert not repo.exists()  # refused before anything was written


def test_device_wheels_are_pinned_once_each():
    names = [w.split("==")[0] for w in files.DEVICE_WHEELS]
    assert all(w.count("==") == 1 and w.split("==")[1] for w in files.DEVICE_WHEELS)
    assert len(set(names)) == len(names)
    # the Jupyter client and kernel, and what the notebooks import, are among them
    assert {"nbclient", "ipykernel", "ipywidgets", "plotly", "jupyter-client", "pyzmq"} <= set(names)
    assert files.NEEDED_MODULES[0] == "gpulab"  # it must fix the mode before numba is imported


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_a_signal_stops_the_stage_skips_the_rest_and_still_writes_the_bundle(tmp_path):
    out, bundle = tmp_path / "out", tmp_path / "gpu-check.tar.gz"
    cmd = [sys.executable, str(ROOT / "src" / "gpulab" / "gpucheck.py"), "--rehearse", "--python", sys.executable]
    cmd += [
        "--only",
        "preflight,notebooks,bench-kernels",
        "--notebooks",
        "lab09",
        "--out",
        str(out),
        "--bundle",
        str(bundle),
    ]
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 120
        while not (out / "notebooks" / "notebooks.json").exists() and time.monotonic() < deadline:
            time.sleep(0.2)
        proc.send_signal(signal.SIGTERM)  # as `timeout` or a device tool's stop would
        text, _ = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 128 + signal.SIGTERM, text[-3000:]
    assert "stopped by SIGTERM" in text and "bench-kernels: skipped, gpu-check was stopped" in text
    with tarfile.open(bundle) as tar:
        doc = json.loads(tar.extractfile("gpu-check/summary.json").read())  # type: ignore[union-attr]
    assert [(s["stage"], s["rc"]) for s in doc["stages"]][1:] == [("notebooks", 143), ("bench-kernels", None)]
    time.sleep(2)  # a kernel ends within a second of its notebook's process
    assert (
        live_with(str(tmp_path)) == {}
    )  # nothing left running: not nbexec, a notebook or its kernel (GPULAB_RESULTS_DIR)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_a_stage_dies_with_gpucheck_even_by_sigkill(tmp_path):
    child = [sys.executable, "-c", "import os, time; print('pid', os.getpid(), flush=True); time.sleep(120)"]
    script = (
        "import os, sys, time; from pathlib import Path; from gpulab import gpucheck\n"
        f"gpucheck.run_stages([('doctor', {child!r})], dict(os.environ), Path({str(tmp_path)!r}),"
        " deadline=time.monotonic() + 120, log=lambda line: print(line, flush=True))\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    pid = 0
    try:
        assert proc.stdout is not None
        line = ""
        while not line.startswith("pid "):
            line = proc.stdout.readline()
            assert line, "the stage never started"
        pid = int(line.split()[1])
        assert alive(pid)
        proc.kill()  # SIGKILL: no handler runs
        proc.wait(30)
        deadline = time.monotonic() + 10
        while alive(pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not alive(pid), "the stage's process outlived gpu-check"
    finally:
        proc.kill()
        if pid and alive(pid):
            os.kill(pid, signal.SIGKILL)


def test_unpack_refuses_a_bundle_that_is_cut_off(tmp_path):
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "summary.json").write_text("{}" * 1000)
    whole = tmp_path / "b.tar.gz"
    files.write_bundle(whole, tmp_path / "out", tmp_path / "out", {})
    cut = tmp_path / "cut.tar.gz"
    cut.write_bytes(whole.read_bytes()[:40])
    repo = tmp_path / "repo"
    with pytest.raises(ValueError, match="not a whole .tar.gz"):
        files.unpack(cut, repo)
    assert not repo.exists()
    r = _gpucheck("--unpack", str(cut), timeout=60)
    assert r.returncode == 2 and "not a whole .tar.gz" in r.stderr and "Traceback" not in r.stderr


def test_summary_survives_a_report_cut_off_while_it_was_written(tmp_path):
    (tmp_path / "notebooks").mkdir()
    (tmp_path / "notebooks" / "notebooks.json").write_text('[\n {\n  "path": "notebooks/01_')
    (tmp_path / "kernels.json").write_text('{"rows": []}')
    text = report.summary([{"stage": "notebooks", "rc": 143, "seconds": 12.0}], tmp_path)
    assert "notebooks.json: unreadable (JSONDecodeError" in text and "kernels.json: unreadable (KeyError" in text


def test_a_stage_that_ignores_sigterm_still_ends_before_the_deadline(tmp_path):
    """The last stage runs to its limit (a hung notebook, say) and ignores SIGTERM: gpu-check still returns
    before the deadline, with time left to write the summary and the bundle (it used to overrun it by 5-15 s)."""
    stubborn = [
        sys.executable,
        "-c",
        "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('up', flush=True); time.sleep(120)",
    ]
    t0 = time.monotonic()
    deadline = t0 + gpucheck.RESERVE + 12
    rows = gpucheck.run_stages(
        [("tests", stubborn)],
        dict(os.environ),
        tmp_path,
        deadline=deadline,
        log=lambda line: None,
        budget={"tests": 600},
    )
    assert rows[0]["rc"] == 124 and "up" in (tmp_path / "tests.log").read_text()
    assert time.monotonic() < deadline - 3, time.monotonic() - deadline  # SIGTERM, 5 s, SIGKILL, all inside


def test_nbexec_is_told_the_stage_limit_the_deadline_leaves(tmp_path):
    cmd = dict(plan.stages("py", tmp_path))["notebooks"] if plan.notebook_paths() else None
    fitted = gpucheck._fit(["py", "-m", "gpulab.nbexec", "a.ipynb", "--timeout", "200", "--cell-timeout", "200"], 75.0)
    assert fitted[-4:] == ["--timeout", "65", "--cell-timeout", "65"]  # 10 s under the stage's limit
    assert gpucheck._fit(["py", "-m", "gpulab", "bench", "--timeout", "200"], 30.0)[-1] == "200"  # not nbexec: as it is
    if cmd is not None:
        assert gpucheck._fit(cmd, 1000.0) == cmd  # a budget below the limit stays


def test_a_stage_that_cannot_start_or_a_report_that_fails_loses_nothing_else(tmp_path):
    quick = [sys.executable, "-c", "print('quick')"]
    calls: list[int] = []

    def after(rows):
        calls.append(len(rows))
        if len(rows) == 1:
            raise OSError("disk full")

    seen: list[str] = []
    rows = gpucheck.run_stages(
        [("doctor", [str(tmp_path / "no-such-python"), "-c", "1"]), ("bench-cnn", quick)],
        dict(os.environ),
        tmp_path,
        deadline=time.monotonic() + 120,
        log=seen.append,
        after=after,
    )
    assert [(r["stage"], r["rc"]) for r in rows] == [("doctor", 127), ("bench-cnn", 0)]
    assert calls == [1, 2] and any("could not run" in s for s in seen) and any("disk full" in s for s in seen)


def test_skipped_stages_do_not_rewrite_the_bundle_each(tmp_path, monkeypatch):
    """Rewriting the whole bundle once per skipped stage cost seconds each at the deadline; it is written
    after every stage that ran, and once at the end."""
    written: list[int] = []
    monkeypatch.setattr(files, "write_bundle", lambda *a, **k: written.append(1) or [])
    monkeypatch.setattr(gpucheck, "probe", lambda: (True, "a fake GPU"))
    quick = [sys.executable, "-c", "print('quick')"]
    monkeypatch.setattr(plan, "stages", lambda *a, **k: [("preflight", quick), ("doctor", quick), ("tests", quick)])
    monkeypatch.setattr(gpucheck, "RESERVE", 0.0)
    monkeypatch.setattr(gpucheck, "MIN_STAGE", 1e6)  # every stage is skipped
    args = ["--python", sys.executable, "--out", str(tmp_path / "out"), "--bundle", str(tmp_path / "b.tar.gz")]
    assert gpucheck.main(args) == 1
    assert written == [1]  # the end's, not one per skipped stage
    doc = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert [s["rc"] for s in doc["stages"]] == [None, None, None]


def test_a_hung_stage_still_leaves_the_bundle_and_the_summary_before_the_deadline(tmp_path, monkeypatch):
    """The run a lent GPU machine does, with its notebooks stage hung (ignoring SIGTERM, as a wedged CUDA call
    can): gpu-check stops it, keeps the stage before it, and writes the summary and the bundle, all before
    --deadline, so the outer `timeout` (a minute later) never cuts the bundle off."""
    quick = [sys.executable, "-c", "print('doctor says hello', flush=True)"]
    hung = [
        sys.executable,
        "-c",
        "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('hung', flush=True); "
        "time.sleep(600)",
    ]
    after = [sys.executable, "-c", "print('never')"]
    monkeypatch.setattr(gpucheck, "probe", lambda: (True, "a fake GPU"))
    monkeypatch.setattr(plan, "stages", lambda *a, **k: [("doctor", quick), ("notebooks", hung), ("tests", after)])
    out, bundle = tmp_path / "out", tmp_path / "back" / "gpu-check.tar.gz"
    deadline = gpucheck.RESERVE + gpucheck.MIN_STAGE + 8
    t0 = time.monotonic()
    rc = gpucheck.main(
        ["--python", sys.executable, "--out", str(out), "--bundle", str(bundle), "--deadline", str(deadline)]
    )
    took = time.monotonic() - t0
    assert rc == 1 and took < deadline, took
    with tarfile.open(bundle) as tar:
        doc = json.loads(tar.extractfile("gpu-check/summary.json").read())  # type: ignore[union-attr]
        names = tar.getnames()
    assert [(s["stage"], s["rc"]) for s in doc["stages"]] == [("doctor", 0), ("notebooks", 124), ("tests", None)]
    assert "gpu-check/doctor.log" in names and "gpu-check/notebooks.log" in names and "gpu-check/summary.txt" in names
    assert "hung" in (out / "notebooks.log").read_text()


def test_summary_names_the_kernels_that_failed_their_check(tmp_path):
    rep = {
        "label": "measured on a GPU",
        "rows": [{"kernel": "copy", "value": 250.0, "metric": "GB/s", "percent_of_peak": 80.0, "baseline": None}],
        "failed": [{"kernel": "sum_atomic", "size": 1 << 24, "error": "AssertionError: not close\nmore"}],
    }
    (tmp_path / "kernels.json").write_text(json.dumps(rep))
    text = report.summary([{"stage": "bench-kernels", "rc": 1, "seconds": 60.0}], tmp_path)
    assert "copy" in text and "sum_atomic       FAILED at n=16777216: AssertionError: not close" in text


def test_cuda_home_is_set_only_where_none_is_named_and_a_toolkit_holds_nvvm(tmp_path):
    """The lent GPU image has NVVM only in its CUDA toolkit (/usr/local/cuda) and no nvidia-nvvm wheel: without
    CUDA_HOME, numba-cuda 0.30 may not find it (gpucheck_files.toolkit_env says why)."""
    toolkit, bare = tmp_path / "cuda", tmp_path / "bare"
    (toolkit / "nvvm" / "lib64").mkdir(parents=True)
    (toolkit / "nvvm" / "lib64" / "libnvvm.so.4").write_bytes(b"")
    bare.mkdir()
    assert files.toolkit_env({}, [bare, toolkit]) == {"CUDA_HOME": str(toolkit)}
    assert files.toolkit_env({"CUDA_HOME": "/opt/cuda"}, [toolkit]) == {}  # the user's choice stands
    assert files.toolkit_env({"CUDA_PATH": "/opt/cuda"}, [toolkit]) == {}
    assert files.toolkit_env({}, [bare]) == {}


def test_doctor_compiles_and_runs_a_kernel_in_gpu_mode_and_says_where_nvvm_is():
    """gpu-check's doctor stage (and a learner's `gpulab doctor`): run in emulated gpu mode (tests/gpu_emulation:
    is_gpu() is True, numba's simulator runs the kernel)."""
    code = (
        "import gpu_emulation.emulate as e; e.activate()\n"
        "from gpulab import doctor\n"
        "lines, ok = doctor.report(); print('\\n'.join(lines)); print('OK' if ok else 'NOT OK')\n"
    )
    env = dict(os.environ, GPULAB_DEVICE="simulator")
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), str(ROOT / "tests")])
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    out = proc.stdout
    assert "mode: gpu" in out and "CUDA_HOME: " in out, out + proc.stderr
    assert "a kernel: compiled by numba-cuda and ran on the GPU" in out and out.rstrip().endswith("OK"), out
    assert "nvvm" in out and "libdevice" in out, out  # the paths, or why they could not be read


def test_a_kernel_that_cannot_compile_fails_the_doctor_with_the_error(monkeypatch):
    from numba import cuda

    from gpulab import doctor

    def no_nvvm(*args, **kwargs):
        raise RuntimeError("nvvm not found; original nvvm error: ...")

    monkeypatch.setattr(cuda, "jit", no_nvvm)
    lines, ok = doctor._kernel_lines()
    assert not ok and lines[-1].startswith("a kernel: FAILED to compile or run: RuntimeError: nvvm not found"), lines
    assert any("nvvm not found" in symptom for symptom, _ in doctor.FIXES)


def test_summary_lists_the_figures_the_open_issues_ask_for(tmp_path):
    """The executed lab 09 / lesson 11 notebooks' figure lines come first in the summary, without the checks'
    report lines; other notebooks' outputs are left out."""

    def executed(name, *texts):
        cells = [{"cell_type": "code", "source": "", "outputs": [{"output_type": "stream", "text": t}]} for t in texts]
        (tmp_path / "notebooks" / f"{name}.ipynb").write_text(json.dumps({"cells": cells}))

    (tmp_path / "notebooks").mkdir()
    executed(
        "lab09_training",
        "mnist: 60,000 training / 10,000 test images, 2 epochs on your kernels: test accuracy 0.985 in 9.1 s\n",
        ["target reached on mnist: 0.985 >= 0.98\n", "ok  size 2: correct (host function images/s)\n"],
        "  your kernels:     41,000 images/s (measured in this run)\n",
    )
    executed("11_energy_cost_hardware", "GPU counter (NVML): usable: total energy\n", "[PASS] joules: passed\n")
    executed("03_matmul_naive", "42 GB/s (measured in this run)\n")
    (tmp_path / "notebooks" / "lab12_transformers.ipynb").write_text("{cut off")
    per_op = [
        {
            "op": "conv_weight_grad",
            "shapes": "(100352, 32), (100352, 9)",
            "calls": 3,
            "ms_per_call": 2.5,
            "share": 0.41,
            "seconds": 0.0075,
        }
    ]
    (tmp_path / "cnn-kernels.json").write_text(json.dumps({"gpulab": {"images_per_second": 31000.0}, "per_op": per_op}))
    text = report.summary([], tmp_path)
    assert "cnn on the kernels backend: 31,000 images/s; time per op:" in text
    assert " 41.0%  conv_weight_grad" in text and "(100352, 32), (100352, 9)" in text, text
    assert "figures for the open issues" in text, text
    # measured with other notebooks on the same GPU (nbexec --jobs): the summary says so next to the figures
    assert f"up to {plan.jobs()} notebooks ran at once on this GPU" in text, text
    for line in ("test accuracy 0.985", "target reached on mnist", "41,000 images/s", "GPU counter (NVML): usable"):
        assert line in text, text
    assert "ok  size 2" not in text and "[PASS]" not in text and "42 GB/s" not in text, text
    assert "lab12_transformers: unreadable" in text


def test_summary_gives_the_launch_floor_each_rows_size_and_the_sizes_skipped(tmp_path):
    """bench kernels measures the time of an empty launch first (gpulab.bench.launch): the summary's kernels block
    says it, the size each figure is from (the cases have their own ladders), and a size skipped for memory."""
    line = "each launch costs about 130 us on this machine (...): below about 67,000,000 elements a copy is launch"
    rep = {
        "label": "measured on a GPU",
        "launch": {"rows": [], "seconds": 1.3e-4, "line": line},
        "rows": [
            {
                "kernel": "copy",
                "size": 1 << 28,
                "value": 2500.0,
                "metric": "GB/s",
                "percent_of_peak": 52.0,
                "baseline": "CuPy copy",
                "percent_of_baseline": 62.0,
            },
            {
                "kernel": "sum_atomic",
                "size": 1 << 24,
                "value": 2.3,
                "metric": "GB/s",
                "percent_of_peak": 0.05,
                "baseline": None,
            },
        ],
        "skipped": [
            {
                "kernel": "add",
                "size": 1 << 28,
                "reason": "n=268,435,456 needs about 5.4 GB of device memory (5 float32 arrays), 3.0 GB is free",
            }
        ],
        "failed": [],
    }
    (tmp_path / "kernels.json").write_text(json.dumps(rep))
    text = report.summary([{"stage": "bench-kernels", "rc": 0, "seconds": 40.0}], tmp_path)
    block = text[text.index("kernels (measured on a GPU)") :].splitlines()
    assert block[1] == f"    launch floor: {line}"
    assert (
        "copy" in block[2] and "n=268,435,456" in block[2] and "sum_atomic" in block[3] and "n=16,777,216" in block[3]
    )
    assert block[4].split()[:2] == ["add", "skipped:"] and "5.4 GB of device memory" in block[4]
