"""The kernels backend's GEMM on a GPU, in emulated gpu mode: the conv layers' weight gradients take split-K.

Collected only by tests/test_gpu_emulated.py (``-p gpu_emulation.plugin``): CuPy arrays go into the launchers as on a
GPU while numba's simulator runs the kernels. The emulated device is a T4 (40 SMs); the H200's shapes are checked
with its 132 SMs mocked and the product itself left to CuPy (a simulated run at batch 128 would take minutes).
"""

from __future__ import annotations

import numpy as np
import pytest

import gpulab
from gpulab import runtime
from gpulab.kernels import nn_ops, splitk
from gpulab.nn.kernel_ops import KernelOps

cupy = pytest.importorskip("cupy")
RNG = np.random.default_rng(0)


def _spy(monkeypatch, run: bool = True) -> list[int]:
    """Record the slices of every split-K product; ``run=False`` computes it with CuPy instead of the kernels."""
    seen: list[int] = []
    real = splitk.matmul_splitk

    def spy(a, b, slices, out=None):
        seen.append(slices)
        return real(a, b, slices, out) if run else a @ b

    monkeypatch.setattr(splitk, "matmul_splitk", spy)
    return seen


def test_the_mode_is_emulated_gpu_on_a_t4():
    assert gpulab.is_gpu() and cupy.EMULATED
    assert splitk.sm_count() == 40


def test_conv1s_weight_gradient_uses_split_k_and_matches_numpy(monkeypatch):
    """conv1 of the course CNN at batch 2: d (2*28*28, 32), cols (2*28*28, 3*3*1), so d.T @ cols is
    (32 x 1,568) @ (1,568 x 9): 2 tiles of C, 98 tiles of K in 20 slices on the T4's 40 SMs."""
    seen = _spy(monkeypatch)
    d_h = RNG.standard_normal((1568, 32)).astype(np.float32)
    cols_h = RNG.standard_normal((1568, 9)).astype(np.float32)
    dw = KernelOps().conv_weight_grad(cupy.asarray(d_h), cupy.asarray(cols_h))
    assert isinstance(dw, cupy.ndarray) and dw.shape == (32, 9)
    assert seen == [splitk.plan(32, 9, 1568).slices] == [20]
    want = d_h.T.astype(np.float64) @ cols_h.astype(np.float64)
    np.testing.assert_allclose(runtime.to_host(dw), want, rtol=1e-4, atol=1e-4 * np.sqrt(1568))


@pytest.mark.parametrize(
    ("d_shape", "cols_shape", "slices"),
    [((100_352, 32), (100_352, 9), 262), ((25_088, 64), (25_088, 288), 8)],
    ids=["conv1", "conv2"],
)
def test_the_h200s_conv_weight_gradients_at_batch_128_take_split_k(monkeypatch, d_shape, cols_shape, slices):
    """Before: the register-tiled kernel, 1 and 5 blocks on 132 SMs (63% and 17.5% of the summed per-op times of a
    training step, make gpu-check on an H200, 2026-12-04)."""
    monkeypatch.setattr(splitk, "sm_count", lambda: 132)
    seen = _spy(monkeypatch, run=False)
    d = cupy.asarray(RNG.standard_normal(d_shape, dtype=np.float32))
    cols = cupy.asarray(RNG.standard_normal(cols_shape, dtype=np.float32))
    dw = KernelOps().conv_weight_grad(d, cols)
    assert seen == [slices] and dw.shape == (d_shape[1], cols_shape[1])


def test_a_product_that_fills_the_gpu_keeps_a_ladder_kernel(monkeypatch):
    seen = _spy(monkeypatch)
    a_h = RNG.standard_normal((40, 24)).astype(np.float32)
    b_h = RNG.standard_normal((24, 20)).astype(np.float32)
    c = nn_ops.gemm(cupy.asarray(a_h), cupy.asarray(b_h))  # K of 2 tiles: never split
    assert seen == [] and isinstance(c, cupy.ndarray)
    np.testing.assert_allclose(runtime.to_host(c), a_h @ b_h, rtol=1e-5, atol=1e-4)


def test_a_learners_kernel_is_launched_as_before(monkeypatch):
    """gemm(kernel=...) (lab 03/04's matmuls, the capstone) never goes through the plan."""
    seen = _spy(monkeypatch)
    from gpulab.kernels.nn_kernels import gemm_kernel

    a_h = RNG.standard_normal((32, 1568)).astype(np.float32)  # a shape the plan would split
    b_h = RNG.standard_normal((1568, 3)).astype(np.float32)
    c = nn_ops.gemm(cupy.asarray(a_h), cupy.asarray(b_h), kernel=gemm_kernel)
    assert seen == []
    np.testing.assert_allclose(runtime.to_host(c), a_h @ b_h, rtol=1e-4, atol=1e-3)


def test_bench_lessons_gemm_shapes_rows_in_gpu_mode():
    """bench lessons' gemm_shapes (lesson 09's recorded GEMM times) on CuPy arrays: each kernel's product checked
    against CuPy's, one row per kernel timed with CUDA events, the reference named cupy; rows fit the schema."""
    from gpulab import results
    from gpulab.bench.gemm_shapes import gemm_shapes_rows

    rows = gemm_shapes_rows([(20, 70, 9)], slices=3, repeat=1)
    assert [r["kernel"] for r in rows] == ["regtiled", "tiled", "splitk", "cupy"]
    assert [r.get("blocks") for r in rows] == [1, 2, 6, None] and all(r["seconds"] > 0 for r in rows)
    results.check_rows("gemm_shapes", rows)
