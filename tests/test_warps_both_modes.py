"""What warp functions return where CUDA defines it, with the same expectations in both modes: in simulator mode
this checks gpulab.simulator.warps, and on a GPU (make gpu-check's tests stage) the hardware checks the simulator's
rules. Undefined results (reads from lanes that took no part) and the simulator's errors are in
tests/test_simulator_warps.py, which only the simulator can run."""

from __future__ import annotations

import numpy as np
import pytest
from numba import cuda, float32

from gpulab import runtime

FULL = 0xFFFFFFFF


@cuda.jit
def shuffles_kernel(x, out, d):  # out[k, lane] for shfl_down, shfl_up, shfl_xor, shfl_sync by d
    i = cuda.grid(1)
    v = x[i]
    out[0, i] = cuda.shfl_down_sync(FULL, v, d)
    out[1, i] = cuda.shfl_up_sync(FULL, v, d)
    out[2, i] = cuda.shfl_xor_sync(FULL, v, d)
    out[3, i] = cuda.shfl_sync(FULL, v, d)


@cuda.jit
def votes_kernel(x, out):  # ballot, any, all, eq, match_any, match_all (mask, pred), lanemask_lt, popc(ballot)
    i = cuda.grid(1)
    p = x[i] > 0
    b = cuda.ballot_sync(FULL, p)
    out[i, 0] = b
    out[i, 1] = cuda.any_sync(FULL, p)
    out[i, 2] = cuda.all_sync(FULL, p)
    out[i, 3] = cuda.eq_sync(FULL, p)
    out[i, 4] = cuda.match_any_sync(FULL, x[i])
    m, same = cuda.match_all_sync(FULL, x[i])
    out[i, 5] = m
    out[i, 6] = same
    out[i, 7] = cuda.lanemask_lt()
    out[i, 8] = cuda.popc(b)


@cuda.jit
def active_kernel(n, out):  # activemask inside a branch: the lanes that took it
    i = cuda.grid(1)
    if i < n:
        out[i] = cuda.activemask()


@cuda.jit
def block_sum_kernel(x, partial):  # a two-stage block sum with shuffles (lesson 05's pattern), 128 threads
    warp_sums = cuda.shared.array(32, float32)
    tx = cuda.threadIdx.x
    lane = tx % 32
    i = cuda.grid(1)
    v = x[i] if i < x.size else float32(0)
    for off in (16, 8, 4, 2, 1):
        v += cuda.shfl_down_sync(FULL, v, off)
    if lane == 0:
        warp_sums[tx // 32] = v
    cuda.syncthreads()
    if tx < 32:
        v = warp_sums[lane] if lane < 4 else float32(0)
        for off in (16, 8, 4, 2, 1):
            v += cuda.shfl_xor_sync(FULL, v, off)
        if lane == 0:
            partial[cuda.blockIdx.x] = v


@pytest.mark.parametrize("d", [1, 5, 16, 31])
def test_shuffles_read_the_lane_cuda_defines(d):
    x = np.arange(64, dtype=np.int32) * 3
    out = np.zeros((4, 64), np.int32)
    shuffles_kernel[1, 64](x, out, d)
    lane = np.arange(64) % 32
    base = np.arange(64) - lane
    down = np.where(lane + d < 32, base + lane + d, base + lane)  # past lane 31: the lane's own value
    up = np.where(lane - d >= 0, base + lane - d, base + lane)
    np.testing.assert_array_equal(out[0], x[down])
    np.testing.assert_array_equal(out[1], x[up])
    np.testing.assert_array_equal(out[2], x[base + (lane ^ d)])
    np.testing.assert_array_equal(out[3], x[base + d])


def test_votes_and_matches_have_numbas_types_and_cudas_values():
    x = np.array([(lane % 3 == 0) * 1 for lane in range(32)], np.int32)
    x[31] = 1  # lane 31's bit: the int32 mask is negative
    out = np.zeros((32, 9), np.int64)
    votes_kernel[1, 32](x, out)
    ballot = sum(1 << k for k in range(32) if x[k] > 0)
    assert (out[:, 0] == np.array(ballot, np.uint32).view(np.int32)).all()  # int32, as numba types ballot_sync
    assert (out[:, 1] == 1).all() and (out[:, 2] == 0).all() and (out[:, 3] == 0).all()
    for k in range(32):
        same = sum(1 << j for j in range(32) if x[j] == x[k])
        assert out[k, 4] == np.array(same, np.uint32).view(np.int32)
        assert out[k, 7] == (1 << k) - 1  # uint32 lanemask_lt
    assert (out[:, 5] == 0).all() and (out[:, 6] == 0).all()
    assert (out[:, 8] == bin(ballot).count("1")).all()  # popc counts the 32 bits, also of a negative int32


def test_match_all_when_every_lane_agrees_gives_the_whole_mask_as_int32():
    out = np.zeros((32, 9), np.int64)
    votes_kernel[1, 32](np.full(32, 7, np.int32), out)
    assert (out[:, 5] == -1).all() and (out[:, 6] == 1).all() and (out[:, 3] == 1).all()


def test_activemask_in_a_branch_names_the_lanes_that_took_it():
    out = np.zeros(32, np.int64)
    active_kernel[1, 32](20, out)
    lanes = np.arange(20)
    assert not out[20:].any()  # lanes that skipped the branch wrote nothing
    # What CUDA guarantees: each lane in the branch sees its own bit, and no lane that skipped the branch.
    assert ((out[:20] >> lanes) & 1 == 1).all() and not (out[:20] >> 20).any()
    if runtime.is_simulator():
        # The simulator's rule: every lane of the branch. A GPU usually agrees, but CUDA does not promise that the
        # lanes of a branch run __activemask() together (independent thread scheduling, Volta and later).
        assert (out[:20] == (1 << 20) - 1).all()


def test_a_two_stage_block_sum_with_shuffles():
    rng = np.random.default_rng(5)
    x = rng.integers(-8, 8, 1000).astype(np.float32)  # small integers: every order of addition is exact
    partial = np.zeros(8, np.float32)
    block_sum_kernel[8, 128](x, partial)
    np.testing.assert_array_equal(partial, np.add.reduceat(np.r_[x, np.zeros(24, np.float32)], np.arange(0, 1024, 128)))


@pytest.mark.ptx
def test_the_kernels_compile_to_ptx():
    from gpulab import ptx
    from gpulab.source import py_func, standalone_source

    sigs = {
        shuffles_kernel: "void(int32[:], int32[:, :], int32)",
        votes_kernel: "void(int32[:], int64[:, :])",
        active_kernel: "void(int32, int64[:])",
        block_sum_kernel: "void(float32[:], float32[:])",
    }
    items = {
        py_func(k).__name__: {"source": standalone_source(k), "name": py_func(k).__name__, "signature": sig}
        for k, sig in sigs.items()
    }
    assert ptx.compile_sources(items, cc=(7, 5)) == dict.fromkeys(items, "ok")
