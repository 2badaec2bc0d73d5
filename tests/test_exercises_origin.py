"""Where an exception really is, in the verdict (gpulab.exercises.frames, .raised): the learner's kernel, the
learner's host code, gpulab's own launcher called with the learner's kernel (naming gpulab's function and the
learner's line that led there), or the launch of a kernel whose parameters do not match."""

from __future__ import annotations

import linecache
import os

import numpy as np
import pytest
from numba import cuda

from gpulab import capstone
from gpulab.exercises import check_kernel
from gpulab.exercises.frames import origin
from gpulab.kernels import nn_ops


@cuda.jit
def relu_extra_param(x, y, n):  # training's launcher passes (x, y): one parameter too many
    for i in range(cuda.grid(1), y.size, cuda.gridsize(1)):
        y[i] = max(x[i], 0.0)


@cuda.jit
def relu_past_the_end(x, y):
    for i in range(cuda.grid(1), y.size, cuda.gridsize(1)):
        y[i] = max(x[i + 1], 0.0)  # reads one past the end


def relu_not_a_kernel(x, y):  # no @cuda.jit
    pass


def _relu_inputs(n, rng):
    return (rng.uniform(-1, 1, n).astype(np.float32),)


def _check_through_gpulab(kernel):
    """The learner's host function calls gpulab's launcher nn_ops.relu with the learner's kernel."""

    def host(x, y):
        y[...] = nn_ops.relu(x, kernel=kernel)  # the learner's line that leads into gpulab's code

    # trusted: the host calls gpulab's launcher, which the own-code check would refuse before anything ran
    return check_kernel(kernel, lambda x: np.maximum(x, 0), inputs=_relu_inputs, sizes=[5], host=host, trusted=True)


def test_a_launch_by_gpulab_that_fails_on_the_kernels_parameters_says_so():
    res = _check_through_gpulab(relu_extra_param)
    assert res.status == "error", res
    # before: "TypeError in thread (0, 0, 0) of block (0, 0, 0): relu_extra_param() missing 1 required ..." and a
    # hint about "the inputs, in the order shown on the `input:` line", which is not what this launcher passes
    assert "in your code" not in res.message and "thread (0, 0, 0)" not in res.message
    assert "when gpulab's launcher (gpulab/kernels/grid_stride.py" in res.message
    assert "launched your kernel relu_extra_param, before any line of it ran" in res.message
    assert "your line that led there" in res.message and "nn_ops.relu(x, kernel=kernel)" in res.message
    assert "missing 1 required positional argument: 'n'" in res.message
    assert "gpulab's launcher passes to it" in res.hint and "not in gpulab's code" in res.hint


def test_an_error_raised_inside_gpulab_is_not_called_yours():
    res = _check_through_gpulab(relu_not_a_kernel)
    assert res.status == "error", res
    # before: "TypeError in your code: 'function' object is not subscriptable"
    assert "raised in gpulab's code (gpulab/kernels/grid_stride.py" in res.message
    assert "not in a line of yours" in res.message and "called with your kernel relu_not_a_kernel" in res.message
    assert "nn_ops.relu(x, kernel=kernel)" in res.message
    assert "@cuda.jit" in res.hint


def test_an_error_in_the_kernel_through_gpulabs_launcher_is_the_kernels_line():
    res = _check_through_gpulab(relu_past_the_end)
    assert not res.passed and "indexed past the end" in res.message, res
    assert "max(x[i + 1], 0.0)" in res.message and "gpulab's code" not in res.message


def test_the_checks_own_launch_with_wrong_parameters_keeps_its_hint():
    @cuda.jit
    def add(a, b, out, n):
        i = cuda.grid(1)
        if i < n:
            out[i] = a[i] + b[i]

    def inputs(n, rng):
        return rng.random(n).astype(np.float32), rng.random(n).astype(np.float32)

    res = check_kernel(add, lambda a, b: a + b, inputs=inputs, sizes=[5], threads=32)
    assert "when the check launched your kernel add, before any line of it ran" in res.message, res
    assert "in the order shown on the `input:` line" in res.hint


def test_the_capstone_names_the_parameters_its_launcher_passes():
    res = capstone.Capstone().register("relu", relu_extra_param)
    assert res.status == "failed", res  # the learner's kernel failed its check, not gpulab's code
    # before: "TypeError in thread (0, 0, 0) of block (0, 0, 0): ... missing 1 required positional argument: 'n'"
    assert "relu's kernel relu_extra_param" in res.message
    assert "relu_extra_param(x, y, n) takes 3 parameters" in res.message
    assert "nn_ops.relu passes 2: those of the course's kernel, relu_kernel(x, y)" in res.message
    assert capstone.signature_mismatch("relu", nn_ops.relu_kernel) == ""


