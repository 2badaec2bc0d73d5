"""Matmul ladder: every kernel against NumPy (in gpu mode on CuPy arrays), launcher checks, and global loads counted
by gpulab.trace (the simulator, in either mode)."""

import numpy as np
import pytest

import gpulab
from gpulab import to_device, to_host
from gpulab.kernels import LaunchError
from gpulab.kernels.matmul import (
    BN,
    MATMUL_KERNELS,
    TILE,
    benchmark_ladder,
    disable_tf32,
    launch_config,
    matmul,
    matmul_flops,
    matmul_naive_kernel,
    matmul_reference,
    matmul_regtiled_kernel,
    matmul_tiled_kernel,
)
from gpulab.trace import trace

SHAPES = [(1, 1, 1), (17, 33, 9), (31, 16, 47), (64, 64, 64)]  # (M, K, N), most not multiples of the tiles


def _inputs(M, K, N, seed=0):
    rng = np.random.default_rng(seed)
    return rng.standard_normal((M, K), dtype=np.float32), rng.standard_normal((K, N), dtype=np.float32)


@pytest.mark.parametrize("name", list(MATMUL_KERNELS))
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_kernel_matches_numpy(name, shape):
    if name == "tiled" and shape == (64, 64, 64):
        shape = (40, 24, 36)  # same coverage (several blocks, partial tiles), a third of the simulator time
    M, K, N = shape
    a, b = _inputs(M, K, N)
    c = matmul(to_device(a), to_device(b), kernel=name)
    assert c.shape == (M, N) and c.dtype == np.float32
    np.testing.assert_allclose(to_host(c), a @ b, rtol=1e-4, atol=1e-4)


