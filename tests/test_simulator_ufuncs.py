"""GPU ufuncs, ``numba.vectorize([...], target="cuda")`` and ``guvectorize``, in the simulator
(gpulab.simulator.ufuncs) with numba-cuda's semantics. The tests without a skip mark expect the same in both
modes, so on a GPU (make gpu-check's tests stage) numba-cuda itself checks what the simulator does; the ones
marked ``simulator only`` check what only the simulator records or refuses."""

from __future__ import annotations

import inspect
import math

import numba
import numpy as np
import pytest
from numba import cuda, guvectorize, vectorize

from gpulab import runtime

simulator_only = pytest.mark.skipif(not runtime.is_simulator(), reason="simulator only")


@vectorize(["float32(float32, float32)", "float64(float64, float64)"], target="cuda")
def mul_add(a, b):
    return a * b + 1


@vectorize(["float32(float64)"], target="cuda")
def halve_to_float32(x):
    return x / 3  # computed in float64, stored as the signature's float32


@vectorize(["float32(float32)"], target="cuda")
def softplus(x):
    return max(x, 0.0) + math.log1p(math.exp(-abs(x)))


@guvectorize(["void(float32[:], float32, float32[:])"], "(n),()->(n)", target="cuda")
def scale_rows(row, s, out):
    for i in range(row.shape[0]):
        out[i] = row[i] * s


def _host(a):
    return a.copy_to_host() if hasattr(a, "copy_to_host") else np.asarray(a)


def test_the_signature_of_the_arrays_dtype_is_picked_and_gives_its_dtype():
    x = np.arange(7, dtype=np.float32)
    got = mul_add(x, x)
    assert isinstance(got, np.ndarray) and got.dtype == np.float32
    np.testing.assert_array_equal(got, x * x + 1)
    assert mul_add(x.astype(np.float64), x.astype(np.float64)).dtype == np.float64
    got = halve_to_float32(np.array([1.0, 2.0]))
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, np.float32([1 / 3, 2 / 3]))


def test_arrays_need_an_exact_match_and_no_match_is_numba_cudas_type_error():
    x = np.arange(4, dtype=np.int32)
    with pytest.raises(TypeError, match="No matching version.*exact types"):
        mul_add(x, x)
    with pytest.raises(TypeError, match="No matching version"):  # a float32 and a float64 array: no cast either
        mul_add(x.astype(np.float32), x.astype(np.float64))


def test_scalars_are_cast_to_the_arrays_signature():
    x = np.arange(5, dtype=np.float32)
    for scalar in (2.0, 2, np.float64(2.0)):
        got = mul_add(x, scalar)
        assert got.dtype == np.float32
        np.testing.assert_array_equal(got, x * 2 + 1)
    np.testing.assert_array_equal(mul_add(2.0, x), x * 2 + 1)


def test_arrays_of_the_same_ndim_broadcast_on_the_host_and_on_the_device():
    col = np.arange(4, dtype=np.float32).reshape(4, 1)
    row = np.arange(3, dtype=np.float32).reshape(1, 3)
    got = mul_add(col, row)
    assert got.shape == (4, 3)
    np.testing.assert_array_equal(got, col * row + 1)
    got_d = mul_add(cuda.to_device(col), cuda.to_device(row))
    np.testing.assert_array_equal(_host(got_d), col * row + 1)
    np.testing.assert_array_equal(mul_add(np.ones((2, 3), np.float32), 5.0), np.full((2, 3), 6, np.float32))


def test_arrays_of_different_ndim_broadcast_as_numba_cuda_does_not_as_numpy():
    """numba-cuda (0.22 to 0.30) compares a shorter array's axes with the result's from the left, so a (4, 1)
    column times a 1-D row reads only the row's first element. The simulator runs numba-cuda's code, so it
    agrees; the lesson broadcasts only arrays of the same ndim. If this fails on a GPU, numba-cuda fixed it."""
    col = np.arange(1, 5, dtype=np.float32).reshape(4, 1)
    row = np.arange(1, 4, dtype=np.float32)
    got = mul_add(col, row)
    np.testing.assert_array_equal(got, np.broadcast_to(col * row[0] + 1, (4, 3)))


