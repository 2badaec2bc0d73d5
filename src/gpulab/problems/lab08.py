"""Lab 08 · backpropagation: leaky ReLU backward, max-pool backward (kernels), linear and convolution
backward (array code), and a dropout backward that regenerates its mask (a kernel and a host function:
:mod:`.lab08_dropout`, re-exported here).

Gradients are sums (over the batch, over the windows that share a pixel), judged against a float64
reference computed here from the definitions, within the float32 rounding bound of the longest sum.
"""

from __future__ import annotations

import numpy as np

from ..exercises import Problem, random_arrays
from ..kernels._launch import ceil_div, conv_out_size
from ..nn.array_ops import ArrayOps
from ..nn.ops import windows
from ._common import launch_1d
from .lab08_dropout import DROPOUT_BACKWARD, DROPOUT_BLOCKS, DROPOUT_STEP, DROPOUT_TPB, as_states, new_states

__all__ = [
    "CONV2D_BACKWARD",
    "DROPOUT_BACKWARD",
    "DROPOUT_BLOCKS",
    "DROPOUT_STEP",
    "DROPOUT_TPB",
    "LINEAR_BACKWARD",
    "LEAKY_RELU_BACKWARD",
    "MAXPOOL_BACKWARD",
    "TPB",
    "as_states",
    "conv2d_backward_spec",
    "conv_backward_inputs",
    "leaky_relu_backward_spec",
    "leaky_relu_inputs",
    "linear_backward_spec",
    "maxpool_backward_spec",
    "maxpool_with_arg",
    "new_states",
    "pool_inputs",
]

TPB = 64  # threads per block


def leaky_relu_inputs(size: tuple[int, float], rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, np.float32]:
    """size = (n, alpha) -> dout, y = leaky_relu(x, alpha) (x[2], x[7], ... exactly 0, so y == 0 there), alpha."""
    n, alpha = size
    dout, x = random_arrays(rng, n, n)
    x[2::5] = 0
    a = np.float32(alpha)
    return dout, np.where(x > 0, x, a * x).astype(np.float32), a


def leaky_relu_backward_spec(dout: np.ndarray, y: np.ndarray, alpha: np.float32) -> np.ndarray:
    """dx = dout where y > 0, alpha * dout elsewhere (y > 0 exactly where x > 0, for alpha >= 0)."""
    return _leaky_back(dout, y, alpha, alpha)


def _leaky_back(dout: np.ndarray, y: np.ndarray, alpha: np.float32, slope: float | np.floating) -> np.ndarray:
    """dout where y > 0, ``slope * dout`` elsewhere (``slope = 0``: lesson 08's ReLU backward)."""
    return np.where(y > 0, dout, slope * dout).astype(np.result_type(dout, alpha))


def _lesson_relu_backward(dout: np.ndarray, y: np.ndarray, alpha: np.float32) -> np.ndarray:
    """A known mistake, lesson 08's kernel pasted: 0 where y <= 0, whatever alpha."""
    if alpha == 0:
        raise ValueError("with alpha = 0 the leaky ReLU is the ReLU: the same as the right answer")
    return _leaky_back(dout, y, alpha, 0.0)


def _leaky_swapped(dout: np.ndarray, y: np.ndarray, alpha: np.float32) -> np.ndarray:
    """A known mistake: alpha on the y > 0 side, dout passed unchanged where y <= 0."""
    return np.where(y > 0, alpha * dout, dout).astype(np.result_type(dout, alpha))


def _leaky_on_dout(dout: np.ndarray, y: np.ndarray, alpha: np.float32) -> np.ndarray:
    """A known mistake: the slope picked by dout's sign, not y's (as ``max(dout, alpha * dout)`` does too, for
    0 <= alpha <= 1: the forward's formula applied to the gradient)."""
    return np.where(dout > 0, dout, alpha * dout).astype(np.result_type(dout, alpha))


def _only_if_told_apart(wrong, other):  # noqa: ANN001, ANN202 - two mistakes' outputs
    """``wrong``, raising (no verdict from it) where ``other`` gives the same output: on one element with y <= 0 and
    dout > 0 the swapped slopes and dout's sign agree, and the hint must not name one of them by chance."""

    def mistake(dout: np.ndarray, y: np.ndarray, alpha: np.float32) -> np.ndarray:
        made = wrong(dout, y, alpha)
        if np.array_equal(made, other(dout, y, alpha)):
            raise ValueError("this input does not tell the two mistakes apart")
        return made

    return mistake


