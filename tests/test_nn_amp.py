"""MixedPrecision's state: master weights, loss scale and step counts saved and loaded with the model and its optimizer
(a resumed run is the uninterrupted one, bit for bit), moved by ``Sequential.to``, checked before anything changes.

Runs on the numpy backend here and on cupy too in gpu mode (gpu-check runs this file on a GPU)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import gpulab
from gpulab import nn
from gpulab.errors import UsageError
from gpulab.nn import ops as contract

BACKENDS = ["numpy", "cupy"] if gpulab.is_gpu() else ["numpy"]  # mixed precision: numpy and cupy only
N, M = 4, 4  # steps before the save, after it


def _host(a):
    return np.asarray(gpulab.runtime.to_host(a))


def _amp(backend: str = "numpy", hidden: int = 16, growth_interval: int = 2, init_scale: float = 2.0**20):
    """A tiny CNN in FP16 with Adam on its masters; 2**20 overflows FP16 gradients at first: steps are skipped and the
    scale halves, and growth_interval=2 doubles it again, so every part of the state changes within a few steps."""
    model = nn.mnist_cnn(image_size=8, channels=(4, 8), hidden=hidden, classes=2, dropout=0.0, backend=backend)
    return model, nn.MixedPrecision(
        model, lambda m: nn.Adam(m, lr=3e-3), init_scale=init_scale, growth_interval=growth_interval
    )


def _batches(n: int, backend: str = "numpy") -> list:
    rng = np.random.default_rng(0)
    out = []
    for _ in range(n):
        x, y = rng.random((16, 1, 8, 8), dtype=np.float32), rng.integers(0, 2, 16)
        out.append((contract.to_backend(x, backend), contract.to_backend(y, backend)))
    return out


def _state(model, amp) -> dict:
    return {**{f"model.{k}": v for k, v in model.state_dict().items()}, **amp.state_dict()}


def _assert_same(a: dict, b: dict) -> None:
    assert sorted(a) == sorted(b)
    for k in a:
        u, v = _host(a[k]), _host(b[k])
        assert u.dtype == v.dtype and np.array_equal(u, v), k


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_mixed_precision_checkpoint_resumes_bit_for_bit(tmp_path, backend):
    """N steps, save model and MixedPrecision, load both into fresh ones, M steps: the N + M uninterrupted steps."""
    batches = _batches(N + M, backend)
    a, amp_a = _amp(backend)
    for x, y in batches[:N]:
        amp_a.step(x, y)
    path = nn.save(a, tmp_path / "amp", optimizer=amp_a)
    with np.load(path) as f:
        assert str(f["optimizer.type"]) == "MixedPrecision" and str(f["optimizer.optimizer.type"]) == "Adam"
        assert f["optimizer.master.0.W"].dtype == np.float32 and f["0.W"].dtype == np.float16
    at_save = (amp_a.scale, amp_a.skipped, amp_a.good_steps)
    for x, y in batches[N:]:
        amp_a.step(x, y)
    b, amp_b = _amp(backend)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a whole checkpoint: no warning
        nn.load(b, path, optimizer=amp_b)
    assert (amp_b.scale, amp_b.skipped, amp_b.good_steps) == at_save
    assert at_save[1] >= 1  # a step was skipped before the save: the scale is not the initial one
    for x, y in batches[N:]:
        amp_b.step(x, y)
    _assert_same(_state(a, amp_a), _state(b, amp_b))  # FP16 weights, FP32 masters, scale, counts, Adam: all equal


def test_to_replaces_the_master_weights_as_it_replaces_the_parameters(monkeypatch):
    """In simulator mode no backend copies an array; a copying move stands in for the GPU's host<->device copy: the
    masters, their gradients and the optimizer's moments are replaced by the moved arrays, values kept."""
    model, amp = _amp()
    x, y = _batches(1)[0]
    amp.step(x, y)
    before = {name: (p, g) for name, p, g in amp.masters.parameters()}
    moments = {k: a for k, a in amp.optimizer.m.items()}
    monkeypatch.setattr(gpulab.runtime, "to_host", lambda a: np.array(a, copy=True))
    model.to("numpy")
    after = {name: (p, g) for name, p, g in amp.masters.parameters()}
    assert sorted(after) == sorted(before) and len(after) == len(model.parameters())
    for name in after:
        assert after[name][0] is not before[name][0] and np.array_equal(after[name][0], before[name][0]), name
        assert after[name][1] is not before[name][1], name
        assert amp.optimizer.m[name] is not moments[name] and np.array_equal(amp.optimizer.m[name], moments[name])