def test_out_and_stream_keywords():
    x = np.arange(6, dtype=np.float32)
    out = np.zeros(6, np.float32)
    mul_add(x, x, out=out)
    np.testing.assert_array_equal(out, x * x + 1)
    x_d = cuda.to_device(x)
    out_d = cuda.device_array(6, np.float32)
    got = mul_add(x_d, x_d, out=out_d)
    np.testing.assert_array_equal(_host(out_d), x * x + 1)
    np.testing.assert_array_equal(_host(got), x * x + 1)
    s = cuda.stream()
    got = mul_add(x, x, stream=s)
    s.synchronize()
    np.testing.assert_array_equal(got, x * x + 1)


def test_device_inputs_give_a_device_array_and_host_inputs_a_host_array():
    x = np.linspace(-3, 3, 50).astype(np.float32)
    x_d = cuda.to_device(x)
    got = softplus(x_d)
    assert not isinstance(got, np.ndarray) and cuda.is_cuda_array(got)
    chained = softplus(softplus(x_d))  # stays on the device
    assert not isinstance(chained, np.ndarray)
    expect = np.logaddexp(0, np.logaddexp(0, x.astype(np.float64)))
    np.testing.assert_allclose(_host(chained), expect, rtol=1e-6)
    assert isinstance(softplus(x), np.ndarray)


def test_the_stable_softplus_holds_at_float32s_extremes():
    x = np.float32([-1000, -100, -20, 0, 20, 88, 89, 100, 1000, 3e38])
    np.testing.assert_allclose(softplus(x), np.logaddexp(0, x.astype(np.float64)), rtol=1e-6, atol=1e-30)


def test_a_ufunc_without_signatures_is_refused_as_numba_cuda_refuses_it():
    def f(a):
        return a + 1

    lazy = numba.vectorize(target="cuda")(f)  # numba-cuda builds it, with no kernel: every call has no match
    with pytest.raises(TypeError, match="No matching version"):
        lazy(np.ones(3, np.float32))
    with pytest.raises(TypeError, match="target"):  # the CPU's lazy DUFunc has no cuda target
        numba.vectorize(f, target="cuda")


def test_guvectorize_with_a_scalar_input_on_host_and_device():
    m = np.arange(12, dtype=np.float32).reshape(3, 4)
    np.testing.assert_array_equal(scale_rows(m, np.float32(2)), 2 * m)
    got = scale_rows(cuda.to_device(m), np.float32(3))
    np.testing.assert_array_equal(_host(got), 3 * m)


# --- the simulator's own records and refusals ----------------------------------------------------------------


@simulator_only
def test_chained_calls_on_host_arrays_copy_in_and_out_each_time_device_arrays_do_not():
    from gpulab import simulator

    n = 64
    x = np.ones(n, np.float32)
    with simulator.instrument() as ins:
        softplus(softplus(x))
    assert [(op.kind, op.nbytes) for op in ins.stream_ops] == [("h2d", 4 * n), ("kernel", 0), ("d2h", 4 * n)] * 2
    x_d = cuda.to_device(x)
    with simulator.instrument() as ins:
        out = softplus(softplus(x_d))
    assert [op.kind for op in ins.stream_ops] == ["kernel", "kernel"]
    with simulator.instrument() as ins:
        mul_add(x, 2.0)  # the scalar becomes a 1-element array broadcast with stride 0: 4 bytes copied
    assert [(op.kind, op.nbytes) for op in ins.stream_ops] == [
        ("h2d", 4 * n),
        ("h2d", 4),
        ("kernel", 0),
        ("d2h", 4 * n),
    ]
    np.testing.assert_allclose(out.copy_to_host(), np.logaddexp(0, np.logaddexp(0, 1.0)), rtol=1e-6)


