"""The lessons' PTX checks: every exercise whose answer is a GPU kernel (or a device function, or a GPU ufunc's
scalar function) is compiled for a GPU by its check (NVVM and ptxas, sm_75), so a kernel the simulator runs but
no GPU compiles loses half its points in the lessons as in the labs; the exercises whose answer is host code have
no such check. (Every reference passing its check, PTX line included, is test_lessons.py's
test_every_reference_passes_its_check.)"""

from __future__ import annotations

import math

import numpy as np
import pytest
from numba import cuda, float32
from numba.cuda.random import xoroshiro128p_uniform_float32

from gpulab import lessons
from gpulab.exercises.cases import build_cases
from gpulab.exercises.ptxcheck import signature_for

# The exercises whose answer is host code: NumPy functions, a host function that launches saxpy on streams, and
# a CuPy ElementwiseKernel that CuPy composes on the host from the learner's strings.
HOST_CODE = {
    ("02", "pipelined_saxpy"),
    ("06", "axpy_elementwise"),
    ("06", "round_to_tf32"),  # a NumPy function on the bits of float32 values
    ("09", "cnn_forward_macs"),
    ("09", "train_step"),
    ("10", "ring_allreduce"),
    ("11", "joules_per_image"),
    ("11", "attainable"),
    ("11", "cost_per_epoch"),
    ("11", "pe_step"),
    ("12", "attention_backward"),  # the attention backward pass in NumPy
}


def test_every_kernel_exercise_is_compiled_for_a_gpu():
    missing = [key for key, ex in lessons.EXERCISES.items() if ex.problem.ptx is None and key not in HOST_CODE]
    assert not missing, f"lesson exercises with a kernel and no PTX check: {missing}"
    for key in HOST_CODE:
        ex = lessons.EXERCISES[key]
        assert ex.problem.host is not None and ex.problem.ptx is None, key  # host code, checked as host code


def test_auto_names_every_argument():
    """``ptx="auto"`` compiles for the first case's argument types: every lesson exercise that uses it has
    arguments numba types on their own (a record array, the dropout's states, is named by hand), so no check says
    "not checked"."""
    autos = [ex for ex in lessons.EXERCISES.values() if ex.problem.ptx == "auto"]
    assert len(autos) >= 30
    for ex in autos:
        p = ex.problem
        case = build_cases(p, p.sizes[:1])[0]
        args = tuple(p.args(case.inputs, case.expected)) if p.args else case.inputs + case.expected
        sig = signature_for(args)
        assert sig is not None and sig.startswith("void("), (ex.lesson, ex.name, sig)


# Kernels that are right in the simulator (it runs Python) and that no GPU compiles or loads. (A Python list or dict
# inside a kernel is refused before any compile, in every exercise, by exercises.static: these need NVVM or ptxas.)
@cuda.jit
def add_importing(a, b, out):  # an import inside a kernel
    import operator

    i = cuda.grid(1)
    if i < out.size:
        out[i] = operator.add(a[i], b[i])


@cuda.jit
def block_max_64k(x, partial):  # 64 KiB of static shared memory: ptxas refuses it (48 KiB at most per block)
    buf = cuda.shared.array(16384, float32)
    tx = cuda.threadIdx.x
    i = cuda.grid(1)
    buf[tx] = x[i] if i < x.size else float32(-math.inf)
    cuda.syncthreads()
    s = 64
    while s > 0:
        if tx < s:
            buf[tx] = max(buf[tx], buf[tx + s])
        cuda.syncthreads()
        s //= 2
    if tx == 0:
        partial[cuda.blockIdx.x] = buf[0]


@cuda.jit
def conv2d_fsum(x, w, out):  # numba-cuda has no math.fsum
    j, i = cuda.grid(2)
    if i < out.shape[0] and j < out.shape[1]:
        acc = float32(0.0)
        for a in range(w.shape[0]):
            for b in range(w.shape[1]):
                acc = math.fsum((acc, x[i + a, j + b] * w[a, b]))
        out[i, j] = acc


@cuda.jit
def dropout_clipped(x, states, p, y, mask):  # np.clip on a number (the states: a hand-written record signature)
    tid = cuda.grid(1)
    for i in range(tid, x.size, cuda.gridsize(1)):
        u = np.clip(xoroshiro128p_uniform_float32(states, tid), float32(0.0), float32(1.0))
        if u >= p:
            y[i] = x[i] / (float32(1.0) - p)
            mask[i] = 1
        else:
            y[i] = float32(0.0)
            mask[i] = 0


@cuda.jit
def softmax_np_exp(x, out):  # np.exp on a number: numba-cuda has no scalar np.exp
    row = cuda.blockIdx.x
    tx = cuda.threadIdx.x
    s_max = cuda.shared.array(32, float32)
    s_sum = cuda.shared.array(32, float32)
    run_max = float32(-math.inf)
    run_sum = float32(0.0)
    for j in range(tx, x.shape[1], 32):
        xj = x[row, j]
        new_max = max(run_max, xj)
        if new_max != -math.inf:
            run_sum = run_sum * math.exp(run_max - new_max) + math.exp(xj - new_max)
        run_max = new_max
    s_max[tx] = run_max
    s_sum[tx] = run_sum
    cuda.syncthreads()
    stride = 16
    while stride > 0:
        if tx < stride:
            m1 = s_max[tx]
            m2 = s_max[tx + stride]
            new_max = max(m1, m2)
            if new_max != -math.inf:
                s_sum[tx] = s_sum[tx] * math.exp(m1 - new_max) + s_sum[tx + stride] * math.exp(m2 - new_max)
            s_max[tx] = new_max
        cuda.syncthreads()
        stride //= 2
    for j in range(tx, x.shape[1], 32):
        out[row, j] = np.exp(x[row, j] - s_max[0]) / s_sum[0]


@pytest.mark.ptx
def test_a_kernel_no_gpu_compiles_loses_half_its_points_in_a_lesson():
    """One compiler process serves every check (gpulab.ptx_child): the first compile starts NVVM, the rest are
    quick."""
    f32 = "float32[:]"
    cases = [
        ("01", "add", add_importing, f"NVVM rejected the kernel (void({f32}, {f32}, {f32}))"),
        ("05", "block_max", block_max_64k, "its shared arrays take 65,536 bytes per block"),
        ("07", "conv2d_single", conv2d_fsum, "NVVM rejected the kernel (void(float32[:, :], float32[:, :], float32"),
        ("08", "dropout_forward", dropout_clipped, "NVVM rejected the kernel (void(float32[:], Record.make_c_struct"),
        ("12", "online_softmax", softmax_np_exp, "`np.exp(...)` on a scalar does not compile for a GPU"),
    ]
    for lesson, name, kernel, said in cases:
        res = lessons.exercise(lesson, name).check(kernel)
        assert res.status == "failed" and res.score == res.max_score / 2, (name, res)
        assert said in res.message, (name, res.message)
        assert res.hint, name  # what to write instead