def maxpool_with_arg(x: np.ndarray, k: int, stride: int) -> tuple[np.ndarray, np.ndarray]:
    """Max-pool forward: (out, arg) where arg = a*k + b of the first maximum in each window."""
    n, c, h, w = x.shape
    ho, wo = conv_out_size(h, k, stride), conv_out_size(w, k, stride)
    flat = windows(x, k, k, stride, ho, wo).reshape(n, c, ho, wo, k * k)
    return flat.max(axis=-1), flat.argmax(axis=-1).astype(np.int32)


def pool_inputs(size: tuple, rng: np.random.Generator) -> tuple:
    """size = (N, C, H, W, k, stride) -> x (for its shape), dout, arg, k, stride."""
    n, c, h, w, k, stride = size
    (x,) = random_arrays(rng, (n, c, h, w))
    out, arg = maxpool_with_arg(x, k, stride)
    (dout,) = random_arrays(rng, out.shape)
    return x, dout, arg, k, stride


def maxpool_backward_spec(x: np.ndarray, dout: np.ndarray, arg: np.ndarray, k: int, stride: int) -> np.ndarray:
    """dx: each window's gradient added onto the input pixel that won it."""
    ho, wo = dout.shape[2], dout.shape[3]
    dx = np.zeros(x.shape, dtype=dout.dtype)
    for a in range(k):
        for b in range(k):
            dx[:, :, a : a + stride * ho : stride, b : b + stride * wo : stride] += dout * (arg == a * k + b)
    return dx


def _pool_back_overwritten(x: np.ndarray, dout: np.ndarray, arg: np.ndarray, k: int, stride: int) -> list:
    """A known mistake: `dx = dout` where it should add, so of the windows a pixel won only one counts: the last in
    window order (a scatter over windows), or the first (a gather looping over the offsets a, b upwards)."""
    return [_pool_back_one_window(x, dout, arg, k, stride, last) for last in (True, False)]


def _pool_back_one_window(
    x: np.ndarray, dout: np.ndarray, arg: np.ndarray, k: int, stride: int, last: bool
) -> np.ndarray:
    ho, wo = dout.shape[2], dout.shape[3]
    dx = np.zeros(x.shape, dtype=dout.dtype)
    order = [(i, j) for i in range(ho) for j in range(wo)]
    for i, j in order if last else order[::-1]:
        win = dx[:, :, i * stride : i * stride + k, j * stride : j * stride + k]  # a view
        won = np.zeros((*dout.shape[:2], k * k), bool)
        np.put_along_axis(won, arg[:, :, i, j, None].astype(np.intp), True, axis=2)
        won = won.reshape(*dout.shape[:2], k, k)[:, :, : win.shape[2], : win.shape[3]]
        win[won] = np.broadcast_to(dout[:, :, i, j, None, None], won.shape)[won]
    return dx