@simulator_only
def test_the_ufunc_launches_blocks_of_threads_as_forall_does_on_a_gpu():
    from gpulab import simulator

    with simulator.instrument() as ins:
        softplus(np.zeros(1500, np.float32))
    (launch,) = [op for op in ins.stream_ops if op.kind == "kernel"]
    assert launch.name.startswith("__vectorized_softplus")
    block_dims = set()

    @cuda.jit
    def blocks(out):
        i = cuda.grid(1)
        if i < out.size:
            out[i] = cuda.blockDim.x

    out = np.zeros(1500, np.int64)
    blocks.forall(1500)(out)
    block_dims.update(out.tolist())
    assert block_dims == {1024}


@simulator_only
def test_what_a_gpu_compile_refuses_is_refused_when_the_ufunc_is_made():
    from numba.core.errors import TypingError

    def helper(x):
        return x + 1

    with pytest.raises(TypingError, match=r"np\.sum"):

        @vectorize(["float32(float32)"], target="cuda")
        def summed(x):
            return np.sum(np.array([x, x]))

    with pytest.raises(TypingError, match="plain Python function.*cuda.jit\\(device=True\\)"):

        @vectorize(["float32(float32)"], target="cuda")
        def calls_helper(x):
            return helper(x)

    device_helper = cuda.jit(device=True)(helper)

    @vectorize(["float32(float32)"], target="cuda")
    def calls_device_function(x):
        return device_helper(x)

    np.testing.assert_array_equal(calls_device_function(np.float32([1, 2])), [2, 3])


def softplus_with_numpy(x):  # the stable formula with NumPy's ufuncs: right values, no GPU compile
    return np.maximum(x, 0) + np.log1p(np.exp(-np.abs(x)))


def softplus_logaddexp(x):
    return np.logaddexp(0, x)


def softplus_with_supported_numpy(x):  # np.maximum is in numba-cuda's CUDA ufunc table: it compiles
    return np.maximum(x, 0.0) + math.log1p(math.exp(-abs(x)))


@simulator_only
def test_numpy_ufuncs_a_gpu_lacks_on_scalars_are_refused_when_the_ufunc_is_made():
    from numba.core.errors import TypingError

    with pytest.raises(TypingError) as raised:
        vectorize(["float32(float32)"], target="cuda")(softplus_with_numpy)
    for call, fix in (("np.abs", "abs(x)"), ("np.exp", "math.exp(x)"), ("np.log1p", "math.log1p(x)")):
        assert f"`{call}(...)` on a scalar" in str(raised.value) and f"use {fix}" in str(raised.value)
    with pytest.raises(TypingError, match=r"`np\.logaddexp\(\.\.\.\)` on a scalar.*math\.log1p") as raised:
        vectorize(["float32(float32)"], target="cuda")(softplus_logaddexp)
    assert "plain Python function" not in str(raised.value)  # `np.logaddexp` is no call of this module's logaddexp
    ok = vectorize(["float32(float32)"], target="cuda")(softplus_with_supported_numpy)
    np.testing.assert_allclose(ok(np.float32([-100, 0, 100])), [0, math.log(2), 100], rtol=1e-6, atol=1e-30)


# --- PTX: the scalar functions compile as device functions --------------------------------------------------


