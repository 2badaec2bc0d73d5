"""gpulab.gradcheck: every layer of gpulab.nn passes; a wrong backward is caught."""

import numpy as np
import pytest

from gpulab import gradcheck, nn


def _x(shape, seed=1):
    x = np.random.default_rng(seed).standard_normal(shape)
    return np.where(np.abs(x) < 0.05, 0.1, x)  # keep ReLU inputs away from the kink at 0


@pytest.mark.parametrize(
    "layer,shape",
    [
        (lambda: nn.Linear(5, 3), (4, 5)),
        (lambda: nn.Conv2d(2, 3, 3, padding=1), (2, 2, 5, 5)),
        (lambda: nn.Conv2d(1, 2, 3, stride=2), (1, 1, 7, 7)),
        (lambda: nn.MaxPool2d(2), (2, 2, 4, 6)),
        (lambda: nn.ReLU(), (3, 7)),
    ],
)
def test_layers_pass(layer, shape):
    errs = gradcheck.check_layer(layer(), _x(shape))
    assert set(errs) >= {"x"}
    assert max(errs.values()) < 1e-6, errs


def test_loss_passes():
    rng = np.random.default_rng(0)
    assert gradcheck.check_loss(nn.SoftmaxCrossEntropy(), rng.standard_normal((4, 5)), np.array([0, 4, 2, 2])) < 1e-6


def test_a_wrong_backward_is_caught():
    class BadReLU(nn.ReLU):
        def backward(self, dout):
            return dout  # forgot the mask

    assert gradcheck.check_layer(BadReLU(), _x((3, 7)))["x"] > 1e-2


def test_numerical_gradient_and_relative_error():
    x = np.array([1.0, -2.0, 3.0])
    g = gradcheck.numerical_gradient(lambda: float((x**3).sum()), x)
    np.testing.assert_allclose(g, 3 * x**2, rtol=1e-6)
    np.testing.assert_array_equal(x, [1.0, -2.0, 3.0])  # restored
    assert gradcheck.relative_error([1, 2], [1, 2]) == 0 and gradcheck.relative_error([0], [0]) == 0
