"""The harness's API: imports, Problem, setup errors addressed to the exercise's author, parameter
names in messages, rendering, the grade log, PTX and kernel sources."""

from __future__ import annotations

import math
import sys

import numpy as np
import pytest
from numba import cuda, float32

from gpulab import exercises
from gpulab.exercises import (
    Budget,
    Case,
    CheckResult,
    KernelTimeout,
    Problem,
    check_kernel,
    kernel_source,  # noqa: F401
    random_arrays,
    rounding_bound,
    standalone_source,
)
from test_exercises_elementwise import add_good, add_inputs, add_no_guard, add_placeholder, check_add
from test_exercises_matmul import mm_tiled as matmul_tiled

TPB = 32
TILE = 8


# --- Problem --------------------------------------------------------------------------------------


ADD = Problem(
    "add",
    spec=lambda a, b: a + b,
    inputs=add_inputs,
    sizes=[1, 7, 100],
    gpu_sizes=[1 << 12],
    threads=[128, 32],
    points=2,
)


def test_problem_checks_a_kernel_at_the_modes_sizes():
    res = ADD.check(add_good)
    assert res.passed and res.score == 2 and res.name == "add_good"
    assert "(1, 7, 100)" in res.message


def test_problem_gpu_scale_with_a_host_emulation():
    def emulated(a, b, out):
        out[...] = a + b

    res = ADD.check(host=emulated, scale="gpu")
    assert res.passed and res.name == "add" and "4096" in res.message, res


def test_problem_overrides_and_unknown_options():
    assert not ADD.check(add_no_guard, sizes=[7]).passed
    with pytest.raises(TypeError, match="unknown option"):
        ADD.check(add_good, treads=32)
    with pytest.raises(ValueError, match="scale must be"):
        ADD.sizes_for("tpu")


# --- setup errors: the exercise's own mistakes ----------------------------------------------------


def test_zero_threads_is_a_setup_error():
    res = check_add(add_good, threads=0)
    assert res.status == "setup error" and res.score == 0
    assert "not in your code" in res.message and "threads=0" in res.message
    assert "exercise's author" in res.hint


def test_spec_returning_a_python_scalar_is_a_setup_error():
    res = check_kernel(add_good, spec=lambda a, b: float((a + b).sum()), inputs=add_inputs, sizes=[4], threads=32)
    assert res.status == "setup error" and "the spec returned float" in res.message


@pytest.mark.parametrize(
    "bad, words",
    [
        (lambda n, rng: None, "returned a NoneType"),
        (lambda n, rng: ([1.0, 2.0], [3.0, 4.0]), "returned a list as argument 0"),
        (lambda n, rng: {"a": 1}, "returned a dict"),
    ],
)
def test_inputs_returning_the_wrong_type_is_a_setup_error(bad, words):
    res = check_kernel(add_good, spec=lambda a, b: a + b, inputs=bad, sizes=[4], threads=32)
    assert res.status == "setup error" and words in res.message, res


def test_a_failing_spec_or_launch_function_is_a_setup_error():
    res = check_kernel(add_good, spec=lambda a, b: a.reshape(3, -1), inputs=add_inputs, sizes=[4], threads=32)
    assert res.status == "setup error" and "the spec raised" in res.message
    res = check_add(add_good, threads=None, launch=lambda a, b, out: (0, 32))
    assert res.status == "setup error" and "CUDA refuses" in res.message
    res = check_add(add_good, threads=None, launch=lambda a, b: (1, 32))
    assert res.status == "setup error" and "launch= function failed" in res.message


def test_launch_options_are_exclusive_and_sizes_required():
    with pytest.raises(ValueError, match="exactly one of threads=, launch= or host="):
        check_kernel(
            add_good, spec=lambda a, b: a + b, inputs=add_inputs, sizes=[3], threads=32, launch=lambda *a: (1, 32)
        )
    with pytest.raises(ValueError, match="at least one input size"):
        check_kernel(add_good, spec=lambda a, b: a + b, inputs=add_inputs, sizes=[], threads=32)


