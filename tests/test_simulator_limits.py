"""The simulator refuses a launch that every GPU refuses (gpulab.simulator.limits), with gpulab's launch error."""

import numpy as np
import pytest
from numba import cuda

from gpulab import runtime
from gpulab.kernels._launch import LaunchError

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
