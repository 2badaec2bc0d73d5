"""gpulab.simulator.memory: what new shared and local arrays hold (NaN, 0xBAADF00D, True), one shared array per
block (dynamic shared memory included), and the harness's hint for a result that shows the integer filler."""

from __future__ import annotations

import numpy as np
import pytest
from numba import boolean, cuda, float32, int16, int32, int64, uint8, uint32

from gpulab import simulator
from gpulab.simulator import filler, filler_hint, instrument

BINS = 8
TPB = 32
INT32_FILLER = -1163005939  # 0xBAADF00D read as int32


@cuda.jit
def _unwritten_integers(o32, ou32, o64, o16, o8, ob, olocal):
    a = cuda.shared.array(2, int32)
    b = cuda.shared.array(2, uint32)
    c = cuda.shared.array(2, int64)
    d = cuda.shared.array(2, int16)
    e = cuda.shared.array(2, uint8)
    f = cuda.shared.array(2, boolean)
    g = cuda.local.array(2, int32)
    o32[0], ou32[0], o64[0], o16[0], o8[0], ob[0], olocal[0] = a[1], b[1], c[1], d[1], e[1], f[1], g[1]


def test_integer_and_bool_shared_and_local_arrays_start_with_the_filler_not_zeros():
    outs = [np.zeros(1, t) for t in (np.int32, np.uint32, np.int64, np.int16, np.uint8, np.bool_, np.int32)]
    _unwritten_integers[1, 1](*outs)
    got = [int(o[0]) for o in outs]
    assert got == [INT32_FILLER, 0xBAADF00D, 0xBAADF00DBAADF00D - (1 << 64), 0xBAAD - (1 << 16), 0xBA, 1, INT32_FILLER]
    assert filler(np.int32) == INT32_FILLER and filler(int32) == INT32_FILLER and filler(uint32) == 0xBAADF00D
    assert np.isnan(filler(float32)) and filler(np.bool_) is True
    assert simulator.uninitialised((2, 3), np.int16).tolist() == [[0xBAAD - (1 << 16)] * 3] * 2


@cuda.jit
def _histogram_unzeroed(labels, out):  # privatised bins, never set to 0 before the atomics add to them
    bins = cuda.shared.array(BINS, int32)
    i = cuda.grid(1)
    tx = cuda.threadIdx.x
    if i < labels.shape[0]:
        cuda.atomic.add(bins, labels[i], 1)
    cuda.syncthreads()  # the block's counts are in bins
    if tx < BINS:
        cuda.atomic.add(out, tx, bins[tx])


@cuda.jit
def _histogram(labels, out):
    bins = cuda.shared.array(BINS, int32)
    i = cuda.grid(1)
    tx = cuda.threadIdx.x
    if tx < BINS:
        bins[tx] = 0
    cuda.syncthreads()  # every bin is 0 before any thread adds to it
    if i < labels.shape[0]:
        cuda.atomic.add(bins, labels[i], 1)
    cuda.syncthreads()  # the block's counts are in bins
    if tx < BINS:
        cuda.atomic.add(out, tx, bins[tx])


@pytest.mark.filterwarnings("ignore:overflow encountered")  # the filler plus counts wraps, as on a GPU
@pytest.mark.parametrize("blocks", [1, 2, 4])
def test_a_histogram_that_forgets_to_zero_its_shared_bins_is_wrong(blocks):
    """Zeros would make it pass; a minimum (top bit alone) would cancel with an even number of blocks."""
    labels = np.random.default_rng(blocks).integers(0, BINS, size=blocks * TPB).astype(np.int32)
    expected = np.bincount(labels, minlength=BINS).astype(np.int32)
    out = np.zeros(BINS, np.int32)
    _histogram_unzeroed[blocks, TPB](labels, out)
    assert (out != expected).all()
    assert ((out.astype(np.int64) - expected - blocks * INT32_FILLER) % (1 << 32) == 0).all()
    assert "not zeroed on a GPU" in filler_hint(out, expected, "out")
    out[:] = 0
    _histogram[blocks, TPB](labels, out)
    assert (out == expected).all()


