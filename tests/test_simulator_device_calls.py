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


@cuda.jit
def launch_size_kernel(out):  # writes the launch's size, one element per thread
    i = cuda.grid(1)
    if i < out.size:
        out[i] = cuda.gridDim.x * cuda.blockDim.x


@pytest.mark.parametrize("launched_before", [True, False])
def test_a_kernel_called_without_brackets_is_refused_with_the_launch_it_needs(launched_before):
    from gpulab.kernels import LaunchError

    out = np.zeros(8, np.float32)
    if launched_before:
        launch_size_kernel[2, 4](out)  # the simulator kept (2, 4) on the kernel and ran a later bare call with it
        out[:] = 0
    with pytest.raises(LaunchError) as err:
        launch_size_kernel(out)
    text = str(err.value)
    assert isinstance(err.value, ValueError) and text.startswith(device_calls.HOST_CALL), "numba-cuda's on a GPU"
    assert "launch_size_kernel(...) needs its launch configuration: launch_size_kernel[blocks, threads](...)" in text
    assert "called without the brackets" in text
    assert not out.any(), "nothing ran"


def test_a_configured_launch_runs_again_and_apart_from_other_configurations():
    out = np.zeros(16, np.float32)
    small, large = launch_size_kernel[1, 4], launch_size_kernel[2, 8]  # numba-cuda: two launch objects
    for _ in range(2):
        small(out)
        assert out[:4].tolist() == [4.0] * 4 and not out[4:].any()
        out[:] = 0
        large(out)
        assert out.tolist() == [16.0] * 16
        out[:] = 0
    with pytest.raises(ValueError, match="needs its launch configuration"):
        launch_size_kernel(out)  # neither configuration stuck to the kernel


def test_a_bare_call_under_the_harness_interception_is_refused_before_it():
    from gpulab.kernels import LaunchError
    from gpulab.simulator.launches import intercepted

    out, taken = np.zeros(8, np.float32), []
    launch_size_kernel[1, 8](out)
    with intercepted(launch_size_kernel, lambda grid, block, args: taken.append((grid, block))):
        with pytest.raises(LaunchError, match="launch_size_kernel\\[blocks, threads\\]"):
            launch_size_kernel(out)  # read the last launch's configuration (or None) before
        assert taken == []
        launch_size_kernel[2, 4](out)  # a launch still goes to the handler
    assert taken == [((2, 1, 1), (4, 1, 1))]


def test_benchmark_refuses_the_kernel_after_a_launch_and_takes_the_launch():
    from gpulab import timing

    x = np.ones(8, np.float32)
    launch_size_kernel[1, 8](x)
    with pytest.raises(ValueError, match="without its launch configuration"):
        timing.benchmark(launch_size_kernel, x, repeat=1, warmup=0)
    assert len(timing.benchmark(launch_size_kernel[1, 8], x, repeat=2, warmup=0).times) == 2


def test_forall_launches_without_configuring_the_kernel():
    out = np.zeros(10, np.float32)
    launch_size_kernel.forall(10)(out)  # blocks of 1024 threads, as numba-cuda's ForAll
    assert out.tolist() == [1024.0] * 10
    with pytest.raises(ValueError, match="needs its launch configuration"):
        launch_size_kernel(out)


def test_install_is_idempotent():
    from numba.cuda.simulator.kernel import FakeCUDAKernel

    before = FakeCUDAKernel.__getitem__, FakeCUDAKernel.__call__
    device_calls.install()
    assert (FakeCUDAKernel.__getitem__, FakeCUDAKernel.__call__) == before
