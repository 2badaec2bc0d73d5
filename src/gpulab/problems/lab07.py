"""Lab 07 · convolution: 1-D, 2-D single channel with a dilated filter, batched with channels/stride/padding, max-pooling,
im2col and a convolution as im2col + matmul.

Every sum is judged against a float64 reference within the float32 rounding bound of its number of
terms (``C * K * K`` products plus the bias); the 2-D kernels and the batched conv2d carry a coalescing budget.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..exercises import Budget, Problem, random_arrays
from ..kernels._launch import conv_out_size
from ..kernels.matmul import matmul
from .lab07_im2col import im2col_host_mistakes
from ._common import grid_2d, launch_1d, launch_2d

__all__ = [
    "CONV1D",
    "CONV2D",
    "CONV2D_BLOCK",
    "CONV2D_IM2COL",
    "CONV2D_SINGLE",
    "IM2COL",
    "IM2COL_BLOCK",
    "MAXPOOL",
    "TPB",
    "conv1d_spec",
    "conv2d_spec",
    "conv_inputs",
    "dilated_inputs",
    "dilated_spec",
    "im2col_launch",
    "im2col_spec",
    "maxpool_spec",
]

TPB = 64  # threads per block for the 1-D launches
CONV2D_BLOCK = (16, 8)  # x: output columns, y: output rows
IM2COL_BLOCK = (16, 16)  # x: columns of cols (taps), y: rows of cols (output pixels)


def conv1d_spec(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    """'valid' cross-correlation: ``out[i] = sum_k x[i + k] * w[k]``, in the inputs' precision."""
    return np.lib.stride_tricks.sliding_window_view(x, w.shape[0]) @ w


def conv2d_spec(x: np.ndarray, w: np.ndarray, b: np.ndarray, stride: int = 1, pad: int = 0) -> np.ndarray:
    """The convolution layer in the inputs' precision: x (N, C, H, W), w (F, C, K, K), b (F,)."""
    n, c, h, wd = x.shape
    f, _, k, _ = w.shape
    xp_ = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    ho, wo = conv_out_size(h, k, stride, pad), conv_out_size(wd, k, stride, pad)
    out = np.zeros((n, f, ho, wo), dtype=np.result_type(x, w, b)) + b[None, :, None, None]
    for a in range(k):
        for d in range(k):
            patch = xp_[:, :, a : a + stride * ho : stride, d : d + stride * wo : stride]  # (N, C, Ho, Wo)
            out += np.einsum("nchw,fc->nfhw", patch, w[:, :, a, d])
    return out


def dilated_spec(x: np.ndarray, w: np.ndarray, dilation: int) -> np.ndarray:
    """A dilated 'valid' cross-correlation of one channel: ``out[i, j] = sum over a, b of
    x[i + dilation*a, j + dilation*b] * w[a, b]``, out of shape ``(H - dilation*(K-1), W - dilation*(K-1))``."""
    k = w.shape[0]
    ho, wo = x.shape[0] - dilation * (k - 1), x.shape[1] - dilation * (k - 1)
    out = np.zeros((ho, wo), dtype=np.result_type(x, w))
    for a in range(k):
        for b in range(k):
            out += x[dilation * a : dilation * a + ho, dilation * b : dilation * b + wo] * w[a, b]
    return out


def dilated_inputs(size: tuple, rng: np.random.Generator) -> tuple:
    """size = (H, W, K, dilation) -> x (H, W), w (K, K), dilation."""
    h, wd, k, dilation = size
    return (*random_arrays(rng, (h, wd), (k, k)), dilation)


def _dilated_as_adjacent(x: np.ndarray, w: np.ndarray, dilation: int) -> np.ndarray:
    """A known mistake, lesson 07's kernel: the taps adjacent whatever the dilation, in the dilated output's shape."""
    if dilation == 1 or w.shape[0] == 1:
        raise ValueError("the same as the right answer without dilation")
    ho, wo = x.shape[0] - dilation * (w.shape[0] - 1), x.shape[1] - dilation * (w.shape[0] - 1)
    return dilated_spec(x, w, 1)[:ho, :wo]


def _dilated_one_axis(x: np.ndarray, w: np.ndarray, dilation: int) -> list[np.ndarray]:
    """A known mistake: the rows' offsets dilated and the columns' not, or the other way round."""
    if dilation == 1 or w.shape[0] == 1:
        raise ValueError("the same as the right answer without dilation")
    k = w.shape[0]
    ho, wo = x.shape[0] - dilation * (k - 1), x.shape[1] - dilation * (k - 1)
    outs = []
    for dr, dc in ((dilation, 1), (1, dilation)):
        out = np.zeros((ho, wo), dtype=np.result_type(x, w))
        for a in range(k):
            for b in range(k):
                out += x[dr * a : dr * a + ho, dc * b : dc * b + wo] * w[a, b]
        outs.append(out)
    return outs


