"""Launcher validation (issue 15): bad launch settings and outputs are refused with a message, never
silently wrong; Numba device arrays stay on the device (issue 17)."""

from __future__ import annotations

import numpy as np
import pytest
from numba import cuda

from gpulab import kernels
from gpulab.errors import UsageError
from gpulab.kernels import conv, elementwise, memory, reduce, scan
from gpulab.kernels._launch import LaunchError, ceil_div, check_launch, conv_out_size, count, is_numba_device_array

A = np.arange(1000, dtype=np.float32)
B = np.ones(1000, dtype=np.float32)
X4 = np.arange(16, dtype=np.float32).reshape(1, 1, 4, 4)
W4 = np.linspace(-1, 1, 18, dtype=np.float32).reshape(2, 1, 3, 3)


def test_launch_error_is_a_usage_error_and_a_value_error():
    assert issubclass(LaunchError, UsageError) and issubclass(LaunchError, ValueError)


@pytest.mark.parametrize(
    "out, match",
    [
        (np.zeros(10, np.float32), r"shape \(1000,\), but has shape \(10,\)"),
        (np.zeros(1000, np.int32), "dtype float32 .* but has int32"),
        (np.zeros(2000, np.float32)[::2], "C-contiguous"),
        (np.broadcast_to(np.zeros(1, np.float32), (1000,)), "C-contiguous|read-only"),
    ],
)
def test_add_refuses_a_wrong_out(out, match):
    with pytest.raises(LaunchError, match=match):
        kernels.add(A, B, out=out)


def test_add_readonly_out_refused():
    out = np.zeros(1000, np.float32)
    out.flags.writeable = False
    with pytest.raises(LaunchError, match="read-only"):
        kernels.add(A, B, out=out)


def test_add_too_few_blocks_refused_unless_grid_stride():
    with pytest.raises(LaunchError, match=r"744 of them would never be written.*blocks=4"):
        kernels.add(A, B, blocks=1)
    got = kernels.add(A, B, blocks=1, threads_per_block=32, kernel=kernels.add_grid_stride_kernel)
    np.testing.assert_array_equal(got, A + B)  # a grid-stride loop covers everything with one block


@pytest.mark.parametrize("blocks", [0, -1, 2.5, "4", True])
def test_add_bad_block_counts(blocks):
    with pytest.raises(LaunchError, match="blocks"):
        kernels.add(A, B, blocks=blocks)


@pytest.mark.parametrize("tpb", [0, -32, 2.5, None])
def test_threads_per_block_checked_everywhere(tpb):
    for call in (
        lambda: kernels.add(A, B, threads_per_block=tpb),
        lambda: kernels.saxpy(1.0, A, B, threads_per_block=tpb),
        lambda: memory.copy(A, threads_per_block=tpb),
        lambda: reduce.sum_atomic(A, threads_per_block=tpb),
        lambda: reduce.sum_atomic(A[:0], threads_per_block=tpb),
    ):
        with pytest.raises(LaunchError, match="threads_per_block"):
            call()


@pytest.mark.parametrize("tpb", [(16,), 16, (16, 16, 1), (16, 0), (4.5, 4)])
def test_two_d_launch_needs_a_pair(tpb):
    with pytest.raises(LaunchError, match="threads_per_block"):
        elementwise.scale2d(2.0, np.ones((4, 4), np.float32), threads_per_block=tpb)


@pytest.mark.parametrize("stride", [2.7, 0, -1, "2", True])
def test_copy_stride_must_be_a_whole_number(stride):
    with pytest.raises(LaunchError, match="stride"):
        memory.copy(A, stride=stride)


def test_copy_integral_float_stride_accepted():
    np.testing.assert_array_equal(memory.copy(A, stride=2.0), A[::2])
    np.testing.assert_array_equal(memory.copy(A, stride=np.int64(3)), A[::3])


def test_siblings_check_out_too():
    with pytest.raises(LaunchError, match="shape"):
        memory.transpose(np.ones((4, 3), np.float32), out=np.empty((4, 3), np.float32))
    with pytest.raises(LaunchError, match="dtype"):
        memory.transpose(np.ones((4, 3), np.float32), out=np.empty((3, 4), np.float64))
    with pytest.raises(LaunchError, match="dtype"):
        reduce.softmax_rows(np.ones((4, 3), np.float32), out=np.empty((4, 3), np.float16))
    with pytest.raises(LaunchError, match="dtype"):
        elementwise.scale2d(1.0, np.ones((4, 3), np.float32), out=np.empty((4, 3), np.int32))
    with pytest.raises(LaunchError, match="C-contiguous"):
        kernels.matmul(np.ones((4, 3), np.float32), np.ones((3, 2), np.float32), out=np.empty((2, 4), np.float32).T)