@pytest.mark.skipif(not gpulab.is_gpu(), reason="a real move needs a GPU (CuPy arrays)")
def test_to_cupy_moves_the_masters_and_training_goes_on_as_on_the_host():
    ref, amp_ref = _amp()
    model, amp = _amp()
    batches = _batches(3)
    for x, y in batches:
        amp_ref.step(x, y)
    amp.step(*batches[0])
    model.to("cupy")
    assert all(type(p).__module__.startswith("cupy") for _, p, _ in amp.masters.parameters())
    for x, y in batches[1:]:
        amp.step(contract.to_backend(x, "cupy"), contract.to_backend(y, "cupy"))
    model.to("numpy")
    assert all(type(p) is np.ndarray for _, p, _ in amp.masters.parameters())
    for (name, p, _), (_, q, _) in zip(amp.masters.parameters(), amp_ref.masters.parameters()):
        np.testing.assert_allclose(p, q, rtol=1e-2, atol=1e-3, err_msg=name)


def test_mixed_precision_states_that_do_not_fit_get_clear_errors_and_change_nothing(tmp_path):
    a, amp_a = _amp()
    for x, y in _batches(2):
        amp_a.step(x, y)
    path = nn.save(a, tmp_path / "amp", optimizer=amp_a)
    plain = nn.mnist_cnn(image_size=8, channels=(4, 8), hidden=16, classes=2, dropout=0.0)
    plain_path = nn.save(plain, tmp_path / "plain", optimizer=nn.Adam(plain, lr=3e-3))
    state = amp_a.state_dict()
    cases = [  # (file, a model and its MixedPrecision, what the error says)
        (plain_path, _amp(), r"state is Adam's, not a MixedPrecision's.*without mixed precision"),
        (path, _amp(growth_interval=3), r"saved with dtype=float16, growth_interval=2; this one has .*=3"),
        (path, _amp(hidden=6), r"master\.7\.W.*float32 of shape \(6, 32\).*float32 of shape \(16, 32\)"),
    ]
    for file, (model, amp), match in cases:
        amp.step(*_batches(1)[0])
        before = _state(model, amp)
        with pytest.raises(UsageError, match=match):
            nn.load(model, file, optimizer=amp)
        _assert_same(before, _state(model, amp))  # checked before anything was copied
    model, amp = _amp()
    for key, value, match in [
        ("scale", np.array(-1.0), r"'scale': expected a finite loss scale > 0"),
        ("skipped", np.array(1.5), r"'skipped': expected a count >= 0"),
        ("optimizer.lr", np.array(1e-2), r"Adam state was saved with lr=0\.01"),
    ]:
        before = _state(model, amp)
        with pytest.raises(UsageError, match=match):
            amp.load_state_dict({**state, key: value})
        _assert_same(before, _state(model, amp))
    with pytest.raises(UsageError, match=r"this optimizer state is MixedPrecision's, the optimizer loading it is Adam"):
        nn.load(plain, path, optimizer=nn.Adam(plain, lr=3e-3))
    with pytest.raises(UsageError, match=r"master weights of a MixedPrecision.*pass the MixedPrecision itself"):
        nn.save(a, tmp_path / "inner", optimizer=amp_a.optimizer)
    assert not (tmp_path / "inner.npz").exists()


def test_loading_the_model_alone_makes_its_weights_the_masters(tmp_path):
    """``nn.load(model, path)`` without the MixedPrecision replaces the FP16 weights; the masters follow, so the next
    step updates the loaded weights (stale masters would copy the old weights back over them)."""
    a, amp_a = _amp()
    for x, y in _batches(2):
        amp_a.step(x, y)
    path = nn.save(a, tmp_path / "a")
    b, amp_b = _amp(init_scale=2.0**10)
    nn.load(b, path)
    for (name, p16, _), (_, p32, _) in zip(b.parameters(), amp_b.masters.parameters()):
        assert np.array_equal(p32, p16.astype(np.float32)), name
        assert np.array_equal(p16, a.state_dict()[name]), name


def test_a_file_without_mixed_precision_state_starts_it_fresh_with_one_warning(tmp_path):
    a, amp_a = _amp()
    for x, y in _batches(2):
        amp_a.step(x, y)
    path = nn.save(a, tmp_path / "a")  # the model only
    b, amp_b = _amp()
    for x, y in _batches(3):
        amp_b.step(x, y)
    with pytest.warns(UserWarning, match="MixedPrecision starts fresh"):
        nn.load(b, path, optimizer=amp_b)
    assert (amp_b.scale, amp_b.good_steps, amp_b.skipped, amp_b.optimizer.t) == (2.0**20, 0, 0, 0)
    for (name, p16, _), (_, p32, _) in zip(b.parameters(), amp_b.masters.parameters()):
        assert np.array_equal(p32, p16.astype(np.float32)), name


