"""gpulab.train and the CNN's kernels backend: short runs only (no full MNIST training here)."""

import json

import numpy as np
import pytest
from _paths import SHARED_MNIST

from gpulab import data, nn, train, train_cli
from gpulab.errors import UsageError

needs_mnist = pytest.mark.skipif(
    not (SHARED_MNIST / "t10k-images-idx3-ubyte.gz").exists(), reason=f"real MNIST files not found at {SHARED_MNIST}"
)


@pytest.fixture(scope="module")
def mnist():
    if not (SHARED_MNIST / "t10k-images-idx3-ubyte.gz").exists():
        pytest.skip(f"real MNIST files not found at {SHARED_MNIST}")
    return data.load("mnist", data_dir=SHARED_MNIST, download=False).subset(1500, 500)


def test_fit_learns_mnist_subset(mnist):
    model = nn.mnist_cnn(seed=0, channels=(8, 16), hidden=32)
    h = train.fit(model, mnist, epochs=2, batch_size=50, progress=False)
    assert len(h.train_loss) == 2 and h.train_loss[1] < h.train_loss[0]
    assert h.test_accuracy[-1] > 0.8  # chance is 0.1
    ev = train.evaluate(model, mnist.x_test, mnist.y_test)
    assert ev["accuracy"] == pytest.approx(h.test_accuracy[-1]) and ev["predictions"].shape == (500,)


@pytest.mark.parametrize("workers", [1, 2])
def test_training_is_deterministic(mnist, workers):
    small = mnist.subset(200, 50)
    runs = [
        train.fit(
            nn.mnist_cnn(seed=1, channels=(4, 8), hidden=16),
            small,
            epochs=1,
            batch_size=40,
            seed=1,
            progress=False,
            workers=workers,
        ).train_loss
        for _ in range(2)
    ]
    assert runs[0] == runs[1]


@needs_mnist
def test_cli_prints_epochs_and_accuracy(tmp_path, capsys):
    out = tmp_path / "run.json"
    rc = train.main(
        [
            "--data-dir",
            str(SHARED_MNIST),
            "--epochs",
            "1",
            "--limit",
            "300",
            "--batch-size",
            "50",
            "--json",
            str(out),
            "--no-download",
            "--save",
            str(tmp_path / "m.npz"),
        ]
    )
    text = capsys.readouterr().out
    assert rc == 0 and "epoch 1:" in text
    last = text.strip().splitlines()[-1]
    assert last.startswith("test accuracy: ") and 0.0 <= float(last.split()[-1]) <= 1.0
    result = json.loads(out.read_text())
    assert result["history"]["epoch"] == [1] and (tmp_path / "m.npz").exists()
    with np.load(tmp_path / "m.npz") as f:  # the model and Adam's state: a checkpoint to resume from
        assert str(f["optimizer.type"]) == "Adam" and int(f["optimizer.t"]) == 6  # 300 images, batches of 50


def test_cli_errors_are_clear(tmp_path, capsys):
    with pytest.raises(SystemExit) as e:
        train.main(["--dataset", "imagenet"])
    assert e.value.code == 2 and "invalid choice" in capsys.readouterr().err
    assert train.main(["--data-dir", str(tmp_path / "nope"), "--no-download"]) == 2
    assert "does not exist" in capsys.readouterr().err
    if SHARED_MNIST.exists():
        assert train.main(["--data-dir", str(SHARED_MNIST), "--backend", "kernels", "--no-download"]) == 2
        err = capsys.readouterr().err
        assert "estimated" in err and "--digits-size 8" in err and "--backend kernels" in err


@pytest.mark.parametrize(
    "args",
    [
        ["--limit", "-5"],
        ["--limit", "0"],
        ["--test-limit", "-10"],
        ["--test-limit", "0"],
        ["--epochs", "0"],
        ["--batch-size", "0"],
        ["--lr", "-1"],
        ["--lr", "nan"],
        ["--lr", "inf"],
        ["--workers", "0"],
        ["--workers", "-2"],
        ["--threads", "-1"],
        ["--channels", "abc"],
        ["--channels", "4"],
        ["--channels", "0,8"],
        ["--hidden", "0"],
        ["--seed", "-1"],
        ["--digits-size", "9"],
    ],
)
def test_cli_refuses_bad_values_before_any_work(args, capsys):
    with pytest.raises(SystemExit) as e:
        train.main(args)
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert "expected" in err or "invalid" in err


