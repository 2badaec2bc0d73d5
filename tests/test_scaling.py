"""gpulab.scaling: footprints vs the real CNN, budgets, ring all-reduce, data parallelism, pipelines."""

import numpy as np
import pytest

from gpulab import nn, scaling
from gpulab.viz import memory_budget_figure, pipeline_figure, tensor_parallel_figure
from gpulab.widgets import memory_budget_explorer, memory_budget_report


@pytest.mark.parametrize(
    "kw", [dict(), dict(channels=(4, 6), hidden=10, dropout=0.0), dict(image_size=8, channels=(3, 5), hidden=7)]
)
def test_footprint_formula_matches_the_engine(kw):
    size = kw.get("image_size", 28)
    counted = scaling.cnn_footprint(**kw)
    measured = scaling.measure_footprint(nn.mnist_cnn(**kw), (1, size, size))
    assert (counted.params, counted.activations, counted.workspace) == (
        measured.params,
        measured.activations,
        measured.workspace,
    )


def test_memory_budget_components():
    fp = scaling.Footprint(params=1000, activations=50, workspace=20)
    b = scaling.memory_budget(fp, 8, optimizer="adam", precision="fp32")
    assert b["weights"] == b["gradients"] == 4000 and b["optimizer state"] == 8000
    assert b["activations"] == 4 * 50 * 8 and b["im2col workspace"] == 4 * 20 * 8
    m = scaling.memory_budget(fp, 8, optimizer="adam", precision="mixed")
    # mixed precision: same 16 bytes per parameter with Adam, half the activation memory
    assert m["weights"] + m["master weights (fp32)"] + m["gradients"] + m["optimizer state"] == 16 * 1000
    assert m["activations"] * 2 == b["activations"]
    assert scaling.memory_budget(fp, 8, optimizer="sgd")["optimizer state"] == 0
    with pytest.raises(ValueError, match="optimizer must be"):
        scaling.memory_budget(fp, 8, optimizer="lion")
    big = scaling.max_batch_size(fp, 1e6)
    assert sum(scaling.memory_budget(fp, big).values()) <= 1e6 < sum(scaling.memory_budget(fp, big + 1).values())
    assert scaling.max_batch_size(fp, 12_000) == 0  # bytes that cannot hold the 16,000 of weights and Adam state


def test_fp16_flush_fraction():
    v = np.array([1e-9, 1e-8, 1e-3, 0.0, 1.0], dtype=np.float32)
    assert scaling.fp16_flush_fraction(v) == 0.5  # 1e-9 and 1e-8 vanish; zeros are not counted
    assert scaling.fp16_flush_fraction(v, scale=1024) == 0.0