def _pool_back_own_window(x: np.ndarray, dout: np.ndarray, arg: np.ndarray, k: int, stride: int) -> np.ndarray:
    """A known mistake: pixel (h, w) looks only at window (h // stride, w // stride), whose offsets a, b are then
    below the stride: winners at offsets a >= stride or b >= stride get nothing."""
    if k <= stride:
        raise ValueError("windows do not overlap: every pixel is in one window at most")
    near = (arg // k < stride) & (arg % k < stride)
    return maxpool_backward_spec(x, dout * near, arg, k, stride)


def _pool_back_to_window(x: np.ndarray, dout: np.ndarray, arg: np.ndarray, k: int, stride: int) -> np.ndarray:
    """A known mistake: every pixel of a window gets its dout, winner or not."""
    ho, wo = dout.shape[2], dout.shape[3]
    dx = np.zeros(x.shape, dtype=np.float64)
    for a in range(k):
        for b in range(k):
            dx[:, :, a : a + stride * ho : stride, b : b + stride * wo : stride] += dout
    return dx.astype(dout.dtype)


def _pool_back_arg_of_2x2(x: np.ndarray, dout: np.ndarray, arg: np.ndarray, k: int, stride: int) -> np.ndarray:
    """A known mistake, lesson 08's 2x2 habit: a pixel at offset (a, b) takes dout where arg == a * 2 + b."""
    if k == 2:
        raise ValueError("the same as the right answer for 2x2 windows")
    ho, wo = dout.shape[2], dout.shape[3]
    dx = np.zeros(x.shape, dtype=dout.dtype)
    for a in range(k):
        for b in range(k):
            dx[:, :, a : a + stride * ho : stride, b : b + stride * wo : stride] += dout * (arg == a * 2 + b)
    return dx


def linear_backward_spec(x: np.ndarray, W: np.ndarray, dout: np.ndarray) -> tuple[np.ndarray, ...]:
    """y = x @ W.T + b: dx = dout @ W, dW = dout.T @ x, db = dout summed over the batch."""
    return dout @ W, dout.T @ x, dout.sum(axis=0)


def _linear_mean(x: np.ndarray, W: np.ndarray, dout: np.ndarray) -> list[np.ndarray]:
    """A known mistake: dW and db divided by the batch size N (the same as the right answer when N == 1)."""
    if x.shape[0] == 1:
        raise ValueError("the same as the right answer for a batch of one")
    return [dout.T @ x / x.shape[0], dout.sum(axis=0) / x.shape[0]]


def conv_backward_inputs(size: tuple, rng: np.random.Generator) -> tuple:
    """size = (N, C, H, W, F, k, stride, pad) -> x, w, dout, stride, pad."""
    n, c, h, w, f, k, stride, pad = size
    ho, wo = conv_out_size(h, k, stride, pad), conv_out_size(w, k, stride, pad)
    x, wt, dout = random_arrays(rng, (n, c, h, w), (f, c, k, k), (n, f, ho, wo))
    return x, wt, dout, stride, pad


def conv2d_backward_spec(x: np.ndarray, w: np.ndarray, dout: np.ndarray, stride: int, pad: int) -> tuple:
    """(dx, dw, db) of ``y = conv2d(x, w) + b``, from the definition, one kernel tap (a, d) at a time."""
    n, c, h, wd = x.shape
    f, _, k, _ = w.shape
    ho, wo = dout.shape[2], dout.shape[3]
    dt = np.result_type(x, w, dout)
    xpad = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    dxpad = np.zeros(xpad.shape, dtype=dt)
    dw = np.zeros(w.shape, dtype=dt)
    for a in range(k):
        for d in range(k):
            rows, cols = slice(a, a + stride * ho, stride), slice(d, d + stride * wo, stride)
            dw[:, :, a, d] = np.einsum("nfhw,nchw->fc", dout, xpad[:, :, rows, cols])
            dxpad[:, :, rows, cols] += np.einsum("nfhw,fc->nchw", dout, w[:, :, a, d])
    return dxpad[:, :, pad : pad + h, pad : pad + wd], dw, dout.sum(axis=(0, 2, 3))


def _conv_backward_cols(
    x: np.ndarray, w: np.ndarray, dout: np.ndarray, stride: int, pad: int, wrong: str
) -> np.ndarray:
    """A known mistake of the im2col backward (columns in (a, b, c) order), named by ``wrong``: ``"dw"`` (dW
    reshaped to (F, C, k, k) without moving C), ``"wmat"`` (the filters flattened in (c, a, b) order for dcols),
    ``"d"`` (dout reshaped to (N*Ho*Wo, F) without moving F last) or ``"dcols"`` (dcols = d @ wmat.T, raising
    unless k*k*C == F). Returns the output that the mistake spoils."""
    f, c, k, _ = w.shape
    ops = ArrayOps()
    cols, _, _ = ops.im2col(x.astype(np.float64), k, k, stride, pad)
    d = (dout.reshape(-1, f) if wrong == "d" else dout.transpose(0, 2, 3, 1).reshape(-1, f)).astype(np.float64)
    if wrong == "dw":
        return (d.T @ cols).reshape(f, c, k, k)
    wmat = w.reshape(f, c * k * k) if wrong == "wmat" else w.transpose(0, 2, 3, 1).reshape(f, k * k * c)
    wmat = wmat.astype(np.float64)
    return ops.col2im(d @ wmat.T if wrong == "dcols" else d @ wmat, x.shape, k, k, stride, pad)


def _conv_d_reshaped(x: np.ndarray, w: np.ndarray, dout: np.ndarray, wrong: str) -> np.ndarray:
    """A known mistake in laying dout out as d, (N*Ho*Wo, F), with sizes written out: ``"c"`` (C, x's channels,
    in place of F) or ``"hw"`` (the input's H*W in place of Ho*Wo). It raises where the sizes differ; else it
    returns d, whose shape is no output's."""
    n, c, h, wd = x.shape
    _, f, ho, wo = dout.shape
    rows, cols = (n * h * wd, f) if wrong == "hw" else (n * ho * wo, c)
    return dout.transpose(0, 2, 3, 1).reshape(rows, cols)


def _conv_backward_terms(x: np.ndarray, w: np.ndarray, dout: np.ndarray, stride: int, pad: int) -> tuple[int, int, int]:
    n, f, ho, wo = dout.shape
    per_tap = ceil_div(w.shape[2], stride) ** 2
    return f * per_tap, n * ho * wo, n * ho * wo  # dx: over filters and taps; dw, db: over batch and pixels


LEAKY_RELU_BACKWARD = Problem(
    "leaky_relu_backward_kernel",
    ptx="auto",  # a GPU must accept it: compiled for the types of the first case's arguments
    spec=leaky_relu_backward_spec,
    inputs=leaky_relu_inputs,
    sizes=[(1, 0.2), (100, 0.01), (77, 0.0), (500, 0.2)],  # alpha = 0: the plain ReLU's backward
    gpu_sizes=[(1, 0.2), (100, 0.01), (77, 0.0), (1 << 20, 0.1)],
    threads=[TPB, 32],
    out_names=["dx"],
    mistakes={
        "this is lesson 08's relu_backward, which blocks the gradient where y <= 0. This lab's leaky ReLU lets a "
        "fraction through there: where y[i] <= 0 the gradient is scaled by alpha (and it passes unchanged where "
        "y[i] > 0).": _lesson_relu_backward,
        "the slopes are swapped: the gradient passes unchanged where y > 0 (slope 1) and is multiplied by alpha "
        "where y <= 0.": _only_if_told_apart(_leaky_swapped, _leaky_on_dout),
        "the slope is chosen by the sign of dout (or dx = max(dout, alpha * dout), the forward's formula applied to "
        "the gradient): it depends on the layer's output y, whatever dout's sign: slope 1 where y[i] > 0, alpha "
        "where y[i] <= 0.": _only_if_told_apart(_leaky_on_dout, _leaky_swapped),
        "where y[i] <= 0 the kernel passed dout[i] unchanged: the slope there is alpha, and it is chosen by the sign "
        "of y (the layer's output), not of dout: slope 1 where y[i] > 0, alpha where y[i] <= 0.": _leaky_swapped,
        "the gradient was multiplied by y: leaky ReLU's derivative is 1 where y > 0 and alpha elsewhere, not y.": (
            lambda dout, y, alpha: dout * y
        ),
        "dout passed unchanged where y == 0: the test is `y[i] > 0`, not `y[i] >= 0`; where x <= 0 (so y <= 0) "
        "the slope is alpha.": lambda dout, y, alpha: np.where(y >= 0, dout, alpha * dout).astype(dout.dtype),
        "where y[i] <= 0 the kernel stored alpha * y[i], the forward's value: the backward multiplies the incoming "
        "gradient by the slope, dx[i] = alpha * dout[i] there (y only tells which side of 0 x was on).": (
            lambda dout, y, alpha: np.where(y > 0, dout, alpha * y).astype(dout.dtype)
        ),
    },
    points=2,
)

MAXPOOL_BACKWARD = Problem(
    "maxpool_backward_kernel",
    ptx="auto",  # a GPU must accept it: compiled for the types of the first case's arguments
    spec=maxpool_backward_spec,
    inputs=pool_inputs,
    args=lambda ins, outs: (*ins[1:], *outs),  # the kernel gets (dout, arg, k, stride, dx)
    sizes=[(1, 1, 3, 3, 2, 1), (2, 3, 7, 9, 2, 2), (1, 2, 9, 8, 3, 2)],
    gpu_sizes=[(1, 1, 3, 3, 2, 1), (2, 3, 7, 9, 2, 2), (1, 2, 9, 8, 3, 2), (128, 32, 28, 28, 2, 2)],
    launch=launch_1d(TPB),  # one thread per input pixel (dx)
    reduction=lambda x, dout, arg, k, stride: ceil_div(k, stride) ** 2,  # windows sharing a pixel
    out_names=["dx"],
    mistakes={
        "where windows overlap, a pixel that won several windows kept only one window's dout: add them "
        "(g += dout[...]), do not assign.": _pool_back_overwritten,
        "each pixel looked only at the window (h // stride, w // stride): where windows overlap (k > stride) a "
        "pixel also lies in windows that start up to k - 1 rows above or columns left of it, and it may have won "
        "those too. Look at every window offset (a, b) that puts the pixel inside a window.": _pool_back_own_window,
        "every pixel of a window got its dout: only the winner, the pixel at offset (a, b) with "
        "arg == a * k + b, gets it; the others get 0 from that window.": _pool_back_to_window,
        "arg was decoded with row and column swapped: arg = a * k + b, with a the row offset (h - i * stride) "
        "and b the column offset (w - j * stride) inside the window.": lambda x, dout, arg, k, stride: (
            maxpool_backward_spec(x, dout, (arg % k) * k + arg // k, k, stride)
        ),
        "arg was decoded as a * 2 + b, which holds only for 2x2 windows: the window here is k x k, so the "
        "winner is the pixel with arg == a * k + b.": _pool_back_arg_of_2x2,
    },
    points=3,
)

LINEAR_BACKWARD = Problem(
    "linear_backward",
    usage="problems.lab08.LINEAR_BACKWARD.check(host=linear_host)",
    spec=linear_backward_spec,
    # size = (N, in, out)
    inputs=lambda size, rng: random_arrays(rng, (size[0], size[1]), (size[2], size[1]), (size[0], size[2])),
    sizes=[(1, 1, 1), (5, 4, 3), (33, 17, 10)],
    gpu_sizes=[(1, 1, 1), (5, 4, 3), (33, 17, 10), (4096, 1024, 512)],
    reduction=lambda x, W, dout: (W.shape[0], x.shape[0], x.shape[0]),  # dx: out terms; dW, db: N terms
    out_names=["dx", "dW", "db"],
    mistakes={
        "this is the mean over the batch: the gradients of W and b are sums over the batch (dout already "
        "carries the loss's 1/N, if it has one), so do not divide by N.": _linear_mean,
        "db holds the sum of all of dout in every element: sum over the batch only, `dout.sum(axis=0)`, one "
        "value per output feature.": lambda x, W, dout: np.full(W.shape[0], dout.sum(dtype=np.float64)),
        # wrong transposes and axes: each raises on most inputs (the verdict then names its shapes, see
        # gpulab.exercises.shapes) and gives a wrong value of the right shape on the others
        "dx = dout @ W: dout is (N, out) and W is (out, in), so dout @ W is (N, in), the shape of x. `dout @ W.T` "
        "would need W as (in, out), as in y = x @ W; here y = x @ W.T.": lambda x, W, dout: dout @ W.T,
        "dW must have W's shape (out, in): dW = dout.T @ x, (out, N) @ (N, in), the batch axis N summed over. "
        "x.T @ dout is (in, out), the gradient for y = x @ W with W (in, out), not for this lab's y = x @ W.T.": (
            lambda x, W, dout: x.T @ dout
        ),
        "x @ dout multiplies (N, in) by (N, out): the batch axis N must be the inner one, the one summed over. "
        "dW = dout.T @ x is (out, N) @ (N, in) = (out, in), the shape of W.": lambda x, W, dout: x @ dout,
        "db = dout.sum(axis=1) sums over the output features, one value per sample (N,): db has b's shape (out,), "
        "one value per output feature, so sum over the batch, `dout.sum(axis=0)`.": lambda x, W, dout: dout.sum(axis=1),
    },
    points=2,
)

CONV2D_BACKWARD = Problem(
    "conv2d_backward",
    usage="problems.lab08.CONV2D_BACKWARD.check(host=conv_backward_host)",
    spec=conv2d_backward_spec,
    inputs=conv_backward_inputs,
    sizes=[(1, 1, 3, 3, 1, 3, 1, 0), (2, 3, 7, 6, 4, 3, 1, 1), (1, 2, 9, 8, 3, 3, 2, 1)],
    gpu_sizes=[
        (1, 1, 3, 3, 1, 3, 1, 0),
        (2, 3, 7, 6, 4, 3, 1, 1),
        (1, 2, 9, 8, 3, 3, 2, 1),
        (64, 32, 14, 14, 64, 3, 1, 1),
    ],
    reduction=_conv_backward_terms,
    out_names=["dx", "dw", "db"],
    mistakes={
        "dw's elements are in the wrong places: `d.T @ cols` has its columns in the (a, b, c) order of cols, so "
        "reshape it to (F, k, k, C) first, then move C forward: `.reshape(F, k, k, C).transpose(0, 3, 1, 2)`. A "
        "plain reshape to (F, C, k, k) mixes channels and taps.": lambda x, w, dout, stride, pad: _conv_backward_cols(
            x, w, dout, stride, pad, "dw"
        ),
        "dx was computed with the filters flattened in (c, a, b) order (`w.reshape(F, C*k*k)`), but the columns of "
        "cols, and so of dcols, are in (a, b, c) order: use `wmat = w.transpose(0, 2, 3, 1).reshape(F, k*k*C)`, as "
        "the forward does.": lambda x, w, dout, stride, pad: _conv_backward_cols(x, w, dout, stride, pad, "wmat"),
        "dout was reshaped to (N*Ho*Wo, F) without moving F last: `dout.reshape(-1, F)` mixes filters and pixels. "
        "Write `d = dout.transpose(0, 2, 3, 1).reshape(-1, F)` (row r = (n*Ho + i)*Wo + j, as in cols).": (
            lambda x, w, dout, stride, pad: _conv_backward_cols(x, w, dout, stride, pad, "d")
        ),
        "dcols = d @ wmat: d is (N*Ho*Wo, F) and wmat is (F, k*k*C), so d @ wmat is (N*Ho*Wo, k*k*C), the shape of "
        "cols. The forward's `cols @ wmat.T` takes the transpose; its backward does not.": (
            lambda x, w, dout, stride, pad: _conv_backward_cols(x, w, dout, stride, pad, "dcols")
        ),
        "d is dout laid out as (N*Ho*Wo, F): its columns are dout's F channels (F = w.shape[0]), not x's C. "
        "Reshape to (n * ho * wo, f).": lambda x, w, dout, stride, pad: _conv_d_reshaped(x, w, dout, "c"),
        "d has one row per output pixel, N*Ho*Wo rows, with Ho and Wo from dout.shape: the output's Ho x Wo is "
        "not the input's H x W (a k x k window shrinks it unless padded, a stride divides it).": lambda x, w, dout, stride, pad: (
            _conv_d_reshaped(x, w, dout, "hw")
        ),
        "db = d.sum(axis=1) sums over the filters, one value per output pixel: db has one value per filter, (F,), "
        "so sum d over its rows, `d.sum(axis=0)` (or `dout.sum(axis=(0, 2, 3))`).": lambda x, w, dout, stride, pad: (
            dout.transpose(0, 2, 3, 1).reshape(-1, w.shape[0]).sum(axis=1)
        ),
        "dw is a mean over the batch: the weight gradient sums over the batch (and every output pixel), "
        "without dividing by N.": lambda x, w, dout, stride, pad: (
            conv2d_backward_spec(x, w, dout, stride, pad)[1] / dout.shape[0]
        ),
        "db is a mean: the bias gradient sums dout over the batch and every output pixel, "
        "`dout.sum(axis=(0, 2, 3))` (or `d.sum(axis=0)`), without dividing.": lambda x, w, dout, stride, pad: [
            dout.sum(axis=(0, 2, 3), dtype=np.float64) / dout.shape[0],
            dout.mean(axis=(0, 2, 3), dtype=np.float64),
        ],
    },
    points=4,
    given=[ArrayOps.im2col, ArrayOps.col2im],  # the lab's NumPy ops build the columns and fold them back
)
