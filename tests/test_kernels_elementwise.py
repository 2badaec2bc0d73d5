"""Elementwise kernels (lesson 01) against NumPy: in the simulator, or on the GPU on CuPy arrays (gpu mode)."""

import numpy as np
import pytest

from gpulab import to_device, to_host
from gpulab.kernels import LaunchError, add, add_grid_stride_kernel, saxpy, scale2d

RNG = np.random.default_rng(1)


@pytest.mark.parametrize("n", [1, 31, 256, 257, 700])
def test_add_and_saxpy_match_numpy(n):
    a = RNG.standard_normal(n).astype(np.float32)
    b = RNG.standard_normal(n).astype(np.float32)
    a_d, b_d = to_device(a), to_device(b)
    np.testing.assert_array_equal(to_host(add(a_d, b_d)), a + b)
    # A GPU contracts alpha * x + y into one fused multiply-add (one rounding, not two): where the sum
    # nearly cancels, the two differ by more than rtol of the result. So the check is against the float64
    # result with an absolute part for the rounding of alpha * x (|alpha * x| < 9 here: under 5e-7).
    exact = 2.5 * a.astype(np.float64) + b
    np.testing.assert_allclose(to_host(saxpy(2.5, a_d, b_d)), exact, rtol=1e-6, atol=2e-6)


def test_grid_stride_covers_every_element_with_few_blocks():
    n = 1000
    a = np.arange(n, dtype=np.float32)
    a_d = to_device(a)
    out = add(a_d, a_d, blocks=2, threads_per_block=64, kernel=add_grid_stride_kernel)
    np.testing.assert_array_equal(to_host(out), 2 * a)


@pytest.mark.parametrize("shape, tpb", [((1, 1), (16, 16)), ((17, 33), (16, 16)), ((5, 40), (32, 4))])
def test_scale2d_matches_numpy(shape, tpb):
    a = RNG.standard_normal(shape).astype(np.float32)
    got = to_host(scale2d(-3.0, to_device(a), threads_per_block=tpb))
    np.testing.assert_allclose(got, np.float32(-3.0) * a, rtol=1e-6)


def test_launcher_errors_say_what_to_do():
    x = np.zeros(8, np.float32)
    with pytest.raises(TypeError, match=r"float32.*astype"):
        saxpy(1.0, x.astype(np.float64), x)
    with pytest.raises(ValueError, match="same shape"):
        saxpy(1.0, x, np.zeros(9, np.float32))
    with pytest.raises(LaunchError, match="2-D"):
        scale2d(1.0, x)
    with pytest.raises(LaunchError, match="at most 1024"):
        scale2d(1.0, np.zeros((4, 4), np.float32), threads_per_block=(64, 32))
    assert saxpy(1.0, x[:0], x[:0]).shape == (0,)