def _dilated_short_loops(x: np.ndarray, w: np.ndarray, dilation: int) -> np.ndarray:
    """A known mistake: the loops over the taps stop one short (`range(K - 1)`), in the right output's shape."""
    k = w.shape[0]
    ho, wo = x.shape[0] - dilation * (k - 1), x.shape[1] - dilation * (k - 1)
    if k == 1:
        return np.zeros((ho, wo), dtype=np.result_type(x, w))
    return dilated_spec(x, w[:-1, :-1].copy(), dilation)[:ho, :wo]


def conv_inputs(size: tuple, rng: np.random.Generator) -> tuple:
    """size = (N, C, H, W, F, K, stride, pad) -> x, w, b, stride, pad."""
    n, c, h, w, f, k, stride, pad = size
    x, wt, b = random_arrays(rng, (n, c, h, w), (f, c, k, k), (f,))
    return x, wt, b, stride, pad


def maxpool_spec(x: np.ndarray, k: int, stride: int) -> np.ndarray:
    """Max over each k x k window with the given stride (no padding)."""
    n, c, h, w = x.shape
    ho, wo = conv_out_size(h, k, stride), conv_out_size(w, k, stride)
    out = np.full((n, c, ho, wo), -np.inf, dtype=x.dtype)
    for a in range(k):
        for b in range(k):
            out = np.maximum(out, x[:, :, a : a + stride * ho : stride, b : b + stride * wo : stride])
    return out


def im2col_spec(x: np.ndarray, k: int, stride: int, pad: int) -> np.ndarray:
    """cols[(n*Ho + i)*Wo + j, (c*k + a)*k + d] = xpad[n, c, i*stride + a, j*stride + d]."""
    n, c, h, w = x.shape
    ho, wo = conv_out_size(h, k, stride, pad), conv_out_size(w, k, stride, pad)
    xp_ = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    cols = np.empty((n, ho, wo, c, k, k), dtype=x.dtype)
    for a in range(k):
        for d in range(k):
            cols[:, :, :, :, a, d] = xp_[:, :, a : a + stride * ho : stride, d : d + stride * wo : stride].transpose(
                0, 2, 3, 1
            )
    return cols.reshape(n * ho * wo, c * k * k)


def im2col_launch(x: Any, k: int, stride: int, pad: int, cols: Any) -> tuple[Any, Any]:
    """One thread per element of ``cols``: x along its columns (taps), y along its rows (pixels)."""
    return grid_2d(cols.shape[0], cols.shape[1], IM2COL_BLOCK)


_CONV_SIZES = [(1, 1, 3, 3, 1, 3, 1, 0), (2, 3, 7, 6, 4, 3, 1, 1), (1, 2, 9, 8, 3, 3, 2, 1)]
_CONV_GPU = (64, 16, 32, 32, 32, 3, 1, 1)
# out (1, 1, 32, 8): 32 rows, so a warp of the 1-D launch spans 4 rows with j fastest (4 sectors per write),
# but 32 rows, one sector each, with i fastest (8x): the coalescing budget's traced case
_CONV_TALL = (1, 1, 34, 10, 1, 3, 1, 0)


def _conv_window_at(x: np.ndarray, w: np.ndarray, b: np.ndarray, stride: int, pad: int, first: int) -> np.ndarray:
    """A known mistake's output: output (i, j)'s window starts at (i*stride + first, j*stride + first) (the right
    start is first = -pad), taps outside x read 0; the output keeps the shape that ``pad`` gives it."""
    n, c, h, wd = x.shape
    k = w.shape[2]
    ho, wo = conv_out_size(h, k, stride, pad), conv_out_size(wd, k, stride, pad)
    edge = abs(first) + k  # zeros around x, enough for any window start
    xp_ = np.pad(x, ((0, 0), (0, 0), (edge, edge), (edge, edge)))[:, :, edge + first :, edge + first :]
    return conv2d_spec(xp_, w, b, stride, 0)[:, :, :ho, :wo]


