"""``train.fit`` continues where the last call left off with a model: two one-epoch calls train as one two-epoch call
(the same batches, the same optimizer), and so does a run saved and loaded between them (``model.fit_state`` goes
through ``nn.save`` / ``nn.load``); states that do not fit are refused before anything changes."""

from __future__ import annotations

import sys
import threading

import numpy as np
import pytest

from gpulab import data, nn, train
from gpulab.errors import UsageError


def _dataset(n: int = 40) -> data.Dataset:
    rng = np.random.default_rng(0)
    x = rng.random((n + 8, 1, 8, 8), dtype=np.float32)
    y = rng.integers(0, 10, n + 8)
    return data.Dataset("toy", x[:n], y[:n], x[n:], y[n:], tuple("0123456789"), "test")


def _cnn() -> nn.Sequential:
    return nn.mnist_cnn(image_size=8, channels=(2, 3), hidden=8, dropout=0.5, seed=1)


def _fit(model, epochs: int, **kw) -> train.History:
    return train.fit(model, _dataset(), epochs=epochs, batch_size=16, seed=3, progress=False, **kw)


def _assert_same(a: dict, b: dict) -> None:
    assert sorted(a) == sorted(b)
    for k in a:
        assert a[k].dtype == b[k].dtype and np.array_equal(a[k], b[k]), k


def test_two_fit_calls_train_as_one(tmp_path):
    """Without an optimizer (fit's own Adam goes on) and with one; the epochs are numbered on."""
    whole = _cnn()
    assert _fit(whole, 2).epoch == [1, 2]
    parts = _cnn()
    assert _fit(parts, 1).epoch == [1]
    assert _fit(parts, 1).epoch == [2]
    _assert_same(whole.state_dict(), parts.state_dict())
    assert parts.fit_state.epoch == 2 and parts.fit_state.optimizer.t == whole.fit_state.optimizer.t == 6
    whole, parts = _cnn(), _cnn()
    opt_whole, opt_parts = nn.Adam(whole, lr=1e-2), nn.Adam(parts, lr=1e-2)
    _fit(whole, 3, optimizer=opt_whole)
    _fit(parts, 1, optimizer=opt_parts)
    _fit(parts, 2, optimizer=opt_parts)
    _assert_same(whole.state_dict(), parts.state_dict())


def test_fit_save_load_fit_trains_as_one_fit(tmp_path):
    whole = _cnn()
    _fit(whole, 2, optimizer=nn.Adam(whole, lr=1e-2))
    first = _cnn()
    opt = nn.Adam(first, lr=1e-2)
    _fit(first, 1, optimizer=opt)
    path = nn.save(first, tmp_path / "ckpt", optimizer=opt)
    with np.load(path) as f:
        assert int(f["fit.epoch"]) == 1 and int(f["fit.seed"]) == 3 and f["fit.shuffle"].dtype == np.uint64
    resumed = _cnn()
    opt_resumed = nn.Adam(resumed, lr=1e-2)
    nn.load(resumed, path, optimizer=opt_resumed)
    assert _fit(resumed, 1, optimizer=opt_resumed).epoch == [2]
    _assert_same(whole.state_dict(), resumed.state_dict())


def test_another_seed_starts_its_own_order_and_loading_a_file_without_fit_state_starts_afresh(tmp_path):
    model = _cnn()
    _fit(model, 1)
    train.fit(model, _dataset(), epochs=1, batch_size=16, seed=5, progress=False)
    ref = np.random.default_rng(5)
    ref.permutation(40)  # one epoch of seed 5's order
    assert model.fit_state.seed == 5 and model.fit_state.rng.bit_generator.state == ref.bit_generator.state
    path = nn.save(_cnn(), tmp_path / "untrained")  # never fit: no fit state in the file
    with np.load(path) as f:
        assert not [k for k in f.files if k.startswith("fit.")]
    nn.load(model, path)
    assert (model.fit_state.epoch, model.fit_state.rng, model.fit_state.optimizer) == (0, None, None)
    fresh = _cnn()
    _fit(model, 1)
    _fit(fresh, 1)
    _assert_same(fresh.state_dict(), model.state_dict())


