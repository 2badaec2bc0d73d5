"""kernels.conv: the direct convolution kernel against NumPy, including sizes that do not fill a block."""

import numpy as np
import pytest

from gpulab.kernels import conv, nn_ops


@pytest.mark.parametrize(
    "shape,f,k,stride,pad",
    [
        ((1, 1, 5, 5), 1, 3, 1, 0),
        ((2, 3, 7, 6), 4, 3, 1, 1),
        ((1, 2, 9, 9), 3, 3, 2, 1),
        ((2, 1, 4, 4), 2, 1, 1, 0),
    ],
)
def test_direct_matches_reference(shape, f, k, stride, pad):
    rng = np.random.default_rng(0)
    x = rng.standard_normal(shape).astype(np.float32)
    w = rng.standard_normal((f, shape[1], k, k)).astype(np.float32)
    b = rng.standard_normal(f).astype(np.float32)
    out = conv.conv2d_direct(x, w, b, stride=stride, pad=pad)
    ref = conv.conv2d_reference(x, w, b, stride, pad)
    np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-4)
    # im2col + GEMM (the nn_ops kernels, channels-last columns) computes the same thing
    cols, ho, wo = nn_ops.im2col(x, k, k, stride, pad)
    wmat = np.ascontiguousarray(w.transpose(0, 2, 3, 1).reshape(f, -1).T)  # (k*k*C, F)
    y = nn_ops.gemm(cols, wmat) + b
    np.testing.assert_allclose(y.reshape(shape[0], ho, wo, f).transpose(0, 3, 1, 2), ref, rtol=1e-4, atol=1e-4)


def test_flops_and_errors():
    assert conv.conv2d_flops((2, 3, 8, 8), (4, 3, 3, 3), 1, 1) == 2 * 2 * 4 * 64 * 27
    x = np.zeros((1, 2, 5, 5), np.float32)
    with pytest.raises(ValueError, match="C = 2"):
        conv.conv2d_direct(x, np.zeros((1, 3, 3, 3), np.float32), np.zeros(1, np.float32))
    with pytest.raises(ValueError, match="one value per filter"):
        conv.conv2d_direct(x, np.zeros((2, 2, 3, 3), np.float32), np.zeros(1, np.float32))
    with pytest.raises(TypeError, match="float32"):
        conv.conv2d_direct(x.astype(np.float64), np.zeros((1, 2, 3, 3), np.float32), np.zeros(1, np.float32))
