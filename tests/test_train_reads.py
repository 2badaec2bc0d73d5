"""What ``train.fit`` reads when, on the host (simulator mode): the same as ever, step by step.

On a GPU fit keeps each step's loss and correct count on the device and reads them every ``READ_EVERY`` steps
(tests/gpu_emulation/checks_train_reads.py counts the reads). On the host reading costs nothing, so there a NaN loss
still stops fit in the step that made it, before its backward, and the progress bar shows every step's loss.
"""

from __future__ import annotations

import numpy as np
import pytest

from gpulab import data, nn, train, train_loop
from gpulab.errors import UsageError


def _dataset(n_train: int, n_test: int = 8) -> data.Dataset:
    rng = np.random.default_rng(0)
    x = rng.random((n_train + n_test, 1, 8, 8), dtype=np.float32)
    y = rng.integers(0, 10, n_train + n_test)
    return data.Dataset(
        "t", x[:n_train], y[:n_train], x[n_train:], y[n_train:], classes=tuple("0123456789"), source="t"
    )


def _model(backend: str = "numpy") -> nn.Sequential:
    return nn.mnist_cnn(seed=0, image_size=8, channels=(2, 3), hidden=8, dropout=0.25, backend=backend)


def _weights(model: nn.Sequential) -> list[np.ndarray]:
    return [np.array(p, copy=True) for _, p, _ in model.parameters()]


class _NaNAfter(nn.Adam):
    """Adam that writes NaN into the first weight after update ``bad``: the loss is NaN from the next step on."""

    def __init__(self, model: nn.Sequential, bad: int) -> None:
        super().__init__(model, lr=1e-3)
        self.bad = bad
        self.after: list[np.ndarray] = []

    def step(self) -> None:
        super().step()
        if self.t == self.bad:
            self.model.parameters()[0][1][...] = np.nan
            self.after = _weights(self.model)


def test_a_nan_loss_on_the_host_stops_fit_in_its_step_before_its_backward():
    model = _model()
    opt = _NaNAfter(model, 1)
    with pytest.raises(FloatingPointError, match=r"^the loss is nan: the logits contain NaN") as err:
        train.fit(model, _dataset(16), epochs=1, batch_size=4, optimizer=opt, progress=False)
    assert "after 1 of 4 batches" in "".join(getattr(err.value, "__notes__", [""]))
    assert opt.t == 1  # step 2 stopped in its loss: no second update
    assert all(np.array_equal(a, b, equal_nan=True) for a, b in zip(opt.after, _weights(model)))


def test_the_progress_bar_shows_every_steps_loss_on_the_host(monkeypatch):
    shown: list[tuple[int, str]] = []

    class Bar:
        n = 0

        def update(self, k: int) -> None:
            self.n += k

        def set_postfix(self, **kw: str) -> None:
            shown.append((self.n, kw["loss"]))

        def close(self) -> None:
            pass

    monkeypatch.setattr(train_loop, "_progress", lambda total, desc, enabled: Bar())
    model = _model()
    ds = _dataset(12)
    train.fit(model, ds, epochs=1, batch_size=4, progress=True, evaluate_each_epoch=False, seed=5)
    ref = _model()
    opt, losses = nn.Adam(ref, lr=1e-3), []
    for xb, yb in data.batches(ds.x_train, ds.y_train, 4, shuffle=True, rng=np.random.default_rng(5)):
        losses.append(f"{float(nn.train_step(ref, nn.SoftmaxCrossEntropy(), opt, xb, yb)[0]):.4f}")
    assert shown == [(1, losses[0]), (2, losses[1]), (3, losses[2])]


def test_labels_out_of_range_are_refused_at_the_first_step_naming_the_training_labels():
    ds = _dataset(8)
    ds.y_train = ds.y_train.copy()
    ds.y_train[6] = 12
    model = _model()
    before = _weights(model)
    with pytest.raises(UsageError, match=r"in \[0, 10\).* from \d+ to 12 in the training labels \(dataset.y_train\)"):
        train.fit(model, ds, epochs=1, batch_size=4, progress=False)
    assert all(np.array_equal(a, b) for a, b in zip(before, _weights(model)))


def test_a_step_leaves_the_loss_where_the_model_computes_and_calling_the_loss_reads_it():
    rng = np.random.default_rng(1)
    x, y = rng.random((4, 1, 8, 8), dtype=np.float32), np.array([1, 2, 3, 4])
    for backend in ("numpy", "kernels"):
        model = _model(backend)
        loss, logits = nn.forward_backward(model, nn.SoftmaxCrossEntropy(), x, y)
        assert isinstance(loss, np.floating) and loss.dtype == np.float32, type(loss)  # a host number: free to read
        called = nn.SoftmaxCrossEntropy()
        called.ops = model.ops
        assert isinstance(called(logits, y), float) and called(logits, y) == float(loss)


def test_labels_that_are_not_integers_are_still_refused_by_the_loss():
    ds = _dataset(8)
    ds.y_train = ds.y_train.astype(np.float32)
    ds.y_train[0] = np.nan
    with pytest.raises(TypeError, match="labels must be integers"):
        train.fit(_model(), ds, epochs=1, batch_size=4, progress=False)
