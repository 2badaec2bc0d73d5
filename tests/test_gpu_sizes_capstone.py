"""Lab 09's checks (the capstone's :data:`gpulab.capstone_problems.PROBLEMS`) at their gpu-mode sizes, with the
arithmetic of the course's reference kernels (:mod:`gpulab.kernels.nn_kernels`) emulated in NumPy float32 (the
tier of tests/test_gpu_sizes.py, for lab 09; no GPU needed).

Each emulation computes what the course's kernel computes on a GPU, in its order, with the scalars the launcher
passes (:mod:`gpulab.kernels.nn_ops` casts Adam's ``lr_t, b1, b2, eps_t`` to float32): gemm adds float32 products
one k after another; col2im and the max-pool backward gather at most k*k taps in the kernel's (a, b) order into a
float32 accumulator; softmax_xent sums the row's exps in float32 one class after another; Adam updates in float32,
plain or with fused multiply-adds. The element-wise ops (ReLU and its backward, the pooling, im2col, dropout) round
once or not at all; their emulations are the kernels' loops written as array code.

The tier has teeth: the Adam spec as it was (Python's ``1 - 0.999`` where the kernel receives ``float32(0.999)``)
fails the course kernel's arithmetic at 2^20 elements.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from gpulab import capstone_specs, xoroshiro
from gpulab.capstone_problems import PROBLEMS
from gpulab.nn.ops import conv_out_hw

F32 = np.float32


def _seq_matmul(A: np.ndarray, B: np.ndarray) -> np.ndarray:
    """gemm_kernel: one float32 accumulator per output, adding k = 0, 1, ... in order."""
    C = np.zeros((A.shape[0], B.shape[1]), F32)
    tmp = np.empty_like(C)
    for k in range(A.shape[1]):
        np.multiply(A[:, k : k + 1], B[k : k + 1, :], out=tmp)
        C += tmp
    return C


def _matmul(a, b, c):
    c[...] = _seq_matmul(a, b)


def _im2col(x, k, stride, pad, cols):  # im2col_kernel: one copy (or a 0 in the padding) per element of cols
    n, ch, h, w = x.shape
    ho, wo = conv_out_hw(h, w, k, k, stride, pad)
    xp_ = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    out = cols.reshape(n, ho, wo, k, k, ch)
    for a in range(k):
        for b in range(k):
            out[:, :, :, a, b, :] = xp_[:, :, a : a + stride * ho : stride, b : b + stride * wo : stride].transpose(
                0, 2, 3, 1
            )


def _col2im(d, x_shape, k, stride, pad, dx):  # col2im_kernel: acc = 0; acc += dcols over (a, b) in order
    n, c, h, w = x_shape
    ho, wo = conv_out_hw(h, w, k, k, stride, pad)
    d6 = d.reshape(n, ho, wo, k, k, c)
    acc = np.zeros((n, c, h + 2 * pad, w + 2 * pad), F32)  # padded; each pixel's taps are added a, then b, order
    for a in range(k):
        for b in range(k):
            acc[:, :, a : a + stride * ho : stride, b : b + stride * wo : stride] += d6[:, :, :, a, b, :].transpose(
                0, 3, 1, 2
            )
    dx[...] = acc[:, :, pad : pad + h, pad : pad + w]


def _relu(x, y):
    y[...] = np.maximum(x, F32(0))


def _relu_backward(d, y, dx):
    dx[...] = np.where(y > 0, d, F32(0))


def _windows(x: np.ndarray, k: int, stride: int) -> np.ndarray:
    ho, wo = conv_out_hw(x.shape[2], x.shape[3], k, k, stride, 0)
    return np.stack(
        [x[:, :, a : a + stride * ho : stride, b : b + stride * wo : stride] for a in range(k) for b in range(k)], -1
    )


def _maxpool(x, k, stride, out, arg):  # maxpool_kernel: best from the first tap; v > best keeps the first maximum
    win = _windows(x, k, stride)
    best, where = win[..., 0].copy(), np.zeros(win.shape[:-1], np.int32)
    for t in range(1, k * k):
        more = win[..., t] > best
        best, where = np.where(more, win[..., t], best), np.where(more, t, where)
    out[...], arg[...] = best, where


def _maxpool_backward(dout, arg, x_shape, k, stride, dx):  # the kernel's gather: acc += dout over (a, b) in order
    ho, wo = dout.shape[2], dout.shape[3]
    acc = np.zeros(x_shape, F32)
    for a in range(k):
        for b in range(k):
            acc[:, :, a : a + stride * ho : stride, b : b + stride * wo : stride] += np.where(
                arg == a * k + b, dout, F32(0)
            )
    dx[...] = acc


def _softmax_xent(logits, labels, grad, losses):  # softmax_xent_kernel: max, float32 sum of exps in class order
    n, classes = logits.shape
    m = logits.max(axis=1, keepdims=True)
    e = np.exp(logits - m).astype(F32)
    s = np.zeros((n, 1), F32)
    for k in range(classes):
        s += e[:, k : k + 1]
    rows = np.arange(n)
    losses[...] = (np.log(s[:, 0]) - (logits[rows, labels] - m[:, 0])).astype(F32)
    p = (e / s).astype(F32)
    p[rows, labels] -= F32(1)
    grad[...] = p / F32(n)


def _adam32(p, g, m, v, lr_t, b1, b2, eps_t, fma: bool = False) -> tuple:
    """adam_kernel's float32 arithmetic with the float32 scalars nn_ops.adam_update passes; ``fma``: the
    multiply-adds fused (one rounding each), as NVCC compiles them."""
    lr_t, b1, b2, eps_t, one = F32(lr_t), F32(b1), F32(b2), F32(eps_t), F32(1)
    if not fma:
        m2 = b1 * m + (one - b1) * g
        v2 = b2 * v + (one - b2) * g * g
        return p - lr_t * m2 / (np.sqrt(v2) + eps_t), m2, v2
    D = np.float64
    m2 = (D(b1) * m + D((one - b1) * g)).astype(F32)
    v2 = (D(b2) * v + D((one - b2) * g) * g).astype(F32)
    return (D(p) - D(lr_t * m2 / (np.sqrt(v2) + eps_t))).astype(F32), m2, v2


def _adam(p, g, m, v, lr_t, b1, b2, eps_t, p2, m2, v2):
    p2[...], m2[...], v2[...] = _adam32(p, g, m, v, lr_t, b1, b2, eps_t)


def _adam_fma(p, g, m, v, lr_t, b1, b2, eps_t, p2, m2, v2):
    p2[...], m2[...], v2[...] = _adam32(p, g, m, v, lr_t, b1, b2, eps_t, fma=True)


def _dropout(x, words, p, y):
    """dropout_kernel, one thread per state: the grid-stride loop a row of the grid at a time (row r: draw r of
    every thread), kept where the draw is >= p, scaled by float32(1) / (1 - p)."""
    states = words.copy().view(xoroshiro.DTYPE)
    threads, flat, out = states.size, x.reshape(-1), y.reshape(-1)
    p = F32(p)
    for start in range(0, flat.size, threads):
        u = xoroshiro.uniform_float32_streams(states, 1)[0]
        part = slice(start, min(start + threads, flat.size))
        kept = u[: part.stop - part.start] >= p
        out[part] = np.where(kept, flat[part] / (F32(1) - p), F32(0))


EMULATIONS = {
    "matmul": _matmul,
    "im2col": _im2col,
    "col2im": _col2im,
    "relu": _relu,
    "relu_backward": _relu_backward,
    "maxpool": _maxpool,
    "maxpool_backward": _maxpool_backward,
    "softmax_xent": _softmax_xent,
    "adam_update": _adam,
    "dropout_forward": _dropout,
    "dropout_backward": _dropout,
}


def gpu_check(op: str, host=None, **overrides):
    """The op's check at its gpu-mode sizes, with the emulation in place of a kernel (no coalescing budget: it
    traces a kernel's launch, and an emulation launches none)."""
    kw = {"race_check": False, "ptx": None, "budget": None, **overrides}
    return PROBLEMS[op].check(host=host or EMULATIONS[op], scale="gpu", trusted=True, **kw)


