"""The capstone's guard in gpu mode (emulated: tests/gpu_emulation/emulate.py): checks held on the device.

On a GPU every read of a check's answer is a wait for the GPU. :class:`gpulab.capstone_ops.LearnerOps` holds each
learner op's check as a 0-d flag on the device and reads them together when the step turns to updating weights and
back, and at the end of an epoch. Here the emulated CuPy counts the host's reads of device memory
(``cupy._array._reads``), and wrong kernels show that the op named is still the first one that went wrong, before
any weight changes. Collected by tests/test_gpu_emulated.py (emulated gpu mode, in a subprocess) and, on a real GPU,
by ``make gpu-check``'s tests stage (gpulab.gpucheck_plan.GPU_TESTS; the read count is the emulation's only).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from numba import cuda, float32
from numba.cuda.random import xoroshiro128p_uniform_float32

import gpulab
from gpulab import capstone, nn, runtime, train
from gpulab.capstone_ops import LearnerOps
from gpulab.kernels import nn_ops as k

cupy = pytest.importorskip("cupy")
if not gpulab.is_gpu():
    pytest.skip("the capstone's held checks run in gpu mode (emulated, or on a GPU)", allow_module_level=True)
EMULATED = bool(getattr(cupy, "EMULATED", False))

LIBRARY = {op: getattr(k, kernel) for op, kernel in capstone.COURSE_KERNELS.items()}  # the course's kernels


def _model(ops: LearnerOps | None = None) -> nn.Sequential:
    model = nn.mnist_cnn(image_size=8, channels=(2, 3), hidden=8, dropout=0.25, backend="kernels")
    return model.use_ops(ops) if ops is not None else model


def _batch(n: int = 4) -> tuple:
    rng = np.random.default_rng(0)
    return runtime.to_device(rng.random((n, 1, 8, 8), dtype=np.float32)), runtime.to_device(np.arange(n) % 10)


def _weights(model: nn.Sequential) -> dict[str, np.ndarray]:
    return {name: runtime.to_host(p).copy() for name, p, _ in model.parameters()}


def _reads_per_step(guard: bool) -> int:
    from cupy import _array as fake  # the emulation's count of the host's reads of device memory

    model = _model(LearnerOps(dict(LIBRARY), guard=guard))
    opt, loss, (x, y) = nn.Adam(model, lr=1e-2), nn.SoftmaxCrossEntropy(), _batch()
    nn.train_step(model, loss, opt, x, y)  # the first step: states, moments, compiled kernels
    before = fake._reads[0]
    nn.train_step(model, loss, opt, x, y)
    return fake._reads[0] - before


@pytest.mark.skipif(not EMULATED, reason="counts the emulated CuPy's reads (on a GPU: the other checks here)")
def test_the_guard_reads_the_device_twice_a_step_not_once_per_op():
    ops = LearnerOps(dict(LIBRARY))
    model = _model(ops)
    nn.train_step(model, nn.SoftmaxCrossEntropy(), nn.Adam(model), *_batch())
    assert set(ops.calls) >= set(LIBRARY) - {"col2im"}  # every learner op ran (col2im: only below a 2nd conv)
    off, on = _reads_per_step(False), _reads_per_step(True)
    # the two turns (to updating, and back at the next step's first op) are the guard's only reads; held checks of
    # ~30 learner outputs and 2 dropout draws would otherwise be read one by one
    assert on - off <= 2, (off, on)
    assert sum(ops.calls.values()) > 20  # so "once per op" would be far more


def test_a_nan_in_a_forward_op_is_named_before_any_weight_changes():
    @cuda.jit
    def relu_nan_on_big_arrays(x, y):  # right on the check's small inputs, NaN on a training batch
        for i in range(cuda.grid(1), y.size, cuda.gridsize(1)):
            y[i] = max(x[i], float32(0.0)) if y.size < 40 else math.nan

    model = _model(LearnerOps({**LIBRARY, "relu": relu_nan_on_big_arrays}))
    before, opt = _weights(model), nn.Adam(model)
    with pytest.raises(capstone.CapstoneError, match="op 'relu': your kernel produced NaN or inf"):
        nn.train_step(model, nn.SoftmaxCrossEntropy(), opt, *_batch())
    after = _weights(model)
    assert all(np.array_equal(before[n], after[n]) for n in before), "a weight changed after the NaN"
    assert opt.t == 0 and opt.m == {}, "Adam counted a step it refused"  # read in Adam.step, before t moves


def test_with_verify_a_nan_is_still_named_as_a_nan():
    @cuda.jit
    def relu_nan(x, y):
        for i in range(cuda.grid(1), y.size, cuda.gridsize(1)):
            y[i] = math.nan

    model = _model(LearnerOps({**LIBRARY, "relu": relu_nan}, verify=True))
    with pytest.raises(capstone.CapstoneError, match="op 'relu': your kernel produced NaN or inf"):
        nn.train_step(model, nn.SoftmaxCrossEntropy(), nn.Adam(model), *_batch())


def test_a_nan_from_the_update_is_named_at_the_next_op_and_at_the_end_of_an_epoch():
    @cuda.jit
    def adam_nan(p, g, m, v, lr_t, b1, b2, eps_t):
        for i in range(cuda.grid(1), p.size, cuda.gridsize(1)):
            p[i] = math.nan

    for end in ("next step", "finish"):
        ops = LearnerOps({**LIBRARY, "adam_update": adam_nan})
        model = _model(ops)
        loss, opt, (x, y) = nn.SoftmaxCrossEntropy(), nn.Adam(model), _batch()
        nn.train_step(model, loss, opt, x, y)  # the update's checks are held: the step itself returns
        with pytest.raises(capstone.CapstoneError, match="op 'adam_update'"):
            if end == "next step":
                nn.train_step(model, loss, opt, x, y)  # read at its first op, before that op runs on NaN weights
            else:
                ops.finish()  # what the end of an epoch does
        assert ops._held.items == []  # read once: raised once
    pytest.importorskip("sklearn")  # the 8x8 digits (optional on a GPU image: this part is skipped there)
    ds = gpulab.data.load("digits", size=8).subset(8, 8)
    with pytest.raises(capstone.CapstoneError, match="op 'adam_update'"):
        train.fit(_model(LearnerOps({**LIBRARY, "adam_update": adam_nan})), ds, epochs=1, batch_size=8, seed=0)


@cuda.jit
def dropout_swapped(x, states, p, y):  # scaled right, but keeps where u < p (no import in here: NVVM refuses it)
    tid = cuda.grid(1)
    for i in range(tid, x.size, cuda.gridsize(1)):
        u = xoroshiro128p_uniform_float32(states, tid)
        y[i] = x[i] / (float32(1.0) - p) if u < p else float32(0.0)


def test_a_wrong_dropout_mask_on_the_device_is_named_with_its_element():
    model = _model(LearnerOps({**LIBRARY, "dropout_forward": dropout_swapped}))
    before = _weights(model)
    with pytest.raises(capstone.CapstoneError, match="op 'dropout_forward' failed the training check") as err:
        nn.train_step(model, nn.SoftmaxCrossEntropy(), nn.Adam(model), *_batch())
    assert "kept where the draw dropped" in str(err.value), err.value
    assert all(np.array_equal(before[n], w) for n, w in _weights(model).items())


def test_predict_reads_what_its_batches_held():
    @cuda.jit
    def matmul_nan(a, b, c):
        j, i = cuda.grid(2)
        if i < c.shape[0] and j < c.shape[1]:
            c[i, j] = math.nan

    model = _model(LearnerOps({**LIBRARY, "matmul": matmul_nan}))
    with pytest.raises(capstone.CapstoneError, match="op 'matmul'"):
        train.predict(model, _batch()[0])


def test_a_step_stopped_by_an_error_leaves_no_held_check_behind():
    ops = LearnerOps(dict(LIBRARY))
    model = _model(ops)
    x, y = _batch()
    with pytest.raises(Exception, match="labels"):
        nn.train_step(model, nn.SoftmaxCrossEntropy(), nn.Adam(model), x, y + 100)  # out of range: refused
    assert ops._held.items == []
    nn.train_step(model, nn.SoftmaxCrossEntropy(), nn.Adam(model), x, y)
    ops.finish()


def test_op_times_over_the_learner_ops_time_each_op_with_events_and_keep_the_guard():
    """nn.OpTimes in gpu mode: CUDA events around each op (read once, at the table), the guard still held and
    read at the turns (a NaN is still named), the same weights as without it."""
    timed = nn.OpTimes(LearnerOps(dict(LIBRARY)))
    model = _model(timed)
    nn.train_step(model, nn.SoftmaxCrossEntropy(), nn.Adam(model), *_batch())
    rows = timed.table()
    assert {"matmul", "relu", "adam_update", "softmax_xent"} <= {r["op"] for r in rows}, rows
    assert timed.report().startswith("time per op (CUDA events on the GPU, measured in this run)")
    plain = _model(LearnerOps(dict(LIBRARY)))
    nn.train_step(plain, nn.SoftmaxCrossEntropy(), nn.Adam(plain), *_batch())
    assert all(np.array_equal(a, b) for a, b in zip(_weights(model).values(), _weights(plain).values()))
    timed.finish()  # forwarded: nothing held is wrong

    @cuda.jit
    def relu_nan(x, y):
        for i in range(cuda.grid(1), y.size, cuda.gridsize(1)):
            y[i] = math.nan

    bad = _model(nn.OpTimes(LearnerOps({**LIBRARY, "relu": relu_nan})))
    with pytest.raises(capstone.CapstoneError, match="op 'relu'"):
        nn.train_step(bad, nn.SoftmaxCrossEntropy(), nn.Adam(bad), *_batch())


@cuda.jit
def _im2col_flat(x, cols, kh, kw, stride, pad, ho, wo):  # a flat 1-D grid-stride loop: every row repeats it
    C, H, W = x.shape[1], x.shape[2], x.shape[3]
    for t in range(cuda.grid(1), cols.size, cuda.gridsize(1)):
        r, q = t // cols.shape[1], t % cols.shape[1]
        n, i, j = r // (ho * wo), (r // wo) % ho, r % wo
        a, b, c = q // (kw * C), (q // C) % kw, q % C
        ih, iw = i * stride + a - pad, j * stride + b - pad
        cols[r, q] = x[n, c, ih, iw] if 0 <= ih < H and 0 <= iw < W else 0.0


def test_a_kernel_that_repeats_its_work_in_a_2d_launch_is_traced_in_the_simulator_in_gpu_mode():
    """gpu mode checks no budget (access counts come from the simulator), but a loop that ignores y would make
    training crawl on the GPU: its writers are counted on a small case traced in the simulator (review F5). Small
    sizes: on a real GPU (make gpu-check) the flat loop at the gpu sizes would repeat 3.6 million elements' work
    12,544 times over."""
    from gpulab.exercises import check_kernel

    small = [(1, 1, 3, 3, 3, 1, 0), (2, 2, 5, 6, 3, 1, 1)]
    cap = capstone.Capstone()
    res = check_kernel(_im2col_flat, **{**cap.problem("im2col", _im2col_flat), "sizes": small}, points=3)
    assert res.status == "failed" and res.score == 1.5, res
    assert "repeated work: each element of cols should be written by one thread" in res.message, res
    assert "traced in the simulator at size (2, 2, 5, 6, 3, 1, 1)" in res.message, res
    assert "your loop ignores y" in res.hint, res
    course = LIBRARY["im2col"]
    right = check_kernel(course, **{**cap.problem("im2col", course), "sizes": small}, points=3, trusted=True)
    assert right.passed and any(c.name == "repeated work" and c.passed for c in right.checks), right
