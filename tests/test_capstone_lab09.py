"""Lab 09 as a learner meets it (review r3): the source check at each op's check, an uncoalesced kernel that still
trains, another lab's parameter order, and the messages and report around training."""

from __future__ import annotations

import math

import numpy as np
import pytest
from numba import cuda, float32

from gpulab import capstone, nn
from gpulab.exercises import check_kernel
from test_capstone import LIBRARY
from test_capstone_orientation import maxpool_i_fastest

TILE = 16
PADDED = TILE + 1  # the right way: a module-level name


@cuda.jit
def matmul_padded_by_expression(A, B, C):  # lab 04's tiled matmul with a padded tile written as `TILE + 1`
    sA = cuda.shared.array(shape=(TILE, TILE + 1), dtype=float32)
    sB = cuda.shared.array((TILE, TILE), float32)
    tx = cuda.threadIdx.x
    ty = cuda.threadIdx.y
    j, i = cuda.grid(2)
    acc = float32(0.0)
    for t in range((A.shape[1] + TILE - 1) // TILE):
        k = t * TILE
        sA[ty, tx] = A[i, k + tx] if i < A.shape[0] and k + tx < A.shape[1] else float32(0.0)
        sB[ty, tx] = B[k + ty, j] if k + ty < B.shape[0] and j < B.shape[1] else float32(0.0)
        cuda.syncthreads()  # wait until both tiles are loaded
        for kk in range(TILE):
            acc += sA[ty, kk] * sB[kk, tx]
        cuda.syncthreads()  # wait until every thread used the tiles
    if i < C.shape[0] and j < C.shape[1]:
        C[i, j] = acc


def test_a_shared_array_shape_a_gpu_cannot_compile_loses_half_at_the_matmul_check():
    """Before: 3/3 at the check (the capstone's checks launch through a host function, and the harness read the
    kernel's source only without one); the challenge then stopped in check_ptx with NVVM's typing error."""
    cap = capstone.Capstone()
    res = check_kernel(
        matmul_padded_by_expression,
        **cap.problem("matmul", matmul_padded_by_expression, block=(TILE, TILE)),
        points=3,
    )
    assert res.status == "failed" and res.score == 1.5, res
    assert "`TILE + 1` is arithmetic" in res.message and "module level" in res.message, res
    assert not cap.accept("matmul", matmul_padded_by_expression, res, block=(TILE, TILE)).passed
    assert "matmul" in cap.missing()


def test_a_correct_but_uncoalesced_kernel_gets_half_its_check_and_still_trains():
    """Before: half the points at the check, and then training refused to start (the kernel was never registered)
    although the lab said only that it "gets half the points"."""
    cap = capstone.Capstone()
    for op, kern in LIBRARY.items():
        cap.register(op, kern, trusted=True)
    res = check_kernel(maxpool_i_fastest, **cap.problem("maxpool", maxpool_i_fastest), points=3)
    assert res.status == "over budget" and res.score == 1.5, res
    cap.accept("maxpool", maxpool_i_fastest, res)
    assert cap.kernels["maxpool"] is maxpool_i_fastest and not cap.missing()
    cap.require_all()  # training starts
    whose = {op: who for op, who, _ in cap.rows()}
    assert whose["maxpool"] == "yours (over budget: uncoalesced, slower on a GPU)", whose
    ops = cap.ops()
    model = nn.mnist_cnn(image_size=8, channels=(2, 3), hidden=8, backend="kernels").use_ops(ops)
    x, y = np.random.default_rng(0).random((4, 1, 8, 8), dtype=np.float32), np.arange(4)
    nn.train_step(model, nn.SoftmaxCrossEntropy(), nn.Adam(model), x, y)
    assert ops.calls["maxpool"] >= 1


@cuda.jit
def maxpool_backward_lab08_order(dout, arg, k, stride, dx):  # lab 08's parameter order, lab 09's body
    N, C, H, W = dx.shape[0], dx.shape[1], dx.shape[2], dx.shape[3]
    for t in range(cuda.grid(1), N * C * H * W, cuda.gridsize(1)):
        dx[t // (C * H * W), (t // (H * W)) % C, (t // W) % H, t % W] = 0.0


def test_lab_08s_max_pool_backward_parameter_order_is_named_not_an_int_without_shape():
    res = capstone.Capstone().register("maxpool_backward", maxpool_backward_lab08_order)
    # before: "AttributeError ... 'int' object has no attribute 'shape'" and a hint to check the argument order
    assert res.status == "failed" and "'int' object" not in res.message, res
    assert "your `k` is where the launcher passes `dx`" in res.message, res
    assert "maxpool_backward_kernel(dout, arg, dx, k, stride)" in res.message and "lab 08's" in res.message, res


def test_the_report_is_text_in_step_order_and_says_which_of_your_kernels_ran():
    cap = capstone.Capstone()
    for op, kern in LIBRARY.items():
        cap.register(op, kern, trusted=True)
    report = cap.report()
    assert "at 0x" not in repr(report) and repr(report) == str(report)  # before: <gpulab.capstone._Report at 0x...>
    ops = [row[0] for row in cap.rows()]
    assert ops[: len(capstone.LEARNER_OPS)] == list(capstone.LEARNER_OPS), ops  # before: alphabetical, mixed
    ran = {op: 3 for op in capstone.LEARNER_OPS if op != "col2im"}  # the digits CNN: no input gradient
    text = str(cap.report(ran))
    assert "col2im             yours, checked, did not run in this training" in text, text
    assert "conv_input_grad    not needed in this training" in text, text
    assert "relu               yours" in text and "(3 launches)" in text, text
    trained = cap.trained(
        check_kernel(
            lambda *a: None,
            spec=lambda x: x,
            inputs=lambda n, rng: (np.zeros(n, np.float32),),
            sizes=[1],
            host=lambda x, out: out.__setitem__(Ellipsis, x),
            trusted=True,
        ),
        dataset="digits",
        accuracy=0.905,
        target=0.85,
        ops=ran,
    )
    first = trained.message.splitlines()[0]
    assert first.startswith("trained on digits: test accuracy 0.905 (target 0.85); your kernels: 11 of 11"), first
    assert "col2im: checked, not run in this training" in first, first


@cuda.jit
def relu_nan_on_big_arrays(x, y):  # right on the check's small inputs, NaN on a training batch
    for i in range(cuda.grid(1), y.size, cuda.gridsize(1)):
        y[i] = max(x[i], 0.0) if y.size < 400 else math.nan


def test_a_nan_stop_names_the_launch_shape_and_the_cell_to_rerun():
    cap = capstone.Capstone()
    for op, kern in LIBRARY.items():
        cap.register(op, kern, trusted=True)
    assert cap.register("relu", relu_nan_on_big_arrays).passed
    model = nn.mnist_cnn(image_size=8, channels=(8, 8), hidden=8, backend="kernels").use_ops(cap.ops())
    x, y = np.random.default_rng(0).random((4, 1, 8, 8), dtype=np.float32), np.arange(4)
    with pytest.raises(capstone.CapstoneError) as err:
        nn.train_step(model, nn.SoftmaxCrossEntropy(), nn.Adam(model), x, y)
    text = str(err.value)
    # before: "... re-run Capstone.register('relu', ...)." (a call the lab never has the learner make), no shape
    assert "(launch 1 of this training): its output of shape (4, 8, 4, 4) has 512 of 512 elements" in text, text
    assert "re-run the check cell of lab 09's exercise 1" in text, text


def test_the_course_kernels_and_other_parameter_names_are_no_order_mismatch():
    for op, kern in LIBRARY.items():  # lab 08's dropout names (dy, states, p, dx) included
        assert capstone.signature_mismatch(op, kern) == "", op

    @cuda.jit
    def adam(p, g, m, v, lr, beta1, beta2, eps):  # adam's p is an array, not dropout's probability
        pass

    assert capstone.signature_mismatch("adam_update", adam) == ""