def _conv_stride_ignored(x: np.ndarray, w: np.ndarray, b: np.ndarray, stride: int, pad: int) -> np.ndarray:
    """A known mistake: the window of output (i, j) starts at (i - pad, j - pad) whatever the stride."""
    k = w.shape[2]
    ho, wo = conv_out_size(x.shape[2], k, stride, pad), conv_out_size(x.shape[3], k, stride, pad)
    return conv2d_spec(x, w, b, 1, pad)[:, :, :ho, :wo]


def _conv_low_taps_wrapped(x: np.ndarray, w: np.ndarray, b: np.ndarray, stride: int, pad: int) -> np.ndarray:
    """A known mistake: taps above or left of x are not skipped, and a negative index wraps around to the far edge
    (Python's indexing, which the simulator follows): the padding on the low sides holds x's last rows/columns."""
    if not pad or pad > min(x.shape[2], x.shape[3]):
        raise ValueError("no low-side taps outside x, or more than a wrap-around")
    n, c, h, wd = x.shape
    k = w.shape[2]
    ho, wo = conv_out_size(h, k, stride, pad), conv_out_size(wd, k, stride, pad)
    rows = np.concatenate([x[:, :, h - pad :], x, np.zeros((n, c, pad, wd), x.dtype)], axis=2)
    xw = np.concatenate([rows[..., wd - pad :], rows, np.zeros((n, c, h + 2 * pad, pad), x.dtype)], axis=3)
    return conv2d_spec(xw, w, b, stride, 0)[:, :, :ho, :wo]


def _maxpool_mistake(x: np.ndarray, k: int, stride: int, taps: int, step: int) -> np.ndarray:
    """A known mistake of max-pooling: windows of ``taps x taps`` (k - 1: a loop one short) starting at
    ``(i*step, j*step)`` (step 1: the stride forgotten), in the output shape of the right one."""
    n, c, h, w = x.shape
    ho, wo = conv_out_size(h, k, stride), conv_out_size(w, k, stride)
    out = np.full((n, c, ho, wo), -np.inf, dtype=x.dtype)
    for a in range(max(taps, 1)):
        for d in range(max(taps, 1)):
            out = np.maximum(out, x[:, :, a : a + step * ho : step, d : d + step * wo : step][:, :, :ho, :wo])
    return out


def _conv_terms(x: np.ndarray, w: np.ndarray, *_: Any) -> int:
    return w.shape[1] * w.shape[2] * w.shape[3] + 1  # C * K * K products and the bias


CONV1D = Problem(
    "lab07.conv1d",
    ptx="auto",  # a GPU must accept it: compiled for the types of the first case's arguments
    spec=conv1d_spec,
    inputs=lambda size, rng: random_arrays(rng, size[0], size[1]),  # size = (n, K)
    sizes=[(1, 1), (9, 3), (100, 5), (250, 7)],
    gpu_sizes=[(1, 1), (9, 3), (100, 5), (1 << 20, 9)],
    threads=[TPB, 32],
    reduction=lambda x, w: w.shape[0],
    mistakes={
        "you flipped the filter (w[K - 1 - k]): in deep learning the filter slides unflipped, "
        "out[i] = sum_k x[i + k] * w[k].": lambda x, w: np.convolve(x, w, mode="valid").astype(np.float32),
        "the last tap is missing: out[i] sums only w[0] .. w[K - 2]. Loop over all K taps, `for k in range(K)` "
        "with K = w.shape[0] (range stops before its end, so `range(K - 1)` drops one).": lambda x, w: (
            conv1d_spec(x, w)[: x.size - w.size + 1] - x[w.size - 1 :] * w[-1]
        ),
    },
    points=2,
)

CONV2D_SINGLE = Problem(
    "lab07.conv2d_single",
    ptx="auto",  # a GPU must accept it: compiled for the types of the first case's arguments
    spec=dilated_spec,
    inputs=dilated_inputs,
    sizes=[(1, 1, 1, 1), (5, 9, 3, 2), (20, 13, 3, 2), (15, 24, 5, 1), (17, 26, 3, 3)],
    gpu_sizes=[(1, 1, 1, 1), (5, 9, 3, 2), (20, 13, 3, 2), (17, 26, 3, 3), (2000, 3000, 5, 2)],
    launch=launch_2d(CONV2D_BLOCK),  # grid (ceil(Wo / 16), ceil(Ho / 8)) over out
    reduction=lambda x, w, dilation: w.size,
    budget=Budget(sectors={"x": 2.0, "out": 2.0}),
    mistakes={
        "this is lesson 07's conv2d_single, whose taps are neighbours, x[i + a, j + b]. This lab's filter is "
        "dilated: tap (a, b) reads x[i + dilation*a, j + dilation*b], the taps `dilation` pixels apart.": (
            _dilated_as_adjacent
        ),
        "the dilation is applied to one axis only: tap (a, b) reads x[i + dilation*a, j + dilation*b], both offsets "
        "multiplied by the dilation.": _dilated_one_axis,
        "you flipped the filter (w[K-1-a, K-1-b]): in deep learning the filter slides unflipped, "
        "out[i, j] = sum over a, b of x[i + dilation*a, j + dilation*b] * w[a, b].": lambda x, w, dilation: (
            dilated_spec(x, w[::-1, ::-1].copy(), dilation)
        ),
        "the last row and column of taps are missing: loop over all K of each, `for a in range(K)` and "
        "`for b in range(K)` with K = w.shape[0] (`range(K - 1)` stops one short).": _dilated_short_loops,
    },
    points=2,
)

