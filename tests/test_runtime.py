"""The mode decision, each case in a fresh subprocess (the mode is fixed once per process)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
import warnings

import pytest

from gpulab import runtime


def run_py(code: str, **env: str) -> subprocess.CompletedProcess:
    drop = ("GPULAB_DEVICE", "NUMBA_ENABLE_CUDASIM", "GPULAB_COMPILE_ONLY")
    full_env = {k: v for k, v in os.environ.items() if k not in drop}
    full_env.update(env)
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, env=full_env, timeout=120
    )


def test_auto_without_driver_picks_simulator_and_sets_cudasim():
    r = run_py("""
        import os, sys
        assert "numba" not in sys.modules
        import gpulab
        print(gpulab.mode(), os.environ["NUMBA_ENABLE_CUDASIM"], sys.getswitchinterval())
        from numba import cuda
        print(cuda.jit.__module__)
    """)
    assert r.returncode == 0, r.stderr
    first = r.stdout.splitlines()[0].split()
    if runtime.probe_driver().found:
        pytest.skip("this machine has a CUDA driver; the no-driver path is tested on CPU-only CI")
    assert first[:2] == ["simulator", "1"]
    assert float(first[2]) == runtime.SIM_SWITCH_INTERVAL
    assert "simulator" in r.stdout.splitlines()[1]


def test_import_in_gpu_mode_does_no_gpu_work():
    """In gpu mode `import gpulab` must not even import numba.cuda (which would create nothing yet,
    but kernels and contexts come only when a lesson asks). Compile-only mode stands in for a GPU."""
    r = run_py(
        """
        import sys, gpulab
        print(gpulab.mode(), "numba.cuda" in sys.modules, "cupy" in sys.modules)
    """,
        GPULAB_DEVICE="gpu",
        GPULAB_COMPILE_ONLY="1",
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["gpu", "False", "False"]


def test_override_simulator():
    r = run_py("import gpulab; print(gpulab.mode(), gpulab.runtime.mode_reason())", GPULAB_DEVICE="simulator")
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("simulator GPULAB_DEVICE=simulator")


def test_override_is_case_and_space_tolerant():
    r = run_py("import gpulab; print(gpulab.mode())", GPULAB_DEVICE=" Simulator ")
    assert r.stdout.strip() == "simulator", r.stderr


def test_bad_value_gives_kind_error():
    r = run_py("import gpulab", GPULAB_DEVICE="cuda")
    assert r.returncode != 0
    assert "GPULAB_DEVICE='cuda' is not a mode gpulab knows" in r.stderr
    assert "gpu, simulator, auto" in r.stderr


def test_gpu_requested_without_driver_explains():
    if runtime.probe_driver().found:
        pytest.skip("a GPU is present")
    r = run_py("import gpulab", GPULAB_DEVICE="gpu")
    assert r.returncode != 0
    assert "GPULAB_DEVICE=gpu was requested" in r.stderr
    assert "GPULAB_DEVICE=simulator" in r.stderr


def test_late_switch_after_numba_imported_in_other_mode_says_restart():
    r = run_py(
        """
        import os
        os.environ["NUMBA_ENABLE_CUDASIM"] = "0"
        from numba import cuda
        import gpulab
    """,
        GPULAB_DEVICE="simulator",
    )
    assert r.returncode != 0
    assert "Restart the kernel" in r.stderr
    assert "numba.cuda was imported in gpu mode" in r.stderr


def test_numba_imported_first_in_same_mode_is_fine():
    r = run_py(
        """
        import os
        os.environ["NUMBA_ENABLE_CUDASIM"] = "1"
        from numba import cuda
        import gpulab
        print(gpulab.mode())
    """,
        GPULAB_DEVICE="simulator",
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "simulator"


def test_switch_after_selection_is_refused():
    r = run_py(
        """
        import gpulab
        from gpulab import runtime
        try:
            runtime.select_mode("gpu")
        except runtime.ModeError as e:
            print("refused:", e)
    """,
        GPULAB_DEVICE="simulator",
    )
    assert "refused: gpulab is already running in simulator mode" in r.stdout, r.stderr
    assert "Restart the kernel" in r.stdout


def test_compile_only_mode_uses_real_cuda_target_without_gpu():
    r = run_py(
        """
        import gpulab
        from numba import cuda
        print(gpulab.mode(), "simulator" in type(cuda.jit).__module__)
    """,
        GPULAB_DEVICE="gpu",
        GPULAB_COMPILE_ONLY="1",
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.split()[0] == "gpu"


@pytest.mark.parametrize("given, expected", [(None, "0"), ("1", "1"), ("0", "0")])
def test_low_occupancy_warnings_are_off_unless_the_user_turned_them_on(given, expected):
    """numba-cuda warns at every launch of fewer than 128 blocks (the lessons' small grids): gpulab turns the warning
    off when it picks the mode, before numba is imported, but keeps a value the user set. Compile-only gpu mode
    imports numba-cuda's real config."""
    env = {"GPULAB_DEVICE": "gpu", "GPULAB_COMPILE_ONLY": "1"}
    if given is not None:
        env["NUMBA_CUDA_LOW_OCCUPANCY_WARNINGS"] = given
    drop = {"NUMBA_CUDA_LOW_OCCUPANCY_WARNINGS"} if given is None else set()
    code = """
        import os, gpulab
        from numba.cuda.core import config
        print(gpulab.mode(), os.environ["NUMBA_CUDA_LOW_OCCUPANCY_WARNINGS"], config.CUDA_LOW_OCCUPANCY_WARNINGS)
    """
    full_env = {k: v for k, v in os.environ.items() if k not in drop | {"GPULAB_DEVICE", "NUMBA_ENABLE_CUDASIM"}}
    r = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, env=full_env | env, timeout=120
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["gpu", expected, expected]


def test_sizes_and_array_module_follow_mode():
    import numpy as np

    assert gpulab_mode() == "simulator"
    assert runtime.sizes(gpu=1 << 24, simulator=1 << 10) == 1 << 10
    assert runtime.xp() is np
    assert runtime.array_module(np.zeros(3)) is np
    a = runtime.to_device(np.arange(3))
    assert isinstance(runtime.to_host(a), np.ndarray)
    assert "simulator" in runtime.banner() and "timings say nothing" in runtime.banner()


def gpulab_mode() -> str:
    return runtime.mode()


@pytest.mark.parametrize(
    ("value", "says"),
    [
        (None, "it was given None (what a function without `return` gives"),
        ("abc", "it was given the text 'abc'"),
        (print, "it was given the function print, not an array"),
        ({"a": 1}, "it was given a dict that is not numbers"),
    ],
)
def test_to_device_and_to_host_refuse_what_is_not_numbers(value, says):
    """NumPy would make a 0-d object array of these (CuPy refuses them): the two modes must not differ."""
    from gpulab.errors import UsageError

    with pytest.raises(UsageError, match=r"to_device takes an array \(or a list of numbers\)"):
        runtime.to_device(value)
    with pytest.raises(UsageError, match=re.escape(says)):
        runtime.to_host(value)


def test_to_device_takes_arrays_lists_and_numbers():
    import numpy as np

    assert runtime.to_device([1, 2]).tolist() == [1, 2] and float(runtime.to_device(3.0)) == 3.0
    assert runtime.to_host(np.float32(2)) == 2 and runtime.to_host([[1.0]]).shape == (1, 1)


def test_sizes_warns_when_the_simulators_size_is_the_larger():
    with pytest.warns(UserWarning, match=r"sizes\(gpu=1,024, simulator=16,777,216\).*sizes\(gpu=16_777_216, simulator"):
        assert runtime.sizes(1 << 10, 1 << 24) == 1 << 24
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        runtime.sizes(gpu=0.98, simulator=0.75)  # rates, and the usual order: no warning
        runtime.sizes(gpu=(32, 64), simulator=(8, 16))
        runtime.sizes(gpu=1 << 24, simulator=1 << 10)


def test_probe_is_fast_and_reports_reason():
    import time

    t = time.perf_counter()
    p = runtime.probe_driver()
    assert time.perf_counter() - t < 2.0
    assert p.reason
    assert p.found == (p.device_count > 0)


def test_doctor_prints_mode_line():
    r = run_py("from gpulab.__main__ import main; raise SystemExit(main(['doctor']))", GPULAB_DEVICE="simulator")
    assert "mode: simulator" in r.stdout.splitlines()
    assert "numba.cuda comes from: numba-cuda package" in r.stdout
    assert "known fixes:" in r.stdout
    assert "simulator blocks: a block's threads run in turn" in r.stdout  # the fast path works on this Python
    assert r.returncode == 0, r.stdout + r.stderr


def test_doctor_says_when_this_python_keeps_blocks_on_numbas_threads(monkeypatch):
    """On a Python whose bytecode the in-turn reading does not follow (3.13 did not, until gpulab left PUSH_NULL out)
    every kernel with a barrier runs on Numba's threads, about 30x slower: doctor says so and what to do."""
    from gpulab import doctor
    from gpulab.simulator import in_turn

    monkeypatch.setattr(in_turn, "plan", lambda fn: None)
    line = doctor._in_turn_line()
    assert line.startswith("simulator blocks: NOT in turn on Python") and "30x slower" in line and "3.10-3.13" in line


def test_from_numba_import_cuda_is_numba_cuda_package():
    from numba import cuda

    assert "numba_cuda" in cuda.__file__


def test_cli_unknown_command():
    r = run_py("from gpulab.__main__ import main; raise SystemExit(main(['frobnicate']))")
    assert r.returncode == 2
    assert "invalid choice: 'frobnicate'" in r.stderr and "Traceback" not in r.stderr


def test_command_line_detection_and_mode_error_hint(monkeypatch):
    """`gpulab ...` / `python -m gpulab ...` tolerate a bad GPULAB_DEVICE at import (the command reports
    it); anything else does not. ModeError keeps the doctor hint apart from the message."""
    monkeypatch.setattr(sys, "orig_argv", ["python", "-m", "gpulab", "--help"], raising=False)
    assert runtime.started_from_command_line()
    monkeypatch.setattr(sys, "orig_argv", ["python", "-m", "ipykernel_launcher", "-f", "x.json"], raising=False)
    monkeypatch.setattr(sys, "argv", ["/venv/lib/ipykernel_launcher.py"])
    assert not runtime.started_from_command_line()
    monkeypatch.setattr(sys, "orig_argv", ["/venv/bin/python", "/venv/bin/gpulab", "doctor"], raising=False)
    monkeypatch.setattr(sys, "argv", ["/venv/bin/gpulab", "doctor"])
    assert runtime.started_from_command_line()
    err = runtime.ModeError("GPULAB_DEVICE=gpu was requested, but no driver.", runtime.DOCTOR_HINT)
    assert err.message.endswith("no driver.") and str(err).endswith("for details.") and "doctor" not in err.message
