"""The capstone registry: a learner kernel takes part only after its check passes; wrong ones are named."""

import dataclasses

import numpy as np
import pytest
from numba import cuda, float32

from gpulab import capstone, nn
from gpulab.kernels import nn_ops as k
from gpulab.problems._stand_ins import dropout_kernel  # lab 08's forward: given dy, its backward

LIBRARY = {
    "matmul": k.gemm_kernel,
    "im2col": k.im2col_kernel,
    "col2im": k.col2im_kernel,
    "relu": k.relu_kernel,
    "relu_backward": k.relu_backward_kernel,
    "maxpool": k.maxpool_kernel,
    "maxpool_backward": k.maxpool_backward_kernel,
    "dropout_forward": dropout_kernel,  # one kernel serves both dropout ops
    "dropout_backward": dropout_kernel,
    "softmax_xent": k.softmax_xent_kernel,
    "adam_update": k.adam_kernel,
}


@cuda.jit
def relu_one_thread_per_element(x, y):  # not a grid-stride loop: the few-thread launch leaves elements unwritten
    i = cuda.grid(1)
    if i < y.size:
        y[i] = max(x[i], 0.0)


@cuda.jit
def relu_placeholder(x, y):
    raise NotImplementedError("replace this line with your code")


def test_every_problem_accepts_the_library_kernel():
    cap = capstone.Capstone()
    for op, kern in LIBRARY.items():
        res = cap.register(op, kern, trusted=True)  # the library's kernels: no own-code stage
        assert res.passed, (op, str(res))
    assert cap.full_marks and cap.missing() == []
    text = str(cap.report())
    assert "11 of 11" in text and "conv_input_grad" in text


def test_a_wrong_kernel_is_not_registered_and_training_says_which_op():
    cap = capstone.Capstone()
    for op, kern in LIBRARY.items():
        cap.register(op, kern, trusted=True)
    res = cap.register("relu", relu_one_thread_per_element)
    assert not res.passed and "relu" not in cap.kernels and not cap.full_marks
    # named for what it is, not "the result changes from run to run (a race)" as the unwritten elements made it look
    assert "must be a grid-stride loop" in str(res) and "cuda.gridsize(1)" in str(res) and "race" not in str(res), res
    with pytest.raises(capstone.CapstoneError, match="relu"):
        cap.ops()


def test_a_placeholder_is_not_implemented_yet():
    res = capstone.Capstone().register("relu", relu_placeholder)
    assert res.status == "not implemented" and "not implemented yet" in res.message


def test_a_kernel_that_turns_nan_during_training_stops_at_its_op():
    @cuda.jit
    def relu_nan_on_big_arrays(x, y):  # right on the check's small inputs, NaN on a training batch
        for i in range(cuda.grid(1), y.size, cuda.gridsize(1)):
            y[i] = max(x[i], 0.0) if y.size < 400 else math.nan

    import math

    cap = capstone.Capstone()
    for op, kern in LIBRARY.items():
        cap.register(op, kern, trusted=True)
    assert cap.register("relu", relu_nan_on_big_arrays).passed
    model = nn.mnist_cnn(image_size=8, channels=(8, 8), hidden=8, backend="kernels").use_ops(cap.ops())
    x, y = np.random.default_rng(0).random((4, 1, 8, 8), dtype=np.float32), np.arange(4)
    with pytest.raises(capstone.CapstoneError, match="op 'relu'"):
        nn.train_step(model, nn.SoftmaxCrossEntropy(), nn.Adam(model), x, y)


def test_learner_ops_train_like_numpy_and_report_calls():
    cap = capstone.Capstone()
    for op, kern in LIBRARY.items():
        cap.register(op, kern, trusted=True)
    rng = np.random.default_rng(0)
    x, y = rng.random((4, 1, 8, 8), dtype=np.float32), np.array([1, 2, 3, 4])
    weights, _calls = {}, None
    for name in ("numpy", "learner"):
        model = nn.mnist_cnn(
            image_size=8, channels=(2, 3), hidden=8, dropout=0.25, backend="numpy" if name == "numpy" else "kernels"
        )  # dropout > 0: every backend draws the same mask from the layer's states
        if name == "learner":
            ops = cap.ops()
            model.use_ops(ops)
        nn.train_step(model, nn.SoftmaxCrossEntropy(), nn.Adam(model, lr=1e-2), x, y)
        weights[name] = {n: np.asarray(p).copy() for n, p, _ in model.parameters()}
    assert set(ops.calls) == set(capstone.LEARNER_OPS)
    for n in weights["numpy"]:
        np.testing.assert_allclose(weights["learner"][n], weights["numpy"][n], rtol=1e-4, atol=1e-5, err_msg=n)


