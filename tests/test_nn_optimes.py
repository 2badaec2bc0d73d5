"""OpTimes: every op of a training step timed through the op contract, grouped by op and shapes."""

from __future__ import annotations

import numpy as np
import pytest

from gpulab import nn
from gpulab.nn.ops import OP_NAMES, get


def _step(ops):
    model = nn.mnist_cnn(image_size=8, channels=(2, 3), hidden=8, dropout=0.25, backend="numpy").use_ops(ops)
    rng = np.random.default_rng(0)
    x, y = rng.random((4, 1, 8, 8), dtype=np.float32), np.arange(4)
    nn.train_step(model, nn.SoftmaxCrossEntropy(), nn.Adam(model, lr=1e-2), x, y)
    return np.concatenate([p.ravel() for _, p, _ in model.parameters()])


def test_every_op_of_the_contract_is_forwarded():
    assert all(name in vars(nn.OpTimes) for name in OP_NAMES), set(OP_NAMES) - set(vars(nn.OpTimes))


def test_a_timed_step_gives_the_same_weights_and_a_table_by_op_and_shapes():
    timed = nn.OpTimes(get("numpy"))
    np.testing.assert_array_equal(_step(timed), _step(get("numpy")))
    rows = timed.table()
    ops = {r["op"] for r in rows}
    assert {"matmul", "relu", "maxpool", "softmax_xent", "adam_update", "conv_weight_grad"} <= ops, ops
    assert abs(sum(r["share"] for r in rows) - 1) < 1e-9 and all(r["seconds"] >= 0 for r in rows)
    assert [r["seconds"] for r in rows] == sorted((r["seconds"] for r in rows), reverse=True)
    assert any(r["op"] == "matmul" and r["shapes"] for r in rows)  # grouped by the shapes of the arrays
    adam = [r for r in rows if r["op"] == "adam_update"]
    assert sum(r["calls"] for r in adam) == 8  # one call per parameter: 2 convolutions and 2 linear layers
    text = timed.report(top=3)
    assert text.startswith("time per op (wall clock on the CPU") and "more op and shape pairs" in text, text
    timed.reset()
    assert timed.table() == [] and "no op was called" in timed.report()


def test_only_ops_are_wrapped():
    with pytest.raises(TypeError, match="OpTimes wraps an implementation of gpulab.nn.ops.Ops, got str"):
        nn.OpTimes("numpy")


def test_the_kernels_in_the_simulator_are_labelled_simulator_seconds():
    from gpulab import runtime

    if not runtime.is_simulator():
        pytest.skip("simulator mode only")
    timed = nn.OpTimes(get("kernels"))
    timed.relu(np.arange(-2, 3, dtype=np.float32))
    assert timed.report().startswith("time per op (simulator seconds (Python runs each CUDA thread"), timed.report()
