"""A small CNN engine: layers with explicit forward and backward, on NumPy, CuPy or the lab's kernels.

Every layer is a few lines of array code written against ``xp`` (NumPy or CuPy, taken from the
inputs); the ``kernels`` backend sends the heavy operations through :mod:`gpulab.kernels.nn_ops`.
"""

from __future__ import annotations

from .amp import MixedPrecision
from .conv import Conv2d
from .init import he_normal
from .io import checkpoint_path, load, save
from .layers import Dropout, Flatten, Linear, MaxPool2d, ReLU
from .loss import SoftmaxCrossEntropy
from .models import mnist_cnn
from .module import Module
from .ops import BACKENDS
from .optimes import OpTimes
from .optim import SGD, Adam
from .parallel import DataParallel
from .sequential import Sequential
from .step import StepSums, forward_backward, train_step

__all__ = [
    "Adam",
    "BACKENDS",
    "Conv2d",
    "DataParallel",
    "Dropout",
    "Flatten",
    "Linear",
    "MaxPool2d",
    "MixedPrecision",
    "Module",
    "OpTimes",
    "ReLU",
    "SGD",
    "Sequential",
    "SoftmaxCrossEntropy",
    "StepSums",
    "checkpoint_path",
    "forward_backward",
    "he_normal",
    "load",
    "mnist_cnn",
    "save",
    "train_step",
]
