"""Training in gpu mode (emulated: tests/gpu_emulation/emulate.py) reads nothing back from the GPU per step.

On a GPU every read of device memory by the host (``float(loss)``, ``int(correct)``, a label's range) waits for all
the work queued before it, and leaves the GPU idle while Python queues the next step. ``train.fit`` reads the
training labels' range once per call and the epoch's running sums (:class:`gpulab.nn.StepSums`) after the first step,
every ``train.READ_EVERY`` steps and at the epoch's end; ``bench cnn``'s timed steps read nothing. The emulated CuPy
counts the host's reads (``cupy._array._reads``). Before, fit read three times a step (the labels' least and
greatest, the loss before the backward was queued, the correct count) and ``bench cnn`` twice.

Collected by tests/test_gpu_emulated.py (emulated gpu mode, in a subprocess) and, on a real GPU, by ``make
gpu-check``'s tests stage (gpulab.gpucheck_plan.GPU_TESTS; the read counts are the emulation's only).
"""

from __future__ import annotations

import numpy as np
import pytest

import gpulab
from gpulab import data, nn, runtime, train

cupy = pytest.importorskip("cupy")
if not gpulab.is_gpu():
    pytest.skip("what fit reads from the device: gpu mode (emulated, or on a GPU)", allow_module_level=True)
EMULATED = bool(getattr(cupy, "EMULATED", False))
counts = pytest.mark.skipif(not EMULATED, reason="counts the emulated CuPy's reads")


def _reads() -> int:
    from cupy import _array as fake  # the emulation's count of the host's reads of device memory

    return fake._reads[0]


def _dataset(n_train: int, n_test: int = 8) -> data.Dataset:
    rng = np.random.default_rng(0)
    x = rng.random((n_train + n_test, 1, 8, 8), dtype=np.float32)
    y = rng.integers(0, 10, n_train + n_test)
    return data.Dataset(
        "t", x[:n_train], y[:n_train], x[n_train:], y[n_train:], classes=tuple("0123456789"), source="t"
    )


def _model(backend: str = "cupy") -> nn.Sequential:
    return nn.mnist_cnn(seed=0, image_size=8, channels=(2, 3), hidden=8, dropout=0.25, backend=backend)


def _fit_reads(backend: str, steps: int, epochs: int = 1) -> int:
    ds = _dataset(4 * steps)
    model = _model(backend)
    before = _reads()
    train.fit(model, ds, epochs=epochs, batch_size=4, progress=False, evaluate_each_epoch=False)
    return _reads() - before


@counts
@pytest.mark.parametrize("backend", ["cupy", "kernels"])
def test_fit_reads_the_device_a_few_times_an_epoch_not_in_every_step(backend):
    few, more = _fit_reads(backend, 3), _fit_reads(backend, 9)
    assert more == few, f"{few} reads for 3 steps, {more} for 9: the steps read the device"  # 0 per step (before: 3)
    assert few <= 3, few  # the labels' range once per fit, the sums after the first step and at the epoch's end
    assert _fit_reads(backend, 3, epochs=2) <= 1 + 2 * 2


@counts
def test_fit_reads_every_read_every_steps_on_a_long_epoch(monkeypatch):
    from gpulab import train_loop

    monkeypatch.setattr(train_loop, "READ_EVERY", 4)
    assert _fit_reads("cupy", 9) == 1 + 1 + 9 // 4 + 1  # the labels; the first step; steps 4 and 8; the epoch's end


@counts
@pytest.mark.parametrize("backend", ["cupy", "kernels"])
def test_a_timed_bench_step_reads_nothing(backend):
    from gpulab.bench.cnn_runs import _GpulabRun

    run = _GpulabRun(backend, batch=4, size=8, channels=(2, 3), hidden=8, batches=2)
    run.steps(1)  # compiled kernels, the optimizer's moments
    before = _reads()
    run.steps(3)
    assert _reads() == before  # before: 2 a step (the labels' range, float(loss))