@cuda.jit
def relu_stride_by_grid_dim(x, y):  # a grid-stride loop written with gridDim: accepted
    i = cuda.grid(1)
    while i < y.size:
        y[i] = max(x[i], 0.0)
        i += cuda.blockDim.x * cuda.gridDim.x


@cuda.jit(device=True)
def _relu_all(x, y):
    for i in range(cuda.grid(1), y.size, cuda.gridsize(1)):
        y[i] = max(x[i], 0.0)


@cuda.jit
def relu_via_device_function(x, y):  # the loop sits in a device function: left to the check, which passes it
    _relu_all(x, y)


def test_grid_stride_is_read_from_the_kernels_code():
    assert capstone.not_grid_stride("relu", relu_stride_by_grid_dim) == ""
    assert capstone.not_grid_stride("relu", relu_via_device_function) == ""
    assert "cuda.gridsize(2)" in capstone.not_grid_stride("im2col", relu_one_thread_per_element)
    cap = capstone.Capstone()
    assert cap.register("relu", relu_stride_by_grid_dim).passed
    assert cap.register("relu", relu_via_device_function).passed


@cuda.jit
def dropout_unscaled(x, states, p, y):  # keeps the right elements but forgets 1 / (1 - p)
    from numba.cuda.random import xoroshiro128p_uniform_float32

    tid = cuda.grid(1)
    for i in range(tid, x.size, cuda.gridsize(1)):
        u = xoroshiro128p_uniform_float32(states, tid)
        y[i] = x[i] if u >= p else 0.0


def test_dropout_ops_take_lab_08s_kernel_and_train_like_numpy():
    cap = capstone.Capstone()
    for op, kern in LIBRARY.items():
        if op not in capstone.DROPOUT_OPS:
            cap.register(op, kern, trusted=True)
    assert cap.missing() == list(capstone.DROPOUT_OPS) and "9 of 11" in str(cap.report())  # full marks need dropout
    for op in capstone.DROPOUT_OPS:
        res = cap.register(op, dropout_kernel, trusted=True)
        assert res.passed, (op, str(res))
    assert "yours" in dict((r[0], r[1]) for r in cap.rows())["dropout_backward"]
    assert cap.full_marks and "11 of 11" in str(cap.report())
    rng = np.random.default_rng(0)
    x, y = rng.random((4, 1, 8, 8), dtype=np.float32), np.array([1, 2, 3, 4])
    weights = {}
    for name in ("numpy", "learner"):
        model = nn.mnist_cnn(image_size=8, channels=(2, 3), hidden=8, dropout=0.5, backend="numpy")
        if name == "learner":
            ops = cap.ops(verify=True)
            model.to("kernels").use_ops(ops)
        nn.train_step(model, nn.SoftmaxCrossEntropy(), nn.Adam(model, lr=1e-2), x, y)
        weights[name] = np.concatenate([np.asarray(p).ravel() for _, p, _ in model.parameters()])
    assert ops.calls["dropout_forward"] == 1 and ops.calls["dropout_backward"] >= 1
    np.testing.assert_allclose(weights["learner"], weights["numpy"], rtol=1e-4, atol=1e-5)


def test_a_wrong_dropout_kernel_fails_its_check_and_stops_training_naming_the_check():
    cap = capstone.Capstone()
    res = cap.register("dropout_forward", dropout_unscaled)
    assert not res.passed and "1 / (1 - p)" in str(res), res
    cap.accept("dropout_forward", dropout_unscaled, dataclasses.replace(res, status="passed"))  # as if it had passed
    model = nn.mnist_cnn(image_size=8, channels=(2, 3), hidden=8, dropout=0.5, backend="kernels")
    model.use_ops(cap.ops(require_all=False))
    x, y = np.random.default_rng(0).random((4, 1, 8, 8), dtype=np.float32), np.arange(4)
    with pytest.raises(capstone.CapstoneError, match=r"op 'dropout_forward' failed the training check 'y\[i\] is 0"):
        nn.train_step(model, nn.SoftmaxCrossEntropy(), nn.Adam(model), x, y)


