"""gpulab.nn: every layer's backward against finite differences (float64) and against PyTorch."""

import numpy as np
import pytest

from gpulab import nn

RNG = np.random.default_rng(1)


def _as64(layer):
    for d in (layer.params, layer.grads):
        for k in d:
            d[k] = d[k].astype(np.float64)
    return layer


def numeric_grad(f, a, eps=1e-6, max_points=40):
    """Central differences of scalar f() w.r.t. a few entries of a (modified in place)."""
    flat = a.reshape(-1)
    idx = RNG.choice(flat.size, size=min(max_points, flat.size), replace=False)
    g = np.zeros(idx.size)
    for t, i in enumerate(idx):
        old = flat[i]
        flat[i] = old + eps
        fp = f()
        flat[i] = old - eps
        fm = f()
        flat[i] = old
        g[t] = (fp - fm) / (2 * eps)
    return idx, g


def check_layer(layer, x, reset=None):
    """Compare analytic dL/dx and dL/dparams with finite differences for L = sum(forward(x) * w)."""
    layer = _as64(layer)
    reset = reset or (lambda: None)
    reset()
    out = layer.forward(x)
    w = RNG.standard_normal(out.shape)
    dx = layer.backward(w)

    def loss():
        reset()
        return float((layer.forward(x) * w).sum())

    idx, g = numeric_grad(loss, x)
    np.testing.assert_allclose(np.asarray(dx).reshape(-1)[idx], g, rtol=1e-5, atol=1e-7)
    for name, p in layer.params.items():
        analytic = layer.grads[name].copy()
        idx, g = numeric_grad(loss, p)
        np.testing.assert_allclose(analytic.reshape(-1)[idx], g, rtol=1e-5, atol=1e-7, err_msg=name)


@pytest.mark.parametrize("stride,pad,k", [(1, 1, 3), (1, 0, 3), (2, 1, 3), (2, 0, 2), (1, 2, 5)])
def test_conv2d_gradients(stride, pad, k):
    x = RNG.standard_normal((2, 3, 7, 6))
    check_layer(nn.Conv2d(3, 4, k, stride=stride, padding=pad, rng=np.random.default_rng(0)), x)


def test_conv2d_matches_direct_loops():
    x = RNG.standard_normal((2, 2, 5, 5)).astype(np.float32)
    conv = nn.Conv2d(2, 3, 3, stride=2, padding=1)
    y = conv.forward(x)
    W, b = conv.params["W"], conv.params["b"]
    xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    ref = np.zeros((2, 3, 3, 3), np.float32)
    for n in range(2):
        for f in range(3):
            for i in range(3):
                for j in range(3):
                    ref[n, f, i, j] = (xp[n, :, 2 * i : 2 * i + 3, 2 * j : 2 * j + 3] * W[f]).sum() + b[f]
    np.testing.assert_allclose(y, ref, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    "k,stride,shape", [(2, 2, (2, 3, 6, 8)), (2, 2, (1, 2, 7, 5)), (3, 2, (2, 2, 7, 7)), (3, 1, (1, 2, 5, 5))]
)
def test_maxpool_gradients(k, stride, shape):
    x = RNG.permutation(np.prod(shape)).reshape(shape).astype(np.float64) * 0.1  # distinct values: no ties
    check_layer(nn.MaxPool2d(k, stride), x)


def test_maxpool_ties_route_gradient_once():
    x = np.zeros((1, 1, 2, 2), np.float32)
    pool = nn.MaxPool2d(2)
    pool.forward(x)
    dx = pool.backward(np.ones((1, 1, 1, 1), np.float32))
    assert dx.sum() == 1.0 and dx[0, 0, 0, 0] == 1.0  # the first maximum, as in PyTorch


def test_relu_linear_flatten_gradients():
    check_layer(nn.ReLU(), RNG.standard_normal((4, 7)) + 0.05)
    check_layer(nn.Linear(6, 5, rng=np.random.default_rng(0)), RNG.standard_normal((3, 6)))
    check_layer(nn.Flatten(), RNG.standard_normal((2, 3, 2, 2)))