def test_default_kernel_writes_into_out_and_accepts_kernel_objects():
    a, b = _inputs(5, 7, 3)
    out = np.full((5, 3), np.nan, np.float32)
    assert matmul(a, b, out) is out
    np.testing.assert_allclose(out, a @ b, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(matmul(a, b, kernel=matmul_naive_kernel), a @ b, rtol=1e-5, atol=1e-5)


def test_empty_and_k_zero():
    a, b = _inputs(0, 3, 4)
    assert matmul(a, b).shape == (0, 4)
    c = matmul(np.zeros((3, 0), np.float32), np.zeros((0, 2), np.float32), kernel="tiled")
    np.testing.assert_array_equal(c, np.zeros((3, 2), np.float32))


def test_reference_and_flops():
    a, b = _inputs(3, 4, 5)
    np.testing.assert_allclose(matmul_reference(a, b), a @ b)
    assert matmul_flops(3, 5, 4) == 120


def test_errors_say_what_was_expected():
    a, b = _inputs(4, 3, 2)
    with pytest.raises(TypeError, match="float32"):
        matmul(a.astype(np.float64), b)
    with pytest.raises(LaunchError, match="2-D"):
        matmul(a.ravel(), b)
    with pytest.raises(LaunchError, match=r"inner dimensions differ.*\(3 != 2\)"):
        matmul(a, b.T.copy())
    with pytest.raises(LaunchError, match=r"out must have shape \(M, N\) = \(4, 2\)"):
        matmul(a, b, np.zeros((2, 4), np.float32))
    with pytest.raises(TypeError, match="must be an array"):
        matmul([[1.0]], b)
    with pytest.raises(LaunchError, match="unknown matmul kernel 'fast'.*naive, tiled, regtiled"):
        matmul(a, b, kernel="fast")
    with pytest.raises(LaunchError, match="does not know how to launch"):
        launch_config(object(), 4, 4)


def test_launch_configs():
    assert launch_config(matmul_naive_kernel, 17, 33) == ((3, 2), (TILE, TILE))
    assert launch_config(matmul_tiled_kernel, 16, 16) == ((1, 1), (TILE, TILE))
    blocks, threads = launch_config(matmul_regtiled_kernel, 65, 64)
    assert blocks == (1, 2) and threads[0] * threads[1] == 256


def _trace(kernel, M, K, N):
    a, b = _inputs(M, K, N, seed=1)
    c = np.zeros((M, N), np.float32)
    blocks, threads = launch_config(kernel, M, N)
    log = trace(kernel, blocks, threads, a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-4, atol=1e-4)
    return log


def test_naive_reads_each_a_element_n_times():
    M, K, N = 16, 8, 32
    log = _trace(matmul_naive_kernel, M, K, N)
    assert (log.per_element("A") == N).all()  # every thread in row i reads all of row i of A
    assert (log.per_element("B") == M).all()
    assert log.reads() == 2 * M * N * K  # 2K loads per output element
    assert (log.per_element("C", "w") == 1).all()


def test_tiled_reads_each_a_element_n_over_tile_times():
    M, K, N = TILE, TILE, 2 * TILE
    log = _trace(matmul_tiled_kernel, M, K, N)
    assert (log.per_element("A") == N // TILE).all()  # once per block along the columns of C
    assert (log.per_element("B") == M // TILE).all()
    # each thread loads one element of A and one of B per tile: 2K/TILE loads per output, naive needs 2K
    assert log.reads() / (M * N) == 2 * K / TILE
    assert (log.per_element("C", "w") == 1).all()


def test_regtiled_reads_each_a_element_once_per_block_column():
    M, K, N = 8, 20, BN + 4
    log = _trace(matmul_regtiled_kernel, M, K, N)
    assert (log.per_element("A") == 2).all()  # two blocks along N, each reads all of A once
    assert (log.per_element("B") == 1).all()  # one block along M


def test_benchmark_ladder_rows():
    rows = benchmark_ladder(8, 8, 8, repeat=1, kernels=["naive", "regtiled"])
    reference = "cuBLAS" if gpulab.is_gpu() else "NumPy"
    assert [r["kernel"] for r in rows] == ["naive", "regtiled", reference]
    for r in rows:
        assert r["seconds"] > 0 and r["gflops"] > 0 and r["mode"] == gpulab.mode() and r["reference"] == reference
    assert rows[-1]["percent_of_reference"] == pytest.approx(100.0)


def test_disable_tf32_sets_cupy_env_before_import(monkeypatch):
    import sys

    monkeypatch.delitem(sys.modules, "cupy", raising=False)
    monkeypatch.setenv("CUPY_TF32", "1")
    monkeypatch.delenv("NVIDIA_TF32_OVERRIDE", raising=False)
    assert disable_tf32() is True
    import os

    assert os.environ["CUPY_TF32"] == "0"
    # not the process-wide NVIDIA_TF32_OVERRIDE: it would also turn TF32 off for every later measurement of TF32
    assert "NVIDIA_TF32_OVERRIDE" not in os.environ


def test_disable_tf32_after_cupy_was_imported_with_tf32_on():
    """CuPy reads CUPY_TF32 at its first float32 product; disable_tf32 sets the compute type itself, so that a
    notebook that imported CuPy with CUPY_TF32=1 (or already ran a TF32 product) need not restart. Real CuPy, no GPU
    needed: the setting is host-side; run in a subprocess so that this process's CuPy state is left alone."""
    import subprocess
    import sys

    pytest.importorskip("cupy._core._routines_linalg", reason="needs the real CuPy (the gpu extra)")
    code = (
        "import os; os.environ['CUPY_TF32'] = '1'\n"
        "import numpy as np, cupy\n"
        "from cupy._core import _routines_linalg as L\n"
        "try:\n"
        "    before = L.get_compute_type(np.float32)  # a GPU of compute capability >= 8.0: TF32\n"
        "except Exception:\n"
        "    before = 'asked the GPU'  # no GPU: CUPY_TF32=1 took the TF32 branch, which asks the device\n"
        "assert before != L.COMPUTE_TYPE_DEFAULT, before\n"
        "import gpulab\n"
        "from gpulab.kernels.matmul import disable_tf32\n"
        "assert disable_tf32() is True\n"
        "assert L.get_compute_type(np.float32) == L.COMPUTE_TYPE_DEFAULT, L.get_compute_type(np.float32)\n"
        "assert L.get_compute_type(np.float64) == L.COMPUTE_TYPE_DEFAULT\n"
        "print('ok')\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and r.stdout.strip().endswith("ok"), r.stderr[-2000:]
