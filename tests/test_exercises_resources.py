"""The PTX check's second half: what ``ptxas`` says a kernel needs, against what a GPU gives a block.

The simulator runs a kernel whose shared arrays exceed 48 KiB per block, or whose registers times its block size
exceed the register file; a GPU refuses both at the first launch ("uses too much shared data", "too many resources
requested for launch"). A check with ``ptx=`` assembles the kernel's PTX for sm_75 and says so, at half points
like any other PTX failure."""

from __future__ import annotations

import importlib.util
import sys

import numpy as np
import pytest
from numba import cuda, float32

from gpulab.exercises import check_kernel
from gpulab.exercises import ptxcheck

pytestmark = pytest.mark.ptx

SIG = "void(float32[:], float32[:])"


@cuda.jit
def double_in_shared_64k(x, out):  # right, but 16,384 float32 = 64 KiB of static shared memory per block
    buf = cuda.shared.array(16384, float32)
    i = cuda.grid(1)
    t = cuda.threadIdx.x
    if i < x.size:
        buf[t] = x[i]
    cuda.syncthreads()
    if i < out.size:
        out[i] = buf[t] * float32(2.0)


@cuda.jit
def double_in_shared(x, out):  # the same with one value per thread: 1 KiB for 256 threads
    buf = cuda.shared.array(256, float32)
    i = cuda.grid(1)
    t = cuda.threadIdx.x
    if i < x.size:
        buf[t] = x[i]
    cuda.syncthreads()
    if i < out.size:
        out[i] = buf[t] * float32(2.0)


def _check(kernel, threads=256, **kw):
    return check_kernel(
        kernel,
        spec=lambda x: 2 * x,
        inputs=lambda n, rng: (rng.random(n, dtype=np.float32),),
        sizes=[5, 300],
        threads=threads,
        ptx=SIG,
        **kw,
    )