def test_check_launch_refuses_odd_shapes():
    with pytest.raises(LaunchError, match="1, 2 or 3"):
        check_launch((1, 1, 1, 1), 32)
    with pytest.raises(LaunchError, match="whole number"):
        check_launch(2.5, 32)
    check_launch((2, 2), 32)  # a 2-D grid of 1-D blocks is legal CUDA


def test_small_helpers():
    assert [ceil_div(n, 256) for n in (0, 1, 256, 257)] == [0, 1, 1, 2]
    assert conv_out_size(28, 3) == 26 and conv_out_size(28, 3, pad=1) == 28 and conv_out_size(28, 2, 2) == 14
    assert count("n", np.int32(3)) == 3


def test_numba_device_arrays_stay_on_the_device():
    """out=None with Numba device arrays allocates a device array: no host array copied both ways."""
    a_d, b_d = cuda.to_device(A), cuda.to_device(B)
    results = {
        "add": kernels.add(a_d, b_d),
        "saxpy": kernels.saxpy(2.0, a_d, b_d),
        "copy": memory.copy(a_d, stride=3),
        "transpose": memory.transpose(cuda.to_device(np.ones((5, 3), np.float32))),
        "scale2d": elementwise.scale2d(2.0, cuda.to_device(np.ones((5, 3), np.float32))),
        "softmax": reduce.softmax_rows(cuda.to_device(np.ones((5, 3), np.float32))),
        "matmul": kernels.matmul(
            cuda.to_device(np.ones((4, 3), np.float32)), cuda.to_device(np.ones((3, 2), np.float32))
        ),
        "scan": scan.inclusive_scan(cuda.to_device(A[:300])),  # two blocks: the block sums too
        "conv2d": conv.conv2d_direct(
            cuda.to_device(X4), cuda.to_device(W4), cuda.to_device(np.ones(2, np.float32)), pad=1
        ),
    }
    for name, out in results.items():
        assert is_numba_device_array(out), f"{name} returned {type(out).__name__}"
    np.testing.assert_array_equal(results["add"].copy_to_host(), A + B)
    np.testing.assert_array_equal(results["copy"].copy_to_host(), A[::3])
    np.testing.assert_allclose(results["scan"].copy_to_host(), np.cumsum(A[:300]), rtol=1e-6)
    np.testing.assert_allclose(
        results["conv2d"].copy_to_host(), conv.conv2d_reference(X4, W4, np.ones(2, np.float32), 1, 1), rtol=1e-5
    )
    assert reduce.sum_atomic(a_d) == pytest.approx(float(A.sum()), rel=1e-5)
    assert reduce.sum_tree(a_d) == pytest.approx(float(A.sum()), rel=1e-5)


@pytest.mark.parametrize(
    ("blocks", "threads", "words"),
    [
        ((1, 65536), (16, 16), "at most 65,535 blocks along y"),
        ((1, 1, 70000), 32, "along z"),
        (2**31, 256, "along x"),
        (1, (1, 1, 128), "at most 64 threads along z"),
    ],
)
def test_check_launch_refuses_what_a_gpu_refuses_per_axis(blocks, threads, words):
    """The simulator launches any grid; a GPU refuses more than CUDA's per-axis limits with a driver error."""
    with pytest.raises(LaunchError, match=words):
        check_launch(blocks, threads)
    check_launch((2**31 - 1, 65535, 65535), (1024, 1, 1))  # the largest legal grid


class _Recorder:
    """Stands in for a compiled kernel: records each ``kernel[grid, block](*args)`` launch."""

    def __init__(self):
        self.launches = []

    def __getitem__(self, config):
        return lambda *args: self.launches.append((config, args))


def test_gpu_2d_launches_stay_within_the_grid_limit(monkeypatch):
    """In gpu mode launch_2d caps y at 65,535 blocks (the grid-stride loop covers the rest), and gemm with
    one thread per output launches row slices of at most 65,535 blocks each."""
    from gpulab import runtime
    from gpulab.kernels import grid_stride, nn_ops

    monkeypatch.setattr(runtime, "is_simulator", lambda: False)
    k = _Recorder()
    grid_stride.launch_2d(k, 3_000_000, 40, np.zeros(1))  # im2col's rows for a batch of about 5,000 MNIST images
    ((grid, block), _) = k.launches[0]
    assert block == grid_stride.BLOCK and grid == (3, 65535)

    k = _Recorder()
    monkeypatch.setattr(runtime, "is_gpu", lambda: True)
    a, b = np.ones((2 * 65535 * 16 + 5, 3), np.float32), np.ones((3, 4), np.float32)
    nn_ops.gemm(a, b, kernel=k, block=(16, 16))
    grids = [cfg[0] for cfg, _ in k.launches]
    rows = [args[0].shape[0] for _, args in k.launches]
    assert grids == [(1, 65535), (1, 65535), (1, 1)] and rows == [65535 * 16, 65535 * 16, 5]