def test_cli_refuses_to_replace_a_saved_file_before_training(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(train_cli, "fit", lambda *a, **k: pytest.fail("training started"))
    old = tmp_path / "m.npz"
    old.write_bytes(b"a learner's checkpoint")
    for given in ("m.npz", "m"):  # nn.save adds the .npz
        assert train.main(["--dataset", "digits", "--save", str(tmp_path / given)]) == 2
        assert "already exists" in capsys.readouterr().err
    assert old.read_bytes() == b"a learner's checkpoint"


def test_cli_refuses_to_replace_a_json_file_before_training(tmp_path, capsys, monkeypatch):
    """--json is checked as --save is: an existing file stops the run before training, and stays as it was."""
    monkeypatch.setattr(train_cli, "fit", lambda *a, **k: pytest.fail("training started"))
    old = tmp_path / "run.json"
    old.write_text('{"my": "results"}')
    assert train.main(["--dataset", "digits", "--json", str(old)]) == 2
    err = capsys.readouterr().err
    assert f"--json {old}: {old} already exists" in err and "Choose another path" in err
    assert old.read_text() == '{"my": "results"}'
    same = tmp_path / "out.npz"  # both outputs at one path: the second write would fail after training
    assert train.main(["--dataset", "digits", "--save", str(same), "--json", str(same)]) == 2
    assert "name the same file" in capsys.readouterr().err


def _fake_fit(*args, **kwargs) -> train.History:
    """fit's result without training (the CLI's own steps after it are what these tests check)."""
    return train.History([1], [2.3], [0.1], [2.3], [0.1], [0.01], [1000.0])


def test_cli_json_is_written_whole_or_not_at_all(tmp_path, capsys, monkeypatch):
    """An interrupt (or error) while the results are written leaves neither half a file, which the next run would
    refuse as existing, nor a temp file; a file that appears at the path while training is kept."""
    monkeypatch.setattr(train_cli, "fit", _fake_fit)
    out = tmp_path / "run.json"
    argv = ["--dataset", "digits", "--digits-size", "8", "--workers", "1", "--json", str(out)]
    real_dump = json.dump

    def interrupted_dump(obj, f, **kw):
        f.write('{"dataset": "dig')  # half the results, then the learner presses Ctrl-C
        raise KeyboardInterrupt

    monkeypatch.setattr(train_cli.json, "dump", interrupted_dump)
    with pytest.raises(KeyboardInterrupt):
        train.main(argv)
    assert list(tmp_path.iterdir()) == []
    monkeypatch.setattr(train_cli.json, "dump", real_dump)
    assert train.main(argv) == 0  # the next run is not refused
    assert json.loads(out.read_text())["history"]["epoch"] == [1] and list(tmp_path.iterdir()) == [out]

    def fit_while_another_writes(*args, **kwargs):
        (tmp_path / "late.json").write_text("a learner's results")
        return _fake_fit()

    monkeypatch.setattr(train_cli, "fit", fit_while_another_writes)
    assert train.main([*argv[:-1], str(tmp_path / "late.json")]) == 2
    assert "the file appeared while training and is kept" in capsys.readouterr().err
    assert (tmp_path / "late.json").read_text() == "a learner's results"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["late.json", "run.json"]


def test_cli_workers_need_numpy(capsys):
    assert train.main(["--dataset", "digits", "--backend", "kernels", "--workers", "2"]) == 2
    assert "--backend numpy" in capsys.readouterr().err


def test_kernels_estimate_refuses_hours_and_suggests_a_run_that_fits(capsys):
    """The refusal's suggested command is itself accepted by the estimate."""
    pytest.importorskip("sklearn", reason="the digits dataset comes with scikit-learn (the data extra)")
    assert train.main(["--dataset", "digits", "--backend", "kernels"]) == 2
    err = capsys.readouterr().err
    assert "estimated" in err and "python -m gpulab train" in err
    suggestion = err.split("python -m gpulab train ", 1)[1].split(". For speed")[0].split()
    ns = train.build_parser().parse_args(suggestion)
    ds = data.load("digits", size=ns.digits_size).subset(ns.limit, ns.test_limit)
    seconds = train.estimate_kernel_seconds(
        ds.x_train.shape[1:],
        len(ds.x_train),
        len(ds.x_test),
        epochs=ns.epochs,
        batch_size=ns.batch_size,
        channels=ns.channels,
        hidden=ns.hidden,
    )
    assert seconds < 60 * ns.max_minutes


def test_fit_validates_its_arguments():
    ds = data.Dataset(
        "t",
        np.zeros((4, 1, 8, 8), np.float32),
        np.zeros(4, np.int64),
        np.zeros((2, 1, 8, 8), np.float32),
        np.zeros(2, np.int64),
        ("0",),
        "test",
    )
    for kw in ({"epochs": 0}, {"batch_size": 0}, {"workers": 0}):
        with pytest.raises(ValueError, match=">= 1"):
            train.fit(nn.mnist_cnn(image_size=8), ds, progress=False, **kw)


def test_kernels_backend_trains_a_step_in_the_simulator():
    """One step on the course's kernels changes the weights like the numpy backend does."""
    rng = np.random.default_rng(0)
    x, y = rng.random((4, 1, 8, 8), dtype=np.float32), np.array([1, 2, 3, 4])
    weights = {}
    for backend in ("numpy", "kernels"):
        model = nn.mnist_cnn(image_size=8, channels=(2, 3), hidden=8, dropout=0.0, backend=backend)
        nn.train_step(model, nn.SoftmaxCrossEntropy(), nn.Adam(model, lr=1e-2), x, y)
        weights[backend] = {k: np.asarray(p).copy() for k, p, _ in model.parameters()}
    for k in weights["numpy"]:
        np.testing.assert_allclose(weights["kernels"][k], weights["numpy"][k], rtol=1e-4, atol=1e-5, err_msg=k)


def test_fit_rejects_nan_data():
    x = np.zeros((4, 1, 8, 8), np.float32)
    x[0, 0, 0, 0] = np.nan
    ds = data.Dataset("t", x, np.zeros(4, np.int64), x, np.zeros(4, np.int64), ("0",), "test")
    with pytest.raises(ValueError, match="NaN"):
        train.fit(nn.mnist_cnn(image_size=8), ds, epochs=1, progress=False)


def test_kernels_backend_matches_numpy_on_a_tiny_batch():
    """Forward, loss and every gradient through the lab's CUDA kernels (simulator here) vs NumPy."""
    rng = np.random.default_rng(0)
    x = rng.random((2, 1, 8, 8), dtype=np.float32)
    y = np.array([3, 7])
    got = {}
    for backend in ("numpy", "kernels"):
        model = nn.mnist_cnn(image_size=8, channels=(2, 3), hidden=8, dropout=0.0, backend=backend)
        loss_fn = nn.SoftmaxCrossEntropy()
        loss_fn.ops = model.ops
        out = model.forward(x)
        loss = loss_fn(out, y)
        model.backward(loss_fn.backward())
        got[backend] = (np.asarray(out), loss, {n: np.asarray(g).copy() for n, _, g in model.parameters()})
    (o1, l1, g1), (o2, l2, g2) = got["numpy"], got["kernels"]
    np.testing.assert_allclose(o2, o1, rtol=1e-4, atol=1e-5)
    assert l2 == pytest.approx(l1, rel=1e-5)
    for k in g1:
        np.testing.assert_allclose(g2[k], g1[k], rtol=1e-4, atol=1e-5, err_msg=k)


def test_bench_cnn_runs_and_writes_json(tmp_path, capsys):
    from gpulab.bench import cnn

    out = tmp_path / "b.json"
    assert (
        cnn.main(
            [
                "--steps",
                "2",
                "--warmup",
                "1",
                "--rounds",
                "1",
                "--batch-size",
                "8",
                "--channels",
                "4,8",
                "--compare",
                "torch",
                "--json",
                str(out),
            ]
        )
        == 0
    )
    res = json.loads(out.read_text())
    assert res["gpulab"]["images_per_second"] > 0
    if "torch" in res:
        assert res["ratio"] == pytest.approx(res["gpulab"]["images_per_second"] / res["torch"]["images_per_second"])


def test_training_figures():
    from gpulab import viz

    h = train.History(
        epoch=[1, 2], train_loss=[1.0, 0.5], train_accuracy=[0.6, 0.8], test_loss=[0.9, 0.6], test_accuracy=[0.7, 0.85]
    )
    fig = viz.training_curves(h)
    assert len(fig.data) == 4 and list(fig.data[3].y) == [0.7, 0.85]
    h.epoch.append(3)
    h.test_accuracy.append(0.9)
    h.test_loss.append(0.4)
    h.train_loss.append(0.3)
    h.train_accuracy.append(0.9)
    viz.update_training_curves(fig, h)
    assert list(fig.data[3].y) == [0.7, 0.85, 0.9]
    y_true, y_pred = np.array([0, 1, 2, 2]), np.array([0, 2, 2, 1])
    m = viz.confusion_matrix(y_true, y_pred, 3)
    assert m.tolist() == [[1, 0, 0], [0, 0, 1], [0, 1, 1]]
    assert "50.00%" in viz.confusion_matrix_figure(y_true, y_pred, ["a", "b", "c"]).layout.title.text
    mis = viz.misclassified_figure(np.zeros((4, 1, 8, 8)), y_true, y_pred, ["a", "b", "c"])
    assert len(mis.data) == 2 and mis.layout.annotations[0].text == "b → c"


def test_training_curves_compare_runs_in_one_figure():
    from gpulab import viz

    a = train.History(
        epoch=[1, 2], train_loss=[1.0, 0.5], train_accuracy=[0.6, 0.8], test_loss=[0.9, 0.6], test_accuracy=[0.7, 0.85]
    )
    b = train.History(epoch=[1], train_loss=[2.0], train_accuracy=[0.3], test_loss=[1.5], test_accuracy=[0.4])
    fig = viz.training_curves({"numpy": a, "kernels": b})
    assert [t.name for t in fig.data][:2] == ["numpy: train loss", "numpy: test loss"]
    assert len(fig.data) == 8 and list(fig.data[7].y) == [0.4]
    b.epoch.append(2)
    b.train_loss.append(1.0)
    b.test_accuracy.append(0.6)
    viz.update_training_curves(fig, {"numpy": a, "kernels": b})
    assert list(fig.data[4].y) == [2.0, 1.0] and list(fig.data[7].x) == [1, 2]


def test_live_plot_redraws_through_a_display_handle(monkeypatch):
    """fit(live_plot=True) shows a plain go.Figure once and updates it after every epoch (works on
    plotly 5-7 and Colab; no FigureWidget, which needs anywidget on plotly 6+)."""
    import IPython.display

    shown, updates = [], []

    class Handle:
        def update(self, obj):
            updates.append([list(t.y) for t in obj.data])

    def fake_display(obj, display_id=False):
        shown.append(obj)
        return Handle() if display_id else None

    monkeypatch.setattr(IPython.display, "display", fake_display)
    rng = np.random.default_rng(0)
    x = rng.random((64, 1, 8, 8), dtype=np.float32)
    y = (x.mean(axis=(1, 2, 3)) > 0.5).astype(np.int64)
    ds = data.Dataset("toy", x[:48], y[:48], x[48:], y[48:], ("0", "1"), "test")
    train.fit(
        nn.mnist_cnn(image_size=8, channels=(2, 2), hidden=4, classes=2),
        ds,
        epochs=2,
        batch_size=16,
        progress=False,
        live_plot=True,
    )
    assert len(shown) == 1 and type(shown[0]).__name__ == "Figure"
    assert len(updates) == 2 and [len(ys) for ys in updates[-1]] == [2, 2, 2, 2]


def test_predict_and_evaluate_move_host_data_to_a_gpu_model(monkeypatch):
    """Lesson 09 evaluates its GPU-trained model on the dataset's NumPy test images
    (``train.evaluate(model, small.x_test, small.y_test)``, ``train.predict(model, small.x_test)``). fit() moves
    its data to the backend; predict() did not, so on a GPU the cupy and kernels backends received NumPy batches
    (CuPy raises TypeError for them). Here a stand-in device world: a NumPy subclass that only the model accepts."""
    from gpulab import runtime

    class Dev(np.ndarray):  # a "device array"
        pass

    def to_device(x):
        return x if isinstance(x, Dev) else np.array(x).view(Dev)

    class GpuModel:  # a model whose backend computes on the device
        backend, training = "cupy", True
        ops = nn.ops.get("numpy")  # predict reads what checks its ops held back (Ops.finish): nothing here
        W = np.arange(12, dtype=np.float32).reshape(4, 3) / 10

        def eval(self):
            self.training = False

        def train(self, mode=True):
            self.training = mode

        def forward(self, x):
            if not isinstance(x, Dev):
                raise TypeError(f"Unsupported type {type(x)}")  # what CuPy says about a NumPy argument
            return (x.reshape(x.shape[0], -1)[:, :4] @ self.W).view(Dev)

    monkeypatch.setattr(runtime, "to_device", to_device)
    rng = np.random.default_rng(0)
    x = rng.random((300, 1, 2, 2), dtype=np.float32)  # NumPy, as data.load gives it: two batches of 256
    y = rng.integers(0, 3, 300)
    model = GpuModel()
    logits = train.predict(model, x)
    assert logits.shape == (300, 3) and model.training  # every batch ran; the training mode is restored
    ev = train.evaluate(model, x, y)
    expected = (x.reshape(300, -1) @ GpuModel.W).argmax(axis=1)
    assert np.array_equal(ev["predictions"], expected) and ev["accuracy"] == float((expected == y).mean())


# ---------------------------------------------------------------- what a careless call gets (review of bad input)


def _toy(size: int = 8, n_train: int = 32, n_test: int = 8) -> data.Dataset:
    rng = np.random.default_rng(0)
    x = rng.random((n_train + n_test, 1, size, size), dtype=np.float32)
    y = rng.integers(0, 10, n_train + n_test)
    return data.Dataset("toy", x[:n_train], y[:n_train], x[n_train:], y[n_train:], tuple("0123456789"), "test")


def _tiny(seed: int = 0, size: int = 8) -> nn.Sequential:
    return nn.mnist_cnn(seed=seed, image_size=size, channels=(2, 3), hidden=8)


def _weights(model: nn.Sequential) -> list:
    return [p.copy() for _, p, _ in model.parameters()]


def test_fit_refuses_an_optimizer_made_for_another_model():
    """The model's cell re-run after the optimizer's: the Adam updates the old model, so fit trained nothing (test
    loss identical in every epoch). Refused before any work, naming both models and the cells' usual order."""
    old = _tiny(seed=1)
    opt = nn.Adam(old, lr=1e-2)
    model = _tiny()  # the model cell, run again
    before, old_before = _weights(model), _weights(old)
    with pytest.raises(UsageError) as e:
        train.fit(model, _toy(), epochs=1, batch_size=16, optimizer=opt, progress=False)
    msg = str(e.value)
    assert "made for another model" in msg and "built the same way as this one (271 parameters)" in msg
    assert "run again after the cell that makes the optimizer" in msg and "optimizer = nn.Adam(model, lr=...)" in msg
    assert "lr=0.01" in msg and "leave optimizer out" in msg
    for a, b in zip(before + old_before, _weights(model) + _weights(old)):
        assert np.array_equal(a, b)  # nothing moved, not even the other model
    assert model.fit_state.epoch == 0

    other = nn.mnist_cnn(image_size=8, channels=(4, 4), hidden=8)  # another architecture: both sizes named
    with pytest.raises(UsageError, match="its Sequential has [0-9,]+ parameters, the model being trained 271"):
        train.fit(model, _toy(), epochs=1, batch_size=16, optimizer=nn.SGD(other, lr=0.1), progress=False)

    mine = nn.Adam(model, lr=1e-2)  # the good path: made for this model, before fit (lab 09's cell)
    train.fit(model, _toy(), epochs=1, batch_size=16, optimizer=mine, progress=False)
    assert mine.t == 2 and any(not np.array_equal(a, b) for a, b in zip(before, _weights(model)))


def test_fit_refuses_what_is_not_an_optimizer():
    model, ds = _tiny(), _toy()
    cases = {
        "adam": "it was given the text 'adam'",
        nn.Adam: "it was given the class nn.Adam itself (not called)",
        object(): "it needs a step() method",
    }
    for optimizer, expected in cases.items():
        with pytest.raises(UsageError, match="optimizer=nn.Adam\\(model, lr=1e-3\\)") as e:
            train.fit(model, ds, epochs=1, optimizer=optimizer, progress=False)
        assert expected in str(e.value), str(e.value)
    amp = nn.MixedPrecision(_tiny(), lambda m: nn.Adam(m, lr=1e-3))
    with pytest.raises(UsageError, match="fit does not run mixed precision: .*amp.step\\(x, y\\)"):
        train.fit(amp.model, ds, epochs=1, optimizer=amp, progress=False)
    with pytest.raises(UsageError, match="master weights of a MixedPrecision over this model"):
        train.fit(amp.model, ds, epochs=1, optimizer=amp.optimizer, progress=False)

    class OwnSGD:  # a learner's optimizer without a .model: taken as is
        def __init__(self, model):
            self.params, self.steps = model.parameters(), 0

        def step(self):
            self.steps += 1
            for _, p, g in self.params:
                p -= 0.01 * g

    own = OwnSGD(model)
    train.fit(model, ds, epochs=1, batch_size=16, optimizer=own, progress=False)
    assert own.steps == 2


def test_fit_wants_a_model_and_a_dataset():
    model, ds = _tiny(), _toy()
    for given, expected in (
        ((ds.x_train, ds.y_train), "it was given a tuple"),
        (ds.x_train, "it was given an array of shape (32, 1, 8, 8)"),
    ):
        with pytest.raises(UsageError, match="dataset is a gpulab Dataset such as data.load") as e:
            train.fit(model, given, epochs=1, progress=False)
        assert expected in str(e.value) and "data.Dataset('mine', x_train, y_train, x_test, y_test" in str(e.value)
    with pytest.raises(UsageError, match="first argument is the model.*given a Dataset. The arguments look swapped"):
        train.fit(ds, model, epochs=1, progress=False)
    empty_train = data.Dataset("e", ds.x_train[:0], ds.y_train[:0], ds.x_test, ds.y_test, ds.classes, "test")
    with pytest.raises(UsageError, match="the training set is empty .*0 images"):
        train.fit(model, empty_train, epochs=1, progress=False)
    no_test = data.Dataset("e", ds.x_train, ds.y_train, ds.x_test[:0], ds.y_test[:0], ds.classes, "test")
    with pytest.raises(UsageError, match="the test set is empty.*evaluate_each_epoch=False"):
        train.fit(model, no_test, epochs=1, progress=False)
    assert model.fit_state.epoch == 0  # refused before the first epoch
    h = train.fit(model, no_test, epochs=1, batch_size=16, progress=False, evaluate_each_epoch=False)
    assert h.epoch == [1] and h.test_loss == []


def test_a_model_built_for_another_image_size_is_named_with_both_sizes():
    """Lesson 09 and lab 09 mix 8x8 and 28x28 digits: a Linear's 'expects 147 input features' named neither."""
    m28, ds = _tiny(size=28), _toy(size=8)
    assert m28.input_shape == (1, 28, 28)
    for call in (
        lambda: train.fit(m28, ds, epochs=1, progress=False),
        lambda: train.evaluate(m28, ds.x_test, ds.y_test),
        lambda: train.predict(m28, ds.x_test),
    ):
        with pytest.raises(UsageError) as e:
            call()
        msg = str(e.value)
        assert "built for 28x28 images (nn.mnist_cnn(image_size=28)) but these images are 8x8" in msg, msg
        assert "nn.mnist_cnn(image_size=8, ...)" in msg and "data.load('digits', size=28)" in msg
    m8 = _tiny()
    with pytest.raises(UsageError, match=r"one image of shape \(1, 8, 8\).*x\[None\]"):
        train.predict(m8, ds.x_test[0])
    with pytest.raises(UsageError, match=r"no channel axis, shape \(8, 8, 8\).*x\[:, None\]"):
        train.predict(m8, ds.x_test[:, 0])
    assert train.predict(m8, ds.x_test[:1]).shape == (1, 10)  # the good path
    assert train.evaluate(m8, ds.x_test, ds.y_test)["predictions"].shape == (8,)


def test_predict_and_evaluate_check_their_arguments():
    model, ds = _tiny(), _toy()
    with pytest.raises(UsageError, match="x must be an array of images.*given a list.*np.asarray"):
        train.predict(model, ds.x_test.tolist())
    with pytest.raises(UsageError, match="batch_size must be >= 1, but got 0"):
        train.predict(model, ds.x_test, batch_size=0)
    with pytest.raises(UsageError, match="batch_size must be a whole number >= 1, but got 2.5"):
        train.evaluate(model, ds.x_test, ds.y_test, batch_size=2.5)
    with pytest.raises(UsageError, match=r"no images to evaluate on \(x has shape \(0, 1, 8, 8\)\)"):
        train.evaluate(model, ds.x_test[:0], ds.y_test[:0])
    with pytest.raises(UsageError, match="images must be an array .*got a list"):
        train.evaluate(model, ds.x_test.tolist(), ds.y_test)
    logits = train.predict(model, ds.x_test, batch_size=3)  # the good path: 3 batches, one of 2
    assert logits.shape == (8, 10) and np.allclose(logits, train.predict(model, ds.x_test))