def test_dropout_gradient_and_scaling():
    d = nn.Dropout(0.5, seed=5)
    start = d.buffers["states"].copy()
    check_layer(d, RNG.standard_normal((4, 10)), reset=lambda: d.buffers["states"].__setitem__(..., start))
    big = np.ones((1000, 100), np.float32)
    y = nn.Dropout(0.25).forward(big)
    assert abs(y.mean() - 1.0) < 0.01 and abs((y == 0).mean() - 0.25) < 0.01
    assert nn.Dropout(0.5).eval().forward(big) is big


def test_softmax_cross_entropy_gradient():
    logits = RNG.standard_normal((5, 4))
    y = np.array([0, 3, 1, 1, 2])
    loss_fn = nn.SoftmaxCrossEntropy()
    loss_fn(logits, y)
    grad = loss_fn.backward()
    idx, g = numeric_grad(lambda: loss_fn(logits, y), logits)
    np.testing.assert_allclose(grad.reshape(-1)[idx], g, rtol=1e-5, atol=1e-8)


def test_sequential_end_to_end_gradient():
    model = nn.mnist_cnn(image_size=8, channels=(2, 3), hidden=5, dropout=0.0)
    for layer in model:
        _as64(layer)
    x = RNG.standard_normal((3, 1, 8, 8))
    y = np.array([1, 2, 3])
    loss_fn = nn.SoftmaxCrossEntropy()
    loss_fn(model.forward(x), y)
    model.backward(loss_fn.backward())
    for name, p, g in model.parameters():
        analytic = g.copy()
        idx, num = numeric_grad(lambda: loss_fn(model.forward(x), y), p, max_points=8)
        np.testing.assert_allclose(analytic.reshape(-1)[idx], num, rtol=1e-4, atol=1e-7, err_msg=name)


def test_against_pytorch_autograd():
    torch = pytest.importorskip("torch")
    model = nn.mnist_cnn(image_size=12, channels=(4, 6), hidden=16, dropout=0.0)
    tm = torch.nn.Sequential(
        torch.nn.Conv2d(1, 4, 3, padding=1),
        torch.nn.ReLU(),
        torch.nn.MaxPool2d(2),
        torch.nn.Conv2d(4, 6, 3, padding=1),
        torch.nn.ReLU(),
        torch.nn.MaxPool2d(2),
        torch.nn.Flatten(),
        torch.nn.Linear(54, 16),
        torch.nn.ReLU(),
        torch.nn.Linear(16, 10),
    ).double()
    tlayers = [m for m in tm if isinstance(m, (torch.nn.Conv2d, torch.nn.Linear))]
    ours = [layer for layer in model if layer.params]
    for a, t in zip(ours, tlayers):
        _as64(a)
        t.weight.data = torch.from_numpy(a.params["W"].copy())
        t.bias.data = torch.from_numpy(RNG.standard_normal(a.params["b"].shape))
        a.params["b"][...] = t.bias.data.numpy()
    x = RNG.standard_normal((4, 1, 12, 12))
    y = np.array([0, 5, 9, 2])
    loss_fn = nn.SoftmaxCrossEntropy()
    loss = loss_fn(model.forward(x), y)
    model.backward(loss_fn.backward())
    tloss = torch.nn.functional.cross_entropy(tm(torch.from_numpy(x)), torch.from_numpy(y))
    tloss.backward()
    assert abs(loss - tloss.item()) < 1e-10
    for a, t in zip(ours, tlayers):
        np.testing.assert_allclose(a.grads["W"], t.weight.grad.numpy(), rtol=1e-8, atol=1e-12)
        np.testing.assert_allclose(a.grads["b"], t.bias.grad.numpy(), rtol=1e-8, atol=1e-12)


def test_adam_and_sgd_match_pytorch():
    torch = pytest.importorskip("torch")
    for make, tmake in [
        (lambda m: nn.Adam(m, lr=0.01), lambda p: torch.optim.Adam(p, lr=0.01)),
        (lambda m: nn.SGD(m, lr=0.1, momentum=0.9), lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9)),
    ]:
        model = nn.Sequential(nn.Linear(3, 2))
        w = torch.tensor(model[0].params["W"].copy(), requires_grad=True)
        b = torch.tensor(model[0].params["b"].copy(), requires_grad=True)
        opt, topt = make(model), tmake([w, b])
        for _step in range(3):
            g = RNG.standard_normal((2, 3)).astype(np.float32)
            model[0].grads["W"][...] = g
            model[0].grads["b"][...] = g[:, 0]
            w.grad, b.grad = torch.from_numpy(g.copy()), torch.from_numpy(g[:, 0].copy())
            opt.step()
            topt.step()
        np.testing.assert_allclose(model[0].params["W"], w.detach().numpy(), rtol=1e-5, atol=1e-6)


