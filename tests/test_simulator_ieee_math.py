"""gpulab.simulator.ieee_math and .swap: ``math`` in a simulated kernel gives CUDA's inf / nan where Python's raises.

Before, the simulator ran ``math.log(0.0)`` as Python and the launch failed with "ValueError tid=[1, 0, 0]
ctaid=[0, 0, 0]: math domain error" where a GPU writes -inf; ``math.exp(1000.0)`` raised OverflowError where a GPU
gives inf. A learner's mistake got that exception instead of the verdict a GPU learner gets from the inf / nan in
the output: lab 12's fused attention kernel masking one key too many raised at ``math.log(row_sum)``.
"""

from __future__ import annotations

import math
import sys
import textwrap
from math import exp

import numpy as np
import pytest
from numba import cuda

import gpulab
from gpulab import lessons, problems
from gpulab.simulator import ieee_math as im
from gpulab.simulator.in_turn import plan
from gpulab.simulator.swap import swapped_modules
from gpulab.source import define

pytestmark = [
    pytest.mark.skipif(not gpulab.is_simulator(), reason="the simulator's math"),
    # inf / inf in a kernel's float32 arithmetic warns in NumPy, as a learner's would
    pytest.mark.filterwarnings("ignore:(overflow|invalid value|divide by zero) encountered:RuntimeWarning"),
]

INF, NAN = math.inf, math.nan
EDGES = [0.0, -0.0, 0.5, -0.5, 1.0, -1.0, 2.0, -2.0, 1e-30, 88.0, 89.0, 100.0, 709.0, 710.0, 1e4, -1e4, INF, -INF, NAN]

UNARY = {
    "exp": np.exp,
    "expm1": np.expm1,
    "log": np.log,
    "log2": np.log2,
    "log10": np.log10,
    "log1p": np.log1p,
    "sqrt": np.sqrt,
    "sin": np.sin,
    "cos": np.cos,
    "tan": np.tan,
    "asin": np.arcsin,
    "acos": np.arccos,
    "atan": np.arctan,
    "sinh": np.sinh,
    "cosh": np.cosh,
    "tanh": np.tanh,
    "asinh": np.arcsinh,
    "acosh": np.arccosh,
    "atanh": np.arctanh,
    "fabs": np.fabs,
    "degrees": np.degrees,
    "radians": np.radians,
}
if hasattr(math, "exp2"):  # Python 3.11+ (the simulator has it where math has it)
    UNARY["exp2"] = np.exp2
BINARY = {"pow": np.power, "atan2": np.arctan2, "hypot": np.hypot, "copysign": np.copysign, "fmod": np.fmod}
PAIRS = [
    (x, y)
    for x in (0.0, -0.0, 1.0, -1.0, 2.0, -8.0, 10.0, INF, -INF, NAN)
    for y in (0.0, -1.0, 2.0, 3.0, 0.5, 400.0, INF)
]


def _want(uf, dtype, *args):
    with np.errstate(all="ignore"):
        return uf(*(dtype(a) for a in args))


def _same(got, want, dtype):
    rtol = 1e-6 if dtype is np.float32 else 1e-13
    if np.isinf(want) or want == 0:
        return got == want  # inf with its sign; 0 exactly
    return bool(np.isclose(got, want, rtol=rtol, atol=0, equal_nan=True))


@pytest.mark.parametrize("name", list(UNARY))
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_each_function_gives_the_ufunc_result_and_the_precision_of_its_argument(name, dtype):
    """Edge values against NumPy's ufunc in the argument's precision, errors ignored (C99's special values, as
    CUDA's): float32 in, float32 out; a Python float in, a Python float out."""
    f = getattr(im, name)
    for x in EDGES:
        arg = np.float32(x) if dtype is np.float32 else x
        got, want = f(arg), _want(UNARY[name], dtype, x)
        assert type(got) is (np.float32 if dtype is np.float32 else float), (name, x, type(got))
        assert _same(got, want, dtype), (name, x, got, want)


@pytest.mark.parametrize("name", list(BINARY))
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_each_two_argument_function_gives_the_ufunc_result(name, dtype):
    """Against the float64 ufunc, rounded to float32 for float32 arguments. NumPy's power gives nan for
    (-inf) ** 0.5 where C99 (F.9.4.4), CUDA's pow and Python's give inf: that one is C99's."""
    f = getattr(im, name)
    for x, y in PAIRS:
        args = (np.float32(x), np.float32(y)) if dtype is np.float32 else (x, y)
        with np.errstate(all="ignore"):
            got, want = f(*args), dtype(_want(BINARY[name], np.float64, x, y))
        if name == "pow" and x == -INF and y == 0.5:
            want = dtype(INF)
        assert type(got) is (np.float32 if dtype is np.float32 else float), (name, x, y, type(got))
        assert _same(got, want, dtype), (name, x, y, got, want)