def test_gemm_row_slices_compute_the_whole_product(monkeypatch):
    """The row-sliced launch gives a @ b exactly (run in the simulator with a tiny limit so that it slices)."""
    from gpulab.kernels import nn_ops

    @cuda.jit
    def one_per_output(A, B, C):
        j, i = cuda.grid(2)
        if i < C.shape[0] and j < C.shape[1]:
            acc = 0.0
            for k in range(A.shape[1]):
                acc += A[i, k] * B[k, j]
            C[i, j] = acc

    monkeypatch.setattr(nn_ops, "MAX_GRID_DIMS", (2**31 - 1, 2, 65535))
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((21, 5)).astype(np.float32), rng.standard_normal((5, 3)).astype(np.float32)
    np.testing.assert_allclose(nn_ops.gemm(a, b, kernel=one_per_output, block=(4, 4)), a @ b, rtol=1e-5, atol=1e-6)


def test_check_launch_refuses_a_float_as_numba_does():
    """numba-cuda refuses 4.0 too ("griddim must be a sequence of integers"): the message says why and the fix."""
    with pytest.raises(LaunchError, match=r"Python's / always gives a float, even 512 / 256 = 2.0.*ceil_div"):
        check_launch(512 / 256, 256)
    with pytest.raises(LaunchError, match=r"threads per block must be a whole number, but got 256.0 \(a float\)"):
        check_launch(4, 256.0)
    check_launch(np.int64(4), (np.int32(16), 16))  # NumPy integers are whole numbers


@pytest.mark.parametrize(
    "call",
    [
        lambda: kernels.add(A[::2], B[::2]),
        lambda: elementwise.saxpy(2.0, A[::2], B[::2]),
        lambda: memory.copy(A[::3]),
        lambda: elementwise.scale2d(2.0, np.ones((4, 6), np.float32)[:, ::2]),
    ],
)
def test_a_strided_view_is_refused_with_the_copy_to_make(call):
    with pytest.raises(
        LaunchError, match=r"is a strided view of another array \(like x\[::2\]\).*np.ascontiguousarray"
    ):
        call()


def test_contiguous_views_still_launch():
    assert np.array_equal(kernels.add(A[10:20], B[10:20]), A[10:20] + 1)  # a slice: one block of memory
    m = np.arange(12, dtype=np.float32).reshape(3, 4)
    assert np.array_equal(kernels.transpose(m.T), m)  # Fortran order is one block of memory too


def test_transpose_kernel_by_name_or_kernel_and_a_plain_function_refused():
    m = np.arange(12, dtype=np.float32).reshape(3, 4)
    for k in ("naive", "tiled", memory.transpose_naive_kernel):
        assert np.array_equal(kernels.transpose(m, kernel=k), m.T)
    with pytest.raises(LaunchError, match=r"unknown transpose kernel 'tile'; expected one of tiled, naive"):
        kernels.transpose(m, kernel="tile")
    with pytest.raises(LaunchError, match=r"it was given function '<lambda>', which is not one.*@cuda.jit"):
        kernels.transpose(m, kernel=lambda a, out: None)


def test_saxpy_alpha_must_be_a_number_not_text():
    with pytest.raises(LaunchError, match=r"alpha must be a number, but got the text '2': write it without quotes"):
        elementwise.saxpy("2", A, B)
    with pytest.raises(LaunchError, match="alpha must be one number"):
        elementwise.scale2d(None, np.ones((2, 2), np.float32))
    assert np.allclose(elementwise.saxpy(np.float64(2), A, B), 2 * A + B)


def test_atomic_launchers_check_their_input_before_its_shape():
    with pytest.raises(TypeError, match=r"x must be an array .* but got list"):
        reduce.sum_atomic([1.0, 2.0, 3.0])
    with pytest.raises(TypeError, match=r"x must be an array .* but got list"):
        reduce.count_above([1.0, 2.0], 0.5)
    assert reduce.sum_atomic(np.ones(3, np.float32)) == 3.0