def test_load_state_dict_on_the_model_makes_the_loaded_weights_the_masters():
    """``model.load_state_dict`` (not only ``nn.load``) replaces the FP16 weights; the masters follow, so the next step
    updates the loaded weights instead of copying the stale masters back over them."""
    a, amp_a = _amp()
    for x, y in _batches(2):
        amp_a.step(x, y)
    b, amp_b = _amp(init_scale=2.0**10)
    b.load_state_dict(a.state_dict())
    for (name, p16, _), (_, p32, _) in zip(b.parameters(), amp_b.masters.parameters()):
        assert np.array_equal(p32, p16.astype(np.float32)), name
    ref = nn.mnist_cnn(image_size=8, channels=(4, 8), hidden=16, classes=2, dropout=0.0)
    ref.load_state_dict(a.state_dict())  # FP32 now: a MixedPrecision built after the load takes these as masters
    amp_ref = nn.MixedPrecision(ref, lambda m: nn.Adam(m, lr=3e-3), init_scale=2.0**10, growth_interval=2)
    x, y = _batches(3)[2]
    amp_b.step(x, y)  # amp_b made no step before: its Adam is as fresh as amp_ref's
    amp_ref.step(x, y)
    _assert_same(b.state_dict(), ref.state_dict())


def test_a_whole_float_growth_interval_round_trips_and_others_are_refused(tmp_path):
    """growth_interval=2000.0 is 2000: its save/load round trip holds (the settings compared on load were '2000.0'
    against the saved '2000'); a fraction, 0, a negative, a bool or not a number is refused when the
    MixedPrecision is built, with what to pass."""
    a, amp_a = _amp(growth_interval=2000.0)
    assert amp_a.growth_interval == 2000 and type(amp_a.growth_interval) is int
    amp_a.step(*_batches(1)[0])
    path = nn.save(a, tmp_path / "amp", optimizer=amp_a)
    b, amp_b = _amp(growth_interval=np.float64(2000.0))
    nn.load(b, path, optimizer=amp_b)
    _assert_same(_state(a, amp_a), _state(b, amp_b))
    for bad in (2000.5, 0, -3, True, float("nan"), float("inf"), 2.0**63, "2000"):
        with pytest.raises(UsageError, match=r"growth_interval must be a whole number of steps from 1 .*got .*2000"):
            _amp(growth_interval=bad)


def test_the_dropout_launcher_takes_float16_through_a_float32_copy():
    """Review 2, finding 6: MixedPrecision's float16 activations reached the dropout launcher, which demanded
    float32 (``TypeError: x must have dtype float32``: the cupy backend's first step with Dropout(p > 0)). In the
    simulator the launcher is the one the cupy backend calls: the same mask and states as float32, one rounding."""
    from gpulab.kernels import nn_ops
    from gpulab.nn.dropout import host_dropout, new_states

    x = np.random.default_rng(0).standard_normal(300).astype(np.float16)
    states, states16, host_states = new_states(32, 1), new_states(32, 1), new_states(32, 1)
    want32 = nn_ops.dropout(x.astype(np.float32), 0.1, states)
    got = nn_ops.dropout(x, 0.1, states16)  # raised TypeError before
    assert got.dtype == np.float16 and got.shape == x.shape
    np.testing.assert_array_equal(got, want32.astype(np.float16))
    np.testing.assert_array_equal(states16, states)  # advanced as the float32 launch advances them
    np.testing.assert_array_equal(host_dropout(x, 0.1, host_states), got)  # the numpy backend agrees bit for bit
    np.testing.assert_array_equal(host_states, states)


@pytest.mark.parametrize("backend", BACKENDS)
def test_mixed_precision_trains_with_dropout(backend):
    """dropout = 0.25 (every other test here has 0.0): float16 activations through Dropout forward and backward."""
    model = nn.mnist_cnn(image_size=8, channels=(4, 8), hidden=16, classes=2, dropout=0.25, backend=backend)
    amp = nn.MixedPrecision(model, lambda m: nn.Adam(m, lr=3e-3), init_scale=2.0**8)
    dropout = next(layer for layer in model if isinstance(layer, nn.Dropout))
    before = _host(dropout.buffers["states"]).copy()
    losses = [amp.step(x, y) for x, y in _batches(3, backend)]
    assert all(np.isfinite(losses)) and amp.skipped == 0, (losses, amp.skipped)
    assert not np.array_equal(_host(dropout.buffers["states"]), before)  # the layer drew its masks
    assert all(_host(p).dtype == np.float16 for _, p, _ in model.parameters())
