"""The simulator refuses a launch that every GPU refuses (gpulab.simulator.limits), with gpulab's launch error; it
warns about (or refuses) a launch of millions of threads, and refuses a list as a kernel argument
(gpulab.simulator.launches)."""

import re
import warnings

import numpy as np
import pytest
from numba import cuda

from gpulab import runtime
from gpulab.errors import UsageError
from gpulab.kernels._launch import LaunchError
from gpulab.simulator import limits

pytestmark = pytest.mark.skipif(not runtime.is_simulator(), reason="the simulator's launch limits")


@cuda.jit
def ones_kernel(x):
    i = cuda.grid(1)
    if i < x.size:
        x[i] = 1


@pytest.mark.parametrize(
    ("grid", "block", "says"),
    [
        (1, 2048, "a block can hold at most 1024 threads, but (2048, 1, 1) is 2048 threads"),
        (1, (32, 64), "a block can hold at most 1024 threads"),
        (1, (1, 1, 128), "at most 64 threads along z"),
        ((1, 70000), 1, "at most 65,535 blocks along y"),
    ],
)
def test_a_launch_a_gpu_refuses_is_refused(grid, block, says):
    x = np.zeros(8)
    with pytest.raises(LaunchError, match=says.replace("(", r"\(").replace(")", r"\)")):
        ones_kernel[grid, block](x)
    assert not x.any(), "nothing ran"


def test_the_largest_launches_a_gpu_takes_still_run():
    x = np.zeros(1100)
    ones_kernel[2, 1024](x)
    assert x.all()
    y = np.zeros(64)
    ones_kernel[1, (1, 1, 64)](y)  # threadIdx.x is 0 everywhere: only y[0] is written
    assert y[0] == 1


def test_forall_with_no_tasks_launches_nothing_as_numba_does_on_a_gpu():
    x = np.zeros(4)
    ones_kernel.forall(0)(x)
    assert not x.any()
    ones_kernel.forall(4)(x)
    assert x.all()


def test_the_check_is_installed_once_however_often_harden_runs():
    from numba.cuda.simulator.kernel import FakeCUDAKernel

    from gpulab import simulator

    before = FakeCUDAKernel.__getitem__
    simulator.harden()
    simulator.harden()
    assert FakeCUDAKernel.__getitem__ is before


@pytest.mark.parametrize(
    ("launch", "says"),
    [
        (lambda x: ones_kernel[1000 / 256, 256](x), "blocks must be a whole number, but got 3.90625 (a float)"),
        (lambda x: ones_kernel[4.0, 256](x), "(n + threads - 1) // threads, or gpulab.kernels.ceil_div(n, threads)"),
        (lambda x: ones_kernel[4, 256.0](x), "threads per block must be a whole number, but got 256.0"),
        (lambda x: ones_kernel[(2, 1.5), 32](x), "blocks must be a whole number, but got 1.5"),
        (lambda x: ones_kernel["4", 256](x), "blocks must be a whole number (or a tuple of up to 3"),
        (lambda x: ones_kernel[4](x), "a launch needs [blocks, threads_per_block]"),
        (lambda x: ones_kernel[4, 256, 0, 0, 0](x), "got ones_kernel[4, 256, 0, 0, 0]"),
    ],
)
def test_a_launch_numba_would_refuse_gets_gpulabs_message(launch, says):
    """numba's own errors ("griddim must be a sequence of integers", "'int' object is not subscriptable") name no
    fix: the float from `/` is the first-week mistake."""
    x = np.zeros(8)
    with pytest.raises(LaunchError, match=re.escape(says)):
        launch(x)
    assert not x.any(), "nothing ran"


def test_what_numba_takes_still_launches():
    x = np.zeros(40)
    ones_kernel[np.int64(2), np.int32(32)](x)  # NumPy integers, as numba-cuda takes them
    ones_kernel[(2,), [32]](x)
    ones_kernel[1, 64, 0](x)  # a stream
    assert x.all()


def test_a_launch_of_millions_of_threads_is_warned_about_with_its_time():
    with pytest.warns(limits.SlowLaunchWarning, match=r"runs 1,048,576 threads in the CUDA simulator") as seen:
        ones_kernel[4096, 256]  # configured only: the warning comes before the long run
    text = str(seen[0].message)
    assert "at least 5 s" in text and "gpulab.sizes(gpu=10_000_000, simulator=1000)" in text
    assert seen[0].filename == __file__  # the learner's line, not gpulab's or numba's


def test_a_launch_of_hours_is_refused():
    with pytest.raises(LaunchError, match=r"runs 71,680,000 threads in the CUDA simulator, more than the 67,108,864"):
        ones_kernel[70_000, 1024]


def test_a_small_launch_says_nothing():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ones_kernel[1023, 1024]  # just under WARN_THREADS


def test_a_list_argument_is_refused_at_the_launch():
    with pytest.raises(
        UsageError, match=r"argument 1 of ones_kernel \(x\) is a list: convert it first: x = np.asarray"
    ):
        ones_kernel[1, 32]([0.0, 0.0])
    with pytest.raises(UsageError, match=r"is a str: pass an array or a number"):
        ones_kernel[1, 32]("x")
