"""Histograms (lesson 05, gpulab.kernels.histogram): the global-atomics and privatized kernels against
np.bincount, uniform and crowded into one bin, at sizes that are no multiple of the block, in the simulator or on
a GPU (gpu mode, CuPy arrays); the launcher's checks."""

import numpy as np
import pytest

import gpulab
from gpulab import kernels, to_device, to_host
from gpulab.kernels import LaunchError
from gpulab.kernels.histogram import BINS, histogram_reference

RNG = np.random.default_rng(9)
SIZES = [0, 1, 255, 1000] + ([1 << 22] if gpulab.is_gpu() else [])


@pytest.mark.parametrize("kernel", ["global", "shared"])
@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("bins", [1, 10, BINS])
def test_histograms_match_bincount(kernel, n, bins):
    for values in (RNG.integers(0, bins, n).astype(np.int32), np.full(n, bins - 1, np.int32)):
        got = to_host(kernels.histogram(to_device(values), bins, kernel=kernel))
        assert got.dtype == np.int32 and np.array_equal(got, histogram_reference(values, bins))


def test_out_is_zeroed_and_reused():
    values = to_device(np.int32([0, 3, 3, 9]))
    out = to_device(np.full(10, 77, np.int32))
    got = kernels.histogram(values, 10, out=out, blocks=3)
    assert got is out and np.array_equal(to_host(out), [1, 0, 0, 2, 0, 0, 0, 0, 0, 1])


def test_the_launcher_explains_bad_arguments():
    values = to_device(np.zeros(4, np.int32))
    with pytest.raises(TypeError, match="int32"):
        kernels.histogram(to_device(np.zeros(4, np.int64)))
    with pytest.raises(LaunchError, match="between 1 and 256"):
        kernels.histogram(values, BINS + 1)
    with pytest.raises(LaunchError, match="'global', 'shared'"):
        kernels.histogram(values, kernel="private")
    with pytest.raises(LaunchError, match=r"shape \(10,\)"):
        kernels.histogram(values, 10, out=to_device(np.zeros(8, np.int32)))
