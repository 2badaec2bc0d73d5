"""Warp functions in the simulator (gpulab.simulator.warps): CUDA's results, and a clear error where a GPU's
result is undefined or it would hang. The same kernels compile to PTX, so they are GPU code as written."""

from __future__ import annotations

import numpy as np
import pytest
from numba import cuda, float32

from gpulab import runtime, simulator
from gpulab.simulator import in_turn, warps
from gpulab.source import py_func

pytestmark = pytest.mark.skipif(not runtime.is_simulator(), reason="the simulator's warp functions")

FULL = 0xFFFFFFFF


@pytest.fixture(autouse=True, params=["in turn", "threads"])
def schedule(request, monkeypatch):
    """Every test twice: a block's threads in turn in one Python thread (warp calls in the kernel's body are
    yields), and one Python thread per CUDA thread (how kernels gpulab cannot read run)."""
    if request.param == "threads":
        from gpulab.simulator import blocks

        monkeypatch.setattr(blocks, "plan", lambda fn: None)
    return request.param


@cuda.jit
def warp_sums_kernel(x, out):  # lane 0 of each warp: the sum of its warp's 32 values (5 shuffles down)
    i = cuda.grid(1)
    v = x[i] if i < x.size else float32(0)
    offset = 16
    while offset > 0:
        v += cuda.shfl_down_sync(FULL, v, offset)
        offset //= 2
    if cuda.laneid == 0:
        out[i // 32] = v


@cuda.jit
def warp_scan_kernel(x, out):  # inclusive prefix sum inside each warp with shfl_up
    i = cuda.grid(1)
    v = x[i]
    offset = 1
    while offset < 32:
        u = cuda.shfl_up_sync(FULL, v, offset)
        if cuda.laneid >= offset:
            v += u
        offset *= 2
    out[i] = v


@cuda.jit
def butterfly_kernel(x, out):  # every lane ends with its warp's sum (xor shuffles)
    i = cuda.grid(1)
    v = x[i]
    m = 16
    while m > 0:
        v += cuda.shfl_xor_sync(FULL, v, m)
        m //= 2
    out[i] = v


@cuda.jit
def broadcast_kernel(x, out, src):  # every lane reads lane `src` (taken mod 32)
    i = cuda.grid(1)
    out[i] = cuda.shfl_sync(FULL, x[i], src)


@cuda.jit
def votes_kernel(x, out):  # out[i] = (ballot, all, any, eq, match_any, match_all mask, match_all pred, active, lt)
    i = cuda.grid(1)
    p = x[i] > 0
    out[i, 0] = cuda.ballot_sync(FULL, p)
    out[i, 1] = cuda.all_sync(FULL, p)
    out[i, 2] = cuda.any_sync(FULL, p)
    out[i, 3] = cuda.eq_sync(FULL, p)
    out[i, 4] = cuda.match_any_sync(FULL, x[i])
    m, same = cuda.match_all_sync(FULL, x[i])
    out[i, 5] = m
    out[i, 6] = same
    cuda.syncwarp(FULL)
    out[i, 7] = cuda.activemask()
    out[i, 8] = cuda.lanemask_lt()


@cuda.jit
def halves_kernel(x, out):  # two groups of 16 lanes, each with its own mask, at the same call
    i = cuda.grid(1)
    mask = 0x0000FFFF if cuda.laneid < 16 else 0xFFFF0000
    out[i] = cuda.shfl_down_sync(mask, x[i], 8)


@cuda.jit
def guarded_kernel(x, out):  # the classic mistake: a guard around the shuffle
    i = cuda.grid(1)
    if i < x.size:
        v = x[i]
        v += cuda.shfl_down_sync(FULL, v, 16)
        out[i] = v


@cuda.jit
def own_lane_missing_kernel(x, out):
    i = cuda.grid(1)
    out[i] = cuda.shfl_down_sync(0x0000FFFF, x[i], 1)  # lanes 16-31 call with a mask without themselves


@cuda.jit
def split_calls_kernel(x, out):  # lanes of one warp at two different shuffles
    i = cuda.grid(1)
    if cuda.laneid < 16:
        out[i] = cuda.shfl_down_sync(FULL, x[i], 1)
    else:
        out[i] = cuda.shfl_up_sync(FULL, x[i], 1)


@cuda.jit
def shuffle_or_barrier_kernel(x, out):  # half the warp at a shuffle, the other half at a barrier
    i = cuda.grid(1)
    v = x[i]
    if cuda.laneid < 16:
        v += cuda.shfl_down_sync(FULL, v, 1)
    cuda.syncthreads()
    out[i] = v


@cuda.jit
def hidden_shuffle_kernel(x, out):  # a warp function reached through getattr: gpulab cannot see it
    i = cuda.grid(1)
    out[i] = getattr(cuda, "shfl_" + "down_sync")(FULL, x[i], 1)


def test_a_warp_sum_with_shuffles_down():
    x = np.arange(96, dtype=np.float32)
    out = np.zeros(3, np.float32)
    warp_sums_kernel[1, 96](x, out)
    np.testing.assert_array_equal(out, x.reshape(3, 32).sum(axis=1))
    assert out.dtype == np.float32


def test_shfl_down_past_lane_31_keeps_the_lanes_own_value():
    x = np.arange(32, dtype=np.float32)
    out = np.zeros(32, np.float32)
    halves_kernel[1, 32](x, out)  # each half: lane + 8 inside the mask, else out of the group (undefined)
    np.testing.assert_array_equal(out[:8], x[8:16])
    np.testing.assert_array_equal(out[16:24], x[24:32])
    assert np.isnan(out[8:16]).all(), "lanes 8-15 read lanes 16-23, outside their mask: undefined (the filler)"
    np.testing.assert_array_equal(out[24:], x[24:])  # past lane 31: their own value, as CUDA defines


def test_a_partial_last_warp_reads_the_filler_from_lanes_that_do_not_exist():
    x = np.ones(48, np.float32)
    out = np.zeros(2, np.float32)
    warp_sums_kernel[1, 48](x, out)  # warp 1 has lanes 0-15 only: lane 0 reads lane 16 at offset 16
    assert out[0] == 32
    assert np.isnan(out[1]), "a block of 48 threads leaves lanes 16-31 of warp 1 empty: their values are undefined"


def test_a_scan_with_shuffles_up():
    rng = np.random.default_rng(0)
    x = rng.integers(-5, 5, 64).astype(np.int32)
    out = np.zeros(64, np.int32)
    warp_scan_kernel[2, 32](x, out)
    np.testing.assert_array_equal(out, np.cumsum(x.reshape(2, 32), axis=1).ravel())
    assert out.dtype == np.int32


def test_a_butterfly_gives_every_lane_the_sum():
    x = np.arange(64, dtype=np.float64)
    out = np.zeros(64)
    butterfly_kernel[1, 64](x, out)
    np.testing.assert_array_equal(out, np.repeat(x.reshape(2, 32).sum(axis=1), 32))


@pytest.mark.parametrize("src,lane", [(3, 3), (35, 3), (31, 31)])
def test_shfl_sync_reads_lane_src_mod_32(src, lane):
    x = np.arange(100, 132, dtype=np.float32)
    out = np.zeros(32, np.float32)
    broadcast_kernel[1, 32](x, out, src)
    assert (out == x[lane]).all()


def test_votes_match_and_masks():
    x = np.array([1 if lane % 3 == 0 else 0 for lane in range(32)], np.int32)
    x[5] = 7
    out = np.zeros((32, 9), np.int64)
    votes_kernel[1, 32](x, out)
    positive = [lane for lane in range(32) if x[lane] > 0]
    ballot = sum(1 << lane for lane in positive)
    assert (out[:, 0] & FULL == ballot).all()
    assert (out[:, 1] == 0).all() and (out[:, 2] == 1).all() and (out[:, 3] == 0).all()
    for lane in range(32):
        assert out[lane, 4] & FULL == sum(1 << m for m in range(32) if x[m] == x[lane])
        assert out[lane, 8] == (1 << lane) - 1
    assert (out[:, 5] == 0).all() and (out[:, 6] == 0).all()  # not all equal
    assert (out[:, 7] == FULL).all()  # no lane has returned


def test_match_all_when_every_lane_holds_the_same_value():
    x = np.full(32, 4, np.int32)
    out = np.zeros((32, 9), np.int64)
    votes_kernel[1, 32](x, out)
    assert (out[:, 5] == -1).all(), "numba types match_all_sync's mask int32: 0xffffffff is -1"
    assert (out[:, 6] == 1).all() and (out[:, 3] == 1).all()


def test_lanes_that_returned_are_not_waited_for_and_what_is_read_from_them_is_undefined():
    """PTX: shfl.sync waits for the lanes of the mask that have not exited; a value read from an exited lane is
    undefined (here the filler, NaN), and undefined_reads() says which lane read which."""
    x = np.arange(20, dtype=np.float32)
    out = np.zeros(20, np.float32)
    with warps.undefined_reads() as notes:
        guarded_kernel[1, 32](x, out)  # lanes 20-31 return before the shuffle
    np.testing.assert_array_equal(out[:4], x[:4] + x[16:20])  # lanes 0-3 read lanes 16-19
    assert np.isnan(out[4:16]).all()  # lanes 4-15 read lanes 20-31, which had returned
    np.testing.assert_array_equal(out[16:], 2 * x[16:])  # past lane 31: their own value
    assert len(notes) == 8
    assert "lane 4 of warp 0 of block (0, 0, 0) read lane 20, which did not make the call" in notes[0]
    assert "v += cuda.shfl_down_sync(FULL, v, 16)" in notes[0]


@cuda.jit
def ballot_after_return_kernel(x, out):  # valid CUDA: the ballot does not wait for lanes that returned
    i = cuda.grid(1)
    if i >= x.size:
        return
    out[i] = cuda.ballot_sync(FULL, x[i] > 0)


def test_a_vote_after_an_early_return_counts_the_lanes_still_there():
    x = np.array([1, 0, 1, 1, 0] * 4, np.float32)
    out = np.zeros(20, np.int64)
    ballot_after_return_kernel[1, 32](x, out)
    assert (out == sum(1 << k for k in range(20) if x[k] > 0)).all()


def test_a_mask_without_the_calling_lane_is_refused(schedule):
    # in turn, lane 16 is the first of lanes 16-31 to call; on Python threads whichever of them gets there first is
    # named (seen in CI: lane 17), and it must be one of those the mask leaves out
    lane = "16" if schedule == "in turn" else "(1[6-9]|2[0-9]|3[01])"
    with pytest.raises(RuntimeError, match=f"does not name the calling lane {lane} "):
        own_lane_missing_kernel[1, 32](np.ones(32, np.float32), np.zeros(32, np.float32))


def test_lanes_at_different_calls_are_refused():
    with pytest.raises(RuntimeError, match="met at different warp calls") as err:
        split_calls_kernel[1, 32](np.ones(32, np.float32), np.zeros(32, np.float32))
    assert "shfl_down_sync" in str(err.value) and "shfl_up_sync" in str(err.value)


def test_a_wait_no_thread_can_leave_is_named_instead_of_hanging():
    with pytest.raises(RuntimeError, match="none can go on") as err:
        shuffle_or_barrier_kernel[1, 32](np.ones(32, np.float32), np.zeros(32, np.float32))
    msg = str(err.value)
    assert "warp 0 lanes 0-15 wait in cuda.shfl_down_sync" in msg
    assert "warp 0 lanes 16-31 wait at cuda.syncthreads()" in msg and "line" in msg


def test_a_warp_function_gpulab_could_not_see_is_refused_not_run_alone(schedule):
    if schedule == "threads":
        pytest.skip("on threads it runs as written")
    assert in_turn.plan(py_func(hidden_shuffle_kernel)) is not None  # read as independent threads
    with pytest.raises(RuntimeError, match="Call cuda.shfl_down_sync by name"):
        hidden_shuffle_kernel[1, 32](np.ones(32, np.float32), np.zeros(32, np.float32))


@cuda.jit(device=True)
def _warp_total(v):
    for m in (16, 8, 4, 2, 1):
        v += cuda.shfl_xor_sync(FULL, v, m)
    return v


@cuda.jit
def device_function_kernel(x, out):  # the warp calls in a device function: in turn too
    i = cuda.grid(1)
    out[i] = _warp_total(x[i])


@cuda.jit
def keyword_kernel(x, out):  # a warp call with a keyword: run on threads
    i = cuda.grid(1)
    cuda.syncwarp(mask=FULL)
    out[i] = x[i]


def test_warp_calls_in_the_kernel_body_or_device_functions_run_in_turn_others_on_threads():
    for k in (warp_sums_kernel, votes_kernel, halves_kernel, shuffle_or_barrier_kernel, device_function_kernel):
        how = in_turn.plan(py_func(k))
        assert how is not None and how[1], f"{py_func(k).__name__} should run in turn as a generator"
    assert in_turn.plan(py_func(keyword_kernel)) is None
    x = np.arange(64, dtype=np.float32)
    out = np.zeros(64, np.float32)
    device_function_kernel[2, 32](x, out)
    np.testing.assert_array_equal(out, np.repeat(x.reshape(2, 32).sum(axis=1), 32))
    keyword_kernel[1, 32](x[:32], out[:32])
    np.testing.assert_array_equal(out[:32], x[:32])


def test_warp_calls_in_turn_cost_a_fraction_of_threads(schedule):
    import time

    if schedule == "threads":
        pytest.skip("measures the in-turn schedule against threads")
    from gpulab.simulator import blocks

    x = np.ones(1024, np.float32)
    out = np.zeros(32, np.float32)
    t0 = time.process_time()
    warp_sums_kernel[8, 128](x, out)
    in_turn_s = time.process_time() - t0
    plan = blocks.plan
    try:
        blocks.plan = lambda fn: None
        t0 = time.process_time()
        warp_sums_kernel[8, 128](x, out)
        threads_s = time.process_time() - t0
    finally:
        blocks.plan = plan
    assert (out == 32).all()
    assert in_turn_s < threads_s / 5, (in_turn_s, threads_s)


def test_the_instruments_count_warp_calls():
    x = np.ones(64, np.float32)
    out = np.zeros(2, np.float32)
    with simulator.instrument() as ins:
        warp_sums_kernel[1, 64](x, out)
    assert ins.warp_ops == {"shfl_down_sync": 5 * 64}


def test_a_failed_block_leaves_the_next_launch_clean():
    with pytest.raises(RuntimeError):
        own_lane_missing_kernel[1, 32](np.ones(32, np.float32), np.zeros(32, np.float32))
    test_a_warp_sum_with_shuffles_down()


def test_lanes_text():
    assert warps.lanes_text([0, 1, 2, 5, 7, 8]) == "lanes 0-2, 5, 7-8"
    assert warps.lanes_text([4]) == "lane 4"


@pytest.mark.ptx
def test_the_kernels_compile_to_ptx(schedule):
    if schedule == "threads":
        pytest.skip("compiled once")
    from gpulab import ptx
    from gpulab.source import standalone_source

    sigs = {
        warp_sums_kernel: "void(float32[:], float32[:])",
        warp_scan_kernel: "void(int32[:], int32[:])",
        butterfly_kernel: "void(float64[:], float64[:])",
        broadcast_kernel: "void(float32[:], float32[:], int32)",
        votes_kernel: "void(int32[:], int64[:, :])",
        halves_kernel: "void(float32[:], float32[:])",
    }
    items = {
        py_func(k).__name__: {"source": standalone_source(k), "name": py_func(k).__name__, "signature": sig}
        for k, sig in sigs.items()
    }
    res = ptx.compile_sources(items, cc=(7, 5))
    assert res == dict.fromkeys(items, "ok")


@cuda.jit
def active_in_branch_kernel(x, out):  # activemask inside a guard: the lanes that took the branch
    i = cuda.grid(1)
    if i < x.size:
        mask = cuda.activemask()
        out[i, 0] = mask
        out[i, 1] = cuda.shfl_down_sync(mask, x[i], 1)


def test_activemask_names_the_lanes_that_took_the_branch():
    x = np.arange(20, dtype=np.int64)
    out = np.zeros((20, 2), np.int64)
    active_in_branch_kernel[1, 32](x, out)
    assert (out[:, 0] == (1 << 20) - 1).all()
    np.testing.assert_array_equal(out[:19, 1], x[1:])
    assert out[19, 1] == np.int64(0xBAADF00DBAADF00D - (1 << 64))  # lane 20 took no part: the filler


@cuda.jit
def half_then_whole_kernel(x, out):  # lanes 0-15 reduce among themselves, then the whole warp reads lane 0
    i = cuda.grid(1)
    v = x[i]
    if cuda.laneid < 16:
        v += cuda.shfl_down_sync(0x0000FFFF, v, 8)
    out[i] = cuda.shfl_sync(FULL, v, 0)


def test_lanes_may_wait_at_a_whole_warp_call_while_the_others_finish_a_sub_mask_call():
    x = np.arange(32, dtype=np.float32)
    out = np.zeros(32, np.float32)
    half_then_whole_kernel[1, 32](x, out)  # valid CUDA: lanes 16-31 wait at shfl_sync for lanes 0-15
    assert (out == x[0] + x[8]).all()


@cuda.jit
def deltas_kernel(x, out, d):
    i = cuda.grid(1)
    out[0, i] = cuda.shfl_down_sync(FULL, x[i], d)
    out[1, i] = cuda.shfl_xor_sync(FULL, x[i], d)


def test_shuffle_offsets_use_their_low_5_bits_as_ptx_does():
    x = np.arange(32, dtype=np.int32)
    out = np.zeros((2, 32), np.int32)
    deltas_kernel[1, 32](x, out, 33)  # b[4:0] = 1
    np.testing.assert_array_equal(out[0], np.r_[x[1:], x[31]])
    np.testing.assert_array_equal(out[1], x ^ 1)


@cuda.jit
def match_kernel(x, out):
    i = cuda.grid(1)
    out[i] = cuda.match_any_sync(FULL, x[i])


def test_match_compares_bits_nan_matches_nan():
    x = np.full(32, np.nan, np.float32)
    x[1] = -0.0
    x[2] = 0.0
    out = np.zeros(32, np.int64)
    match_kernel[1, 32](x, out)
    assert out[0] & FULL == FULL & ~0b110 and out[1] == 0b10 and out[2] == 0b100
    assert out[0] < 0  # numba types the mask int32: lane 31's bit makes it negative, as on a GPU


@cuda.jit
def warp_totals_kernel(x, out):  # the mistake: lanes past the end return before the shuffles
    i = cuda.grid(1)
    if i >= x.size:
        return
    v = x[i]
    for m in (16, 8, 4, 2, 1):
        v += cuda.shfl_xor_sync(FULL, v, m)
    if cuda.laneid == 0:
        out[i // 32] = v


def test_the_harness_names_a_read_from_a_lane_that_returned():
    from gpulab.exercises import Problem, random_arrays

    problem = Problem(
        "warp_totals_kernel",
        lambda x: np.add.reduceat(x, np.arange(0, x.size, 32)).astype(x.dtype),
        lambda n, rng: random_arrays(rng, n),
        sizes=[20, 40],
        launch=lambda x, out: (1, 64),
        out_names=["out"],
        ptx=None,
    )
    res = problem.check(warp_totals_kernel)
    assert res.status == "failed", res
    assert "a shuffle read a lane that took no part" in res.hint and "which did not make the call" in res.hint, res
    assert "`v = x[i] if i < n else float32(0)`" in res.hint and "-inf for a maximum" in res.hint, res


@cuda.jit(device=True)
def _down_sum(v):
    for off in (16, 8, 4, 2, 1):
        v += cuda.shfl_down_sync(FULL, v, off)
    return v


@cuda.jit
def first_lane_leaves_kernel(x, out):  # lane 0 returns before any lane has made a warp call
    i = cuda.grid(1)
    if i == 0:
        return
    v = _down_sum(x[i])
    if i == 1:
        out[0] = v


def test_a_lane_that_returns_before_any_warp_call_is_not_waited_for():
    """(review finding) On threads, a lane that returned before the block's first warp call was never noted as
    exited, and the others waited for it until the simulator said none could go on."""
    for _ in range(5):  # which lane runs first is up to the Python threads
        out = np.zeros(1, np.float32)
        first_lane_leaves_kernel[1, 32](np.ones(32, np.float32), out)
        assert out[0] == 32  # lanes 1-31 hold 1; past lane 31 a lane reads its own value (lane 17 at offset 16)


def test_a_stuck_message_names_only_threads_that_wait():
    with pytest.raises(RuntimeError, match="none can go on") as err:
        shuffle_or_barrier_kernel[1, 64](np.ones(64, np.float32), np.zeros(64, np.float32))
    assert "line 0" not in str(err.value), err.value