def test_the_harness_names_shared_memory_that_was_not_zeroed():
    from gpulab.problems.lab05 import HISTOGRAM

    @cuda.jit
    def histogram_kernel(labels, out):
        bins = cuda.shared.array(10, int32)
        i = cuda.grid(1)
        if i < labels.shape[0]:
            cuda.atomic.add(bins, labels[i], 1)
        cuda.syncthreads()  # the block's counts are in bins
        if cuda.threadIdx.x < 10:
            cuda.atomic.add(out, cuda.threadIdx.x, bins[cuda.threadIdx.x])

    res = HISTOGRAM.check(histogram_kernel, sizes=[1, 200])
    assert not res.passed, res
    assert "0xBAADF00D read as int32" in res.hint and "not zeroed on a GPU" in res.hint, res.hint
    assert "cuda.syncthreads() before reading" in res.hint, res.hint


def test_the_harness_names_the_filler_only_in_the_simulator(monkeypatch):
    """On a GPU nothing fills shared memory with 0xBAADF00D: a result that happens to be off by it (an int16 output off
    by 112 is 48 x 0xBAAD modulo 2**16) must not be explained as "the value gpulab's simulator puts" there."""
    from types import SimpleNamespace

    from gpulab import runtime
    from gpulab.exercises import specific

    exp = np.arange(8, dtype=np.int16)
    got = exp + np.int16(112)
    judge = SimpleNamespace(rtol=0.0)
    assert "48 x -17747" in specific._unset_memory(got, exp, 0, None, judge, "out", None)  # simulator: named
    monkeypatch.setattr(runtime, "is_simulator", lambda: False)
    assert specific._unset_memory(got, exp, 0, None, judge, "out", None) == ""


def test_filler_hint_recognises_the_filler_through_wrap_around_and_types():
    exp = np.arange(1, 11, dtype=np.int32)

    def times(k, dt):
        return ((exp.astype(np.int64) + k * INT32_FILLER) % (1 << 32)).astype(np.uint32).view(dt)

    assert "off by -1163005939 (0xBAADF00D read as int32)" in filler_hint(times(1, np.int32), exp, "h")
    assert "off by 6 x -1163005939" in filler_hint(times(6, np.int32), exp, "h")  # wrapped: 6 blocks' copies
    assert "read as uint32" in filler_hint(times(3, np.uint32), exp.astype(np.uint32), "h")
    wide = exp.astype(np.int64) + 2 * INT32_FILLER  # int32 bins added into int64: no wrap
    assert "off by 2 x -1163005939" in filler_hint(wide, exp.astype(np.int64), "h")
    as_float = (exp + np.float32(INT32_FILLER)).astype(np.float32)  # counts converted to float
    assert "0xBAADF00D" in filler_hint(as_float, exp.astype(np.float32), "h")
    holds = exp.copy()
    holds[3] = INT32_FILLER
    assert filler_hint(holds, exp, "h").startswith("h[3] holds -1163005939")
    short = np.full(4, 0xBAAD - (1 << 16), np.int16)
    assert "0xBAAD read as int16" in filler_hint(short, np.zeros(4, np.int16), "s")


def test_filler_hint_says_nothing_about_other_wrong_answers():
    exp = np.arange(100, dtype=np.int32)
    rng = np.random.default_rng(0)
    assert filler_hint(exp + 1, exp, "h") == ""
    assert filler_hint(exp[::-1].copy(), exp, "h") == ""
    assert filler_hint(rng.integers(-(2**31), 2**31, 100).astype(np.int32), exp, "h") == ""
    assert filler_hint(rng.integers(-(2**15), 2**15, 100).astype(np.int16), exp.astype(np.int16), "h") == ""
    assert filler_hint(np.full(4, 0xBA, np.uint8), np.zeros(4, np.uint8), "h") == ""  # 8 bits: too few to tell
    assert filler_hint(exp.astype(np.float32) + 0.5, exp.astype(np.float32), "h") == ""
    assert filler_hint(exp, exp, "h") == ""
    some = exp.copy()
    some[:10] += INT32_FILLER  # 10 elements off by the filler, 90 wrong otherwise: something else is the story
    some[10:] += 1
    assert filler_hint(some, exp, "h") == ""


