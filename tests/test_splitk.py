"""Split-K matmul (gpulab.kernels.splitk): the kernel against NumPy (in the simulator, or on a GPU in gpu-check), the
plan the kernels backend's gemm follows on a GPU (an H200's 132 SMs mocked), its PTX, and the simulator path of gemm
left as it was. On a GPU, gemm at the CNN's batch-128 shapes against cuBLAS."""

from __future__ import annotations

import numpy as np
import pytest

from gpulab import kernels, ptx, runtime
from gpulab.exercises.precision import float64_literal_accumulators
from gpulab.kernels import nn_ops, splitk
from gpulab.kernels._launch import LaunchError
from gpulab.kernels.matmul import TILE
from gpulab.kernels.splitk import GemmPlan, matmul_splitk, plan

F32 = np.float32
H200_SMS = 132


def _operands(M: int, K: int, N: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return rng.standard_normal((M, K)).astype(F32), rng.standard_normal((K, N)).astype(F32)


# (M, K, N, slices): sizes that are not multiples of the 16 x 16 tile; K shorter than slices x TILE (40 = 3 tiles in
# 8 slices: slices 3-7 are empty and must add zeros); K = 1 and K = 0 (C is all zeros); one slice (no partials);
# several column and row tiles with slices of unequal length (7 tiles in 3 slices of 3, 3, 1).
CASES = [(20, 70, 17, 3), (5, 40, 3, 8), (7, 1, 5, 4), (7, 0, 5, 3), (33, 40, 18, 1), (18, 100, 33, 3)]


@pytest.mark.parametrize(("M", "K", "N", "slices"), CASES, ids=str)
def test_splitk_matches_numpy_in_the_simulator(M, K, N, slices):
    a, b = _operands(M, K, N, seed=M * K + N)
    c = matmul_splitk(runtime.to_device(a), runtime.to_device(b), slices)
    want = a.astype(np.float64) @ b.astype(np.float64)
    assert c.shape == (M, N) and c.dtype == F32
    np.testing.assert_allclose(runtime.to_host(c), want, rtol=1e-5, atol=1e-5 * max(1.0, np.sqrt(K)))


def test_splitk_writes_the_given_out_and_refuses_wrong_arguments():
    a_h, b_h = _operands(9, 50, 6)
    a, b = runtime.to_device(a_h), runtime.to_device(b_h)
    out = runtime.xp().full((9, 6), np.nan, dtype=F32)
    assert matmul_splitk(a, b, 2, out=out) is out
    np.testing.assert_allclose(runtime.to_host(out), a_h @ b_h, rtol=1e-5, atol=1e-4)
    with pytest.raises(LaunchError, match="out must have shape"):
        matmul_splitk(a, b, 2, out=runtime.xp().empty((6, 9), dtype=F32))
    with pytest.raises(LaunchError, match="slices"):
        matmul_splitk(a, b, 0)
    with pytest.raises(LaunchError, match="a.shape\\[1\\] == b.shape\\[0\\]"):
        matmul_splitk(a, runtime.to_device(b_h.T.copy()), 2)


@pytest.mark.parametrize(
    ("M", "K", "N", "slices", "grid"),
    [
        (32, 100_352, 9, 262, (1, 2, 262)),  # conv1's weight gradient at batch 128: 6,272 K tiles, 24 a slice
        (64, 25_088, 288, 8, (18, 4, 8)),  # conv2's: 1,568 K tiles, 196 a slice
        (128, 3_136, 128, 9, (8, 8, 9)),  # the dense layer's forward: 196 K tiles, 22 a slice
    ],
    ids=str,
)
def test_the_h200s_small_outputs_with_long_k_are_split_to_fill_it(M, K, N, slices, grid):
    """Before: one or two blocks (the register-tiled kernel's 64 x 64 tiles) walked all of K on 132 SMs."""
    p = plan(M, N, K, sms=H200_SMS)
    assert p == GemmPlan("splitk", slices, grid)
    blocks = grid[0] * grid[1] * grid[2]
    assert 2 * H200_SMS <= blocks <= 2 * splitk.WAVES * H200_SMS  # the GPU filled a few times over
    k_tiles = -(-K // TILE)
    per = -(-k_tiles // slices)
    assert per >= splitk.MIN_SLICE_TILES and (slices - 1) * per < k_tiles  # long slices, none empty


@pytest.mark.parametrize("size", [1024, 4096], ids=str)
def test_large_square_products_keep_the_register_tiled_kernel(size):
    assert plan(size, size, size, sms=H200_SMS) == GemmPlan("regtiled", 1, (size // 64, size // 64, 1))


def test_without_a_split_the_grid_decides_between_tiled_and_register_tiled():
    # K too short to split (3 tiles), 4 register-tiled blocks on 132 SMs: the 16 x 16 tiled kernel's 64 blocks
    assert plan(128, 128, 48, sms=H200_SMS) == GemmPlan("tiled", 1, (8, 8, 1))
    # 1,024 tiles of 16 x 16 fill the GPU without a split; 64 register-tiled blocks would not
    assert plan(512, 512, 512, sms=H200_SMS) == GemmPlan("tiled", 1, (32, 32, 1))
    # a big output with a long K is never split
    assert plan(100_352, 32, 1_024, sms=H200_SMS).kernel == "regtiled"
    # an empty output launches nothing worth splitting
    assert plan(0, 9, 100_352, sms=H200_SMS).kernel != "splitk"


def test_sm_count_reads_the_device_once_and_falls_back(monkeypatch):
    class Device:
        MULTIPROCESSOR_COUNT = H200_SMS

    calls = []

    def fake_device():
        calls.append(1)
        return Device()

    monkeypatch.setattr(splitk.cuda, "get_current_device", fake_device)
    splitk.sm_count.cache_clear()
    try:
        assert splitk.sm_count() == splitk.sm_count() == H200_SMS and len(calls) == 1
        splitk.sm_count.cache_clear()
        monkeypatch.setattr(splitk.cuda, "get_current_device", lambda: object())  # no attribute: the simulator's
        assert splitk.sm_count() == splitk.FALLBACK_SMS
    finally:
        splitk.sm_count.cache_clear()


@pytest.mark.skipif(not runtime.is_simulator(), reason="the simulator's path")
def test_gemm_in_the_simulator_does_not_take_the_gpu_path(monkeypatch):
    """gemm's simulator path (grid-stride gemm_kernel, few threads) stays as it was: CI's speed depends on it."""

    def refuse(*args, **kwargs):
        raise AssertionError("the simulator's gemm called the GPU's matmul_auto")

    monkeypatch.setattr(splitk, "matmul_auto", refuse)
    a, b = _operands(9, 300, 5)
    np.testing.assert_allclose(nn_ops.gemm(a, b), a @ b, rtol=1e-5, atol=1e-4)


def test_the_splitk_kernel_is_in_the_ptx_tier_and_computes_in_float32():
    names = [name for name, _, _ in kernels.all_ptx_signatures()]
    assert "splitk.matmul_splitk_kernel" in names
    assert float64_literal_accumulators(splitk.matmul_splitk_kernel) == []


@pytest.mark.ptx
def test_the_splitk_kernel_compiles_for_a_gpu_without_float64():
    texts = ptx.kernels_ptx(splitk.PTX_SIGNATURES, cc=(9, 0))
    (text,) = texts.values()
    assert ".entry" in text and not [ln for ln in text.splitlines() if ".f64" in ln]


@pytest.mark.skipif(not runtime.is_gpu(), reason="needs a GPU: full-size products, minutes in the simulator")
@pytest.mark.parametrize(("M", "K", "N"), [(32, 100_352, 9), (64, 25_088, 288), (128, 3_136, 128)], ids=str)
def test_gemm_on_a_gpu_matches_cublas_at_the_cnns_shapes(M, K, N):
    """gemm's plan on this GPU (split-K on an H200), against CuPy's float32 product, relative to the sizes."""
    cupy = pytest.importorskip("cupy")
    if getattr(cupy, "EMULATED", False):
        pytest.skip("full-size kernels in the simulator take minutes (tests/gpu_emulation/checks_splitk.py)")
    a_h, b_h = _operands(M, K, N)
    a, b = runtime.to_device(a_h), runtime.to_device(b_h)
    got = runtime.to_host(nn_ops.gemm(a, b))
    want = a_h.astype(np.float64) @ b_h.astype(np.float64)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * np.sqrt(K))
