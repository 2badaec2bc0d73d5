"""Dropout through the op contract: every backend draws the same mask from the same generator states (the
kernel's draws replayed on the host, bit for bit), advances the states as the kernel does, and its backward is
dout times that mask exactly; the layer owns its states, moves them with the model and passes through in eval."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import gpulab
from gpulab import nn, xoroshiro
from gpulab.errors import UsageError
from gpulab.nn import ops as contract
from gpulab.nn.dropout import new_states
from gpulab.problems._dropout import draws
from test_nn_ops import BACKENDS  # every backend, cupy only on a GPU

SHAPES = [(1,), (5, 7), (37, 29), (2, 3, 5, 7)]  # odd sizes: fewer and more elements than streams, partial rounds


def _host(a):
    return np.asarray(gpulab.runtime.to_host(a))


def _advanced(words: np.ndarray, n: int) -> np.ndarray:
    """The states after a kernel with one thread per state drew for n elements: state t made ceil((n - t) / T)
    draws (numba's xoroshiro128p_next, one Python call each)."""
    st = words.view(xoroshiro.DTYPE).copy()
    t_all = st.size
    for t in range(t_all):
        for _ in range(max(0, -(-(n - t) // t_all))):
            xoroshiro.next_u64(st, t)
    return st.view(np.uint64)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("p", [0.0, 0.25, 0.5, 0.9])
@pytest.mark.parametrize("streams", [32, 96])
def test_dropout_ops_draw_the_kernels_mask_on_every_backend(backend, shape, p, streams):
    rng = np.random.default_rng(abs(hash((shape, p, streams))) % 1000)
    x = (rng.uniform(0.5, 1.5, shape) * rng.choice([-1, 1], shape)).astype(np.float32)  # never 0
    dout = rng.standard_normal(shape).astype(np.float32)
    words = new_states(streams, seed=11)
    ops = contract.get(backend)
    states = contract.to_backend(words.copy(), backend)  # numpy: to_backend would not copy
    saved = states.copy()  # as the layer does: the states before the forward
    y = _host(ops.dropout_forward(contract.to_backend(x, backend), p, states))
    keep = draws(words, x.size).reshape(shape) >= np.float32(p)  # the host replay lesson 08's check uses
    scale = np.float32(1) - np.float32(p)
    assert y.dtype == np.float32 and y.shape == shape
    assert np.array_equal(y, np.where(keep, x / scale, np.float32(0))), "the mask or the scale differs"
    np.testing.assert_array_equal(_host(states), _advanced(words, x.size))  # advanced as the kernel leaves them
    dx = _host(ops.dropout_backward(contract.to_backend(dout, backend), p, saved))
    assert np.array_equal(dx, np.where(y != 0, dout / scale, np.float32(0)))  # dout times the forward's mask
    np.testing.assert_array_equal(_host(saved), _host(states))  # the backward drew the same numbers
    if p == 0.0:
        assert np.array_equal(y, x) and np.array_equal(dx, dout)


@pytest.mark.parametrize("backend", BACKENDS)
def test_training_sized_dropout_is_the_same_on_every_backend_and_the_backward_reuses_the_forwards_draws(backend):
    x = np.random.default_rng(3).standard_normal((16, 40)).astype(np.float32) + np.float32(3)  # > 0: kept != 0
    words = new_states(1024, seed=5)
    ops, ref = contract.get(backend), contract.get("numpy")
    states, ref_states = contract.to_backend(words.copy(), backend), words.copy()
    for _ in range(3):  # three steps: the states carry the stream on
        saved = states.copy()
        y = _host(ops.dropout_forward(contract.to_backend(x, backend), 0.25, states))
        assert np.array_equal(y, ref.dropout_forward(x, 0.25, ref_states))
        assert np.array_equal(_host(ops.dropout_backward(contract.to_backend(x, backend), 0.25, saved)), y)
    np.testing.assert_array_equal(_host(states), ref_states)


@pytest.mark.parametrize("backend", ["numpy", "kernels"])
def test_bad_dropout_arguments_are_usage_errors(backend):
    ops, x = contract.get(backend), np.ones(4, np.float32)
    with pytest.raises(UsageError, match=r"p must be a number in \[0, 1\)"):
        ops.dropout_forward(x, 1.0, new_states(32, 0))
    with pytest.raises(UsageError, match="2 per generator"):
        ops.dropout_forward(x, 0.5, new_states(32, 0)[:6])
    with pytest.raises(UsageError, match="uint64"):
        ops.dropout_forward(x, 0.5, np.zeros(64, np.float32))
    with pytest.raises(UsageError, match="multiple of 32"):
        new_states(100, 0)


def test_the_layer_owns_its_states_advances_them_and_passes_through_in_eval():
    d = nn.Dropout(0.5, seed=4, streams=64)
    x = np.ones((6, 50), np.float32)
    start = d.buffers["states"].copy()
    y1 = d.forward(x)
    assert not np.array_equal(d.buffers["states"], start)  # advanced for the next step
    assert np.array_equal(d.backward(x), y1)  # the forward's mask again (all ones in, so dx == y)
    y2 = d.forward(x)
    assert not np.array_equal(y1, y2)  # the next step draws new numbers
    ref = contract.get("numpy").dropout_forward(x, 0.5, start.copy())
    assert np.array_equal(y1, ref)
    moved = d.buffers["states"].copy()
    assert d.eval().forward(x) is x and d.backward(x) is x
    assert np.array_equal(d.buffers["states"], moved)  # eval draws nothing
    assert nn.Dropout(0.0).forward(x) is x


@pytest.mark.skipif(not gpulab.is_gpu(), reason="CuPy input to a layer whose states stayed on the host: gpu mode only")
def test_a_layer_left_on_the_host_drops_cupy_input_and_still_advances_its_states():
    d = nn.Dropout(0.5, seed=3, streams=64)  # not in a Sequential: its states are NumPy, its ops the numpy backend's
    x = np.ones((6, 50), np.float32)
    start = d.buffers["states"].copy()
    y = _host(d.forward(gpulab.runtime.to_device(x)))  # the kernel on CuPy x, the states copied in and back
    assert np.array_equal(y, contract.get("numpy").dropout_forward(x, 0.5, start.copy()))
    assert not np.array_equal(d.buffers["states"], start)  # advanced in place for the next step
    assert np.array_equal(_host(d.backward(gpulab.runtime.to_device(x))), y)  # the forward's mask again


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_saved_state_loads_in_place_where_the_model_is(tmp_path, backend):
    """nn.save / nn.load onto a model on ``backend`` (CuPy arrays for cupy, and for kernels in gpu mode): the
    parameters and the uint64 generator words are copied into the arrays the model already has, on its device.
    Here rather than in test_nn_state.py: gpu-check runs this file on the GPU."""
    rng = np.random.default_rng(0)
    a = nn.Sequential(nn.Linear(6, 8, rng=rng), nn.Dropout(0.5, seed=1, streams=32), nn.Linear(8, 4, rng=rng))
    x, y = rng.random((5, 6), dtype=np.float32), rng.integers(0, 4, 5)
    nn.train_step(a, nn.SoftmaxCrossEntropy(), nn.SGD(a, lr=0.1), x, y)  # states advanced, weights moved
    path = nn.save(a, tmp_path / "m")
    b = nn.Sequential(nn.Linear(6, 8, rng=rng), nn.Dropout(0.5, seed=1, streams=32), nn.Linear(8, 4, rng=rng))
    b.to(backend)
    arrays = [p for _, p, _ in b.parameters()] + [buf for _, buf in b.named_buffers()]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a whole file: no warning
        nn.load(b, path)
    after = [p for _, p, _ in b.parameters()] + [buf for _, buf in b.named_buffers()]
    assert len(after) == len(arrays) == 5 and all(u is v for u, v in zip(arrays, after))  # in place
    module = gpulab.runtime.array_module(b[1].buffers["states"])
    assert module.__name__ == ("cupy" if contract.device_for(backend) == "gpu" else "numpy")
    assert b[1].buffers["states"].dtype == np.uint64
    state_a, state_b = a.state_dict(), b.state_dict()
    assert sorted(state_a) == sorted(state_b)
    for k in state_a:
        assert state_a[k].dtype == state_b[k].dtype and np.array_equal(state_a[k], state_b[k]), k


def test_a_smaller_batch_keeps_the_first_elements_draws():
    big, small = (nn.Dropout(0.5, seed=1, streams=32) for _ in range(2))
    x = np.ones((10, 7), np.float32)
    assert np.array_equal(big.forward(x)[:3], small.forward(x[:3]))


def test_models_on_two_backends_drop_the_same_elements():
    x = np.random.default_rng(0).random((4, 1, 8, 8), dtype=np.float32)
    y = np.array([1, 2, 3, 4])
    weights = {}
    for backend in ("numpy", "kernels"):
        model = nn.mnist_cnn(image_size=8, channels=(2, 3), hidden=8, dropout=0.5, backend=backend)
        # the kernels backend computes on the GPU in gpu mode: its batch goes there first (train.fit does this)
        xb, yb = (gpulab.to_device(a) for a in (x, y)) if backend == "kernels" else (x, y)
        for _ in range(2):
            nn.train_step(model, nn.SoftmaxCrossEntropy(), nn.Adam(model, lr=1e-2), xb, yb)
        weights[backend] = np.concatenate([_host(p).ravel() for _, p, _ in model.parameters()])
        drop = model.layers[9]
        assert drop.buffers["states"].shape == (2 * drop.streams,)
    np.testing.assert_allclose(weights["kernels"], weights["numpy"], rtol=1e-4, atol=1e-5)


def test_data_parallel_replicas_draw_from_their_own_subsequence():
    model = nn.mnist_cnn(image_size=8, channels=(2, 3), hidden=8, dropout=0.5)
    dp = nn.DataParallel(model, workers=3, seed=2)
    try:
        words = [r.layers[9].buffers["states"].copy() for r in dp.replicas]
        assert len({w.tobytes() for w in words}) == 3  # no two workers share a stream
        jumped = new_states(
            model.layers[9].streams, model.layers[9].seed, subsequence_start=2001 * model.layers[9].streams
        )
        assert np.array_equal(words[1], jumped)
        x, y = np.random.default_rng(0).random((6, 1, 8, 8), dtype=np.float32), np.arange(6)
        dp.step(x, y)  # each worker's share advanced its own states only
        after = [r.layers[9].buffers["states"] for r in dp.replicas]
        assert all(not np.array_equal(a, b) for a, b in zip(after, words))
        assert dp.replicas[1].layers[9].buffers is not model.layers[9].buffers
    finally:
        dp.close()