CONV2D = Problem(
    "lab07.conv2d",
    ptx="auto",  # a GPU must accept it: compiled for the types of the first case's arguments
    spec=conv2d_spec,
    inputs=conv_inputs,
    sizes=_CONV_SIZES + [(2, 1, 6, 5, 2, 5, 1, 2), _CONV_TALL],
    gpu_sizes=_CONV_SIZES + [_CONV_GPU],
    launch=launch_1d(TPB),  # one thread per element of out
    reduction=_conv_terms,
    # out's writes only: x's reads are strided by design when stride > 1 (2.65x the ideal traffic for the solution
    # at stride 3), and a check with other sizes (the hidden one) traces its largest case instead of _CONV_TALL
    budget=Budget(
        sectors={"out": 2.0},
        size=_CONV_TALL,
        hint="neighbouring threads (t, t + 1) should write neighbouring elements of out's last axis: decode t in C "
        "order with j fastest, j = t % WO, i = (t // WO) % HO, f = (t // (HO * WO)) % F, n = t // (F * HO * WO) "
        "(i = t % HO puts a warp's writes WO elements apart, one memory sector each).",
    ),
    mistakes={
        "padding ignored: the taps must start at i*stride - pad (and skip rows/columns outside x).": lambda x, w, b, stride, pad: (
            _conv_window_at(x, w, b, stride, pad, 0) if pad else np.full(1, np.nan)  # pad 0: no such mistake
        ),
        "the padding was added, not subtracted: the zeros lie above and left of x, so output (i, j)'s window "
        "starts pad rows above its stride position, at i*stride - pad.": lambda x, w, b, stride, pad: (
            _conv_window_at(x, w, b, stride, pad, pad) if pad else np.full(1, np.nan)
        ),
        "the window is shifted by one: output (i, j)'s first tap is x[n, c, i*stride - pad, j*stride - pad] "
        "(row i*stride + a - pad for tap a), with no + 1.": lambda x, w, b, stride, pad: _conv_window_at(
            x, w, b, stride, pad, -pad + 1
        ),
        "the stride is ignored: output (i, j)'s window starts at row i*stride - pad and column j*stride - pad.": (
            _conv_stride_ignored
        ),
        "the filter is flipped (w[f, c, K-1-a, K-1-d]): in deep learning the filter slides unflipped, "
        "tap (a, d) multiplies w[f, c, a, d].": lambda x, w, b, stride, pad: conv2d_spec(
            x, w[:, :, ::-1, ::-1].copy(), b, stride, pad
        ),
        "the bias is missing: start each output's sum from b[f].": lambda x, w, b, stride, pad: conv2d_spec(
            x, w, np.zeros_like(b), stride, pad
        ),
        "the bias was added once per input channel (inside the loop over c): add b[f] once per output, before or "
        "after the loops.": lambda x, w, b, stride, pad: (
            conv2d_spec(x, w, b * x.shape[1], stride, pad) if x.shape[1] > 1 else np.full(1, np.nan)
        ),
        "taps above or left of x were read, not skipped: the guard must test both sides, `0 <= r < H and "
        "0 <= q < W`, for the tap's input row r and column q (with padding, r or q is negative above or left of "
        "x). (A negative index "
        "wraps around to x's last rows or columns here, as in Python; on a GPU it reads outside x.)": (
            _conv_low_taps_wrapped
        ),
    },
    points=3,
)

