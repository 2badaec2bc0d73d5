"""Copy and transpose kernels (lesson 02) against NumPy (simulator, or the GPU on CuPy arrays in gpu mode), plus
their access patterns (gpulab.trace runs the kernel in the simulator in either mode)."""

import numpy as np
import pytest

from gpulab import to_device, to_host
from gpulab.kernels import LaunchError, copy, copy_kernel, strided_copy_kernel, transpose
from gpulab.kernels.memory import transpose_naive_kernel, transpose_tiled_kernel
from gpulab.trace import trace

RNG = np.random.default_rng(2)


@pytest.mark.parametrize("n", [1, 100, 256, 513])
@pytest.mark.parametrize("stride", [1, 2, 7, 32])
def test_copy_matches_numpy_slicing(n, stride):
    src = RNG.standard_normal(n).astype(np.float32)
    out = copy(to_device(src), stride=stride, threads_per_block=128)
    np.testing.assert_array_equal(to_host(out), src[::stride])


@pytest.mark.parametrize("shape", [(1, 1), (16, 16), (17, 5), (3, 40)])
@pytest.mark.parametrize("kernel", [transpose_naive_kernel, transpose_tiled_kernel])
def test_transpose_matches_numpy(shape, kernel):
    a = RNG.standard_normal(shape).astype(np.float32)
    np.testing.assert_array_equal(to_host(transpose(to_device(a), kernel=kernel)), a.T)


def test_strided_reads_need_more_transactions():
    src = np.arange(32 * 32, dtype=np.float32)
    coalesced = trace(copy_kernel, 1, 32, src, np.empty(32, np.float32), names=("src", "out"))
    strided = trace(strided_copy_kernel, 1, 32, src, np.empty(32, np.float32), 32, names=("src", "out"))
    assert coalesced.transactions("src") == 4 and strided.transactions("src") == 32
    assert strided.warp_addresses("src")[3] == [96]


def test_tiled_transpose_writes_are_coalesced():
    a = np.arange(16 * 16, dtype=np.float32).reshape(16, 16)
    out = np.empty_like(a)
    naive = trace(transpose_naive_kernel, (1, 1), (16, 16), a, out, names=("a", "out"))
    tiled = trace(transpose_tiled_kernel, (1, 1), (16, 16), a, out, names=("a", "out"))
    np.testing.assert_array_equal(out, a.T)
    # a warp (two rows of 16 threads) writes 16 columns of two rows: 4 sectors tiled, 32 naive
    assert tiled.transactions("out", "w") < naive.transactions("out", "w")
    assert naive.transactions("a") == tiled.transactions("a")


def test_launcher_errors_say_what_to_do():
    x = np.zeros(10, np.float32)
    with pytest.raises(TypeError, match="float32"):
        copy(x.astype(np.int32))
    with pytest.raises(LaunchError, match="stride"):
        copy(x, stride=0)
    with pytest.raises(ValueError, match="ceil"):
        copy(x, np.zeros(10, np.float32), stride=2)
    with pytest.raises(LaunchError, match="2-D"):
        transpose(x)
    with pytest.raises(ValueError, match=r"\(3, 2\)"):
        transpose(np.zeros((2, 3), np.float32), np.zeros((2, 3), np.float32))
