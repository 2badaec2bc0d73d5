"""gpulab.interop without a GPU: references, the array interface, and the precision model."""

import numpy as np
import pytest

import gpulab
from gpulab import interop


def test_references():
    x = np.array([-2.0, -0.0, 0.5, 3.0], dtype=np.float32)
    y = np.array([1.0, 1.0, 0.5, -1.0], dtype=np.float32)
    np.testing.assert_array_equal(interop.squared_diff_reference(x, y), [9.0, 1.0, 0.0, 16.0])
    np.testing.assert_array_equal(interop.relu_reference(x), [0.0, 0.0, 0.5, 3.0])
    assert "relu_forward" in interop.RELU_RAW_SOURCE and 'extern "C"' in interop.RELU_RAW_SOURCE
    assert interop.SQUARED_DIFF_SPEC["operation"].startswith("z =")


def test_cupy_functions_explain_simulator_mode():
    assert gpulab.is_simulator()
    for fn in (interop.require_cupy, interop.make_relu_raw_kernel, interop.make_squared_diff_kernel):
        with pytest.raises(ModuleNotFoundError, match="simulator mode"):
            fn()


def test_array_interface_shares_memory_with_numba_kernels():
    from numba import cuda

    from gpulab.kernels import add

    a = np.arange(300, dtype=np.float32)
    out = np.zeros_like(a)
    ptr = interop.data_pointer(out)
    add(a, a, out)  # a Numba kernel writes straight into the NumPy buffer
    assert interop.data_pointer(out) == ptr
    np.testing.assert_array_equal(out, 2 * a)
    info = interop.array_interface(cuda.to_device(a))  # simulator device array: NumPy inside
    assert info["shape"] == (300,) and info["typestr"] == "<f4"
    with pytest.raises(TypeError, match="neither"):
        interop.array_interface([1, 2, 3])


def test_round_to_tf32():
    x = np.array([1.0, 1 + 2**-10, 1 + 2**-11, 1 + 3 * 2**-11, 1 + 2**-12, -3.14159, np.inf, np.nan], dtype=np.float32)
    r = interop.round_to_tf32(x)
    assert r.dtype == np.float32
    assert r[0] == 1.0 and r[1] == 1 + 2**-10  # representable values are kept
    assert r[2] == 1.0  # a tie rounds to the even mantissa
    assert r[3] == 1 + 2**-9  # a tie rounds up to the even mantissa
    assert r[4] == 1.0
    assert abs(r[5] + 3.14159) < 2**-10 * 4 and r[5] != x[5]
    assert np.isinf(r[6]) and np.isnan(r[7])
    mant = r[:6].view(np.uint32) & np.uint32(0x1FFF)
    assert not mant.any()  # the 13 lowest mantissa bits are gone


@pytest.mark.parametrize("n", [7, 64])
def test_emulated_precisions_order(n):
    errs = interop.precision_errors(n)
    assert set(errs) == set(interop.PRECISIONS)
    assert errs["fp32"] < 1e-5
    assert errs["fp32"] < errs["tf32"] < 5e-3
    assert errs["fp32"] < errs["fp16"] < 5e-3
    c = interop.matmul_precision(np.eye(3, dtype=np.float32), np.eye(3, dtype=np.float32), "fp16")
    assert c.dtype == np.float16
    with pytest.raises(ValueError, match="precision must be one of"):
        interop.emulate_matmul(np.eye(2), np.eye(2), "bf8")


@pytest.mark.parametrize(("n", "says"), [(0, "n must be >= 1, but got 0"), (-5, "n must be >= 1"), (2.5, "whole")])
def test_precision_errors_needs_a_matrix_size(n, says):
    with pytest.raises(ValueError, match=says):
        interop.precision_errors(n)


def test_precision_benchmark_is_gpu_only():
    with pytest.raises(ModuleNotFoundError):
        interop.precision_benchmark(64)