def _heavy_module(tmp_path, n: int = 80):
    """A kernel that keeps ``n`` loaded values alive at once (95 registers per thread on sm_75 for n = 80), written
    to a file: the PTX check rebuilds a kernel from its source file. out[i] = sum_k x_k s x_(n-1-k) with
    x_k = x[i + k * out.size] and s the sum of every x_k."""
    lines = ["from numba import cuda", "", "", "@cuda.jit", "def heavy(x, out):", "    i = cuda.grid(1)"]
    lines += ["    m = out.size", "    if i < m:"]
    lines += [f"        x{k} = x[i + {k} * m]" for k in range(n)]
    lines.append("        s = " + " + ".join(f"x{k}" for k in range(n)))
    lines.append("        out[i] = " + " + ".join(f"x{k} * s * x{n - 1 - k}" for k in range(n)))
    path = tmp_path / "heavy_kernel_mod.py"
    path.write_text("\n".join(lines) + "\n")
    spec = importlib.util.spec_from_file_location("heavy_kernel_mod", path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules["heavy_kernel_mod"] = mod
    spec.loader.exec_module(mod)
    return mod.heavy


def _heavy_spec(x, m):
    xs = x.astype(np.float64).reshape(-1, m)  # xs[k] = x[k * m : (k + 1) * m]
    s = xs.sum(axis=0)
    return sum(xs[k] * s * xs[len(xs) - 1 - k] for k in range(len(xs))).astype(np.float32)


def _check_heavy(kernel, threads):
    return check_kernel(
        kernel,
        spec=lambda x, out: _heavy_spec(x, out.size),
        inputs=lambda m, rng: (rng.random(80 * m, dtype=np.float32), np.zeros(m, np.float32)),
        args=lambda ins, outs: (ins[0], outs[0]),
        sizes=[3],
        threads=threads,
        rtol=1e-3,
        ptx=SIG,
    )


def test_shared_arrays_over_48_kib_fail_with_what_a_gpu_allows():
    res = _check(double_in_shared_64k)
    assert res.status == "failed" and res.score == 0.5, res
    assert "65,536 bytes per block" in res.message and "49,152 (48 KiB)" in res.message, res.message
    assert "simulator has no such limit" in res.message and res.hint == ptxcheck.SHARED_HINT


TARGET_WHY = "for sm_75 (a T4, the oldest GPU the course supports: the same target on every machine"


def test_a_kernel_that_fits_says_what_it_uses():
    res = _check(double_in_shared)
    assert res.passed, res
    ptx = next(c for c in res.checks if c.name == "PTX")
    assert ptx.message.startswith(f"compiles to PTX as {SIG} {TARGET_WHY});"), ptx.message  # simulator: no GPU named
    assert "registers per thread and 1,024 bytes of shared memory per block (ptxas)" in ptx.message
    assert "blocks of 256 threads fit" in ptx.message, ptx.message


def test_in_gpu_mode_the_row_says_why_sm_75_and_what_this_gpu_is(monkeypatch):
    """On the H200 (2026-12-04) the row read "(ptxas, sm_75)" with no word why: the target is fixed for every
    machine (the oldest GPU the course supports), and in gpu mode the row names the GPU's own architecture beside it;
    a compute capability that cannot be read is said to be so, and the row still passes."""
    from gpulab import ptx, runtime

    monkeypatch.setattr(runtime, "is_gpu", lambda: True)
    monkeypatch.setattr(ptx, "_current_cc", lambda: (9, 0))
    row = ptxcheck.ptx_check(double_in_shared, SIG, threads=256)
    assert row.passed and row.message.startswith(f"compiles to PTX as {SIG} {TARGET_WHY}; this GPU is sm_90);"), row
    assert "(ptxas): blocks of 256 threads fit" in row.message, row.message

    def unreadable():
        raise RuntimeError("CUDA_ERROR_NOT_INITIALIZED\n(more)")

    monkeypatch.setattr(ptx, "_current_cc", unreadable)
    row = ptxcheck.ptx_check(double_in_shared, SIG, threads=256)
    assert row.passed, row
    assert (
        f"{TARGET_WHY}; this GPU's compute capability could not be read (RuntimeError: CUDA_ERROR_NOT_INITIALIZED))"
        in row.message
    ), row.message


def test_registers_times_threads_over_the_register_file_fail_only_for_the_big_block(tmp_path):
    heavy = _heavy_module(tmp_path)
    big = _check_heavy(heavy, 1024)
    assert big.status == "failed" and big.score == 0.5, big
    assert "the check launches blocks of 1024 threads: 1024 threads x" in big.message, big.message
    assert "registers as the hardware allocates them, of 65,536" in big.message, big.message
    assert "too many resources requested for launch" in big.message and big.hint == ptxcheck.REGISTERS_HINT
    assert "max_registers" not in big.message + big.hint  # not an option a learner's check can use
    small = _check_heavy(heavy, 256)
    assert small.passed, small
    assert "blocks of 256 threads fit" in next(c for c in small.checks if c.name == "PTX").message


def test_the_largest_block_of_every_threads_option_is_the_one_checked(tmp_path):
    heavy = _heavy_module(tmp_path)
    res = _check_heavy(heavy, [128, 1024])  # threads= cycles its options over the runs
    assert res.status == "failed" and "blocks of 1024 threads" in res.message, res.message


def test_without_ptxas_the_resources_are_not_checked_and_say_so(monkeypatch):
    from gpulab import ptxas

    def none():
        raise FileNotFoundError("no ptxas")

    monkeypatch.setattr(ptxas, "find_ptxas", none)
    res = _check(double_in_shared_64k)
    assert res.passed, res  # NVVM alone accepts it: only ptxas knows the limit
    ptx = next(c for c in res.checks if c.name == "PTX")
    assert "registers and shared memory not checked (no ptxas installed here)" in ptx.message


def test_a_host_function_without_its_launch_is_checked_for_shared_memory_only():
    def host(x, out):
        double_in_shared[(out.size + 255) // 256, 256](x, out)

    res = check_kernel(
        double_in_shared,
        spec=lambda x: 2 * x,
        inputs=lambda n, rng: (rng.random(n, dtype=np.float32),),
        sizes=[5, 300],
        host=host,
        ptx=SIG,
    )
    assert res.passed, res
    ptx = next(c for c in res.checks if c.name == "PTX")
    assert "bytes of shared memory per block (ptxas)" in ptx.message and "fit" not in ptx.message


@pytest.mark.parametrize(
    "text",
    [
        "[701] Call to cuLaunchKernel results in CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES",  # numba-cuda's driver wording
        "ptxas error   : Entry function 'k' uses too much shared data (0x10000 bytes, 0xc000 max)",  # at load
    ],
)
def test_a_launch_the_gpu_refuses_for_resources_gets_that_hint_not_the_parameters_one(text):
    """gpu mode: the launch of the learner's kernel fails in numba-cuda (the check's own launch, kind "launch")."""
    from gpulab.exercises.frames import Origin
    from gpulab.exercises.problem import Case
    from gpulab.exercises.raised import exception_verdict
    from gpulab.exercises.raised_elsewhere import LAUNCH_HINT, RESOURCES_HINT

    case = Case(size=5, seed=0, inputs=(np.zeros(5, np.float32),), expected=(np.zeros(5, np.float32),))
    exc = RuntimeError(text)
    exc.gpulab_origin = Origin("launch", None, "gpulab/exercises/run.py, line 1, in go", True, package="numba")
    exc.gpulab_kernel = "heavy"
    status, msg, hint = exception_verdict(exc, "heavy[(1,), (1024,)]", case)
    assert status == "error" and hint == RESOURCES_HINT and hint != LAUNCH_HINT, (msg, hint)
    assert "when the check launched your kernel heavy, before any line of it ran" in msg, msg


def test_ptxas_output_it_cannot_read_is_not_checked_rather_than_a_traceback(monkeypatch):
    from gpulab import ptxas

    def unreadable(*args, **kwargs):
        raise ValueError("no 'Used N registers' line in ptxas's output")

    monkeypatch.setattr(ptxas, "ptxas_usage", unreadable)
    res = _check(double_in_shared)
    assert res.passed, res
    ptx = next(c for c in res.checks if c.name == "PTX")
    assert "ptxas could not check it (no 'Used N registers' line" in ptx.message, ptx.message