def test_the_special_values_cuda_gives():
    f32 = np.float32
    assert math.isinf(im.exp(1000.0)) and im.exp(f32(100.0)) == INF  # expf: float32 overflow (2.7e43 in double)
    assert im.log(0.0) == -INF and math.isnan(im.log(-1.0)) and im.log(-0.0) == -INF
    assert im.log1p(-1.0) == -INF and math.isnan(im.log1p(-2.0))
    assert math.isnan(im.sqrt(-1.0)) and math.isnan(im.sqrt(f32(-1.0))) and type(im.sqrt(f32(-1.0))) is f32
    assert math.isnan(im.acos(2.0)) and math.isnan(im.asin(-2.0)) and math.isnan(im.acosh(0.5))
    assert im.atanh(1.0) == INF and im.atanh(-1.0) == -INF and math.isnan(im.atanh(2.0))
    assert im.sinh(-1000.0) == -INF and im.cosh(-1000.0) == INF and im.sinh(f32(100.0)) == INF
    assert math.isnan(im.fmod(1.0, 0.0)) and math.isnan(im.fmod(INF, 1.0)) and im.fmod(5.5, 2.0) == 1.5
    assert math.isnan(im.remainder(1.0, 0.0)) and im.remainder(5.0, 2.0) == 1.0  # IEEE: round to even, not floor
    assert im.pow(0.0, -1.0) == INF and im.pow(-0.0, -1.0) == -INF and math.isnan(im.pow(-8.0, 0.5))
    assert im.pow(-10.0, 401.0) == -INF and im.pow(f32(10.0), np.int32(39)) == INF
    assert type(im.pow(f32(2.0), np.int32(3))) is f32 and type(im.pow(f32(2.0), f32(3.0))) is f32
    # Numba types pow(float32, int64) (a literal 2, an index) as float64: no float32 overflow there
    assert (
        type(im.pow(f32(2.0), 3)) is float
        and im.pow(f32(1e20), 2) == float(f32(1e20)) ** 2
        and im.pow(f32(10.0), 39) == 1e39
    )
    assert im.ldexp(-1.0, 2000) == -INF and im.ldexp(f32(1.0), 200) == INF and im.ldexp(f32(1.0), 3) == 8.0
    assert im.gamma(0.0) == INF and im.gamma(-0.0) == -INF and math.isnan(im.gamma(-2.0)) and im.gamma(200.0) == INF
    assert math.isnan(im.gamma(-INF)) and im.gamma(5.0) == 24.0 and type(im.gamma(f32(5.0))) is f32
    assert im.lgamma(0.0) == INF and im.lgamma(-3.0) == INF and im.lgamma(1e308) == INF
    assert im.erf(f32(0.5)) == np.float32(math.erf(0.5)) and im.erfc(1.0) == math.erfc(1.0)
    assert im.log(8.0, 2.0) == math.log(8.0, 2.0)  # Python's two-argument log (CUDA has none)
    assert im.nextafter(f32(1.0), f32(2.0)) == f32(1.0) + np.finfo(np.float32).eps  # the next float32
    assert im.frexp(f32(8.0)) == (0.5, 4) and type(im.frexp(f32(8.0))[0]) is f32
    assert im.modf(f32(2.5)) == (0.5, 2.0) and type(im.modf(f32(2.5))[1]) is f32


def test_every_name_of_math_is_there_and_the_rest_is_maths_own():
    for name in dir(math):
        if not name.startswith("_"):
            assert hasattr(im, name), name
    assert im.floor is math.floor and im.isnan is math.isnan and im.pi == math.pi and im.inf == math.inf
    with pytest.raises(TypeError):
        im.exp("1")  # not a number: Python's error, as before
    assert im.exp(1.0) == math.exp(1.0) and im.log(2) == math.log(2) and type(im.sin(1)) is float


@cuda.jit
def log_kernel(x, out):
    i = cuda.grid(1)
    if i < x.size:
        out[i] = math.log(x[i])


@cuda.jit
def exp_ratio_kernel(x, out):  # from math import exp: the imported function is swapped too
    i = cuda.grid(1)
    if i < x.size:
        out[i] = exp(x[i]) / exp(x[i])  # float32: inf / inf = nan past 88.7, as expf gives


@cuda.jit
def log_then_index_past_the_end(x, out):
    i = cuda.grid(1)
    out[i] = math.log(x[i] - 1.0)  # log(0) = -inf, then no bounds guard: thread 4 raises IndexError


def test_a_kernel_using_math_gets_what_a_gpu_writes():
    x, out = np.array([1, 0, -1], np.float32), np.zeros(3, np.float32)
    log_kernel[1, 32](x, out)  # before: ValueError tid=[1, 0, 0] ctaid=[0, 0, 0]: math domain error
    assert out[0] == 0.0 and out[1] == -np.inf and np.isnan(out[2]), out
    assert sys.modules["math"] is math and log_kernel.py_func.__globals__["math"] is math  # host: the real math


def test_a_kernel_using_from_math_import_exp_gets_float32_results():
    x, out = np.array([1, 88, 89, 1000], np.float32), np.zeros(4, np.float32)
    exp_ratio_kernel[1, 32](x, out)  # before: OverflowError at 1000, and 1.0 at 89 (exp in double)
    assert out[0] == 1.0 and out[1] == 1.0 and np.isnan(out[2]) and np.isnan(out[3]), out
    assert exp_ratio_kernel.py_func.__globals__["exp"] is math.exp