def test_tf32_is_modelled_in_the_simulator():
    from gpulab import interop

    assert interop.tf32_supported() is True
    errors = interop.precision_errors(64)
    assert errors["fp32"] < errors["tf32"] < 1e-2


# ---------------------------------------------------------------- issue 17: TF32 on a T4, NCCL


class _FakeLinalg:
    COMPUTE_TYPE_DEFAULT, COMPUTE_TYPE_TF32 = 0, 4

    def __init__(self):
        self.value, self.history = 0, []

    def get_compute_type(self, dtype):
        return self.value

    def set_compute_type(self, dtype, value):
        self.history.append(value)
        self.value = value


@pytest.mark.parametrize("supported, used", [(False, 0), (True, 4)])
def test_tf32_is_not_requested_where_the_gpu_has_none(monkeypatch, supported, used):
    """On a T4 (no TF32) cuBLAS runs FP32 anyway; asking CuPy for TF32 only printed a UserWarning."""
    import warnings

    from gpulab import interop

    fake = _FakeLinalg()
    monkeypatch.setattr(interop, "require_cupy", lambda: None)
    monkeypatch.setattr(interop, "_linalg", lambda: fake)
    monkeypatch.setattr(interop, "tf32_supported", lambda: supported)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with interop.cublas_compute_type("tf32"):
            assert fake.value == used
    assert fake.value == 0  # restored


def test_nccl_status_is_true_to_what_is_missing(monkeypatch):
    import sys
    import types

    from gpulab import interop

    ok, msg = interop.nccl_status()
    assert not ok and "simulator" in msg  # this machine: simulator mode
    monkeypatch.setattr(interop.runtime, "is_gpu", lambda: True)
    fake_cuda = types.ModuleType("cupy.cuda")
    fake_nccl = types.ModuleType("cupy.cuda.nccl")
    fake_nccl.available = False
    fake_cuda.nccl = fake_nccl
    fake_cupy = types.ModuleType("cupy")
    fake_cupy.cuda = fake_cuda
    monkeypatch.setitem(sys.modules, "cupy", fake_cupy)
    monkeypatch.setitem(sys.modules, "cupy.cuda", fake_cuda)
    monkeypatch.setitem(sys.modules, "cupy.cuda.nccl", fake_nccl)
    monkeypatch.setattr(interop, "_cuda_major", lambda: 13)
    ok, msg = interop.nccl_status()
    assert not ok and "do not include NCCL" in msg and "nvidia-nccl-cu13" in msg and "bundles" not in msg
    with pytest.raises(RuntimeError, match="nvidia-nccl-cu13"):
        interop.require_nccl()
    fake_nccl.available = True
    assert interop.nccl_status()[0] and interop.require_nccl() is fake_nccl


def test_gpu_extras_bring_nccl_for_their_cuda_major():
    """CuPy's wheels do not include NCCL: each GPU extra adds the NCCL wheel built for its CUDA major."""
    import re
    from pathlib import Path

    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    extras = tomllib.loads((Path(__file__).resolve().parents[1] / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
    for major in (12, 13):
        names = {re.split(r"[<>=!~\[; ]", req, maxsplit=1)[0] for req in extras[f"gpu-cu{major}"]}
        assert {f"cupy-cuda{major}x", f"nvidia-nccl-cu{major}"} <= names, (major, names)


def test_lesson10_guards_its_nccl_cell_with_nccl_status():
    """Lesson 10's multi-GPU cell asks interop.nccl_status() (tested above) and prints its message, so the
    advice names the wheel for this CuPy's CUDA major instead of a hard-coded one."""
    import json
    from pathlib import Path

    nb = json.loads((Path(__file__).resolve().parents[1] / "notebooks" / "10_scaling_up.ipynb").read_text())
    cells = ["".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code"]
    (cell,) = [c for c in cells if "nccl_data_parallel_gradients(" in c]
    assert "interop.nccl_status()" in cell and "nccl_says" in cell.split("elif n_gpus >= 2:")[1]
    assert "nvidia-nccl-cu" not in cell and "bundles" not in cell