# --- messages -------------------------------------------------------------------------------------


def test_messages_use_the_kernels_parameter_names():
    @cuda.jit
    def add_last_missing(x, y, total):
        i = cuda.grid(1)
        if i < total.shape[0] - 1:
            total[i] = x[i] + y[i]

    res = check_add(add_last_missing, sizes=[7])
    assert "total[6]: expected" in res.message and "out" not in res.message.split("\n")[0]
    named = check_add(add_last_missing, sizes=[7], out_names=["sum_out"])
    assert "sum_out[6]" in named.message


def test_scalar_inputs_are_described_plainly():
    case = Case(3, 0, (np.float32(2.5), np.zeros((2, 3), np.float32)), ())
    assert case.describe() == "size=3, seed=0 (inputs: 2.5, float32(2, 3))"


def test_result_renders_as_text_and_html():
    res = check_add(add_no_guard)
    text, page = str(res), res._repr_html_()
    assert text.startswith("[FAIL] add_no_guard: failed (0/1 points)") and "hint:" in text
    assert "<div" in page and "missing bounds guard" in page and "0/1 points" in page
    assert res.to_dict()["status"] == "failed"
    assert isinstance(res, CheckResult) and not res


def test_grade_log_collects_results(tmp_path, monkeypatch):
    log = tmp_path / "log.jsonl"
    monkeypatch.setenv("GPULAB_GRADE_LOG", str(log))
    check_add(add_good, sizes=[3])
    check_add(add_placeholder)
    lines = log.read_text().splitlines()
    assert len(lines) == 2 and '"passed": true' in lines[0] and '"not implemented"' in lines[1]


@cuda.jit
def reverse_no_sync(x, out):
    buf = cuda.shared.array(TPB, float32)
    tx = cuda.threadIdx.x
    i = cuda.grid(1)
    if i < x.shape[0]:
        buf[tx] = x[i]
    if i < x.shape[0]:
        out[i] = buf[TPB - 1 - tx]


def test_switch_interval_is_restored():
    before = sys.getswitchinterval()
    check_kernel(
        reverse_no_sync,
        spec=lambda x: x.reshape(-1, TPB)[:, ::-1].ravel().copy(),
        inputs=lambda n, rng: random_arrays(rng, n),
        sizes=[64],
        threads=TPB,
    )
    assert sys.getswitchinterval() == before
    assert exercises.races.SCHEDULES  # schedules used for re-runs are configured


def test_public_names_and_rounding_bound():
    assert set(exercises.__all__) >= {
        "Budget",
        "Case",
        "CheckResult",
        "KernelTimeout",
        "Problem",
        "check_kernel",
        "kernel_source",
        "random_arrays",
        "rounding_bound",
    }
    assert issubclass(KernelTimeout, Exception)
    assert math.isclose(rounding_bound(2), 2 * 2.0**-24 / (1 - 2 * 2.0**-24))
    assert Budget().sectors == {} and Budget(sectors=2.0).sectors == 2.0


# --- kernel sources and PTX -----------------------------------------------------------------------


@cuda.jit(device=True)
def _clamp01(v):
    return min(max(v, 0.0), 1.0)


@cuda.jit
def clamp_kernel(x, out):
    buf = cuda.shared.array(TPB, np.float32)
    i = cuda.grid(1)
    if i < x.shape[0]:
        buf[cuda.threadIdx.x] = _clamp01(x[i]) * math.pi / math.pi
        out[i] = buf[cuda.threadIdx.x]


def test_kernel_source_is_the_source_and_standalone_source_rebuilds_a_module():
    assert kernel_source(matmul_tiled).startswith("@cuda.jit\ndef mm_tiled(A, B, C):")
    src = standalone_source(matmul_tiled)
    assert "TILE = 8" in src and "from numba import float32" in src and "def mm_tiled(A, B, C):" in src
    assert src.startswith("from numba import cuda")


