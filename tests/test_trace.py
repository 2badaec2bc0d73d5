import numpy as np
import pytest
from numba import cuda, float32

from gpulab.kernels import add_kernel
from gpulab.trace import trace

TPB = 8


@cuda.jit
def _strided_read(a, out, stride):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = a[i * stride]


@cuda.jit
def _tiled_matmul(A, B, C):
    sA = cuda.shared.array((TPB, TPB), float32)
    sB = cuda.shared.array((TPB, TPB), float32)
    x, y = cuda.grid(2)
    tx, ty = cuda.threadIdx.x, cuda.threadIdx.y
    acc = float32(0.0)
    for t in range((A.shape[1] + TPB - 1) // TPB):
        sA[ty, tx] = 0
        sB[ty, tx] = 0
        if y < A.shape[0] and t * TPB + tx < A.shape[1]:
            sA[ty, tx] = A[y, t * TPB + tx]
        if x < B.shape[1] and t * TPB + ty < B.shape[0]:
            sB[ty, tx] = B[t * TPB + ty, x]
        cuda.syncthreads()  # wait until the whole tile is loaded
        for k in range(TPB):
            acc += sA[ty, k] * sB[k, tx]
        cuda.syncthreads()  # wait until everyone is done with the tile before overwriting it
    if y < C.shape[0] and x < C.shape[1]:
        C[y, x] = acc


def test_counts_reads_writes_and_result_is_written():
    a = np.arange(100, dtype=np.float32)
    out = np.zeros_like(a)
    log = trace(add_kernel, 4, 32, a, a, out)
    np.testing.assert_array_equal(out, 2 * a)
    assert log.reads("a") == 100 and log.reads("b") == 100 and log.writes("out") == 100
    per_thread = log.per_thread("r")
    assert len(per_thread) == 128  # idle threads are listed with 0
    assert sorted(set(per_thread.values())) == [0, 2]
    assert log.bytes_moved() == 300 * 4
    assert log.warp_addresses("a", (0, 0, 0), 0)[5] == [5]


def test_coalesced_vs_strided_transactions():
    a = np.arange(32 * 32, dtype=np.float32)
    out = np.zeros(32, np.float32)
    coalesced = trace(_strided_read, 1, 32, a, out, 1).transactions("a")
    strided = trace(_strided_read, 1, 32, a, out, 32).transactions("a")
    assert coalesced == 4  # 32 floats = 128 bytes = four 32-byte sectors
    assert strided == 32


def test_tiled_matmul_reads_each_input_n_over_tile_times():
    n = 16
    rng = np.random.default_rng(0)
    A, B = rng.random((n, n), np.float32), rng.random((n, n), np.float32)
    C = np.zeros((n, n), np.float32)
    log = trace(_tiled_matmul, (2, 2), (TPB, TPB), A, B, C)
    np.testing.assert_allclose(C, A @ B, rtol=1e-5)
    assert log.per_element("A").max() == n // TPB
    assert log.reads("A") == n * n * (n // TPB)
    assert log.per_element("C", "w").min() == 1


def test_trace_checks_launch():
    from gpulab.kernels import LaunchError

    a = np.zeros(4, np.float32)
    with pytest.raises(LaunchError):
        trace(add_kernel, 1, 2048, a, a, a)


def test_trace_runs_in_the_simulator_in_gpu_mode_too():
    """Notebooks 02, 05 and 07 trace kernels in both modes: in gpu mode (here compile-only, no GPU
    needed) trace runs the kernel's Python source in the simulator, shared memory included."""
    import os
    import subprocess
    import sys
    import textwrap

    code = textwrap.dedent("""
        import numpy as np
        import gpulab
        from gpulab import kernels
        from gpulab.trace import trace
        assert gpulab.mode() == "gpu"
        xs, partials = np.ones(512, np.float32), np.zeros(2, np.float32)
        log = trace(kernels.sum_tree_kernel, 2, 256, xs, partials, names=("x", "partials"))
        assert partials.tolist() == [256.0, 256.0] and log.writes("partials") == 2 and log.reads("x") == 512
        T = kernels.memory.TILE
        a = np.arange(T * T, dtype=np.float32).reshape(T, T)
        out = np.zeros_like(a)
        tiled = trace(kernels.transpose_tiled_kernel, (1, 1), (T, T), a, out, names=("a", "out"))
        assert np.array_equal(out, a.T) and tiled.writes("out") == T * T
        try:
            trace(kernels.add, 1, 4, a, a, a)
        except TypeError as e:
            assert "@cuda.jit kernel" in str(e)
        else:
            raise AssertionError("a launcher function was accepted")
        print("ok")
    """)
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    env.update(GPULAB_DEVICE="gpu", GPULAB_COMPILE_ONLY="1")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip().endswith("ok")
