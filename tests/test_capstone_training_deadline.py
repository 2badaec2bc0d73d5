"""The capstone's training deadline (gpulab.capstone_deadline): a learner op that passed its check but does not end
at training's sizes stops training with a message naming the op, its launch and sizes, and the check to run."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest
from numba import cuda

from gpulab import capstone, capstone_deadline, nn
from gpulab.capstone_deadline import WORK
from gpulab.exercises import check_kernel


@cuda.jit
def relu_stuck_on_big_arrays(x, y):  # right at the check's sizes (at most 300); never advances at training's
    i = cuda.grid(1)
    while i < y.size:
        y[i] = max(x[i], 0.0)
        if y.size < 400:
            i += cuda.gridsize(1)


@cuda.jit
def relu_ok(x, y):
    for i in range(cuda.grid(1), y.size, cuda.gridsize(1)):
        y[i] = max(x[i], 0.0)


def _step(ops: capstone.LearnerOps) -> None:
    model = nn.mnist_cnn(image_size=8, channels=(8, 8), hidden=8, backend="kernels").use_ops(ops)
    x, y = np.random.default_rng(0).random((4, 1, 8, 8), dtype=np.float32), np.arange(4)
    nn.train_step(model, nn.SoftmaxCrossEntropy(), nn.Adam(model), x, y)


def test_a_kernel_that_hangs_at_training_sizes_stops_training_naming_op_launch_and_sizes(monkeypatch):
    cap = capstone.Capstone()
    assert cap.register("relu", relu_stuck_on_big_arrays).passed
    monkeypatch.setattr(capstone_deadline, "SLACK", 1.0)  # a short limit for the test (the course's relu: ~10 ms)
    start = time.perf_counter()
    with pytest.raises(capstone.CapstoneError) as err:
        _step(cap.ops(require_all=False))
    elapsed = time.perf_counter() - start
    msg = str(err.value)
    assert "op 'relu'" in msg and "relu_stuck_on_big_arrays did not finish within" in msg, msg
    assert "Launch: relu_stuck_on_big_arrays[1, 8]" in msg, msg  # the simulator's launch: one block of 8 threads
    # the first ReLU: after the first convolution and its pooling, 4 images x 8 channels x 4 x 4
    assert "relu((4, 8, 4, 4))" in msg and "'sizes': [512]" in msg and "plus 1 s" in msg, msg
    assert "cap.problem('relu', relu_stuck_on_big_arrays)" in msg and "loop" in msg, msg
    assert elapsed < 30, f"{elapsed:.1f} s"
    # the check it suggests runs as written (here with a kernel that ends, so that it passes quickly)
    command = msg.split("Run its check at this size, which names the stuck threads: ")[1].split("; fix")[0]
    res = eval(command, {"check_kernel": check_kernel, "cap": cap, "relu_stuck_on_big_arrays": relu_ok})
    assert res.passed and res.name == "relu", res
    for _ in range(50):  # the stuck worker was stopped, not left spinning
        if not any(t.name == "gpulab-check" and t.is_alive() for t in threading.enumerate()):
            break
        time.sleep(0.1)
    assert not any(t.name == "gpulab-check" and t.is_alive() for t in threading.enumerate())


def test_a_correct_kernel_trains_under_the_deadline_and_the_course_kernel_runs_once_per_op():
    cap = capstone.Capstone()
    assert cap.register("relu", relu_ok).passed
    ops = cap.ops(require_all=False)
    _step(ops)
    assert set(ops.course_seconds) == {("relu", None)}  # only your ops are timed; the course's run as before
    seconds, work = ops.course_seconds["relu", None]
    assert seconds > 0 and work == 4 * 8 * 4 * 4  # measured on the first launch's sizes
    assert ops.calls["relu"] >= 2  # both convolutions' ReLUs, with one measurement
    again = cap.ops(require_all=False)  # a second backend (a new model) reuses the measurement
    _step(again)
    assert again.course_seconds["relu", None] == (seconds, work)
    off = capstone.Capstone()
    assert off.register("relu", relu_ok).passed
    _step(off.ops(require_all=False, deadline=False))
    assert off.course_seconds == {}


def test_work_scales_with_what_each_op_loops_over():
    a, b = np.zeros((16, 9), np.float32), np.zeros((9, 10), np.float32)
    assert WORK["matmul"](a, b) == 16 * 9 * 10
    x = np.zeros((2, 3, 8, 8), np.float32)
    assert WORK["im2col"](x, 3, 3, 1, 1) == x.size * 9 and WORK["maxpool"](x, 2, 2) == x.size
    assert WORK["col2im"](np.zeros((1, 1)), (2, 3, 8, 8), 3, 3, 1, 1) == x.size * 9
