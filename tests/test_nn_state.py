"""A model's whole state: parameters and buffers (Dropout's generator states) saved and loaded bit for bit, so
training continues after a round trip through a file exactly as without it; files from before buffers were saved
still load (one warning); states that do not fit get errors that say what was expected and found; backward after
a move between forward and backward is refused."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest

import gpulab
from gpulab import nn
from gpulab.errors import UsageError

STEPS = {"numpy": (2, 3), "kernels": (1, 2)}  # steps before the save, steps after it (the simulator is slow)


def _cnn(backend: str = "numpy", seed: int = 1) -> nn.Sequential:
    return nn.mnist_cnn(image_size=8, channels=(2, 3), hidden=8, dropout=0.5, seed=seed, backend=backend)


def _mlp(streams: tuple[int, int] = (32, 64)) -> nn.Sequential:
    """Two Dropout layers (buffers "1.states" and "3.states"); 6 features in, 4 classes out."""
    rng = np.random.default_rng(0)
    return nn.Sequential(
        nn.Linear(6, 8, rng=rng),
        nn.Dropout(0.5, seed=1, streams=streams[0]),
        nn.Linear(8, 4, rng=rng),
        nn.Dropout(0.25, seed=2, streams=streams[1]),
    )


def _batches(n: int, shape: tuple[int, ...], classes: int) -> list[tuple[np.ndarray, np.ndarray]]:
    rng = np.random.default_rng(7)
    return [(rng.random(shape, dtype=np.float32), rng.integers(0, classes, shape[0])) for _ in range(n)]


def _train(model: nn.Sequential, batches: list) -> None:
    opt = nn.SGD(model, lr=0.1)  # no momentum: the optimizer holds no state the model's file would have to carry
    for x, y in batches:
        nn.train_step(model, nn.SoftmaxCrossEntropy(), opt, x, y)


def _assert_same_state(a: dict, b: dict) -> None:
    assert sorted(a) == sorted(b)
    for k in a:
        assert a[k].dtype == b[k].dtype and np.array_equal(a[k], b[k]), k


@pytest.mark.parametrize("backend", ["numpy", "kernels"])
def test_training_after_save_and_load_continues_bit_for_bit(tmp_path, backend):
    before, after = STEPS[backend]
    batches = _batches(before + after, (4, 1, 8, 8), 10)
    a = _cnn(backend)
    _train(a, batches[:before])
    path = nn.save(a, tmp_path / "model")
    with np.load(path) as f:  # the generator words went through np.savez / np.load exactly
        words = f["buffers.9.states"]
        assert words.dtype == np.uint64 and words.shape == (2 * a[9].streams,)
        assert np.array_equal(words, a[9].buffers["states"])
    snapshot = a.state_dict()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a whole file: no warning
        b = nn.load(_cnn(backend), path)  # built as `a` was: its own states are the seed's, not a's after training
    _train(a, batches[before:])
    _train(b, batches[before:])
    _assert_same_state(a.state_dict(), b.state_dict())  # parameters and buffers, bit for bit
    with np.load(path) as f:
        _assert_same_state(snapshot, {k: f[k] for k in f.files})  # state_dict is a copy: training did not change it
    assert not np.array_equal(snapshot["buffers.9.states"], a[9].buffers["states"])


def test_state_dict_keys_cannot_collide_and_keep_dtypes():
    model = _mlp()
    state = model.state_dict()
    assert sorted(state) == ["0.W", "0.b", "2.W", "2.b", "buffers.1.states", "buffers.3.states"]
    assert [name for name, _ in model.named_buffers()] == ["1.states", "3.states"]
    assert state["buffers.1.states"].dtype == np.uint64 and state["0.W"].dtype == np.float32
    assert state["buffers.3.states"] is not model[3].buffers["states"]  # a copy


def test_a_file_of_parameters_only_loads_with_one_warning_and_keeps_the_models_buffers(tmp_path):
    batches = _batches(4, (5, 6), 4)
    a = _mlp()
    _train(a, batches[:2])
    old = tmp_path / "old.npz"  # what gpulab.nn.save wrote before buffers were saved: the parameters only
    np.savez(old, **{k: v for k, v in a.state_dict().items() if not k.startswith("buffers.")})
    b = _mlp()
    b.forward(batches[0][0])  # its states advanced: "its current buffers" are not the seed's
    mine = {i: b[i].buffers["states"].copy() for i in (1, 3)}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        nn.load(b, old)
    assert len(caught) == 1, [str(w.message) for w in caught]  # once, naming every missing buffer
    msg = str(caught[0].message)
    assert issubclass(caught[0].category, UserWarning)
    assert "no buffers" in msg and "'buffers.1.states'" in msg and "'buffers.3.states'" in msg
    for name, p, _ in b.parameters():
        assert np.array_equal(p, a.state_dict()[name])  # the parameters loaded
    for i in (1, 3):
        assert np.array_equal(b[i].buffers["states"], mine[i])  # the buffers kept
    _train(a, batches[2:])
    _train(b, batches[2:])
    assert not np.array_equal(a[0].params["W"], b[0].params["W"])  # other masks: why buffers are saved now


def _with(state: dict, key: str, value: np.ndarray | None) -> dict:
    """``state`` with ``key`` set to ``value``, or left out if ``value`` is None."""
    out = {k: v for k, v in state.items() if k != key}
    return out if value is None else {**out, key: value}


def test_states_that_do_not_fit_get_clear_errors_and_leave_the_model_as_it_was(tmp_path):
    good = _mlp()
    _train(good, _batches(1, (5, 6), 4))
    state = good.state_dict()
    words = good[1].buffers["states"].copy()
    cases = [  # (key, value, what the error says)
        ("buffers.1.states", words.astype(np.int64), r"1\.states.*model has uint64 of shape \(64,\).*int64 of shape"),
        ("buffers.1.states", np.zeros(128, np.uint64), r"uint64 of shape \(64,\).*uint64 of shape \(128,\)"),
        ("buffers.7.states", words, r"unexpected \['buffers\.7\.states'\]"),
        ("buffers.3.states", None, r"missing \['buffers\.3\.states'\], unexpected \[\]"),
        ("0.W", state["0.W"].astype(np.int32), r"parameter 0\.W.*floating-point.*int32"),
        ("2.b", np.zeros(5, np.float32), r"parameter 2\.b.*shape \(4,\).*\(5,\)"),
    ]
    for key, value, match in cases:
        model = _mlp()
        before = model.state_dict()
        with pytest.raises(UsageError, match=match):
            model.load_state_dict(_with(state, key, value))
        _assert_same_state(before, model.state_dict())  # checked before anything was copied
    path = tmp_path / "lossy.npz"  # the words through float64 (what a careless conversion does to them)
    np.savez(path, **_with(state, "buffers.1.states", words.astype(np.float64)))
    with pytest.raises(UsageError, match=r"model has uint64 of shape \(64,\), the state has float64"):
        nn.load(_mlp(), path)


def test_a_failed_save_leaves_the_old_file_and_no_temp_file(tmp_path, monkeypatch):
    model = _mlp()
    path = nn.save(model, tmp_path / "m")
    _train(model, _batches(1, (5, 6), 4))

    def broken_savez(f, **arrays):  # half a file, then the disk is full
        if hasattr(f, "write"):
            f.write(b"PK\x03\x04 half a zip")
        else:
            Path(f).write_bytes(b"PK\x03\x04 half a zip")
        raise OSError("disk full")

    monkeypatch.setattr(nn.io.np, "savez", broken_savez)
    with pytest.raises(OSError, match="disk full"):
        nn.save(model, path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.npz"]
    nn.load(_mlp(), path)  # still the whole first file


def test_backward_after_a_move_is_refused_and_backward_where_the_forward_ran_is_right():
    (x, y), loss_fn = _batches(1, (4, 1, 8, 8), 10)[0], nn.SoftmaxCrossEntropy()
    ref, model = _cnn(), _cnn()
    loss_fn(ref.forward(x), y)
    ref.backward(loss_fn.backward())
    loss_fn(model.forward(x), y)
    dout = loss_fn.backward()
    saved = model[9].saved.copy()
    model.to("kernels")  # in gpu mode a real move: the forward's caches and dout stay on the host
    moved = r"forward ran on backend 'numpy'.*moved the model to 'kernels'.*run forward again"
    with pytest.raises(UsageError, match=moved):
        model.backward(dout)
    with pytest.raises(UsageError, match="backward after a move"):
        model.backward(dout)  # asked again without moving back: still refused
    assert np.array_equal(model[9].saved, saved)  # nothing ran
    model.to("numpy")  # back where the forward ran: the step is the unmoved one
    model.backward(dout)
    for (name, _, g), (_, _, g_ref) in zip(model.parameters(), ref.parameters()):
        assert np.array_equal(g, g_ref), name
    _assert_same_state(model.state_dict(), ref.state_dict())


def test_a_forward_after_a_move_makes_its_backward_fine():
    (x, y), loss_fn = _batches(1, (4, 1, 8, 8), 10)[0], nn.SoftmaxCrossEntropy()
    ref, model = _cnn(), _cnn()
    ref.forward(x)  # a forward without a backward (an evaluation), then a whole step
    nn.forward_backward(ref, loss_fn, x, y)
    model.forward(x)
    model.to("kernels")
    nn.forward_backward(model, loss_fn, x, y)  # forward after the move: nothing stale
    assert np.array_equal(model[9].buffers["states"], ref[9].buffers["states"])  # the same draws on every backend
    for (name, _, g), (_, _, g_ref) in zip(model.parameters(), ref.parameters()):
        np.testing.assert_allclose(gpulab.runtime.to_host(g), g_ref, rtol=1e-4, atol=1e-6, err_msg=name)