@pytest.mark.parametrize("n_dev,length", [(1, 10), (3, 10), (4, 1000), (5, 3)])
def test_ring_allreduce(n_dev, length):
    rng = np.random.default_rng(n_dev)
    bufs = [rng.standard_normal(length).astype(np.float32) for _ in range(n_dev)]
    out, sent = scaling.ring_allreduce(bufs)
    for o in out:
        np.testing.assert_allclose(o, np.sum(bufs, axis=0), rtol=1e-5, atol=1e-6)
    chunk = -(-length // n_dev) * 4
    assert sent <= 2 * (n_dev - 1) * chunk
    if length % n_dev == 0:
        assert sent == 2 * (n_dev - 1) * length * 4 // n_dev


def test_data_parallel_equals_one_big_batch():
    model = nn.mnist_cnn(image_size=8, channels=(3, 4), hidden=8, dropout=0.0)
    loss_fn = nn.SoftmaxCrossEntropy()
    rng = np.random.default_rng(0)
    x = rng.random((12, 1, 8, 8), dtype=np.float32)
    y = rng.integers(0, 10, 12)
    loss, full = scaling.full_batch_gradients(model, loss_fn, x, y)
    dp = scaling.data_parallel_gradients(model, loss_fn, x, y, 3)
    assert abs(np.mean(dp["shard_losses"]) - loss) < 1e-5
    for k in full:
        np.testing.assert_allclose(dp["grads"][k], full[k], rtol=1e-4, atol=1e-6)
    with pytest.raises(ValueError, match="cannot be split evenly"):
        scaling.data_parallel_gradients(model, loss_fn, x, y, 5)


def test_nccl_needs_a_gpu():
    with pytest.raises(ModuleNotFoundError, match="simulator mode"):
        scaling.nccl_allreduce_mean([np.zeros(3, np.float32)])


@pytest.mark.parametrize("p,m", [(1, 1), (2, 4), (4, 4), (4, 16)])
def test_pipeline_schedule(p, m):
    sched = scaling.pipeline_schedule(p, m)
    slots = max(s["start"] for s in sched) + 1
    assert slots == 2 * (m + p - 1)
    for stage in range(p):  # no device does two things at once
        starts = [s["start"] for s in sched if s["stage"] == stage]
        assert len(starts) == len(set(starts)) == 2 * m
    for s in sched:  # a forward needs the previous stage's forward; a backward the next stage's backward
        if s["kind"] == "forward" and s["stage"] > 0:
            prev = next(
                t
                for t in sched
                if t["kind"] == "forward" and t["stage"] == s["stage"] - 1 and t["microbatch"] == s["microbatch"]
            )
            assert prev["start"] < s["start"]
        if s["kind"] == "backward" and s["stage"] < p - 1:
            nxt = next(
                t
                for t in sched
                if t["kind"] == "backward" and t["stage"] == s["stage"] + 1 and t["microbatch"] == s["microbatch"]
            )
            assert nxt["start"] < s["start"]
    idle = 1 - len(sched) / (p * slots)
    assert idle == pytest.approx(scaling.bubble_fraction(p, m))


def test_figures_and_widget():
    fp = scaling.cnn_footprint()
    fig = memory_budget_figure({"a": scaling.memory_budget(fp, 64)}, limits_gb={"T4": 16})
    assert fig.layout.yaxis.title.text == "memory (GB)" and len(fig.data) == 6
    assert len(pipeline_figure(scaling.pipeline_schedule(3, 4)).data) == 2
    assert tensor_parallel_figure(3).layout.title.text.startswith("Tensor")
    budget, html = memory_budget_report(16, 16, "adam", "fp32")
    assert "does not fit" in html and sum(budget.values()) > 16e9
    w = memory_budget_explorer()
    assert len(w.controls) == 4 and len(w.children) == 4  # two rows of controls, the figure, the summary


def test_measure_footprint_puts_the_input_where_the_model_computes(monkeypatch):
    """A model's input is created with the model's backend rule (CuPy for a cupy model), not NumPy zeros."""
    from gpulab import nn, scaling
    from gpulab.nn import ops as nn_ops_contract

    seen = []
    real = nn_ops_contract.to_backend
    monkeypatch.setattr(nn_ops_contract, "to_backend", lambda x, b: seen.append(b) or real(x, b))
    model = nn.mnist_cnn(image_size=8, channels=(2, 4), hidden=8)
    fp = scaling.measure_footprint(model, (1, 8, 8))
    assert seen == ["numpy"] and fp.params == model.num_parameters()
    assert fp == scaling.measure_footprint(model, (1, 8, 8))


def test_measure_footprint_runs_a_gpu_model_on_device_arrays(monkeypatch):
    """Issue 17: measure_footprint fed NumPy zeros to a CuPy-backend model (CuPy raises TypeError on a
    NumPy input) and compared host copies with np.shares_memory (never shared, so a view like Flatten
    was counted). Here a stand-in device world: arrays that layers accept only on the device, and an
    array module whose shares_memory accepts only device arrays. The old code fails both ways."""
    from gpulab import runtime, scaling

    class Dev:  # a device array over a host buffer
        def __init__(self, a):
            self.a = np.asarray(a)

        size = property(lambda self: self.a.size)

    class DeviceXp:
        @staticmethod
        def shares_memory(y, x):
            assert isinstance(y, Dev) and isinstance(x, Dev), (type(y), type(x))
            return np.shares_memory(y.a, x.a)

    def device_only(x):
        if not isinstance(x, Dev):
            raise TypeError(f"Unsupported type {type(x)}")  # what CuPy says about a NumPy argument
        return x.a

    class Conv2d:
        def forward(self, x):
            cols = device_only(x).reshape(-1, 1).repeat(9, axis=1)
            self.cache = (x.a.shape, Dev(cols))
            return Dev(cols.sum(axis=1).reshape(x.a.shape))

    class Flatten:
        def forward(self, x):
            return Dev(device_only(x).reshape(1, -1))  # a view of its input

    class Dense:
        def forward(self, x):
            return Dev(device_only(x) @ np.ones((x.size, 10), np.float32))

    class Model:
        backend, layers = "cupy", [Conv2d(), Flatten(), Dense()]

        def num_parameters(self):
            return 640

    monkeypatch.setattr(runtime, "to_device", lambda x: x if isinstance(x, Dev) else Dev(x))
    monkeypatch.setattr(runtime, "array_module", lambda *a: DeviceXp if all(isinstance(v, Dev) for v in a) else np)
    fp = scaling.measure_footprint(Model(), (1, 8, 8))
    assert fp.layers == (("input", 64), ("0:Conv2d", 64), ("2:Dense", 10)), fp.layers  # Flatten: a view
    assert (fp.params, fp.activations, fp.workspace) == (640, 138, 576)


def test_max_batch_size_refuses_gigabytes_given_as_bytes():
    """Lesson 10 and lab 10 pass 16e9 or gb * 1e9; max_batch_size(fp, 16) answered 0, as if no batch fitted."""
    from gpulab.errors import UsageError

    fp = scaling.cnn_footprint()
    with pytest.raises(UsageError) as e:
        scaling.max_batch_size(fp, 16)
    msg = str(e.value)
    assert "16 bytes cannot hold even the weights, gradients and optimizer state (7,356,232 bytes" in msg, msg
    assert "memory_bytes is in bytes, not gigabytes: for a 16 GB GPU pass 16e9 (or gb * 1e9)" in msg
    tiny = scaling.Footprint(params=10, activations=1000, workspace=0)  # fixed 160 bytes, 4,000 per sample
    with pytest.raises(UsageError, match="0.5 bytes cannot hold even the weights"):
        scaling.max_batch_size(tiny, 0.5)
    with pytest.raises(UsageError, match="200 bytes cannot hold one sample's activations"):
        scaling.max_batch_size(tiny, 200)
    for bad in (-1, 0, float("nan"), "16e9", None):
        with pytest.raises(UsageError, match="memory_bytes must be a number of bytes > 0, e.g. 16e9"):
            scaling.max_batch_size(fp, bad)
    with pytest.raises(UsageError, match="fp must be a Footprint.*got 16000000000.0 \\(float\\).*swapped"):
        scaling.max_batch_size(16e9, fp)
    # the good paths: bytes as the lessons pass them, and a real "does not fit" (0) above the gigabytes range
    assert scaling.max_batch_size(fp, 16e9) == 26220 and scaling.max_batch_size(fp, 1e5) == 0
    assert scaling.max_batch_size(tiny, 8160) == 2  # under 10,000 bytes but it fits: an answer, not an error


def test_pipeline_counts_are_whole_numbers_at_least_1():
    from gpulab.errors import UsageError

    for call in (scaling.bubble_fraction, scaling.pipeline_schedule):
        for args, expected in (
            ((0, 4), "stages must be >= 1, but got 0."),
            ((4, 0), "microbatches must be >= 1, but got 0."),
            ((4.5, 2), "stages must be a whole number >= 1, but got 4.5 (float); it is never rounded for you."),
            ((4, "8"), "microbatches must be a whole number >= 1, but got '8' (str)"),
        ):
            with pytest.raises(UsageError) as e:
                call(*args)
            assert expected in str(e.value) and f"{call.__name__}(4, 8) is for 4 pipeline stages" in str(e.value)
    assert scaling.bubble_fraction(4, 1) == 0.75 and scaling.bubble_fraction(4.0, 8) == 3 / 11  # as lesson 10
    assert len(scaling.pipeline_schedule(2, 3)) == 12


def test_cnn_footprint_checks_its_arguments_as_mnist_cnn_does():
    from gpulab.errors import UsageError

    with pytest.raises(UsageError, match="channels must be two whole numbers .*got 64"):
        scaling.cnn_footprint(channels=64)
    with pytest.raises(UsageError, match="image_size must be >= 4, but got 0.*e.g. cnn_footprint\\(image_size=28"):
        scaling.cnn_footprint(image_size=0)
    with pytest.raises(UsageError, match="hidden must be >= 1, but got 0"):
        scaling.cnn_footprint(hidden=0)
    with pytest.raises(UsageError, match="multiple of 4"):
        scaling.cnn_footprint(image_size=30)
    assert scaling.cnn_footprint(image_size=28.0, channels=[32, 64]) == scaling.cnn_footprint()