@cuda.jit
def _dynamic_per_block(seen, out):
    buf = cuda.shared.array(0, float32)  # sized by the launch's fourth value
    tx = cuda.threadIdx.x
    seen[cuda.blockIdx.x, tx] = buf[tx]  # read before anything was written: nan in every block
    cuda.syncthreads()  # every thread has read
    buf[tx] = cuda.blockIdx.x + 1.0
    cuda.syncthreads()  # the block's values are in buf
    out[cuda.blockIdx.x, tx] = buf[(tx + 1) % cuda.blockDim.x]


def test_dynamic_shared_memory_is_one_fresh_buffer_per_block():
    """numba-cuda's one buffer per launch let a block read the values the block before it had left."""
    seen, out = np.zeros((3, 4), np.float32), np.zeros((3, 4), np.float32)
    _dynamic_per_block[3, 4, 0, 4 * 4](seen, out)
    assert np.isnan(seen).all()
    assert out.tolist() == [[1.0] * 4, [2.0] * 4, [3.0] * 4]


@cuda.jit
def _dynamic_aliases(out_f, out_i, out_alias):
    ints = cuda.shared.array(0, int32)
    floats = cuda.shared.array(0, float32)  # the same bytes, as on a GPU
    tx = cuda.threadIdx.x
    out_i[tx] = ints[tx]  # the first request's dtype set the filler
    cuda.syncthreads()  # every thread has read
    if tx == 0:
        floats[1] = 1.0
    cuda.syncthreads()  # floats[1] is written
    out_alias[cuda.blockIdx.x] = ints[1]
    out_f[tx] = floats[tx]


def test_dynamic_shared_arrays_alias_one_buffer_and_start_with_the_first_dtypes_filler():
    out_f, out_i, alias = np.zeros(4, np.float32), np.zeros(4, np.int32), np.zeros(2, np.int32)
    _dynamic_aliases[2, 4, 0, 4 * 4](out_f, out_i, alias)
    assert (out_i == INT32_FILLER).all()
    assert (alias == np.array([1.0], np.float32).view(np.int32)[0]).all()
    assert out_f[1] == 1.0 and (out_f[[0, 2, 3]] == np.array([INT32_FILLER], np.int32).view(np.float32)[0]).all()


@cuda.jit
def _dynamic_block_sum(x, partial):
    buf = cuda.shared.array(0, float32)
    tx = cuda.threadIdx.x
    i = cuda.grid(1)
    buf[tx] = x[i] if i < x.shape[0] else 0.0
    cuda.syncthreads()  # the block's values are in buf
    s = cuda.blockDim.x // 2
    while s > 0:
        if tx < s:
            buf[tx] += buf[tx + s]
        cuda.syncthreads()  # this level is done
        s //= 2
    if tx == 0:
        partial[cuda.blockIdx.x] = buf[0]


def test_a_reduction_in_dynamic_shared_memory_is_right_and_instrumented():
    x = np.arange(100, dtype=np.float32)
    partial = np.zeros(4, np.float32)
    with instrument(watch_shared=True) as ins:
        _dynamic_block_sum[4, TPB, 0, TPB * 4](x, partial)
    assert partial.tolist() == [float(x[k * TPB : (k + 1) * TPB].sum()) for k in range(4)]
    assert ins.shared_bytes_per_block() == TPB * 4
    (label, log, shape), *rest = ins.shared_logs.values()
    assert not rest and label == "buf" and shape == (TPB,)
    assert {a.block for a in log} == {(k, 0, 0) for k in range(4)} and {a.kind for a in log} == {"r", "w"}


def test_the_public_names_stay_importable_from_gpulab_simulator():
    from gpulab.simulator import (  # noqa: F401
        Access,
        Instruments,
        Watched,
        dynamic_shared_array,
        fast_arrays,
        flat_indices,
        harden,
        shared_array,
        simulated,
        stop_thread,
        stop_threads,
        uninitialised,
        watch,
    )

    assert set(simulator.__all__) <= set(dir(simulator))