def test_float32_throughout_and_deterministic():
    x = RNG.random((4, 1, 28, 28), dtype=np.float32)
    y = np.array([1, 2, 3, 4])
    runs = []
    for _ in range(2):
        model = nn.mnist_cnn(seed=3)
        opt, loss_fn = nn.Adam(model), nn.SoftmaxCrossEntropy()
        out = model.forward(x)
        assert out.dtype == np.float32
        loss_fn(out, y)
        model.backward(loss_fn.backward())
        opt.step()
        assert all(p.dtype == np.float32 and g.dtype == np.float32 for _, p, g in model.parameters())
        runs.append(model.state_dict())
    for k in runs[0]:
        np.testing.assert_array_equal(runs[0][k], runs[1][k])


def test_save_load_roundtrip(tmp_path):
    a, b = nn.mnist_cnn(seed=1), nn.mnist_cnn(seed=2)
    path = nn.save(a, tmp_path / "model")
    assert path.suffix == ".npz"
    nn.load(b, path)
    for k, v in a.state_dict().items():
        np.testing.assert_array_equal(v, b.state_dict()[k])
    with pytest.raises(ValueError, match="shape"):
        nn.load(nn.mnist_cnn(hidden=64), path)
    with pytest.raises(FileNotFoundError, match="no saved model"):
        nn.load(a, tmp_path / "missing.npz")


def test_bad_inputs_get_clear_errors():
    conv = nn.Conv2d(1, 2, 3)
    with pytest.raises(ValueError, match="4-D"):
        conv.forward(np.zeros((28, 28), np.float32))
    with pytest.raises(ValueError, match="1 input channels"):
        conv.forward(np.zeros((1, 3, 28, 28), np.float32))
    with pytest.raises(TypeError, match="float32"):
        conv.forward(np.zeros((1, 1, 28, 28), np.uint8))
    with pytest.raises(ValueError, match="input features"):
        nn.Linear(4, 2).forward(np.zeros((1, 5), np.float32))
    with pytest.raises(FloatingPointError, match="NaN"):
        nn.SoftmaxCrossEntropy()(np.full((2, 3), np.nan), np.array([0, 1]))
    with pytest.raises(ValueError, match="labels must be in"):
        nn.SoftmaxCrossEntropy()(np.zeros((2, 3)), np.array([0, 3]))
    with pytest.raises(ValueError, match="unknown backend"):
        nn.mnist_cnn(backend="tpu")
    with pytest.raises(RuntimeError, match="simulator"):
        nn.mnist_cnn(backend="cupy")


def test_mixed_precision_learns_and_skips_overflowing_steps():
    rng = np.random.default_rng(0)
    x = rng.random((64, 1, 8, 8), dtype=np.float32)
    y = (x[:, 0, :4].mean(axis=(1, 2)) > x[:, 0, 4:].mean(axis=(1, 2))).astype(np.int64)  # top half brighter?
    model = nn.mnist_cnn(image_size=8, channels=(4, 8), hidden=16, classes=2, dropout=0.0)
    amp = nn.MixedPrecision(model, lambda m: nn.Adam(m, lr=3e-3), init_scale=2.0**30, growth_interval=5)
    assert all(p.dtype == np.float16 for _, p, _ in model.parameters())
    assert all(p.dtype == np.float32 for _, p, _ in amp.masters.parameters())
    losses = [amp.step(x, y) for _ in range(40)]
    assert amp.skipped >= 1 and amp.scale < 2.0**30  # 2**30 overflows FP16 gradients: steps skipped, scale cut
    # the same steps in FP32 (no skipped ones) reach about the same loss
    ref = nn.mnist_cnn(image_size=8, channels=(4, 8), hidden=16, classes=2, dropout=0.0)
    opt, loss_fn = nn.Adam(ref, lr=3e-3), nn.SoftmaxCrossEntropy()
    for _ in range(40 - amp.skipped):
        ref_loss = loss_fn(ref.forward(x), y)
        ref.backward(loss_fn.backward())
        opt.step()
    assert losses[-1] < losses[0] - 0.05 and abs(losses[-1] - ref_loss) < 0.05
    for (_, p16, _), (_, p32, _) in zip(model.parameters(), amp.masters.parameters()):
        np.testing.assert_array_equal(p16, p32.astype(np.float16))
    with pytest.raises(ValueError, match="float32-only"):
        nn.MixedPrecision(nn.Sequential(nn.Linear(2, 2), backend="kernels"), nn.Adam)


