"""gpulab's gpu-mode library paths, run in emulated gpu mode (tests/gpu_emulation/emulate.py).

Collected only by tests/test_gpu_emulated.py, which runs this file in a pytest subprocess with
``-p gpu_emulation.plugin`` (the name does not start with ``test_``, so the simulator-mode run never collects it).
Each check hands the library CuPy arrays (the emulated CuPy refuses what CuPy refuses) and reads results back
with ``to_host``: a ``np.asarray(cupy_array)`` or a NumPy array mixed into a CuPy operation in a gpu-mode path fails
here as it would on a GPU.
"""

from __future__ import annotations

import numpy as np
import pytest
from numba import cuda

import gpulab
from gpulab import runtime

cupy = pytest.importorskip("cupy")
RNG = np.random.default_rng(0)


def test_the_mode_is_emulated_gpu():
    assert gpulab.is_gpu() and not gpulab.is_simulator()
    assert runtime.xp() is cupy and cupy.EMULATED
    assert runtime.sizes(gpu=1 << 24, simulator=1 << 10) == 1 << 10


def test_the_stand_in_refuses_what_cupy_refuses():
    a = cupy.arange(4, dtype=cupy.float32)
    assert not isinstance(a, np.ndarray) and type(a).__module__ == "cupy"
    for bad in (
        lambda: np.asarray(a),
        lambda: a + np.ones(4),
        lambda: np.ones(4) * a,
        lambda: cupy.maximum(a, np.zeros(4)),
        lambda: np.concatenate([a, np.zeros(4)]),
    ):
        with pytest.raises(TypeError):
            bad()
    # accepted: np.allclose dispatches to cupy.allclose, which copies a NumPy operand over (cupy/_logic/comparison.py)
    assert isinstance(np.allclose(a, np.arange(4)), cupy.ndarray)
    with pytest.raises(ValueError, match="cannot be used for fill"):
        a[...] = np.zeros(4, np.float32)
    assert isinstance(a.sum(), cupy.ndarray) and a.sum().ndim == 0 and float(a.sum()) == 6.0
    assert isinstance(a[1], cupy.ndarray) and int(a[1]) == 1
    assert isinstance(np.exp(a), cupy.ndarray)  # NumPy's ufuncs dispatch to CuPy's
    assert (a * np.float32(2)).get().tolist() == [0, 2, 4, 6]  # NumPy scalars are accepted
    with pytest.raises(AttributeError):
        cupy.not_a_cupy_function  # noqa: B018


def test_to_device_and_to_host():
    d = runtime.to_device(np.arange(3, dtype=np.float32))
    assert isinstance(d, cupy.ndarray)
    h = runtime.to_host(d)
    assert isinstance(h, np.ndarray) and h.tolist() == [0, 1, 2]
    assert runtime.array_module(d) is cupy and runtime.array_module(h) is np


def test_benchmark_times_cupy_work_with_cuda_events():
    from gpulab import timing

    a = cupy.ones((64, 64), cupy.float32)
    res = timing.benchmark(cupy.matmul, a, a, repeat=3)
    assert res.clock == "CUDA events" and len(res.times) == 3 and res.median >= 0
    assert timing.device_name() == "Tesla T4"


def test_reference_kernels_on_cupy_arrays():
    from gpulab.kernels import elementwise, reduce
    from gpulab.kernels import histogram as histogram_fn
    from gpulab.kernels import matmul as matmul_fn

    x = RNG.random(1000).astype(np.float32)
    xd = cupy.asarray(x)
    out = elementwise.add(xd, xd)
    assert isinstance(out, cupy.ndarray) and np.allclose(runtime.to_host(out), 2 * x)
    assert abs(float(reduce.sum_tree(xd)) - x.sum()) < 1e-2
    assert abs(float(reduce.max_tree(xd)) - x.max()) < 1e-6
    a, b = RNG.random((20, 12)).astype(np.float32), RNG.random((12, 9)).astype(np.float32)
    c = matmul_fn(cupy.asarray(a), cupy.asarray(b))
    assert np.allclose(runtime.to_host(c), a @ b, atol=1e-4)
    v = RNG.integers(0, 256, 2000).astype(np.int32)
    h = histogram_fn(cupy.asarray(v))
    assert np.array_equal(runtime.to_host(h), np.bincount(v, minlength=256))
    s = reduce.softmax_rows(cupy.asarray(a))
    assert np.allclose(runtime.to_host(s).sum(axis=1), 1, atol=1e-5)


@pytest.mark.parametrize("backend", ["cupy", "kernels"])
def test_nn_forward_backward_on_the_device(backend):
    from gpulab import nn

    model = nn.mnist_cnn(image_size=8, channels=(2, 3), hidden=8, dropout=0.0, backend=backend)
    x = cupy.asarray(RNG.random((4, 1, 8, 8)).astype(np.float32))
    y = cupy.asarray(np.array([1, 2, 3, 0]))
    logits = model.forward(x)
    assert isinstance(logits, cupy.ndarray)
    loss_fn = nn.SoftmaxCrossEntropy()
    loss = loss_fn(logits, y)
    model.backward(loss_fn.backward())
    assert np.isfinite(float(loss))
    for _, p, g in model.parameters():
        assert isinstance(p, cupy.ndarray) and isinstance(g, cupy.ndarray)
    state = model.state_dict()
    assert all(isinstance(v, np.ndarray) for v in state.values())
    model.load_state_dict(state)


