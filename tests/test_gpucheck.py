"""``make gpu-check`` without a GPU: it must stop at once with a clear message and touch nothing."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from gpulab import gpucheck

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
    assert gpucheck.pip_args("/wheels") == ["--no-index", "--find-links", "/wheels"]
    assert gpucheck.pip_args(None) == []


def test_stages_run_notebooks_and_benchmarks_in_order(tmp_path):
    names = [name for name, _ in gpucheck.stages(Path("/venv/bin/python"), tmp_path)]
    assert names[0] == "doctor" and "bench-kernels" in names
    kernels_cmd = dict(gpucheck.stages(Path("/venv/bin/python"), tmp_path))["bench-kernels"]
    assert "--record" in kernels_cmd
    if gpucheck._notebooks():
        cmd = dict(gpucheck.stages(Path("/venv/bin/python"), tmp_path))["notebooks"]
        assert "--nbval-lax" in cmd and all(nb in cmd for nb in gpucheck._notebooks())
    assert sum(gpucheck.BUDGET.values()) <= 8 * 60