def test_host_math_is_the_real_one_after_a_kernel_raised():
    x, out = np.ones(4, np.float32), np.zeros(4, np.float32)
    with pytest.raises(IndexError):  # before: ValueError (math domain error) in thread 0, before any IndexError
        log_then_index_past_the_end[1, 8](x, out)
    globs = log_then_index_past_the_end.py_func.__globals__
    assert globs["math"] is math and globs["exp"] is math.exp and globs["cuda"] is cuda
    with pytest.raises(ValueError, match="math domain error"):
        math.log(0.0)  # host code keeps Python's math


def test_swapped_while_running_and_restored_after_nested_entries():
    globs = log_kernel.py_func.__globals__
    with swapped_modules(log_kernel.py_func, "fake cuda"):
        assert globs["math"] is im and globs["exp"] is im.exp and globs["cuda"] == "fake cuda"
        assert plan(log_kernel.py_func) is not None  # the stand-in is a library: the block still runs in turn
        with swapped_modules(log_kernel.py_func, "other"):  # a device function of the same module: counted
            assert globs["math"] is im
        assert globs["math"] is im
    assert globs["math"] is math and globs["exp"] is math.exp and globs["cuda"] is cuda


DEVICE_MODULE = textwrap.dedent(
    """
    @cuda.jit(device=True)
    def safe_log(v):
        return m.log(v) if v == 0 else lg(v)
    """
)


def test_a_device_function_in_another_module_gets_it():
    """A device function whose globals are another namespace (``import math as m``, ``from math import log as
    lg``), called from a kernel with a barrier (threads run barrier by barrier)."""
    ns = {"cuda": cuda, "m": math, "lg": math.log}
    safe_log = define(DEVICE_MODULE, "safe_log", ns)
    src = textwrap.dedent(
        """
        @cuda.jit
        def kernel(x, out):
            i = cuda.grid(1)
            cuda.syncthreads()  # nothing to wait for: the block runs barrier by barrier
            if i < x.size:
                out[i] = safe_log(x[i])
        """
    )
    kernel = define(src, "kernel", {"cuda": cuda, "safe_log": safe_log})
    x, out = np.array([np.e, 0, -1], np.float32), np.zeros(3, np.float32)
    kernel[1, 4](x, out)
    assert np.isclose(out[0], 1.0) and out[1] == -np.inf and np.isnan(out[2]), out
    assert ns["m"] is math and ns["lg"] is math.log


def test_the_cooperative_launch_gets_it():
    from gpulab.kernels import cooperative

    x, out = np.array([1, 0, -1, 1000], np.float32), np.zeros(4, np.float32)
    assert plan(log_kernel.py_func) is not None  # the launch runs the threads in turn, not on the simulator
    cooperative.launch(log_kernel, 1, 4, x, out)
    assert out[0] == 0.0 and out[1] == -np.inf and np.isnan(out[2]) and np.isclose(out[3], np.log(1000)), out
    assert log_kernel.py_func.__globals__["math"] is math


# --- verdicts: the mistakes that raised now get the hint a GPU learner gets from the inf / nan -----------------


def test_lab12_overmasking_is_named_not_a_math_domain_error():
    """``key >= row + offset``: query 0 sees no key at all, so row_sum = 0; ``math.log(row_sum)`` raised
    "ValueError ... math domain error". Now lse is -inf, out nan (0 / 0), and the mask is named."""
    from test_lab12_mistakes import _lab_kernel, _lesson_kernel

    over = [("key > row + offset", "key >= row + offset")]
    res = problems.lab12.FLASH_LSE.check(_lab_kernel(over), race_check=False, budget=None, ptx=None)
    assert not res.passed and "ValueError" not in res.message and "domain" not in res.message, res
    assert "mask key > i + (m - n), not >=" in res.hint, res
    res = lessons.check("12", "flash", _lesson_kernel(over))
    assert not res.passed and "mask key > i + (m - n), not >=" in res.hint, res


def test_softmax_without_the_maximum_gets_the_gpu_verdict():
    """Lab 05's softmax without the row maximum (logits up to +-1e4): OverflowError before, now inf / nan in the
    output, named as a GPU learner's is."""
    from test_problems import softmax_unshifted

    res = problems.lab05.SOFTMAX.check(softmax_unshifted, ptx=None)
    assert not res.passed and "OverflowError" not in res.message, res
    assert "subtract the row's maximum" in res.hint, res


def test_float32_rounding_does_not_depend_on_numpys_promotion_rules():
    """-0.0 + r rounds to float32 under NEP 50 (NumPy 2); under NumPy 1.x the module rounds explicitly instead."""
    r = im.exp(np.float32(1.0))
    assert type(r) is np.float32 and r == np.float32(math.e)
    assert type(im._NZ32 + 1.0) is np.float32