@cuda.jit
def dropout_swapped(x, states, p, y):  # scaled right, but keeps where u < p: a fraction p survives
    from numba.cuda.random import xoroshiro128p_uniform_float32

    tid = cuda.grid(1)
    for i in range(tid, x.size, cuda.gridsize(1)):
        u = xoroshiro128p_uniform_float32(states, tid)
        y[i] = x[i] / (float32(1.0) - p) if u < p else float32(0.0)


@pytest.mark.parametrize(
    ("kernel", "op", "why"),
    [
        (dropout_swapped, "dropout_forward", "kept where the draw dropped"),
        (dropout_swapped, "dropout_backward", "kept where the draw dropped"),
        (dropout_unscaled, "dropout_forward", "scale them by 1 / (1 - p)"),
    ],
)
def test_a_wrong_dropout_kernel_stops_training_naming_the_op(kernel, op, why):
    """Every output of a swapped kernel is 0 or x / (1 - p), as a right one's: the training check compares the mask
    with the draws of the states the op was given, so the swap stops training too, at its op."""
    cap = capstone.Capstone()
    for name, kern in LIBRARY.items():
        cap.register(name, kern, trusted=True)
    res = cap.register(op, kernel)
    assert not res.passed and op not in cap.kernels, res  # its check names the mistake first
    cap.accept(op, kernel, dataclasses.replace(res, status="passed"))  # as if it had passed
    model = nn.mnist_cnn(image_size=8, channels=(2, 3), hidden=8, dropout=0.25, backend="kernels").use_ops(cap.ops())
    x, y = np.random.default_rng(0).random((4, 1, 8, 8), dtype=np.float32), np.arange(4)
    with pytest.raises(capstone.CapstoneError, match=f"op '{op}' failed the training check") as err:
        nn.train_step(model, nn.SoftmaxCrossEntropy(), nn.Adam(model), x, y)
    assert why in str(err.value), err.value


def test_training_waits_for_every_op_with_a_message_and_no_traceback(capsys):
    from gpulab.grading.runner import _error

    cap = capstone.Capstone()
    with pytest.raises(capstone.NotReadyToTrain) as info:
        cap.require_all()
    assert "0 of 11" in capsys.readouterr().out  # the report is printed first
    lines = info.value._render_traceback_()  # what a notebook shows instead of a traceback
    assert lines[0] == "NotReadyToTrain: training starts once every op is yours; not yet:"
    assert "- matmul: not checked yet: run its exercise's check cell" in lines
    assert not any("Traceback" in line or "File " in line for line in lines)

    class Result:  # what IPython's run_cell returns, as the grader's runner reads it
        error_in_exec, error_before_exec = info.value, None

    assert _error(Result())[0] == "NotImplementedError"  # graded "not implemented", as before


def test_require_all_passes_once_every_op_is_registered():
    cap = capstone.Capstone()
    for op, kern in LIBRARY.items():
        assert cap.register(op, kern, trusted=True).passed, op
    cap.require_all()  # no raise


def test_a_fault_after_held_checks_names_the_ops_that_ran_since_the_last_wait():
    """On a GPU a kernel's fault surfaces at the next wait: the error then lists the learner ops that ran since
    the last one (held checks); other errors, and a step with nothing held, get no such note."""
    from gpulab.capstone_ops import LearnerOps

    ops = LearnerOps(dict(LIBRARY))
    for op in ("im2col", "relu", "relu"):
        ops._held.add(op, np.bool_(True), lambda: None)
    fault = RuntimeError("[700] Call to cuCtxSynchronize results in CUDA_ERROR_ILLEGAL_ADDRESS")
    ops._unread(fault)
    assert ops._held.items == []
    assert "your ops im2col, relu ran on the GPU since it was last waited for" in "".join(fault.__notes__)
    assert "cap.ops(verify=True)" in fault.__notes__[0]
    other = ValueError("labels out of range")
    ops._held.add("relu", np.bool_(True), lambda: None)
    ops._unread(other)
    assert not getattr(other, "__notes__", None) and ops._held.items == []
