"""Where an exception really is, in the verdict (gpulab.exercises.frames, .raised): the learner's kernel, the
learner's host code, gpulab's own launcher called with the learner's kernel (naming gpulab's function and the
learner's line that led there), or the launch of a kernel whose parameters do not match."""

from __future__ import annotations

import numpy as np
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

    return check_kernel(kernel, lambda x: np.maximum(x, 0), inputs=_relu_inputs, sizes=[5], host=host)


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
    assert res.status == "error", res
    # before: "TypeError in thread (0, 0, 0) of block (0, 0, 0): ... missing 1 required positional argument: 'n'"
    assert "refused your kernel relu_extra_param" in res.message
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

    ns: dict = {"TypingError": TypingError, "TypeError": TypeError}
    exec(compile("def compile_kernel(err):\n    raise err('cannot compile')\n", numba_errors.__file__, "exec"), ns)
    exec(compile("def launch_1d(err):\n    compile_kernel(err)\n", launcher_module.__file__, "exec"), ns)
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
