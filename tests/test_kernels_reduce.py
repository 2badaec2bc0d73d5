"""Reductions and the row softmax (lesson 05) against NumPy: in the simulator, or on the GPU on CuPy arrays (gpu
mode); the traffic counts come from gpulab.trace (the simulator, in either mode)."""

import numpy as np
import pytest

from gpulab import to_device, to_host
from gpulab.kernels import (
    LaunchError,
    count_above,
    max_tree,
    softmax_rows,
    sum_atomic,
    sum_reduce,
    sum_tree,
    sum_warp,
)
from gpulab.kernels.reduce import count_above_kernel, sum_atomic_kernel, sum_tree_kernel
from gpulab.trace import trace

RNG = np.random.default_rng(3)


@pytest.mark.parametrize("n", [1, 255, 256, 700])
@pytest.mark.parametrize("fn", [sum_atomic, sum_tree, sum_warp, sum_reduce])
def test_sums_match_float64_reference(fn, n):
    x = RNG.standard_normal(n).astype(np.float32)
    ref = float(x.astype(np.float64).sum())
    assert fn(to_device(x)) == pytest.approx(ref, rel=1e-5, abs=1e-4 * np.sqrt(n))


@pytest.mark.parametrize("fn", [sum_tree, sum_warp])
def test_tree_and_warp_sums_need_a_second_pass_beyond_one_block(fn):
    x = np.ones(256 * 2 + 1, np.float32)  # 3 partials, then a second pass over 1 block
    assert fn(to_device(x)) == 256 * 2 + 1


@pytest.mark.parametrize("n", [0, 1, 255, 700])
def test_count_above_matches_numpy(n):
    x = RNG.standard_normal(n).astype(np.float32)
    x[: n // 3] = 0.25  # values equal to the threshold do not count
    assert count_above(to_device(x), 0.25) == int((x > 0.25).sum())


def test_count_above_writes_only_for_the_elements_that_count():
    x = np.array([0.1, 0.9, 0.5, 0.7, 0.2], np.float32)
    count = np.zeros(1, np.int32)
    log = trace(count_above_kernel, 1, 8, x, np.float32(0.5), count, names=("x", "threshold", "count"))
    assert count[0] == 2 and log.writes("count") == 2 and log.reads("x") == x.size


@pytest.mark.parametrize("n", [1, 255, 256, 700, 256 * 2 + 3])
def test_max_tree_matches_numpy(n):
    x = (RNG.standard_normal(n) - 50.0).astype(np.float32)  # all negative: a 0 loaded past the end would win
    assert max_tree(to_device(x)) == float(x.max())


def test_max_tree_of_an_empty_array_says_what_to_do():
    with pytest.raises(LaunchError, match="at least one element"):
        max_tree(to_device(np.zeros(0, np.float32)))


@pytest.mark.parametrize("n", [33, 100])
def test_warp_sum_of_a_partial_block_counts_each_lane_once(n):
    """Lanes past the end (a partial warp, and warps with no element at all) add 0; values 2**k tell which lanes
    were added, and how often."""
    x = (2.0 ** (np.arange(n) % 20)).astype(np.float32)
    assert sum_warp(to_device(x)) == float(x.astype(np.float64).sum())


def test_atomic_vs_tree_global_traffic():
    n = 512
    x = np.ones(n, np.float32)
    total = np.zeros(1, np.float32)
    atomic = trace(sum_atomic_kernel, 2, 256, x, total, names=("x", "total"))
    partials = np.zeros(2, np.float32)
    tree = trace(sum_tree_kernel, 2, 256, x, partials, names=("x", "partials"))
    assert total[0] == n and partials.sum() == n
    assert atomic.writes("total") == n  # one read-modify-write of the same address per element
    assert tree.writes("partials") == 2  # one write per block
    assert atomic.reads("x") == tree.reads("x") == n


def _softmax(x):
    e = np.exp(x - x.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


@pytest.mark.parametrize("shape", [(1, 1), (2, 5), (3, 300)])
def test_softmax_matches_numpy(shape):
    x = (RNG.standard_normal(shape) * 5).astype(np.float32)
    out = to_host(softmax_rows(to_device(x)))
    np.testing.assert_allclose(out, _softmax(x.astype(np.float64)), rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(out.sum(axis=1), 1.0, rtol=1e-5)


def test_softmax_is_stable_for_large_inputs():
    x = np.array([[1000.0, 1001.0, 1002.0]], np.float32)  # exp(1000) overflows float32
    out = to_host(softmax_rows(to_device(x)))
    assert np.all(np.isfinite(out))
    np.testing.assert_allclose(out, _softmax(x.astype(np.float64)), rtol=1e-5)


def test_launcher_errors_say_what_to_do():
    with pytest.raises(TypeError, match="float32"):
        sum_tree(np.ones(4, np.float64))
    with pytest.raises(LaunchError, match="1-D"):
        sum_atomic(np.ones((2, 2), np.float32))
    with pytest.raises(LaunchError, match="2-D"):
        softmax_rows(np.ones(4, np.float32))
    with pytest.raises(LaunchError, match="at least one column"):
        softmax_rows(np.ones((2, 0), np.float32))
    assert sum_tree(np.ones(0, np.float32)) == 0.0
    assert sum_warp(np.ones(0, np.float32)) == 0.0
    with pytest.raises(TypeError, match="float32"):
        sum_warp(np.ones(4, np.float64))