def test_data_parallel_gradient_equals_single_thread():
    x = RNG.random((10, 1, 8, 8), dtype=np.float32)
    y = RNG.integers(0, 10, 10)
    single, split = (nn.mnist_cnn(image_size=8, channels=(3, 4), hidden=8, dropout=0.0) for _ in range(2))
    loss_fn = nn.SoftmaxCrossEntropy()
    loss = loss_fn(single.forward(x), y)
    single.backward(loss_fn.backward())
    dp = nn.DataParallel(split, workers=3)  # 10 images: shares of 4, 3 and 3 (the model, worker 0, takes a largest)
    loss_dp, logits = dp.step(x, y)
    dp.close()
    assert logits.shape == (10, 10) and abs(loss - loss_dp) < 1e-5
    for (name, _, g1), (_, _, g2) in zip(single.parameters(), split.parameters()):
        np.testing.assert_allclose(g2, g1, rtol=1e-4, atol=1e-6, err_msg=name)
    with pytest.raises(ValueError, match="workers"):
        nn.DataParallel(split, workers=0)


def test_load_of_a_garbage_file_does_not_suggest_allow_pickle(tmp_path):
    from gpulab.errors import UsageError

    bad = tmp_path / "m.npz"
    bad.write_bytes(b"\x80\x04garbage, not a zip archive" * 10)
    with pytest.raises(UsageError) as e:
        nn.load(nn.mnist_cnn(image_size=8), bad)
    assert "allow_pickle" not in str(e.value) and "gpulab.nn.save" in str(e.value)


@pytest.mark.parametrize("backend", ["numpy", "kernels"])
def test_relu_before_maxpool_runs_after_it_with_the_same_outputs_and_gradients(backend):
    """Sequential runs ReLU after the pooling (max and ReLU commute); with exact ties (blank image regions,
    windows of equal values, all-negative windows) outputs and gradients equal the layer order's bit for bit."""
    model = nn.mnist_cnn(image_size=8, channels=(3, 4), hidden=8, dropout=0.0, backend=backend)
    order = model.run_order()
    assert [type(layer).__name__ for layer in order[:6]] == [
        "Conv2d",
        "MaxPool2d",
        "ReLU",
        "Conv2d",
        "MaxPool2d",
        "ReLU",
    ]
    model.layers[0].params["b"][...] = np.array([0.5, -0.5, 0.0], np.float32)
    x = RNG.random((3, 1, 8, 8)).astype(np.float32)
    x[:, :, :4] = 0.0  # blank rows: equal conv outputs, so ties inside pooling windows
    y = np.array([1, 2, 3])

    def grads(run_layers):
        out = x
        for layer in run_layers:
            out = layer.forward(out)
        loss_fn = nn.SoftmaxCrossEntropy()
        loss_fn.ops = model.ops
        loss = loss_fn(out, y)
        d = loss_fn.backward()
        for layer in reversed(run_layers):
            d = layer.backward(d)
        return loss, out.copy(), [g.copy() for _, _, g in model.parameters()]

    loss_a, out_a, g_a = grads(model.layers)  # the order written
    loss_b, out_b, g_b = grads(order)  # the order run
    assert loss_a == loss_b
    np.testing.assert_array_equal(out_a, out_b)
    for a, b in zip(g_a, g_b):
        np.testing.assert_array_equal(a, b)