def test_origin_of_an_error_in_plain_learner_code():
    try:
        [][1]
    except IndexError as exc:
        found = origin(exc)
    assert found.kind == "yours" and found.line is not None and "[][1]" in found.line[1]


def test_a_compile_error_on_launch_is_the_kernels_own():
    """In gpu mode Numba compiles the kernel at its first launch from gpulab's launcher: a TypingError there is
    the kernel's code, not the launch's parameters. The stack is built here from code objects named after a
    gpulab launcher and a Numba file (the simulator compiles nothing)."""
    import numba.core.errors as numba_errors
    from numba.core.errors import TypingError

    import gpulab.kernels.grid_stride as launcher_module

    dispatcher = os.path.join(os.path.dirname(numba_errors.__file__), os.pardir, "cuda", "dispatcher.py")
    ns: dict = {"TypingError": TypingError, "TypeError": TypeError}
    exec(compile("def __call__(err):\n    raise err('cannot compile')\n", dispatcher, "exec"), ns)  # the launch
    exec(compile("def launch_1d(err):\n    __call__(err)\n", launcher_module.__file__, "exec"), ns)
    found = {}
    for err in (TypingError, TypeError):
        try:
            ns["launch_1d"](err)
        except Exception as exc:  # noqa: BLE001
            found[err] = origin(exc)
    assert found[TypingError].kind == "yours" and found[TypingError].where == ""
    assert found[TypeError].kind == "launch" and "gpulab/kernels/grid_stride.py" in found[TypeError].where


def test_a_package_installed_in_dist_packages_is_not_the_learners_code():
    """Colab (and Debian) install packages in dist-packages, CuPy's frames name .pyx files: an error raised there,
    called from the learner's line, is not "raised in your code at line N" of the package's source."""
    package = {}
    exec(
        compile(
            "def fail(x):\n    raise ValueError('shapes do not match')\n",
            "/usr/local/lib/python3.12/dist-packages/numpy_like/core.py",
            "exec",
        ),
        package,
    )
    cython = {}
    exec(compile("def fail(x):\n    raise ValueError('bad')\n", "cupy/_core/core.pyx", "exec"), cython)
    for fail in (package["fail"], cython["fail"]):
        try:
            fail(1)  # the learner's line
        except ValueError as exc:
            found = origin(exc)
        assert found.kind == "yours" and found.line is not None and "fail(1)" in found.line[1], found


# --- an error raised in Numba's code that gpulab's code called for something other than a launch ---------------

_NUMBA = os.path.join(os.path.dirname(os.path.dirname(cuda.__file__)), "cuda")  # numba's cuda package (either mode)


def _module(path: str, source: str, ns: dict, monkeypatch) -> dict:
    """Code objects named after ``path`` (a gpulab or Numba file that does not exist), with ``source`` as its text."""
    monkeypatch.setitem(linecache.cache, path, (len(source), None, source.splitlines(True), path))
    exec(compile(source, path, "exec"), ns)
    return ns


def _gpulab_file(name: str) -> str:
    import gpulab

    return os.path.join(os.path.dirname(gpulab.__file__), "kernels", f"_{name}_for_a_test.py")


def test_an_error_in_a_transfer_by_gpulabs_code_is_not_called_a_launch(monkeypatch):
    """A real one in the simulator: gpulab's code copies a device array into a host array of the wrong shape."""
    ns = _module(_gpulab_file("copy_back"), "def copy_back(x_d, out):\n    x_d.copy_to_host(out)\n", {}, monkeypatch)

    def host(x, y):
        ns["copy_back"](cuda.to_device(x), np.zeros(2, np.float32))  # the learner's line that leads there
        y[...] = np.maximum(x, 0)

    res = check_kernel(relu_past_the_end, lambda x: np.maximum(x, 0), inputs=_relu_inputs, sizes=[5], host=host)
    assert res.status == "error", res
    # before: "ValueError when gpulab's launcher (gpulab/kernels/_copy_back_for_a_test.py, line 2, in copy_back)
    # launched your kernel relu_past_the_end, before any line of it ran"
    assert "launched" not in res.message and "before any line of it ran" not in res.message, res.message
    assert (
        "ValueError raised in Numba's code during a transfer (copy_to_host) by gpulab's code "
        "(gpulab/kernels/_copy_back_for_a_test.py, line 2, in copy_back), not in a line of yours" in res.message
    ), res.message
    assert 'ns["copy_back"](cuda.to_device(x)' in res.message and "incompatible shape" in res.message
    assert "their shapes and dtypes" in res.hint