def test_standalone_source_includes_device_functions_and_module_aliases():
    src = standalone_source(clamp_kernel)
    assert "import numpy as np" in src and "import math" in src and "TPB = 32" in src
    assert "@cuda.jit(device=True)\ndef _clamp01(v):" in src
    assert src.index("def _clamp01") < src.index("def clamp_kernel")
    namespace: dict = {}
    exec(compile(src, "<rebuilt>", "exec"), namespace)  # the rebuilt module runs on its own
    assert "clamp_kernel" in namespace and "_clamp01" in namespace


@pytest.mark.ptx
def test_ptx_check_accepts_real_cuda_and_rejects_python_only_code():
    @cuda.jit
    def fill_with_list(out):
        i = cuda.grid(1)
        xs = [1.0, 2.0]
        if i < out.shape[0]:
            out[i] = xs[0]

    bad = check_kernel(
        fill_with_list,
        spec=lambda x: np.ones_like(x),
        inputs=lambda n, rng: (np.zeros(n, np.float32),),
        sizes=[5],
        threads=8,
        args=lambda ins, outs: outs,
        ptx="void(float32[:])",
    )
    # the source check names the list first (no compiler needed); NVVM refuses it too
    assert bad.status == "failed" and bad.score == 0.5 and "uses a Python list (`[1.0, 2.0]`)" in bad.message
    from gpulab.exercises.ptxcheck import ptx_check

    refused = ptx_check(fill_with_list, "void(float32[:])")
    assert not refused.passed and "NVVM rejected" in refused.message
    good = check_kernel(
        matmul_tiled,
        spec=lambda A, B: A @ B,
        inputs=lambda s, rng: random_arrays(rng, (s[0], s[1]), (s[1], s[2])),
        sizes=[(13, 10, 7)],
        threads=(TILE, TILE),
        reduction=lambda A, B: A.shape[1],
        ptx="void(float32[:, :], float32[:, :], float32[:, :])",
    )
    assert good.passed and any(c.name == "PTX" and c.passed for c in good.checks)


def test_a_host_function_that_never_returns_is_stopped_after_the_verdict():
    """Issue 15: a `host=` function that loops forever gets a timeout verdict, and its thread does
    not keep spinning afterwards."""
    import threading
    import time

    def forever(a, b, out):
        while True:
            time.sleep(0.001)

    res = check_kernel(
        forever,
        spec=lambda a, b: a + b,
        inputs=lambda n, rng: (np.ones(n, np.float32), np.ones(n, np.float32)),
        sizes=[4],
        host=forever,
        timeout=0.5,
    )
    assert res.status == "timeout" and "did not finish within 0.5 s" in res.message, res
    deadline = time.time() + 5
    while time.time() < deadline and any(t.name == "gpulab-check" and t.is_alive() for t in threading.enumerate()):
        time.sleep(0.05)
    assert not any(t.name == "gpulab-check" and t.is_alive() for t in threading.enumerate())


def test_a_host_function_whose_helper_returns_none_is_asked_about_return():
    def halves(a):
        a[: a.size // 2], a[a.size // 2 :]  # no return

    def host(a, b, out):
        lo, hi = halves(a)
        out[...] = a + b

    res = check_kernel(
        host,
        spec=lambda a, b: a + b,
        inputs=lambda n, rng: (np.ones(n, np.float32), np.ones(n, np.float32)),
        sizes=[4],
        host=host,
    )
    assert not res.passed and "NoneType" in res.message
    assert "is its `return` statement missing" in res.hint and "CUDA features" not in res.hint, res.hint


def test_a_host_function_error_is_not_told_about_kernels():
    def host(a, b, out):
        out[...] = len(a) + a.shape  # an int plus a tuple: a TypeError in host code, no kernel involved

    res = check_kernel(
        host,
        spec=lambda a, b: a + b,
        inputs=lambda n, rng: (np.ones(n, np.float32), np.ones(n, np.float32)),
        sizes=[4],
        host=host,
    )
    assert not res.passed
    assert "CUDA features" not in res.hint and "your function failed as Python" in res.hint, res