def test_mnist_cnn_and_layers_check_their_arguments():
    """The arguments a careless learner gets wrong reach a gpulab message, not NumPy's random module or a
    ZeroDivisionError in the weight initialisation; a model that could not run is not built."""
    from gpulab.errors import UsageError

    cases = {
        (("channels", 8),): "channels must be two whole numbers (c1, c2), the output channels of the two convolutions",
        (("channels", (2, 3, 4)),): "e.g. channels=(32, 64); got (2, 3, 4)",
        (("channels", (2.5, 3)),): "channels[0] must be a whole number >= 1, but got 2.5",
        (("channels", (2, 0)),): "channels[1] must be >= 1, but got 0",
        (("image_size", 0),): "image_size must be >= 4, but got 0. It is the side of the square images",
        (("image_size", -4),): "image_size must be >= 4, but got -4",
        (("image_size", "28"),): "image_size must be a whole number >= 4, but got '28' (str)",
        (("image_size", 30),): "image_size must be a multiple of 4 (two 2x2 poolings halve it twice), got 30",
        (("hidden", 0),): "hidden must be >= 1, but got 0. It is the width of the hidden linear layer",
        (("classes", 1),): "classes must be >= 2, but got 1. A classifier needs at least 2 classes",
        (("seed", -1),): "seed must be >= 0, but got -1. Pass e.g. seed=0",
        (("dropout", 25),): "Dropout probability must be a number in [0, 1)",
    }
    for kw, expected in cases.items():
        args = {"image_size": 8, **dict(kw)}
        with pytest.raises(UsageError) as e:
            nn.mnist_cnn(**args)
        assert expected in str(e.value), (args, str(e.value))
    with pytest.raises(UsageError, match="got 25. For 25% pass 0.25"):
        nn.Dropout(25)
    with pytest.raises(UsageError, match="got 1.5. Pass e.g. 0.25"):
        nn.Dropout(1.5)
    with pytest.raises(UsageError, match="Linear's in_features must be a whole number >= 1, but got 3.5"):
        nn.Linear(3.5, 2)
    with pytest.raises(UsageError, match="Linear's out_features must be >= 1, but got 0"):
        nn.Linear(3, 0)
    with pytest.raises(UsageError, match="MaxPool2d's kernel_size must be >= 1, but got 0"):
        nn.MaxPool2d(0)
    with pytest.raises(UsageError, match="MaxPool2d's stride must be >= 1, but got 0"):
        nn.MaxPool2d(2, stride=0)
    # the good paths: a whole float is a whole number; the model records the images it was built for
    model = nn.mnist_cnn(image_size=8.0, channels=[2, 3], hidden=8, classes=2, seed=np.int64(3))
    assert model.input_shape == (1, 8, 8) and model.forward(np.zeros((2, 1, 8, 8), np.float32)).shape == (2, 2)
    assert nn.mnist_cnn().input_shape == (1, 28, 28) and nn.Sequential(nn.Linear(3, 2)).input_shape is None
    assert nn.MaxPool2d(3).stride == 3 and nn.MaxPool2d(3, stride=1).stride == 1 and nn.Linear(3.0, 2).n_in == 3


def test_optimizers_take_the_model_itself():
    """PyTorch's habit, nn.Adam(model.parameters()), failed at the first step ('list' object has no attribute
    'parameters'); a learning rate in quotes was called not > 0."""
    from gpulab.errors import UsageError

    model = nn.Sequential(nn.Linear(3, 2))
    for make in (nn.Adam, nn.SGD):
        with pytest.raises(UsageError) as e:
            make(model.parameters(), lr=1e-3)
        name = make.__name__
        assert f"nn.{name} takes the model itself, nn.{name}(model, lr=...) (not model.parameters() as in " in str(
            e.value
        ) and "given a list" in str(e.value)
    with pytest.raises(UsageError, match="given None"):
        nn.Adam(None)
    with pytest.raises(UsageError, match="got the text '1e-3': write lr=0.001 without quotes"):
        nn.Adam(model, lr="1e-3")
    with pytest.raises(UsageError, match="got the text 'fast': pass e.g. lr=1e-3"):
        nn.SGD(model, lr="fast")
    for lr in (0, -1, float("nan"), True):
        with pytest.raises(UsageError, match="finite number > 0"):
            nn.Adam(model, lr=lr)
    assert nn.Adam(model, lr=np.float32(0.5)).lr == 0.5 and nn.SGD(model, lr=1).lr == 1.0  # the good path
