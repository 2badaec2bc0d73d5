"""The exercises of lessons 07 (convolution) and 08 (backpropagation) as data: what each kernel must compute,
on which inputs, launched how (2-D exercises in blocks of :data:`BLOCK`), and the known mistakes that get a
named hint. Reference answers: :mod:`.answers_05_10`.

They reach the lessons through :mod:`.ex_05_10`'s ``EXERCISES_LIST`` (in lesson order, between 06 and 10),
which also re-exports the specs later lesson cells reuse (``windows``, ``conv_single_spec``, ...). This
module's name does not start with ``ex_``, so :mod:`.problems` does not collect its exercises twice.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..exercises import Budget, Problem, random_arrays
from ..problems import grid_2d, launch_1d
from . import answers_05_10 as _a
from .exercise import Exercise
from .mistakes_07_08 import bias_row_sums, last_row_and_column_unwritten

__all__ = [
    "BLOCK",
    "EXERCISES_07_08",
    "all_filters_spec",
    "conv_single_spec",
    "im2col_spec",
    "pool_back_spec",
    "pool_spec",
    "windows",
]

TPB = _a.TPB  # threads per block, 1-D exercises
K = _a.K  # window size, lesson 07
BLOCK = (16, 8)  # (x, y) threads per block of the 2-D exercises: x along the columns


# --- 07 · convolution ---------------------------------------------------------------------------------


def windows(x: np.ndarray, kk: int) -> np.ndarray:
    """Every kk x kk window of x: shape (Ho, Wo, kk, kk)."""
    return np.lib.stride_tricks.sliding_window_view(x, (kk, kk))


def conv_single_spec(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    """One channel, one filter, no padding: out[i, j] = sum of x[i + a, j + b] * w[a, b]."""
    return np.einsum("ijab,ab->ij", windows(x, w.shape[0]), w).astype(x.dtype)


def im2col_spec(x: np.ndarray) -> np.ndarray:
    """Row i*Wo + j holds the K x K window at (i, j), flattened."""
    v = windows(x, K)
    return v.reshape(v.shape[0] * v.shape[1], K * K).copy()


def pool_spec(x: np.ndarray) -> np.ndarray:
    """2 x 2 max-pool, stride 2 (an odd last row or column is dropped)."""
    ho, wo = x.shape[0] // 2, x.shape[1] // 2
    return x[: 2 * ho, : 2 * wo].reshape(ho, 2, wo, 2).max(axis=(1, 3))


def all_filters_spec(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    """F filters over one channel: out[f, i, j]."""
    return np.einsum("ijab,fab->fij", windows(x, w.shape[1]), w).astype(x.dtype)


def _conv_centred(x: np.ndarray, w: np.ndarray) -> np.ndarray:  # a known mistake: x[i + a - 1, j + b - 1], zero outside
    p = w.shape[0] // 2
    ho, wo = x.shape[0] - w.shape[0] + 1, x.shape[1] - w.shape[1] + 1
    return conv_single_spec(np.pad(x, p), w)[:ho, :wo]


def _conv_last_tap(x: np.ndarray, w: np.ndarray) -> np.ndarray:  # a known mistake: out[i, j] = ... in the loop
    kk = w.shape[0]
    return (windows(x, kk)[:, :, kk - 1, kk - 1] * w[kk - 1, kk - 1]).astype(x.dtype)


def _conv_short_loops(x: np.ndarray, w: np.ndarray) -> np.ndarray:  # a known mistake: range(K - 1)
    w2 = w.copy()
    w2[-1, :] = 0
    w2[:, -1] = 0
    return conv_single_spec(x, w2)


def _im2col_rows_down_columns(x: np.ndarray) -> np.ndarray:  # a known mistake: i = r % Ho, j = r // Ho
    v = windows(x, K)
    return v.transpose(1, 0, 2, 3).reshape(v.shape[0] * v.shape[1], K * K).copy()


def _im2col_taps_transposed(x: np.ndarray) -> np.ndarray:  # a known mistake: a = q % K, b = q // K
    return im2col_spec(x).reshape(-1, K, K).transpose(0, 2, 1).reshape(-1, K * K).copy()


def _pool_stride_1(x: np.ndarray) -> np.ndarray:  # a known mistake: window (i, j) read at x[i, j], not x[2i, 2j]
    ho, wo = x.shape[0] // 2, x.shape[1] // 2
    return windows(x, 2)[:ho, :wo].max(axis=(2, 3))


def _pool_three_of_four(x: np.ndarray) -> list[np.ndarray]:
    """A known mistake: the max over three of the window's four positions (one read twice or left out); each of
    the four possible outputs."""
    ho, wo = x.shape[0] // 2, x.shape[1] // 2
    win = x[: 2 * ho, : 2 * wo].reshape(ho, 2, wo, 2).transpose(0, 2, 1, 3).reshape(ho, wo, 4)
    return [np.delete(win, k, axis=2).max(axis=2) for k in range(4)]


def _lesson07() -> list[Exercise]:
    def launch(x: Any, *rest: Any) -> tuple[Any, Any]:  # one thread per output element (the last argument)
        out = rest[-1]
        return grid_2d(out.shape[-2], out.shape[-1], BLOCK)

    return [
        Exercise(
            "07",
            "conv2d_single",
            Problem(
                "conv2d_single_kernel",
                conv_single_spec,
                lambda s, rng: random_arrays(rng, s, (K, K)),
                # (5, 40): outputs 38 wide on 8 rows of threads, so a kernel with x along the rows is told so
                # (5, 7) first: a 1 x 1 output left unwritten reads as a reduction that never stored
                sizes=[(5, 7), (3, 3), (12, 9), (20, 19), (5, 40)],
                launch=launch,
                ptx="auto",  # a GPU must compile it too (NVVM, ptxas; sm_75), for the first case's argument types
                reduction=K * K,  # each output is a sum of K*K products
                mistakes={
                    "the filter is flipped (w[K-1-a, K-1-b]): deep learning's convolution uses "
                    "w[a, b] as it is.": lambda x, w: conv_single_spec(x, w[::-1, ::-1].copy()),
                    "the filter is transposed: w's two indices are swapped (w[b, a]); tap (a, b) multiplies "
                    "x[i + a, j + b] by w[a, b].": lambda x, w: conv_single_spec(x, w.T.copy()),
                    "the window is centred on (i, j) with zero padding (x[i + a - 1, j + b - 1]); this exercise "
                    "has no padding: the window's top-left corner is (i, j), so read x[i + a, j + b].": _conv_centred,
                    "each output is only the product of the last tap: `out[i, j] = ...` inside the loop overwrites. "
                    "Add the products into a float32 accumulator (acc += ...) and write out[i, j] once, "
                    "after the loops.": _conv_last_tap,
                    "the loops over the taps stop one short (`range(K - 1)`?): the last row and column of the "
                    "window are missing. Loop with range(K) (or range(w.shape[0])).": _conv_short_loops,
                    "the last row and column of out were never written: the guard stops one short of the output "
                    "size. A valid window fits W - K + 1 times across (and H - K + 1 down), so guard on out's own "
                    "shape, not on x's shape minus K.": last_row_and_column_unwritten(conv_single_spec),
                },
                budget=Budget(sectors={"x": 2.0, "out": 2.0}),  # x along the columns: `j, i = cuda.grid(2)`
            ),
            _a.conv2d_single_kernel,
        ),
        Exercise(
            "07",
            "im2col_single",
            Problem(
                "im2col_single_kernel",
                im2col_spec,
                lambda s, rng: random_arrays(rng, s),
                sizes=[(4, 6), (3, 3), (9, 7), (13, 10)],  # (4, 6) first: at (3, 3) Wo = W - K is 0 (a division)
                launch=launch,
                ptx="auto",
                out_names=["cols"],
                mistakes={
                    "the rows of cols go down the columns of the output (i = r % Ho, j = r // Ho); row r is "
                    "output (i, j) with r = i * Wo + j: i = r // Wo, j = r % Wo.": _im2col_rows_down_columns,
                    "the taps of a row are transposed (a = q % K, b = q // K); column q is tap (a, b) with "
                    "q = a * K + b: a = q // K, b = q % K.": _im2col_taps_transposed,
                },
                budget=Budget(sectors={"cols": 2.0}),
            ),
            _a.im2col_single_kernel,
        ),  # writes of cols coalesced
        Exercise(
            "07",
            "maxpool2x2",
            Problem(
                "maxpool2x2_kernel",
                pool_spec,
                lambda s, rng: random_arrays(rng, s),
                # (4, 6) first: a 1 x 1 output left unwritten reads as a reduction that never stored
                sizes=[(4, 6), (2, 2), (7, 9), (17, 34)],
                launch=launch,
                ptx="auto",
                mistakes={
                    "the windows overlap: window (i, j) starts at (i, j); with stride 2 it starts at "
                    "(2 * i, 2 * j), so read x[2 * i + a, 2 * j + b].": _pool_stride_1,
                    "the maximum is 0 where a window is all negative: it started from 0. Start from the "
                    "window's first value, x[2 * i, 2 * j].": lambda x: np.maximum(pool_spec(x), 0),
                    "one of the window's four positions is never read (another one is read twice): the window "
                    "covers rows 2 * i and 2 * i + 1 and columns 2 * j and 2 * j + 1, four pairs in all.": (
                        _pool_three_of_four
                    ),
                    "you averaged the window; a max-pool keeps its largest value.": lambda x: (
                        x[: x.shape[0] // 2 * 2, : x.shape[1] // 2 * 2]
                        .reshape(x.shape[0] // 2, 2, x.shape[1] // 2, 2)
                        .mean(axis=(1, 3))
                    ),
                },
            ),
            _a.maxpool2x2_kernel,
        ),
        Exercise(
            "07",
            "conv2d_all_filters",
            Problem(
                "conv2d_all_filters_kernel",
                all_filters_spec,
                lambda s, rng: random_arrays(rng, s[1:], (s[0], K, K)),
                # (F, H, W); (4, 6, 9) first (a 1 x 1 output left unwritten reads as a reduction); 40 wide: x along
                # the rows is seen
                sizes=[(4, 6, 9), (1, 3, 3), (5, 11, 8), (3, 5, 40)],
                launch=launch,
                ptx="auto",
                reduction=K * K,
                mistakes={
                    "out[f] holds the sum over filters 0 to f: the accumulator was not reset for each filter, so "
                    "each filter's sum starts where the previous one ended. Each filter needs its own sum, started "
                    "afresh inside the loop over the filters.": lambda x, w: np.cumsum(all_filters_spec(x, w), axis=0),
                    "the last row and column of every filter's output were never written: the guard stops one "
                    "short of the output size. Guard on out's own shape (out.shape[1] rows, out.shape[2] columns), "
                    "not on x's shape minus K.": last_row_and_column_unwritten(all_filters_spec),
                },
                budget=Budget(reads_per_element={"x": K * K}),
            ),
            _a.conv2d_all_filters_kernel,
        ),
    ]


# --- 08 · backpropagation -----------------------------------------------------------------------------


def _relu_inputs(n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    dout, x = random_arrays(rng, n, n)
    x[0] = abs(x[0]) + 0.5  # y[0] > 0: at n = 1, passing dout everywhere and an inverted mask differ
    return dout, np.maximum(x, 0)  # y = relu(x): about half zeros


def _pool_back_inputs(s: tuple[int, int], rng: np.random.Generator) -> tuple[np.ndarray, ...]:
    h, w = s
    dout = rng.standard_normal((h // 2, w // 2)).astype(np.float32)
    arg = rng.integers(0, 4, size=(h // 2, w // 2)).astype(np.int32)
    return dout, arg, np.zeros((h, w), np.float32)  # the last array only gives dx its shape


def pool_back_spec(dout: np.ndarray, arg: np.ndarray, like: np.ndarray) -> np.ndarray:
    """dx: each window's dout goes to the input pixel that won it (arg = 2 * row + column within the window)."""
    dx = np.zeros_like(like)
    oi, oj = np.indices(dout.shape)
    dx[2 * oi + arg // 2, 2 * oj + arg % 2] = dout
    return dx


def _spread_evenly(dout: np.ndarray, arg: np.ndarray, like: np.ndarray) -> np.ndarray:  # a known mistake
    dx = np.zeros_like(like)
    ho, wo = dout.shape
    dx[: 2 * ho, : 2 * wo] = np.repeat(np.repeat(dout / 4, 2, axis=0), 2, axis=1)
    return dx


def _odd_edge_unwritten(dout: np.ndarray, arg: np.ndarray, like: np.ndarray) -> np.ndarray:  # a known mistake
    dx = pool_back_spec(dout, arg, like)
    dx[2 * dout.shape[0] :, :] = np.nan  # a last odd row or column: in no window, and never written
    dx[:, 2 * dout.shape[1] :] = np.nan
    return dx


def _copied_to_window(dout: np.ndarray, arg: np.ndarray, like: np.ndarray) -> np.ndarray:  # a known mistake
    return _spread_evenly(dout * 4, arg, like)


def _arg_row_column_swapped(dout: np.ndarray, arg: np.ndarray, like: np.ndarray) -> np.ndarray:  # a known mistake
    return pool_back_spec(dout, (arg % 2) * 2 + arg // 2, like)


_ONE_SAMPLE = (
    "{what} only one sample's term, {which}: {why} The gradient is a sum over the batch: add every n into a "
    "float32 accumulator (acc += ...) and write once, after the loop."
)


def _lesson08() -> list[Exercise]:
    return [
        Exercise(
            "08",
            "bias_grad",
            Problem(
                "bias_grad_kernel",
                lambda dout: dout.sum(axis=0),
                lambda s, rng: random_arrays(rng, s),
                sizes=[(1, 1), (5, 3), (33, 70), (8, 200)],  # (batch, features)
                launch=launch_1d(TPB),
                ptx="auto",
                out_names=["db"],
                reduction=lambda dout: dout.shape[0],
                mistakes={
                    _ONE_SAMPLE.format(
                        what="db holds", which="the first row of dout", why="the loop over the batch is missing."
                    ): lambda dout: dout[0],
                    _ONE_SAMPLE.format(
                        what="db holds",
                        which="the last row of dout",
                        why="`db[o] = dout[n, o]` in the loop overwrites.",
                    ): lambda dout: dout[-1],
                    "db is the mean over the batch; the bias gradient is the sum (dout already carries the loss's "
                    "1/N, if it has one): do not divide.": lambda dout: dout.mean(axis=0),
                    "the loop over the batch stops one short (`range(N - 1)`?): the last sample's dout is missing "
                    "from every db[o]. Loop over all N rows of dout.": lambda dout: dout[:-1].sum(axis=0),
                    "db[o] summed row o of dout, across the features: db is a column sum, over the batch. Thread o "
                    "adds the o-th element of every sample's row.": bias_row_sums,
                },
                budget=Budget(sectors={"dout": 2.0}),
            ),
            _a.bias_grad_kernel,
        ),
        Exercise(
            "08",
            "linear_weight_grad",
            Problem(
                "linear_weight_grad_kernel",
                lambda dout, x: dout.T @ x,
                lambda s, rng: random_arrays(rng, (s[0], s[1]), (s[0], s[2])),
                sizes=[(1, 1, 1), (4, 3, 5), (7, 10, 19), (16, 9, 33)],  # (batch, out, in)
                launch=lambda dout, x, dw: grid_2d(*dw.shape, BLOCK),
                ptx="auto",
                out_names=["dw"],
                reduction=lambda dout, x: dout.shape[0],
                mistakes={
                    _ONE_SAMPLE.format(
                        what="dw holds", which="dout[0, i] * x[0, j]", why="the loop over the batch is missing."
                    ): lambda dout, x: np.outer(dout[0], x[0]),
                    _ONE_SAMPLE.format(
                        what="dw holds",
                        which="the last sample's dout[n, i] * x[n, j]",
                        why="`dw[i, j] = ...` in the loop overwrites.",
                    ): lambda dout, x: np.outer(dout[-1], x[-1]),
                    "dw is the mean over the batch; the weight gradient is the sum (dout already carries the loss's "
                    "1/N, if it has one): do not divide.": lambda dout, x: dout.T @ x / dout.shape[0],
                },
            ),
            _a.linear_weight_grad_kernel,
        ),
        Exercise(
            "08",
            "relu_backward",
            Problem(
                "relu_backward_kernel",
                lambda dout, y: np.where(y > 0, dout, 0).astype(dout.dtype),
                _relu_inputs,
                sizes=[1, 100, 300, 1000],
                launch=launch_1d(TPB),
                ptx="auto",
                out_names=["dx"],
                mistakes={
                    "dx equals dout everywhere: ReLU blocks the gradient where y == 0.": lambda dout, y: dout,
                    "the mask is inverted: dout passed where y == 0 and was blocked where y > 0. Pass it where "
                    "y[i] > 0.": lambda dout, y: np.where(y > 0, 0, dout).astype(dout.dtype),
                    "the gradient was multiplied by y: ReLU's derivative is 1 where y > 0 (and 0 elsewhere), "
                    "not y.": lambda dout, y: dout * y,
                    "dx was never written where y <= 0: dx is not zeroed for you, so the blocked elements need "
                    "their 0 written too, not only the passed ones.": lambda dout, y: np.where(y > 0, dout, np.nan),
                },
            ),
            _a.relu_backward_kernel,
        ),
        Exercise(
            "08",
            "maxpool2x2_backward",
            Problem(
                "maxpool2x2_backward_kernel",
                pool_back_spec,
                _pool_back_inputs,
                sizes=[(2, 2), (4, 6), (7, 9), (17, 34)],
                args=lambda ins, outs: (ins[0], ins[1], outs[0]),  # the kernel gets (dout, arg, dx)
                launch=lambda dout, arg, dx: grid_2d(*dx.shape, BLOCK),
                ptx="auto",
                out_names=["dx"],
                mistakes={
                    "the gradient was spread evenly over the window: only the winner (arg) reached the output, "
                    "so only it gets dout.": _spread_evenly,
                    "every pixel of a window got its dout: only the winner (arg) reached the output, so only it "
                    "gets dout; the other three get 0.": _copied_to_window,
                    "arg was decoded with row and column swapped: arg = 2 * row + column within the window, so "
                    "pixel (i, j) won where arg == (i % 2) * 2 + j % 2.": _arg_row_column_swapped,
                    "the pixels of a last odd row or column were never written: they belong to no window, so "
                    "nothing routes a gradient to them, but dx is not zeroed for you. Every thread of dx writes "
                    "its pixel: 0 when its window (i // 2, j // 2) is past the end of dout.": _odd_edge_unwritten,
                },
            ),
            _a.maxpool2x2_backward_kernel,
        ),
    ]


EXERCISES_07_08: list[Exercise] = _lesson07() + _lesson08()
