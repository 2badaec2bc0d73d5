import numpy as np
import pytest
from numba import cuda, float32

from gpulab.errors import UsageError
from gpulab.kernels import add_kernel, sum_tree_kernel, sum_warp_kernel
from gpulab.trace import trace

TPB = 8


@cuda.jit
def _strided_read(a, out, stride):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = a[i * stride]


@cuda.jit
def _copy_2d(x, out):
    j, i = cuda.grid(2)  # x along the columns: neighbouring lanes, neighbouring elements of a row
    if i < out.shape[0] and j < out.shape[1]:
        out[i, j] = x[i, j]


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


def test_coalescing_ideal_is_per_row_of_the_warp_and_strides_cost():
    a = np.arange(32 * 32, dtype=np.float32)
    out = np.zeros(32, np.float32)
    assert trace(_strided_read, 1, 32, a, out, 1).coalescing("a") == (4.0, 4.0)
    assert trace(_strided_read, 1, 32, a, out, 32).coalescing("a") == (32.0, 4.0)  # 8x the traffic
    # 16 x 8 blocks over 80 columns: a warp's two thread rows lie 320 bytes apart, 16 float32 (2 sectors) each
    x = np.ones((8, 80), np.float32)
    assert trace(_copy_2d, (5, 1), (16, 8), x, np.zeros_like(x), names=("x", "out")).coalescing("x") == (4.0, 4.0)


def test_coalescing_ideal_merges_rows_next_to_each_other_in_memory():
    # 16 x 8 blocks over 9 columns (lesson 07's im2col of a 3 x 3 window): a warp's two thread rows write
    # 2 x 9 float32 that follow each other in memory, 72 bytes, 3 sectors. Counted row by row (2 + 2), the ideal
    # was 4, above the 3 actually touched: "0.75x the memory traffic" of an ideal the kernel beat.
    x = np.ones((16, 9), np.float32)
    log = trace(_copy_2d, (1, 2), (16, 8), x, np.zeros_like(x), names=("x", "out"))
    assert log.coalescing("out", "w") == (3.0, 3.0) and log.coalescing("x") == (3.0, 3.0)


@pytest.mark.parametrize("cols", [1, 3, 5, 9, 15, 17, 20, 33])
def test_coalescing_ideal_never_exceeds_the_sectors_touched(cols):
    x = np.ones((12, cols), np.float32)
    log = trace(_copy_2d, (3, 2), (16, 8), x, np.zeros_like(x), names=("x", "out"))
    t = np.ones((cols, 12), np.float32).T  # a transposed view: a thread row's elements lie a row of t apart
    view_log = trace(_copy_2d, (3, 2), (16, 8), t, np.zeros((12, cols), np.float32), names=("x", "out"))
    for lg, arr, kind in ((log, "x", "r"), (log, "out", "w"), (view_log, "x", "r")):
        actual, ideal = lg.coalescing(arr, kind)
        assert 0 < ideal <= actual, (cols, arr, kind, actual, ideal)
    assert view_log.coalescing("x")[0] > log.coalescing("x")[0] or cols == 1  # the view's rows are strided


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
    needed) trace runs the kernel's Python source in the simulator, shared memory and warp shuffles included."""
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
        p_warp = np.zeros(2, np.float32)
        warp = trace(kernels.sum_warp_kernel, 2, 256, xs, p_warp, names=("x", "partials"), shared=True)
        assert p_warp.tolist() == [256.0, 256.0] and warp.max_barriers() == 1 and warp.shared_writes() == 16
        assert warp.warp_ops["shfl_down_sync"] == 2 * (256 + 32) * 5
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