def test_fit_on_the_device_gives_the_histories_of_reading_every_step():
    """The sums kept on the device are float64: the numbers a loop that read every step and summed in Python got."""
    ds = _dataset(12, 8)
    model = _model()
    hist = train.fit(model, ds, epochs=1, batch_size=4, progress=False, seed=3)
    ref = _model()
    xtr, ytr = runtime.to_device(ds.x_train), runtime.to_device(ds.y_train)
    loss_sum, correct, opt = 0.0, 0, nn.Adam(ref, lr=1e-3)
    for xb, yb in data.batches(xtr, ytr, 4, shuffle=True, rng=np.random.default_rng(3)):
        loss, logits = nn.train_step(ref, nn.SoftmaxCrossEntropy(), opt, xb, yb)
        loss_sum += float(loss) * xb.shape[0]
        correct += int((logits.argmax(axis=1) == yb).sum())
    assert hist.train_loss == [loss_sum / 12] and hist.train_accuracy == [correct / 12]
    assert isinstance(hist.train_loss[0], float) and isinstance(hist.train_accuracy[0], float)


class _NaNAfter(nn.Adam):
    """Adam that writes NaN into the first weight after update ``bad``: the loss is NaN from the next step on."""

    def __init__(self, model: nn.Sequential, bad: int) -> None:
        super().__init__(model, lr=1e-3)
        self.bad = bad

    def step(self) -> None:
        super().step()
        if self.t == self.bad:
            self.model.parameters()[0][1][...] = np.nan


def test_a_nan_loss_stops_fit_at_the_next_read_naming_the_steps():
    model = _model()
    with pytest.raises(FloatingPointError, match=r"the loss is nan .*one of steps 2 to 4 of epoch 1.*lower the"):
        train.fit(model, _dataset(16), epochs=1, batch_size=4, optimizer=_NaNAfter(model, 1), progress=False)
    assert model.fit_state.epoch == 1  # the epoch counts as started, as for any error inside it
    model = _model()
    model.parameters()[0][1][...] = np.inf
    with pytest.raises(FloatingPointError, match=r"the loss is nan .*in step 1 of epoch 1"):  # the first read
        train.fit(model, _dataset(8), epochs=1, batch_size=4, progress=False)


def test_labels_out_of_range_are_refused_at_the_first_step_from_the_range_read_once():
    ds = _dataset(8)
    ds.y_train = ds.y_train.copy()
    ds.y_train[5] = 10
    model = _model()
    before = [runtime.to_host(p).copy() for _, p, _ in model.parameters()]
    said = r"in \[0, 10\).* from \d to 10 in the training labels \(dataset.y_train\)"
    with pytest.raises(gpulab.errors.UsageError, match=said):
        train.fit(model, ds, epochs=1, batch_size=8, progress=False)
    assert all(np.array_equal(b, runtime.to_host(p)) for b, (_, p, _) in zip(before, model.parameters()))


class _Bar:
    """A stand-in for fit's tqdm bar: what it was told."""

    def __init__(self) -> None:
        self.n, self.shown = 0, []

    def update(self, k: int) -> None:
        self.n += k

    def set_postfix(self, **kw: str) -> None:
        self.shown.append((self.n, kw["loss"]))

    def close(self) -> None:
        pass


def test_the_progress_bar_shows_the_last_loss_at_each_read(monkeypatch):
    from gpulab import train_loop

    bar = _Bar()
    monkeypatch.setattr(train_loop, "READ_EVERY", 2)
    monkeypatch.setattr(train_loop, "_progress", lambda total, desc, enabled: bar)
    train.fit(_model(), _dataset(20), epochs=1, batch_size=4, progress=True, evaluate_each_epoch=False)
    assert bar.n == 5 and [n for n, _ in bar.shown] == [1, 2, 4], bar.shown  # the steps read: 1, every 2nd
    assert all(np.isfinite(float(loss)) and len(loss.split(".")[1]) == 4 for _, loss in bar.shown)
