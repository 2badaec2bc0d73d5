"""The simulator refuses what numba-cuda refuses on a GPU about device functions and kernels
(gpulab.simulator.device_calls): launching a device function, launching a kernel in a kernel, calling a device
function from the host. What a GPU allows still runs: a device function called in a kernel, a kernel called like a
function in a kernel (numba-cuda compiles it as a device-function call). The GPU's side is in tests/test_ptx.py."""

import numpy as np
import pytest
from numba import cuda
from numba.core.errors import TypingError

from gpulab import runtime
from gpulab.simulator import device_calls

pytestmark = pytest.mark.skipif(not runtime.is_simulator(), reason="the simulator's rules for device functions")


@cuda.jit(device=True)
def twice(v):
    return 2 * v


@cuda.jit
def twice_kernel(x, out):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = twice(x[i])


@cuda.jit
def ones_kernel(out):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = 1


@cuda.jit
def launches_ones(out):
    ones_kernel[1, 32](out)


@cuda.jit
def launches_twice(x, out):
    twice[1, 32](x)


@cuda.jit
def calls_ones(out):
    ones_kernel(out)  # a call, not a launch: numba-cuda compiles it as a device function, in this thread


def test_a_device_function_called_in_a_kernel_runs():
    x = np.arange(40, dtype=np.float32)
    out = np.zeros_like(x)
    twice_kernel[2, 32](x, out)
    assert np.array_equal(out, 2 * x)


def test_launching_a_device_function_raises_the_gpus_runtime_error():
    x = np.ones(4, np.float32)
    launch = twice[1, 32]  # configuring is allowed on a GPU too
    with pytest.raises(RuntimeError, match=device_calls.LAUNCHED_DEVICE_FUNCTION) as err:
        launch(x)
    assert "`twice` is a device function" in str(err.value) and "Launch a kernel" in str(err.value)


def test_calling_a_device_function_from_the_host_raises_the_gpus_value_error():
    with pytest.raises(ValueError, match=device_calls.HOST_CALL) as err:
        twice(3.0)
    assert "twice.py_func(...)" in str(err.value)
    assert twice.py_func(3.0) == 6.0  # its Python code, as the message says


@pytest.mark.parametrize(
    ("kernel", "callee", "advice"),
    [(launches_ones, "ones_kernel", "from the host after"), (launches_twice, "twice", "Call the device function")],
)
def test_a_launch_inside_a_kernel_raises_the_gpus_typing_error(kernel, callee, advice):
    out = np.zeros(4, np.float32)
    args = (out, out) if kernel is launches_twice else (out,)
    with pytest.raises(TypingError) as err:
        kernel[1, 4](*args)
    text = str(err.value)
    assert device_calls.LAUNCH_IN_KERNEL in text and f"CUDADispatcher({callee})" in text and advice in text
    assert "tid=" in text, "the simulator names the thread"
    assert not out.any(), "the inner kernel did not run"
    with pytest.raises(ValueError, match="launch configuration was not specified"):
        ones_kernel(out)  # the refused launch left ones_kernel unconfigured, as on a GPU


def test_a_kernel_called_like_a_function_in_a_kernel_runs_in_the_calling_thread():
    out = np.zeros(4, np.float32)
    calls_ones[1, 4](out)
    assert np.array_equal(out, np.ones(4, np.float32))


def test_a_launch_leaves_the_kernel_unconfigured_as_on_a_gpu():
    out = np.zeros(4, np.float32)
    ones_kernel[1, 4](out)  # numba-cuda: kernel[...] is a launch object; the kernel itself stays unconfigured
    assert np.array_equal(out, np.ones(4, np.float32))
    with pytest.raises(ValueError, match="Kernel launch configuration was not specified"):
        ones_kernel(out)
    stream = cuda.stream()
    ones_kernel[2, 2, stream](out)  # configurations with a stream still launch
    stream.synchronize()


def test_install_is_idempotent():
    from numba.cuda.simulator.kernel import FakeCUDAKernel

    before = FakeCUDAKernel.__getitem__, FakeCUDAKernel.__call__
    device_calls.install()
    assert (FakeCUDAKernel.__getitem__, FakeCUDAKernel.__call__) == before
