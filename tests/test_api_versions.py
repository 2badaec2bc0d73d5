"""The CuPy and numba-cuda names gpu-mode code uses exist in the installed versions (tests/apicheck.py).

``make test`` runs this against the newest pins (CuPy 14, numba-cuda 0.30); ``make test-oldest`` against
the oldest gpulab supports (CuPy 13, numba-cuda 0.22, numba 0.60 on Python 3.12), so a call that only a
newer CuPy or numba-cuda has fails in CI instead of on a learner's GPU. No GPU is needed: both import
without one, and the check runs in a subprocess that imports numba.cuda's device API, not the simulator.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _apicheck(*paths: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("NUMBA_ENABLE_CUDASIM", "GPULAB_DEVICE")}
    return subprocess.run(
        [sys.executable, "-W", "ignore", str(ROOT / "tests" / "apicheck.py"), *map(str, paths)],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )


def _major_minor(dist_names: tuple[str, ...]) -> tuple[int, int]:
    for dist in dist_names:
        try:
            major, minor = version(dist).split(".")[:2]
            return int(major), int(minor)
        except PackageNotFoundError:
            continue
    raise AssertionError(f"none of {dist_names} is installed: the gpu-mode API check needs it (no GPU needed)")


def test_every_cupy_and_numba_cuda_name_gpu_mode_uses_exists_in_the_installed_versions():
    r = _apicheck()
    assert r.returncode == 0, r.stdout + r.stderr
    assert "CuPy/numba names used in" in r.stdout  # it scanned (src/gpulab, lessons, lab solutions)


def test_the_check_reports_names_attributes_and_keywords_that_do_not_exist(tmp_path):
    py = tmp_path / "uses.py"
    py.write_text(
        "import cupy as cp\nfrom numba import cuda\nimport numba\n\n\n"
        "def f(xp, a):\n"
        "    cp.not_a_cupy_function(a)\n"
        "    cuda.not_a_numba_cuda_function()\n"
        "    cuda.threadIdx.w\n"
        "    xp.asarray(a, not_a_keyword=1)\n"
        "    cuda.to_device(a)\n"  # exists: not reported
        "    return numba.cuda.as_cuda_array(a, sync=False)\n"
    )
    cell = "if True:\n    %time x = 1\n    !ls\ncp.also_not_a_cupy_function()\n"  # magics inside a block
    nb = tmp_path / "nb.ipynb"
    nb.write_text(
        json.dumps(
            {
                "cells": [
                    {"cell_type": "code", "source": "import cupy as cp\n", "metadata": {}},
                    {"cell_type": "code", "source": cell, "metadata": {}},
                ],
                "metadata": {},
                "nbformat": 4,
                "nbformat_minor": 5,
            }
        )
    )
    r = _apicheck(py, nb)
    assert r.returncode == 1, r.stdout + r.stderr
    missing = [ln for ln in r.stdout.splitlines() if "MISSING" in ln]
    for name in (
        "cupy.not_a_cupy_function",
        "numba.cuda.not_a_numba_cuda_function",
        "numba.cuda.threadIdx.w",
        "cupy.asarray(..., not_a_keyword=...)",
        "cupy.also_not_a_cupy_function",
    ):
        assert any(name in ln for ln in missing), (name, r.stdout)
    assert len(missing) == 5, r.stdout
    assert "uses.py:7" in r.stdout and "nb.ipynb:cell 1" in r.stdout  # where each one is used


def test_the_check_sees_the_installed_versions_not_the_newest(tmp_path):
    """Names added in CuPy 14 / numba-cuda 0.30: missing under make test-oldest's CuPy 13 and numba-cuda
    0.22, present under make test's pins. Proves each run checks the versions its venv holds."""
    py = tmp_path / "new_names.py"
    py.write_text("import cupy\nfrom numba import cuda\n\ncupy.trapezoid\ncuda.is_fp8_supported\n")
    r = _apicheck(py)
    out = r.stdout
    cupy_v = _major_minor(("cupy-cuda12x", "cupy-cuda13x", "cupy"))
    nbc_v = _major_minor(("numba-cuda",))
    if cupy_v[0] == 13:
        assert "MISSING cupy.trapezoid" in out, out
    elif cupy_v[0] >= 14:
        assert "cupy.trapezoid" not in out, out
    if nbc_v == (0, 22):
        assert "MISSING numba.cuda.is_fp8_supported" in out, out
    elif nbc_v >= (0, 30):
        assert "is_fp8_supported" not in out, out
    assert r.returncode == (1 if "MISSING" in out else 0), out + r.stderr


# Names gpu-mode code reaches through a variable (``linalg = interop._linalg()``, ``nccl = require_nccl()``,
# numba's config module in timing.no_interface_sync), which the scan cannot follow, and which the unit
# tests replace with fakes (tests/test_interop.py, tests/test_timing.py): the fakes must stand for real names.
# Also the methods called on numba-cuda's objects (the scan sees ``out_d.copy_to_host``, not its class): lesson 02's
# streams (DeviceNDArray copies with stream=, a slice of a DeviceNDArray as a view, ``kernel[blocks, threads,
# stream]``, Stream.synchronize), timing.benchmark's events and bench/streams.py's copy-engine count.
REACHED_THROUGH_VARIABLES = """
import cupy
import numba.cuda.api
import numba.cuda.cudadrv.devicearray
import numba.cuda.cudadrv.driver
import numba.cuda.core.config
import numba.cuda.dispatcher
numba.cuda.cudadrv.devicearray.DeviceNDArray.copy_to_host(None, stream=0)
numba.cuda.cudadrv.devicearray.DeviceNDArray.copy_to_device(None, stream=0)
numba.cuda.cudadrv.devicearray.DeviceNDArray.__getitem__(None)
numba.cuda.cudadrv.driver.Stream.synchronize()
numba.cuda.cudadrv.driver.Event.record(stream=0)
numba.cuda.cudadrv.driver.Event.synchronize()
numba.cuda.cudadrv.driver.binding.CUdevice_attribute.CU_DEVICE_ATTRIBUTE_ASYNC_ENGINE_COUNT
numba.cuda.dispatcher.CUDADispatcher.configure(None, None, stream=0, sharedmem=0)
cupy._core._routines_linalg.get_compute_type
cupy._core._routines_linalg.set_compute_type
cupy._core._routines_linalg.COMPUTE_TYPE_DEFAULT
cupy._core._routines_linalg.COMPUTE_TYPE_TF32
cupy.cuda.nccl.available
numba.cuda.core.config.CUDA_ARRAY_INTERFACE_SYNC
numba.cuda.api.config.CUDA_ARRAY_INTERFACE_SYNC
numba.cuda.cudadrv.devicearray.config.CUDA_ARRAY_INTERFACE_SYNC
"""


def test_names_reached_through_variables_exist_in_the_installed_versions(tmp_path):
    py = tmp_path / "reached.py"
    py.write_text(REACHED_THROUGH_VARIABLES)
    r = _apicheck(py)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "22 CuPy/numba names" in r.stdout, r.stdout  # every line above was checked