def test_every_capstone_problem_has_an_emulation():
    assert set(EMULATIONS) == set(PROBLEMS)


@pytest.mark.parametrize("op", sorted(EMULATIONS))
def test_capstone_check_passes_the_course_kernels_float32_arithmetic_at_gpu_sizes(op):
    res = gpu_check(op)
    assert res.passed, res
    assert len(res.checks) >= len(PROBLEMS[op].gpu_sizes)


def test_adam_check_passes_fused_multiply_adds_at_gpu_sizes():
    res = gpu_check("adam_update", host=_adam_fma)
    assert res.passed, res


def test_gpu_sizes_reach_training_sizes():
    assert max(PROBLEMS["adam_update"].gpu_sizes) >= 1 << 20
    assert max(m * k for m, k, _ in PROBLEMS["matmul"].gpu_sizes) >= 512 * 288
    assert (128, 32, 28, 28, 2, 2) in PROBLEMS["maxpool_backward"].gpu_sizes


def _adam_spec_python_scalars(p, g, m, v, lr_t, b1, b2, eps_t) -> tuple:
    """The spec as it was: Python's 1 - 0.999 (= 0.001), where the kernel's 1 - float32(0.999) is 0.00099998713."""
    lr_t, b1, b2, eps_t = 1e-2, 0.9, 0.999, 1e-8
    m2 = b1 * m + (1 - b1) * g
    v2 = b2 * v + (1 - b2) * g * g
    return (p - lr_t * m2 / (np.sqrt(v2) + eps_t)).astype(p.dtype), m2.astype(p.dtype), v2.astype(p.dtype)


def test_adam_spec_of_python_scalars_fails_the_course_kernel_at_gpu_size():
    """The teeth: the old spec fails the same emulation at 2^20 elements (9 elements of p, where a step almost
    cancels p), and the spec of the float32 scalars passes it (the test above)."""
    assert capstone_specs._adam_inputs(3, np.random.default_rng(0))[5].dtype == F32
    old_problem = dataclasses.replace(PROBLEMS["adam_update"], spec=_adam_spec_python_scalars)
    old = old_problem.check(host=_adam, scale="gpu", race_check=False, ptx=None, trusted=True, sizes=[1 << 20])
    assert not old.passed and old.status == "failed", old
    assert "p[" in old.message, old
