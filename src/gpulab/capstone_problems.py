"""The capstone's checks (lab 09), one :class:`Problem` per learner op: the NumPy spec, the
inputs at each size, the named mistakes (their outputs in :mod:`gpulab.capstone_mistakes`), the coalescing
budgets (:mod:`gpulab.capstone_budgets`) and the time limits. The host function that runs a learner's
kernel through the launcher training uses (:mod:`gpulab.kernels.nn_ops`) is the op's entry in
:data:`gpulab.capstone_hosts.HOSTS` (importable from here too). :class:`gpulab.capstone.Capstone`
registers a kernel only once its problem here passes.
"""

from __future__ import annotations

from typing import Any
from collections.abc import Callable

import numpy as np

from .capstone_budgets import BUDGETS, TALL_COL2IM, TALL_POOL, TALL_XENT
from .capstone_hosts import HOSTS as HOSTS
from .capstone_mistakes import (  # the known mistakes of every op
    _im2col_channel_first,
    _im2col_no_pad_shift,
    _im2col_offsets_swapped,
    _col2im_channel_first,
    _col2im_no_stride_test,
    _col2im_pad_flipped,
    _pool_last_max,
    _pool_from_zero,
    _pool_arg_flat,
    _pool_backward_routed,
    _xent_grad_not_mean,
    _xent_losses_mean,
    _xent_loss_no_shift,
    _xent_no_onehot,
    _adam_ascent,
    _adam_old_moments,
    _adam_v_from_g,
    _adam_m_hat_only,
    _adam_both_hats,
)
from .capstone_specs import (  # noqa: F401  (the specs and inputs of every op)
    _matmul_inputs,
    _conv_inputs,
    _im2col_spec,
    _col2im_inputs,
    _col2im_spec,
    _pool_inputs,
    _pool_spec,
    _pool_backward_inputs,
    _pool_backward_spec,
    _xent_inputs,
    _xent_spec,
    _adam_inputs,
    _dropout_inputs,
    _dropout_spec,
    _adam_spec,
)
from .exercises import Problem, random_arrays

__all__ = ["BLOCK_TIMEOUT", "GRID_STRIDE_TIMEOUT", "HOSTS", "PROBLEMS"]


# ----------------------------------------------------------------------------- problems (one per op)


def _dropout_problem(op: str, inp: str, scaling: str) -> Problem:
    from .problems._dropout import named_mistakes

    return _problem(
        op,
        _dropout_spec,
        _dropout_inputs,
        # (elements, p, streams): fewer, then more elements than threads, not multiples of the block or the grid
        [(1, 0.5, 32), (50, 0.25, 96), (250, 0.5, 96), (1001, 0.1, 96)],
        [(50, 0.25, 96), (1001, 0.1, 96), ((1 << 20) + 3, 0.5, 2048)],
        out_names=["y" if inp == "x" else "dx"],
        mistakes=named_mistakes(inp, scaling),
    )


# Deadlines of one launch in a check, in seconds. The checks' grid-stride launches are small (8 threads in the
# simulator): the course's kernels took at most 0.15 s per launch (gemm_kernel on 20x40x17; the other ops
# 0.002-0.05 s), measured 2026-12-02 in simulator mode on the shared 2-core machine at load 8-10 (several test
# runs beside it). 10 s is over 60 times that, so a learner's slower kernel still finishes, and a stuck one is
# named after 10 s instead of 60. A matmul registered with block=(TILE, TILE) runs 256 simulator threads per
# block: lab 09's tiled solution took 3.5 s on the 20x40x17 case (4 blocks) at load 10, so it keeps 60 s (17x).
GRID_STRIDE_TIMEOUT = 10.0
BLOCK_TIMEOUT = 60.0


def _problem(name: str, spec: Callable, inputs: Callable, sizes: list, gpu_sizes: list, **kw: Any) -> Problem:
    return Problem(name, spec, inputs, sizes, gpu_sizes=gpu_sizes, timeout=GRID_STRIDE_TIMEOUT, **kw)