def test_on_chip_counts_of_a_tree_and_a_warp_shuffle_block_sum():
    """Barriers per thread, shared-memory accesses and warp calls of one launch (lesson 05's measure step)."""
    x = np.ones(512, np.float32)
    p_tree, p_warp = np.zeros(2, np.float32), np.zeros(2, np.float32)
    tree = trace(sum_tree_kernel, 2, 256, x, p_tree, names=("x", "partials"), shared=True)
    warp = trace(sum_warp_kernel, 2, 256, x, p_warp, names=("x", "partials"), shared=True)
    assert p_tree.tolist() == p_warp.tolist() == [256, 256]
    assert len(tree.barriers) == len(warp.barriers) == 512  # every thread of both blocks
    assert set(tree.barriers.values()) == {9} and set(warp.barriers.values()) == {1}  # 1 + log2(256), and 1
    assert tree.max_barriers() == 9 and warp.max_barriers() == 1
    # tree, per block: 256 loads + 255 sums written; 2 reads per sum + thread 0's read of cache[0]
    assert tree.shared_writes("cache") == tree.shared_writes() == 2 * 511
    assert tree.shared_reads("cache") == 2 * 511 and tree.shared_reads("warp_sums") == 0
    # shuffles, per block: lane 0 of each of the 8 warps writes its sum, warp 0's first 8 lanes read them
    assert warp.shared_writes("warp_sums") == warp.shared_reads("warp_sums") == 2 * 8
    assert warp.warp_ops["shfl_down_sync"] == 2 * (256 + 32) * 5  # per lane: 5 in every warp, 5 more in warp 0
    assert not tree.warp_ops
    assert tree.reads("x") == warp.reads("x") == 512  # the global counts are unchanged


def test_shared_counts_need_shared_true():
    a, b = np.ones(40, np.float32), np.ones(40, np.float32)
    out = np.zeros(40, np.float32)
    log = trace(add_kernel, 2, 32, a, b, out)
    assert log.max_barriers() == 0 and not log.warp_ops
    with pytest.raises(UsageError, match="shared=True"):
        log.shared_reads()


# --- atomics: how many, and how many lanes of a warp hit one address at once ------------------------------


@cuda.jit
def _two_atomics_per_lane(hist, where):
    tx = cuda.threadIdx.x
    cuda.atomic.add(hist, where[tx], 1)  # first instruction: the lanes' targets from `where`
    cuda.atomic.add(hist, 0, 1)  # second instruction: every lane on element 0


def test_atomics_and_the_worst_same_address_conflict_per_warp():
    from gpulab.kernels import histogram_global_kernel

    values = np.full(96, 3, np.int32)  # 3 warps of one block, every value in bin 3
    hist = np.zeros(8, np.int32)
    log = trace(histogram_global_kernel, 1, 96, values, hist)
    assert hist[3] == 96 and log.atomics("hist") == 96 and log.atomics() == 96
    assert log.atomic_conflicts("hist") == 32  # a whole warp on one address
    assert log.max_atomics_per_thread() == 1 and log.writes("hist") == 96  # atomics are writes as well
    spread = np.arange(96, dtype=np.int32) % 8
    log = trace(histogram_global_kernel, 1, 96, spread, np.zeros(8, np.int32))
    assert log.atomic_conflicts("hist") == 4  # 32 lanes over 8 bins
    assert trace(add_kernel, 1, 8, *[np.ones(8, np.float32)] * 3).atomic_conflicts() == 0  # no atomics at all


def test_conflicts_group_each_lanes_kth_atomic_and_blocks_apart():
    hist = np.zeros(64, np.int32)
    where = np.arange(32, dtype=np.int32) + 32  # first atomic: 32 different elements
    log = trace(_two_atomics_per_lane, 2, 32, hist, where)
    assert log.atomics("hist") == 128 and log.max_atomics_per_thread("hist") == 2
    assert log.atomic_conflicts("hist") == 32  # the second instruction, within one block (not 64 over both)
    hist[:] = 0
    log = trace(_two_atomics_per_lane, 1, 16, hist, where)  # a partial warp: 16 lanes
    assert log.atomic_conflicts() == 16


def test_shared_atomics_are_counted_on_request_only():
    from gpulab.kernels import histogram_shared_kernel

    values = np.full(200, 5, np.int32)
    hist = np.zeros(16, np.int32)
    log = trace(histogram_shared_kernel, 2, 64, values, hist, shared=True)
    assert hist[5] == 200 and hist.sum() == 200
    assert log.atomics("hist") == 2 and log.atomic_conflicts("hist") == 1  # one merge per block
    assert log.atomics(shared=True) == 200 and log.atomic_conflicts("bins", shared=True) == 32
    plain = trace(histogram_shared_kernel, 2, 64, values, np.zeros(16, np.int32))
    with pytest.raises(UsageError, match="shared=True"):
        plain.atomics(shared=True)