@simulator_only  # on a GPU numba-cuda refuses these answers itself, when the ufunc is made
@pytest.mark.ptx
@pytest.mark.parametrize(
    "answer, calls, fixes",
    [
        (softplus_with_numpy, ["np.abs", "np.exp", "np.log1p"], ["abs(x)", "math.exp(x)", "math.log1p(x)"]),
        (softplus_logaddexp, ["np.logaddexp"], ["max(a, b) + math.log1p(math.exp(-abs(a - b)))"]),
    ],
)
def test_the_softplus_checks_ptx_stage_names_the_numpy_call_a_gpu_cannot_compile(monkeypatch, answer, calls, fixes):
    """The exercise's PTX stage compiles the scalar function as numba-cuda does (``device=True``); the simulator's
    source check is turned off here so that the values are right and only that stage can refuse it."""
    from gpulab.lessons import gpu_ufunc
    from gpulab.lessons.ex_05_10 import EXERCISES_LIST
    from gpulab.simulator import ufuncs

    monkeypatch.setattr(ufuncs, "python_only_ufunc", lambda fn: [])
    (exercise,) = [e for e in EXERCISES_LIST if e.name == "softplus"]
    res = exercise.check(gpu_ufunc.GPUUfunc(answer))
    assert res.status == "failed" and res.score == res.max_score / 2, res.message
    assert res.message.startswith("correct on all") and "PTX" in res.message
    assert f"`{calls[0]}(...)` on a scalar does not compile for a GPU" in res.message
    for call, fix in zip(calls, fixes):
        assert f"`{call}`" in res.hint and fix in res.hint, res.hint
    assert (
        exercise.check(exercise.reference, trusted=True).status == "passed"
    )  # the reference compiles: the stage passes it


@pytest.mark.ptx
def test_the_scalar_functions_compile_to_ptx_as_device_functions():
    from gpulab import ptx
    from gpulab.lessons import answers_05_10

    from gpulab.lessons.gpu_ufunc import scalar_function

    def scalar_source(ufunc):  # the scalar function a ufunc was made from, without its decorator
        lines = inspect.getsource(scalar_function(ufunc)).splitlines(keepends=True)
        return "import math\n\n" + "".join(ln for ln in lines if not ln.lstrip().startswith("@"))

    items = {
        "softplus": {"source": scalar_source(softplus), "name": "softplus", "signature": "float32(float32)"},
        "mul_add": {"source": scalar_source(mul_add), "name": "mul_add", "signature": "float32(float32, float32)"},
        "answer": {
            "source": inspect.getsource(answers_05_10),
            "name": "softplus",
            "signature": "float32(float32)",
        },
        "supported_numpy": {  # np.maximum is in numba-cuda's CUDA ufunc table (gpulab's CUDA_UFUNCS)
            "source": "import math\nimport numpy as np\n\n" + inspect.getsource(softplus_with_supported_numpy),
            "name": "softplus_with_supported_numpy",
            "signature": "float32(float32)",
        },
        "placeholder": {  # the learner version's body, before it is filled in
            "source": "def softplus(x):\n    raise NotImplementedError('replace this line with your code')\n",
            "name": "softplus",
            "signature": "float32(float32)",
        },
    }
    for item in items.values():
        item["device"] = True
    compiled = ptx.compile_sources(items, ccs=((7, 5),))[(7, 5)]
    assert compiled == dict.fromkeys(items, "ok"), compiled


def test_copies_counts_what_a_chain_of_ufunc_calls_moves_in_both_modes():
    """gpulab.copies.count: the lesson's count of bytes between host and device (on a GPU it wraps numba-cuda's
    copies, so this checks that wrapper too)."""
    from gpulab import copies

    n = 100
    x = np.linspace(-5, 5, n).astype(np.float32)
    with copies.count() as host_chain:
        softplus(softplus(x))
    assert (host_chain.h2d, host_chain.d2h, host_chain.calls) == (8 * n, 8 * n, 4)
    with copies.count() as device_chain:
        x_d = cuda.to_device(x)
        back = softplus(softplus(x_d)).copy_to_host()
    assert (device_chain.h2d, device_chain.d2h, device_chain.calls) == (4 * n, 4 * n, 2)
    np.testing.assert_allclose(back, np.logaddexp(0, np.logaddexp(0, x.astype(np.float64))), rtol=1e-6)
    with copies.count() as scalar:
        mul_add(x, 2.0)  # the scalar is copied as one element, broadcast on the device with stride 0
    assert (scalar.h2d, scalar.d2h) == (4 * n + 4, 4 * n)