PROBLEMS: dict[str, Problem] = {
    "matmul": _problem(
        "matmul",
        lambda a, b: a @ b,
        _matmul_inputs,
        # (3, 5, 5): B square, so a kernel that reads B[j, k] stays inside B and its result names the mistake
        # (on the others it reads past B's end). (40, 9, 5): C 40 x 5, whose TILE x TILE grid (1 x 3 blocks) a
        # kernel with the row from x (`i, j = cuda.grid(2)`) does not cover: it is then right only with x and y
        # exchanged (its verdict says so). The last: K spans three 16-wide tiles (the last ragged), so a
        # tile overwritten while others still read it (a missing second cuda.syncthreads()) shows as a race; every
        # side is over 16 so that the harness's square probe (the smallest side) spans two tiles as well and does
        # not pass such a kernel
        [(1, 1, 1), (3, 5, 5), (5, 7, 3), (40, 9, 5), (20, 40, 17)],
        [(1, 1, 1), (3, 5, 5), (129, 257, 65), (512, 288, 64)],
        reduction=lambda a, b: a.shape[1],
        out_names=["C"],
        budget=BUDGETS["matmul"],
        mistakes={
            "B is read transposed: C[i, j] = sum over k of A[i, k] * B[k, j], row k and column j of B (B[j, k] "
            "reads B's column as a row; with B (K, N) not square it reads past B's end).": lambda a, b: (
                a @ b.T if b.shape[0] == b.shape[1] else np.full(1, np.nan)
            ),
        },
    ),
    "im2col": _problem(
        "im2col",
        _im2col_spec,
        _conv_inputs,
        [(1, 1, 3, 3, 3, 1, 0), (2, 2, 5, 6, 3, 1, 1), (1, 3, 7, 5, 2, 2, 1)],
        [(2, 2, 5, 6, 3, 1, 1), (64, 32, 14, 14, 3, 1, 1)],
        out_names=["cols"],
        budget=BUDGETS["im2col"],
        mistakes={
            "the columns are in channel-first order, q = (c*kh + a)*kw + b (PyTorch's weight layout, and lab "
            "07's): here the channel is the fastest index, q = (a*kw + b)*C + c, so a = q // (kw*C), "
            "b = (q // C) % kw, c = q % C.": _im2col_channel_first,
            "every tap is shifted by pad: the padded image starts pad pixels before x, so subtract pad from the "
            "input row and column of every tap, and take 0 where that falls outside x.": _im2col_no_pad_shift,
            "the window offsets a and b are swapped: a (the row offset, added to i*stride) is the slower one, "
            "a = q // (kw*C), and b (the column offset, added to j*stride) the faster, b = (q // C) % kw.": (
                _im2col_offsets_swapped
            ),
        },
    ),
    "col2im": _problem(
        "col2im",
        _col2im_spec,
        _col2im_inputs,
        # the last: tall (34 rows of 20), so that a flat index decoded with h fastest shows in the budget
        [(1, 1, 3, 3, 3, 1, 0), (2, 2, 5, 6, 3, 1, 1), (1, 3, 7, 5, 3, 2, 1), TALL_COL2IM],
        [(2, 2, 5, 6, 3, 1, 1), (64, 32, 14, 14, 3, 1, 1)],
        reduction=9,
        out_names=["dx"],
        budget=BUDGETS["col2im"],
        mistakes={
            "dcols is read in channel-first order, q = (c*kh + a)*kw + b: im2col's columns have the channel "
            "fastest, q = (a*kw + b)*C + c.": _col2im_channel_first,
            "with stride > 1 a tap (a, b) reaches pixel (h, w) only when ii = h + pad - a is a multiple of the "
            "stride (and jj likewise): test ii % stride == 0 before using ii // stride, which otherwise rounds down "
            "onto a window that does not hold the pixel.": _col2im_no_stride_test,
            "the padding shifts the wrong way: pixel h sits at h + pad in the padded image, so the window row that "
            "holds it at tap a is ii = h + pad - a (and jj = w + pad - b), not h - pad - a.": _col2im_pad_flipped,
        },
    ),
    "relu": _problem(
        "relu",
        lambda x: np.maximum(x, 0),
        lambda n, rng: random_arrays(rng, n),
        [1, 37, 300],
        [1, 37, 1 << 20],
        out_names=["y"],
    ),
    "relu_backward": _problem(
        "relu_backward",
        lambda d, y: d * (y > 0),
        lambda n, rng: (random_arrays(rng, n)[0], np.maximum(random_arrays(rng, n)[0], 0)),
        [1, 37, 300],
        [1, 37, 1 << 20],
        out_names=["dx"],
        mistakes={
            "dx[i] = dout[i] only where y[i] > 0: where y[i] == 0 (a clipped input) dx[i] is 0.": lambda d, y: d,
            "dx is the ReLU's derivative alone (1 or 0): the chain rule multiplies it by the gradient that arrives, "
            "dout.": lambda d, y: (y > 0).astype(d.dtype),
        },
    ),
    "maxpool": _problem(
        "maxpool",
        _pool_spec,
        _pool_inputs,
        [(1, 1, 2, 2, 2, 2), (2, 3, 7, 9, 2, 2), (1, 2, 5, 5, 3, 1, True), TALL_POOL],
        [(2, 3, 7, 9, 2, 2), (2, 2, 5, 5, 3, 1, True), (128, 32, 28, 28, 2, 2)],
        out_names=["out", "arg"],
        budget=BUDGETS["maxpool"],
        mistakes={
            "arg must be the position of the *first* maximum when a window holds its maximum twice (after a ReLU "
            "whole windows are 0): update best and arg only on v > best, not v >= best.": _pool_last_max,
            "a window of negative values gave 0: start best from the window's first element, "
            "x[n, c, i*stride, j*stride] (with arg 0), not from 0.0.": _pool_from_zero,
            "arg is the position inside the window, a*k + b (0 to k*k - 1), not the input pixel's index "
            "h*W + w: the backward finds the pixel from the window and that position.": _pool_arg_flat,
        },
    ),
    "maxpool_backward": _problem(
        "maxpool_backward",
        _pool_backward_spec,
        _pool_backward_inputs,
        [(1, 1, 2, 2, 2, 2), (2, 3, 7, 9, 2, 2), (1, 2, 5, 5, 3, 1), TALL_POOL],
        [(2, 3, 7, 9, 2, 2), (128, 32, 28, 28, 2, 2)],
        reduction=9,
        out_names=["dx"],
        budget=BUDGETS["maxpool_backward"],
        mistakes={
            "dout went to every pixel of the window: only the window's maximum gets it, the pixel whose offset "
            "(a, b) has arg[n, c, i, j] == a*k + b; the others get 0 from that window.": lambda *c: (
                _pool_backward_routed(*c, how="all")
            ),
            "only one window per pixel was looked at (i = h // stride): with k > stride windows overlap, so a pixel "
            "lies in several windows; loop over its offsets a, b in range(k), i = (h - a) // stride where "
            "(h - a) % stride == 0, and sum every window whose maximum it is.": lambda *c: _pool_backward_routed(
                *c, how="one_window"
            ),
            "a pixel that is the maximum of several overlapping windows gets only the last one's dout: add "
            "(acc += dout[...]) over the windows, do not assign.": lambda *c: _pool_backward_routed(*c, how="last"),
        },
    ),
    "softmax_xent": _problem(
        "softmax_xent",
        _xent_spec,
        _xent_inputs,
        # (5, 10, 1000.0): logits near 1000, where exp overflows unless the row's maximum is subtracted first;
        # TALL_XENT: the coalescing budget's trace
        [(1, 10), (7, 10), (33, 3), (5, 10, 1000.0), TALL_XENT],
        [(7, 10), (4096, 10), (5, 10, 1000.0)],
        out_names=["grad", "losses"],
        budget=BUDGETS["softmax_xent"],
        rtol=1e-4,
        atol=1e-6,
        mistakes={
            "divide grad by N, the batch size (logits.shape[0]): the loss is the mean over the batch, so each "
            "row's gradient is (softmax - onehot) / N.": _xent_grad_not_mean,
            "losses[r] is row r's own loss, not divided by N (the engine takes the mean of losses).": _xent_losses_mean,
            "losses[r] has the wrong sign: the loss is -log(softmax[y]) = log(s) - (logits[r, y] - m), which is "
            "never negative.": lambda lg, lb: (-_xent_spec(lg, lb)[1]).astype(lg.dtype),
            "losses[r] is off by the row's maximum m: s was summed over exp(logits - m), so the label's logit is "
            "shifted too: log(s) - (logits[r, y] - m).": _xent_loss_no_shift,
            "grad is the softmax alone: subtract 1 at the label, grad[r, k] = (softmax[r, k] - [k == y]) / N (the "
            "cross-entropy's derivative).": _xent_no_onehot,
        },
    ),
    "adam_update": _problem(
        "adam_update",
        _adam_spec,
        _adam_inputs,
        [1, 37, 300],
        [37, 1 << 20],
        out_names=["p", "m", "v"],
        rtol=1e-5,
        atol=1e-6,
        mistakes={
            "p is unchanged: the update is in place, so write the new value into p itself (p[i] -= ...), not "
            "into a local copy that is lost when the kernel ends.": lambda p, g, m, v, *_: p,
            "m is unchanged: store the new moment back (m[i] = b1 * m[i] + (1 - b1) * g[i]); the next step reads "
            "it, so a local copy is not enough.": lambda p, g, m, v, *_: m,
            "v is unchanged: store the new moment back (v[i] = b2 * v[i] + (1 - b2) * g[i] * g[i]); the next step "
            "reads it, so a local copy is not enough.": lambda p, g, m, v, *_: v,
            "p was updated with the previous step's moments: update m and v first, then p with the new "
            "ones.": _adam_old_moments,
            "p moved up the gradient: the step descends, p[i] -= lr_t * m[i] / (sqrt(v[i]) + eps_t).": _adam_ascent,
            "v averages the squared gradient: v = b2 * v + (1 - b2) * g[i] * g[i], not g[i].": _adam_v_from_g,
            "m was bias-corrected (m / (1 - b1)) but v was not: here both corrections are already folded into lr_t and "
            "eps_t (lr_t = lr * sqrt(1 - b2^t) / (1 - b1^t), eps_t = eps * sqrt(1 - b2^t), computed by the optimizer, "
            "which knows the step t), so the kernel uses the new m and v as they are: "
            "p[i] -= lr_t * m[i] / (sqrt(v[i]) + eps_t).": _adam_m_hat_only,
            "m and v were bias-corrected in the kernel (m / (1 - b1), v / (1 - b2)): both corrections are already "
            "folded into lr_t and eps_t (the optimizer computes them from the step t), so the kernel uses the new m "
            "and v as they are: p[i] -= lr_t * m[i] / (sqrt(v[i]) + eps_t).": _adam_both_hats,
        },
    ),
    "dropout_forward": _dropout_problem(
        "dropout_forward",
        "x",
        "y is x where kept, not x / (1 - p): inverted dropout scales the kept values by 1 / (1 - p), so that the "
        "expected value of y[i] is x[i] and nothing changes at test time (where dropout is off).",
    ),
    "dropout_backward": _dropout_problem(
        "dropout_backward",
        "dy",
        "dx is dy where kept, not dy / (1 - p): the forward scaled the kept values, y = x / (1 - p), so its "
        "derivative there is 1 / (1 - p): dx = dy / (1 - p) where kept, 0 where dropped.",
    ),
}