def test_fit_states_that_do_not_fit_are_refused_before_anything_changes(tmp_path):
    model = _cnn()
    _fit(model, 1)
    path = nn.save(model, tmp_path / "ckpt")
    with np.load(path) as f:
        state = {k: f[k] for k in f.files}
    other = _cnn()
    _fit(other, 1)
    before = other.state_dict()
    for key, value, match in [
        ("fit.shuffle", state["fit.shuffle"].astype(np.float64), r"'shuffle': expected a PCG64 generator state"),
        ("fit.epoch", np.array(-1), r"'epoch': expected a whole number >= 0"),
        ("fit.seed", None, r"expected the keys \['fit\.epoch', 'fit\.seed', 'fit\.shuffle'\]"),
    ]:
        bad = tmp_path / "bad.npz"
        np.savez(bad, **{k: v for k, v in state.items() if k != key}, **({} if value is None else {key: value}))
        with pytest.raises(UsageError, match=match):
            nn.load(other, bad)
        bad.unlink()
        _assert_same(before, other.state_dict())
        assert other.fit_state.epoch == 1 and other.fit_state.optimizer is not None


@pytest.mark.parametrize(
    "word, value, match",
    [
        (4, 2, r"fit\.shuffle\[4\] \(has_uint32\) must be 0 or 1, got 2"),
        (5, 2**40, r"fit\.shuffle\[5\] \(uinteger\) must be below 2\*\*32, got 1099511627776"),
        (3, 2, r"fit\.shuffle\[3\] \(the increment's low 64 bits\) must be odd, got 2"),
    ],
)
def test_a_hand_edited_shuffle_state_is_refused_with_what_to_do(tmp_path, word, value, match):
    """Words no PCG64 generator has: a UsageError that names the word and what to do, not NumPy's OverflowError (or,
    for has_uint32, a generator NumPy accepts silently), and nothing changes."""
    model = _cnn()
    _fit(model, 1)
    path = nn.save(model, tmp_path / "ckpt")
    with np.load(path) as f:
        state = {k: f[k] for k in f.files}
    state["fit.shuffle"][word] = value
    np.savez(tmp_path / "edited.npz", **state)
    other = _cnn()
    before = other.state_dict()
    with pytest.raises(UsageError, match=match + r".*changed after gpulab\.nn\.save wrote it.*'fit\.\*' arrays"):
        nn.load(other, tmp_path / "edited.npz")
    _assert_same(before, other.state_dict())
    assert other.fit_state.epoch == 0 and other.fit_state.rng is None


@pytest.mark.parametrize("seed", [-1, 2**63, 1.5, True])
def test_a_seed_nn_save_cannot_keep_is_refused_before_training(seed, monkeypatch):
    """The seed goes into the checkpoint as a 64-bit integer: one that does not fit is refused before the first step,
    not after training by nn.save (an OverflowError that loses the run)."""
    monkeypatch.setattr(nn, "train_step", lambda *a, **k: pytest.fail("training started"))
    with pytest.raises(UsageError, match=r"seed must be a whole number from 0 to 2\*\*63 - 1"):
        train.fit(_cnn(), _dataset(), epochs=1, batch_size=16, seed=seed, progress=False)


def test_fits_own_adam_is_forgotten_once_another_optimizer_trained_the_model():
    """Its moments belong to the weights as it left them: after a call with the learner's optimizer, a call without
    one starts a fresh Adam (as nn.load does), not the one from two calls ago; passing fit's Adam itself keeps it."""
    model = _cnn()
    _fit(model, 1)
    made = model.fit_state.optimizer
    _fit(model, 1, optimizer=made)  # fit's own Adam, passed back: it goes on
    assert model.fit_state.optimizer is made and made.t == 6
    _fit(model, 1, optimizer=nn.SGD(model, lr=0.1))
    assert model.fit_state.optimizer is None
    _fit(model, 1)
    assert model.fit_state.optimizer is not made and model.fit_state.optimizer.t == 3