MAXPOOL = Problem(
    "lab07.maxpool",
    ptx="auto",  # a GPU must accept it: compiled for the types of the first case's arguments
    spec=maxpool_spec,
    inputs=lambda size, rng: (*random_arrays(rng, size[:4]), size[4], size[5]),  # size = (N, C, H, W, k, stride)
    sizes=[(1, 1, 2, 2, 2, 2), (2, 3, 7, 9, 2, 2), (1, 2, 9, 8, 3, 2), (2, 2, 6, 6, 3, 3)],
    gpu_sizes=[(1, 1, 2, 2, 2, 2), (2, 3, 7, 9, 2, 2), (1, 2, 9, 8, 3, 2), (128, 32, 28, 28, 2, 2)],
    launch=launch_1d(TPB),
    mistakes={
        "the maximum starts at 0: windows with only negative numbers must give a negative maximum.": lambda x, k, stride: (
            np.maximum(maxpool_spec(x, k, stride), 0)
        ),
        "the window is one row and one column short: loop over all k of each, `for a in range(k)` and "
        "`for b in range(k)` (`range(k - 1)` stops one short).": lambda x, k, stride: _maxpool_mistake(
            x, k, stride, k - 1, stride
        ),
        "the stride is ignored: window (i, j) starts at row i*stride and column j*stride of x, not at (i, j).": (
            lambda x, k, stride: (
                [  # the loop's windows at (i, j), the running maximum started there or at (i*stride, j*stride)
                    _maxpool_mistake(x, k, stride, k, 1),
                    np.maximum(_maxpool_mistake(x, k, stride, k, 1), _maxpool_mistake(x, k, stride, 1, stride)),
                ]
                if stride > 1
                else np.full(1, np.nan)
            )
        ),
    },
    points=2,
)


def _im2col_padding_unwritten(x: np.ndarray, k: int, stride: int, pad: int) -> np.ndarray:
    """A known mistake: only the taps inside x were written; the padding's stay as the check's fill (nan)."""
    if not pad:
        return np.full(1, np.nan)  # no padding: no such mistake
    cols = im2col_spec(x, k, stride, pad)
    cols[im2col_spec(np.ones_like(x), k, stride, pad) == 0] = np.nan
    return cols


IM2COL = Problem(
    "lab07.im2col",
    ptx="auto",  # a GPU must accept it: compiled for the types of the first case's arguments
    spec=im2col_spec,
    inputs=lambda size, rng: (*random_arrays(rng, size[:4]), *size[4:]),  # size = (N, C, H, W, k, stride, pad)
    sizes=[(1, 1, 3, 3, 3, 1, 0), (2, 3, 7, 6, 3, 1, 1), (1, 2, 9, 8, 3, 2, 1)],
    gpu_sizes=[(1, 1, 3, 3, 3, 1, 0), (2, 3, 7, 6, 3, 1, 1), (1, 2, 9, 8, 3, 2, 1), (64, 16, 32, 32, 3, 1, 1)],
    launch=im2col_launch,
    budget=Budget(sectors={"cols": 2.0}),  # neighbouring threads write neighbouring taps of a row
    mistakes={
        "the columns are in the library's order, q = (a*k + d)*C + c (channels fastest, as in lesson 07's "
        "picture); this lab's is q = (c*k + a)*k + d (channel slowest), so that w.reshape(F, C*k*k) matches.": (
            lambda x, k, stride, pad: (
                im2col_spec(x, k, stride, pad)
                .reshape(-1, x.shape[1], k, k)
                .transpose(0, 2, 3, 1)
                .reshape(-1, x.shape[1] * k * k)
                if x.shape[1] > 1
                else np.full(1, np.nan)  # one channel: both orders agree
            )
        ),
        "the taps that fall in the padding were never written: cols is not zeroed for you, so each thread writes "
        "its element, 0 where the tap's input row or column lies outside x.": _im2col_padding_unwritten,
        "a tap's row and column offsets are swapped: with q = (c*k + a)*k + d, the column offset d varies fastest "
        "(the remainder of q by k), then the row offset a, then the channel c (the quotient of q by k*k).": lambda x, k, stride, pad: (
            im2col_spec(x, k, stride, pad)
            .reshape(-1, x.shape[1], k, k)
            .transpose(0, 1, 3, 2)
            .reshape(-1, x.shape[1] * k * k)
        ),
    },
    points=2,
)

CONV2D_IM2COL = Problem(
    "conv2d_im2col",
    usage="problems.lab07.CONV2D_IM2COL.check(host=conv2d_im2col)",
    spec=conv2d_spec,
    inputs=conv_inputs,
    sizes=_CONV_SIZES,
    gpu_sizes=_CONV_SIZES + [_CONV_GPU],
    reduction=_conv_terms,
    mistakes=im2col_host_mistakes(conv2d_spec, im2col_spec),
    points=3,
    given=[matmul],  # the lab's given matmul multiplies the columns by the weights
)
