"""gpulab.kernels.cooperative: a simulated kernel's threads run in turn, with barriers kept, give the same
results as Numba's simulator (a Python thread per CUDA thread) at a fraction of the cost per thread."""

import numpy as np
import pytest
from numba import cuda, float32

import gpulab
from gpulab import capstone, nn
from gpulab.kernels import cooperative
from gpulab.kernels import nn_ops as k
from gpulab.simulator.in_turn import plan

pytestmark = pytest.mark.skipif(not gpulab.is_simulator(), reason="the cooperative launch is for simulator mode")

TILE = 4


@cuda.jit
def matmul_tiled_kernel(A, B, C):  # lab 04's tiled matmul: one thread per output, two barriers per tile
    sA = cuda.shared.array((TILE, TILE), float32)
    sB = cuda.shared.array((TILE, TILE), float32)
    tx = cuda.threadIdx.x
    ty = cuda.threadIdx.y
    j, i = cuda.grid(2)
    acc = float32(0.0)
    for t in range((A.shape[1] + TILE - 1) // TILE):
        k0 = t * TILE
        sA[ty, tx] = A[i, k0 + tx] if i < A.shape[0] and k0 + tx < A.shape[1] else float32(0.0)
        sB[ty, tx] = B[k0 + ty, j] if k0 + ty < B.shape[0] and j < B.shape[1] else float32(0.0)
        cuda.syncthreads()  # wait until both tiles are loaded
        for kk in range(TILE):
            acc += sA[ty, kk] * sB[kk, tx]
        cuda.syncthreads()  # wait until every thread used the tiles before they are overwritten
    if i < C.shape[0] and j < C.shape[1]:
        C[i, j] = acc


@cuda.jit
def matmul_naive_kernel(A, B, C):  # lab 03's: no barrier, runs each thread to its end
    j, i = cuda.grid(2)
    if i < C.shape[0] and j < C.shape[1]:
        acc = float32(0.0)
        for kk in range(A.shape[1]):
            acc += A[i, kk] * B[kk, j]
        C[i, j] = acc


@cuda.jit
def block_reverse_kernel(x, out):  # every thread reads what another wrote: wrong without the barrier
    buf = cuda.shared.array(8, float32)
    tx = cuda.threadIdx.x
    i = cuda.grid(1)
    buf[tx] = x[i]
    cuda.syncthreads()  # wait until the block's chunk is in buf
    out[i] = buf[7 - tx]


@pytest.mark.parametrize("kernel", [matmul_tiled_kernel, matmul_naive_kernel], ids=["tiled", "naive"])
@pytest.mark.parametrize("shape", [(1, 1, 1), (5, 7, 3), (9, 13, 6)])
def test_same_result_as_the_threaded_simulator(kernel, shape):
    m, kk, n = shape
    rng = np.random.default_rng(0)
    a, b = rng.random((m, kk), dtype=np.float32), rng.random((kk, n), dtype=np.float32)
    grid = ((n + TILE - 1) // TILE, (m + TILE - 1) // TILE)
    c1, c2 = np.full((m, n), np.nan, np.float32), np.full((m, n), np.nan, np.float32)
    kernel[grid, (TILE, TILE)](a, b, c1)
    cooperative.launch(kernel, grid, (TILE, TILE), a, b, c2)
    np.testing.assert_array_equal(c2, c1)
    np.testing.assert_allclose(c2, a.astype(np.float64) @ b, rtol=1e-5, atol=1e-6)


def test_barriers_hold_every_thread_of_the_block():
    x = np.arange(24, dtype=np.float32)
    out = np.zeros_like(x)
    cooperative.launch(block_reverse_kernel, 3, 8, x, out)
    np.testing.assert_array_equal(out, x.reshape(3, 8)[:, ::-1].ravel())


def test_a_closure_runs_in_turn_unless_it_has_a_barrier():
    scale = np.float32(2.0)

    @cuda.jit
    def scale_kernel(x, y):
        i = cuda.grid(1)
        if i < y.size:
            y[i] = x[i] * scale

    assert plan(scale_kernel.py_func) == (scale_kernel.py_func, False)  # no barrier: a closure runs in turn too
    x = np.arange(5, dtype=np.float32)
    y = np.zeros_like(x)
    cooperative.launch(scale_kernel, 1, 8, x, y)
    np.testing.assert_array_equal(y, 2 * x)

    width = 8

    @cuda.jit
    def reverse_closure(x, out):  # its source cannot be recompiled with `width` bound: Numba's threads
        buf = cuda.shared.array(8, float32)
        i = cuda.grid(1)
        buf[cuda.threadIdx.x] = x[i]
        cuda.syncthreads()
        out[i] = buf[width - 1 - cuda.threadIdx.x]

    assert plan(reverse_closure.py_func) is None
    out = np.zeros(16, dtype=np.float32)
    cooperative.launch(reverse_closure, 2, 8, np.arange(16, dtype=np.float32), out)
    np.testing.assert_array_equal(out, np.arange(16, dtype=np.float32).reshape(2, 8)[:, ::-1].ravel())


def test_blocks_in_turn_cost_a_fraction_of_a_python_thread_per_cuda_thread():
    """A block with a barrier: Numba's threads against the simulator's and the cooperative launch's in turn
    (measured 2026-12-01, 2 cores: 0.4 ms, 11 us and 4 us per CUDA thread)."""
    cost = cooperative.per_thread_seconds(1024)
    assert cost["simulator"] < cost["threads"] / 5, cost
    assert cost["cooperative"] < cost["threads"] / 5, cost


def test_capstone_trains_with_a_tiled_matmul_like_numpy():
    cap = capstone.Capstone()
    res = cap.register("matmul", matmul_tiled_kernel, block=(TILE, TILE))
    assert res.passed, str(res)
    assert cap.blocks == {"matmul": (TILE, TILE)}
    assert not cap.register("matmul", matmul_tiled_kernel).passed  # launched grid-stride style it misses outputs
    assert "matmul" not in cap.blocks and "matmul" not in cap.kernels
    with pytest.raises(capstone.CapstoneError, match="block="):
        cap.problem("relu", k.relu_kernel, block=(TILE, TILE))
    cap.register("matmul", matmul_tiled_kernel, block=(TILE, TILE))
    rng = np.random.default_rng(0)
    x, y = rng.random((3, 1, 8, 8), dtype=np.float32), np.array([1, 2, 3])
    weights = {}
    for name in ("numpy", "learner"):
        model = nn.mnist_cnn(
            image_size=8, channels=(2, 3), hidden=8, dropout=0.0, backend="numpy" if name == "numpy" else "kernels"
        )
        if name == "learner":
            ops = cap.ops(require_all=False)
            model.use_ops(ops)
        nn.train_step(model, nn.SoftmaxCrossEntropy(), nn.Adam(model, lr=1e-2), x, y)
        weights[name] = {n: np.asarray(p).copy() for n, p, _ in model.parameters()}
    assert ops.calls["matmul"] >= 5  # forward and both backward GEMMs of each layer
    for n in weights["numpy"]:
        np.testing.assert_allclose(weights["learner"][n], weights["numpy"][n], rtol=1e-4, atol=1e-5, err_msg=n)