def _record_steps(monkeypatch, interrupt_at: int | None = None) -> list:
    """Patch fit's step to record each batch's images; the step numbered ``interrupt_at`` (from 0) raises
    KeyboardInterrupt before it runs (the stop button, in the middle of an epoch)."""
    seen: list = []
    real = nn.train_step

    def step(model, loss_fn, optimizer, xb, yb, parallel=None):
        if len(seen) == interrupt_at:
            seen.append(None)
            raise KeyboardInterrupt
        seen.append(np.array(xb))
        return real(model, loss_fn, optimizer, xb, yb, parallel)

    monkeypatch.setattr(nn, "train_step", step)
    return seen


def test_an_interrupted_epoch_counts_as_started_and_the_next_call_shuffles_afresh(monkeypatch):
    """40 images in batches of 16: 3 steps an epoch. Stopped at epoch 2's second batch, the model keeps epoch 2 as
    started (its weights saw part of it), so re-running fit trains epoch 3 on the batches the uninterrupted run's
    epoch 3 has: the generator as the interrupted epoch left it, not epoch 2's order again."""
    seen = _record_steps(monkeypatch)
    _fit(_cnn(), 3)
    whole_epoch_3 = seen[6:9]
    model = _cnn()
    seen = _record_steps(monkeypatch, interrupt_at=4)
    with pytest.raises(KeyboardInterrupt) as stopped:
        _fit(model, 3)
    assert model.fit_state.epoch == 2
    kept = model.fit_state.history  # epoch 1 finished before the interrupt: its numbers are not lost
    assert kept.epoch == [1] and len(kept.train_loss) == len(kept.test_accuracy) == 1
    if sys.version_info >= (3, 11):
        assert "epochs this call finished are in model.fit_state.history." in stopped.value.__notes__[0]
        assert "stopped in epoch 2 after 1 of 3 batches (epochs finished in this call: 1)" in stopped.value.__notes__[0]
        assert "the next fit with this model trains epoch 3, with a fresh shuffle" in stopped.value.__notes__[0]
    seen = _record_steps(monkeypatch)
    returned = _fit(model, 1)
    assert returned.epoch == [3] and model.fit_state.history is returned
    assert len(seen) == 3 and all(np.array_equal(a, b) for a, b in zip(seen, whole_epoch_3))


def test_an_interrupt_before_an_epochs_shuffle_leaves_it_not_started(monkeypatch):
    """Stopped after epoch 1, before epoch 2 drew its shuffle: nothing of epoch 2 happened, so the next call trains
    epoch 2 and the two calls train as one uninterrupted call."""
    whole = _cnn()
    _fit(whole, 2)
    model = _cnn()
    real_train, calls = model.train, []

    def train_then_stop(*mode):
        if not mode:  # fit's model.train() at the start of each epoch (evaluate passes a mode)
            calls.append(1)
            if len(calls) == 2:
                raise KeyboardInterrupt
        return real_train(*mode)

    monkeypatch.setattr(model, "train", train_then_stop)
    with pytest.raises(KeyboardInterrupt):
        _fit(model, 2)
    monkeypatch.undo()
    assert model.fit_state.epoch == 1
    assert _fit(model, 1).epoch == [2]
    _assert_same(whole.state_dict(), model.state_dict())


def test_an_interrupted_data_parallel_fit_ends_its_worker_threads(monkeypatch):
    """workers=2 runs each batch on a thread pool: stopped mid-epoch, fit shuts it down before the interrupt goes
    on, so no idle worker threads are left behind in the kernel."""
    before = set(threading.enumerate())
    _record_steps(monkeypatch, interrupt_at=1)  # the first step ran on the pool's threads
    with pytest.raises(KeyboardInterrupt):
        _fit(_cnn(), 1, workers=2)
    assert [t.name for t in threading.enumerate() if t not in before and t.is_alive()] == []