@pytest.mark.parametrize("backend", ["cupy", "kernels"])
def test_a_host_batch_for_a_model_on_the_device_is_refused_with_the_move(backend):
    """Before, CuPy's implicit-conversion TypeError came from deep inside the first op (gemm)."""
    from gpulab import nn
    from gpulab.errors import UsageError

    model = nn.mnist_cnn(image_size=8, channels=(2, 3), hidden=8, dropout=0.0, backend=backend)
    x = RNG.random((4, 1, 8, 8)).astype(np.float32)
    with pytest.raises(UsageError, match=r"x is a NumPy array .*x = gpulab.to_device\(x\)"):
        model.forward(x)
    host = nn.mnist_cnn(image_size=8, channels=(2, 3), hidden=8, dropout=0.0, backend="numpy")
    with pytest.raises(UsageError, match=r"x is a CuPy array .*gpulab.to_host\(x\)"):
        host.forward(cupy.asarray(x))


def test_fit_and_evaluate_on_the_device():
    from gpulab import data, nn, train

    ds = data.load("digits", size=8)
    ds.x_train, ds.y_train, ds.x_test, ds.y_test = ds.x_train[:64], ds.y_train[:64], ds.x_test[:32], ds.y_test[:32]
    model = nn.mnist_cnn(image_size=ds.x_train.shape[-1], channels=(2, 3), hidden=8, dropout=0.0, backend="cupy")
    hist = train.fit(model, ds, epochs=1, batch_size=32, progress=False)
    assert np.isfinite(hist.train_loss[-1])
    ev = train.evaluate(model, ds.x_test, ds.y_test)
    assert isinstance(ev["predictions"], np.ndarray) and 0 <= ev["accuracy"] <= 1


def test_interop_on_the_device():
    from gpulab import interop

    x = RNG.standard_normal(300).astype(np.float32)
    k = interop.make_squared_diff_kernel()
    got = k(cupy.asarray(x), cupy.asarray(np.zeros_like(x)))
    assert np.allclose(runtime.to_host(got), x * x)
    errs = interop.precision_errors(32)
    assert set(errs) == set(interop.PRECISIONS) and all(e >= 0 for e in errs.values())
    ok, message = interop.nccl_status()
    assert not ok and "nvidia-nccl-cu12" in message
    with pytest.raises(cupy.NotEmulated):
        interop.relu_raw(cupy.asarray(x))


def test_scaling_on_one_device():
    from gpulab import nn, scaling

    model = nn.mnist_cnn(image_size=8, channels=(2, 3), hidden=8, dropout=0.0, backend="cupy")
    x = cupy.asarray(RNG.random((8, 1, 8, 8)).astype(np.float32))
    y = cupy.asarray(np.arange(8) % 10)
    loss, grads = scaling.full_batch_gradients(model, nn.SoftmaxCrossEntropy(), x, y)
    dp = scaling.data_parallel_gradients(model, nn.SoftmaxCrossEntropy(), x, y, 2)
    assert isinstance(loss, float)
    for name, g in grads.items():
        assert np.allclose(dp["grads"][name], runtime.to_host(g), atol=1e-5), name
    assert 0 <= scaling.fp16_flush_fraction(cupy.asarray(x)) <= 1


@cuda.jit
def _scale_kernel(x, s, out):
    i = cuda.grid(1)
    if i < x.size:
        out[i] = x[i] * s


@cuda.jit
def _scale_0d_kernel(x, s, out):
    i = cuda.grid(1)
    if i < x.size:
        out[i] = x[i] * s[()]


def test_a_0d_array_given_to_a_kernel_is_an_array_as_on_a_gpu():
    """numba-cuda types a 0-d CuPy array (a reduction's result) as a 0-d array: a kernel using it as a number does
    not compile on a GPU (emulate.ZeroDimArg), so the emulation refuses it; read as s[()] it works, as on a GPU."""
    x = cupy.arange(4, dtype=cupy.float32)
    out = cupy.zeros(4, dtype=cupy.float32)
    with pytest.raises(TypeError, match="0-d ARRAY"):
        _scale_kernel[1, 32](x, x.max(), out)
    with pytest.raises(TypeError, match="0-d ARRAY"):
        _scale_kernel[1, 32](x, np.array(3.0, np.float32), out)
    _scale_kernel[1, 32](x, float(x.max()), out)
    assert runtime.to_host(out).tolist() == [0.0, 3.0, 6.0, 9.0]
    _scale_0d_kernel[1, 32](x, x.max(), out)
    assert runtime.to_host(out).tolist() == [0.0, 3.0, 6.0, 9.0]


def test_bench_kernels_launch_floor_and_memory_check_in_gpu_mode():
    """gpu mode's bench kernels: the floor's empty kernel takes a CuPy array and a Numba device array, the free
    device memory is read (CuPy's pool released first), and the line names the CuPy floor and a copy's element count."""
    from gpulab.bench import kernels as bk

    free, why = bk._free_device_bytes()
    assert isinstance(free, int) and free > 0 and why == "", why
    report = bk.measure([256], only=["copy", "sum_tree"], repeat=1, log=lambda s: None)
    assert [r["kind"] for r in report["launch"]["rows"]] == ["array", "numba", "launcher"]
    line = report["launch"]["line"]
    assert "given a CuPy array" in line and "elements a copy's time is mostly launch" in line, line
    assert [r["kernel"] for r in report["rows"]] == ["copy", "sum_tree"] and not report["skipped"]