def _raise_through(monkeypatch, gpulab_line: str, api: dict, error):
    """Raise ``error`` in Numba's code called from a gpulab line (``cuda`` there stands for ``api``)."""
    cuda_api = type("api", (), {name: staticmethod(fn) for name, fn in api.items()})
    ns = _module(_gpulab_file("launcher"), f"def step(x=None):\n    {gpulab_line}\n", {"cuda": cuda_api}, monkeypatch)
    with pytest.raises(error) as info:
        ns["step"]()
    return origin(info.value)


@pytest.mark.parametrize(
    "line,numba_fn,call,callee",
    [
        # the error is raised while Numba makes the CUDA context current: only the wrapper is on the stack, so the
        # name comes from gpulab's line
        ("x_d = cuda.to_device(x)", "_require_cuda_context", "transfer", "to_device"),
        ("cuda.synchronize()", "synchronize", "synchronisation", "synchronize"),
        ("f = cuda.typeof_pyval(x)", "typeof_pyval", "", ""),
    ],
)
def test_a_numba_error_after_gpulabs_code_names_what_gpulab_was_doing(monkeypatch, line, numba_fn, call, callee):
    """gpu mode's stacks, built from code objects named after a gpulab file and Numba's files."""
    from numba.core.errors import NumbaError

    class CudaAPIError(NumbaError):
        pass

    CudaAPIError.__module__ = "numba.cuda.cudadrv.driver"  # where Numba's own is defined

    source = f"def {numba_fn}(*args):\n    raise error('[700] CUDA_ERROR_ILLEGAL_ADDRESS')\n"
    numba = _module(os.path.join(_NUMBA, "cudadrv", "devices.py"), source, {"error": CudaAPIError}, monkeypatch)
    api_name = line.split("cuda.")[1].split("(")[0]  # what gpulab's line calls: Numba's function, or its wrapper
    found = _raise_through(monkeypatch, line, {api_name: numba[numba_fn]}, CudaAPIError)
    # before: kind "yours" (a Numba exception after a gpulab frame was taken for the kernel's failed compilation)
    assert found.kind == "numba" and (found.call, found.callee) == (call, callee), found
    assert found.where == "gpulab/kernels/_launcher_for_a_test.py, line 2, in step" and not found.harness


def test_the_verdicts_for_a_transfer_a_synchronisation_and_an_unknown_call():
    from gpulab.exercises.frames import Origin
    from gpulab.exercises.problem import Case
    from gpulab.exercises.raised import exception_verdict
    from gpulab.exercises.raised_elsewhere import DEVICE_FAULT_HINT

    case = Case(size=5, seed=0, inputs=(np.zeros(5, np.float32),), expected=(np.zeros(5, np.float32),))
    where = "gpulab/kernels/nn_ops.py, line 9, in relu"

    def verdict(found, text="bad shape"):
        exc = ValueError(text)
        exc.gpulab_origin, exc.gpulab_kernel = found, "relu_kernel"
        return exception_verdict(exc, "host function host(...)", case)

    _, msg, _ = verdict(Origin("numba", None, where, call="transfer", callee="to_device", package="numba"))
    assert msg.startswith(f"ValueError raised in Numba's code during a transfer (to_device) by gpulab's code ({where})")
    _, msg, hint = verdict(Origin("numba", None, where, package="CuPy"), "an illegal memory access was encountered")
    assert msg.startswith(f"ValueError raised in CuPy's code called from gpulab's code at {where}, not in a line")
    assert hint == DEVICE_FAULT_HINT
    _, msg, hint = verdict(Origin("numba", None, where, True, "synchronisation", "synchronize", "numba"))
    assert msg.startswith("ValueError when the check waited for your kernel relu_kernel to finish") and hint


def test_the_checks_own_synchronisation_is_named():
    """run.py's wait after the learner's kernel -> gpulab.runtime.synchronize -> Numba: an error there is reported
    as the check's wait for the kernel (on a GPU the kernel's illegal address shows there)."""
    from gpulab import runtime
    from gpulab.exercises import run as harness

    api: dict = {"error": RuntimeError}
    exec(
        compile("def synchronize():\n    raise error('illegal address')\n", os.path.join(_NUMBA, "api.py"), "exec"), api
    )
    rt: dict = {"cuda": type("api", (), {"synchronize": staticmethod(api["synchronize"])})}
    exec(compile("def synchronize():\n    cuda.synchronize()\n", runtime.__file__, "exec"), rt)
    run_ns: dict = {"synchronize": rt["synchronize"]}
    exec(compile("def go_and_wait():\n    synchronize()\n", harness.__file__, "exec"), run_ns)
    with pytest.raises(RuntimeError) as info:
        run_ns["go_and_wait"]()
    found = origin(info.value)
    assert found.kind == "numba" and found.harness and found.call == "synchronisation", found
