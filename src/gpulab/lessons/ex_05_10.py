"""The exercises of lessons 05-10 as data: what each kernel must compute, on which inputs, launched how,
the known mistakes that get a named hint, and the memory budgets. Reference answers: :mod:`.answers_05_10`.

A lesson checks one with ``lessons.check("05", "block_max", block_max_kernel)``. The specs that later
cells of a lesson reuse (``windows``, ``conv_single_spec``, ...) are importable from here.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ..exercises import Budget, Problem, random_arrays
from ..problems import grid_2d, launch_1d, pad_to_blocks
from . import answers_05_10 as _a
from .elementwise import run_elementwise
from .exercise import Exercise

__all__ = [
    "BLOCK",
    "EXERCISES_LIST",
    "all_filters_spec",
    "block_max_spec",
    "block_scan_spec",
    "conv_single_spec",
    "im2col_spec",
    "pair_sums_spec",
    "pool_back_spec",
    "pool_spec",
    "windows",
]

TPB = _a.TPB  # threads per block, 1-D exercises
K = _a.K  # window size, lesson 07
BLOCK = (16, 8)  # (x, y) threads per block of the 2-D exercises: x along the columns


# --- 05 · reductions, atomics, scans ------------------------------------------------------------------


def block_max_spec(x: np.ndarray) -> np.ndarray:
    """The maximum of each block of TPB elements (the padding, -inf, never wins)."""
    return pad_to_blocks(x, TPB, -np.inf, np.float32).max(axis=1)


def pair_sums_spec(x: np.ndarray) -> np.ndarray:
    """The sum of each block of 2 * TPB elements."""
    return pad_to_blocks(x, 2 * TPB).sum(axis=1, dtype=x.dtype)


def block_scan_spec(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The inclusive scan within each block of TPB elements, and each block's total."""
    per_block = pad_to_blocks(x, TPB, 0, np.float64)
    return (np.cumsum(per_block, axis=1).ravel()[: x.size].astype(np.float32), per_block.sum(axis=1).astype(np.float32))


def _exclusive_scan(x: np.ndarray) -> np.ndarray:  # a known mistake: out[i] without x[i]
    return block_scan_spec(x)[0] - x


def _lesson05() -> list[Exercise]:
    return [
        Exercise(
            "05",
            "dot_atomic",
            Problem(
                "dot_atomic_kernel",
                lambda a, b: np.array([np.dot(a, b)], dtype=a.dtype),
                lambda n, rng: random_arrays(rng, n, n),
                sizes=[0, 1, 100, 300],
                launch=launch_1d(TPB, arg=0),  # one thread per element of a
                out_init=0,
                out_names=["total"],
                reduction=lambda a, b: a.size,  # a float32 sum of n products: its rounding bound is the tolerance
                mistakes={
                    "total holds only one product: `total[0] = a[i] * b[i]` overwrites; add atomically with "
                    "cuda.atomic.add(total, 0, a[i] * b[i]).": lambda a, b: (
                        (a * b)[-1:] if a.size else np.zeros(1, a.dtype)
                    )
                },
            ),
            _a.dot_atomic_kernel,
        ),
        Exercise(
            "05",
            "block_max",
            Problem(
                "block_max_kernel",
                block_max_spec,
                lambda n, rng: random_arrays(rng, n, low=-2.0, high=-0.5),
                sizes=[1, 100, 300],
                launch=lambda x, partial: (partial.size, TPB),  # one block per partial result
                out_names=["partial"],
                mistakes={
                    "the maximum is 0 where every value is negative: threads past the end loaded 0. Load "
                    "float32(-math.inf) there, which never wins a max.": lambda x: np.maximum(block_max_spec(x), 0)
                },
                budget=Budget(reads_per_element={"x": 1}),
            ),
            _a.block_max_kernel,
        ),
        Exercise(
            "05",
            "sum_two_per_thread",
            Problem(
                "sum_two_per_thread_kernel",
                pair_sums_spec,
                lambda n, rng: random_arrays(rng, n),
                sizes=[1, 200, 300, 700],
                launch=lambda x, partial: (partial.size, TPB),
                out_names=["partial"],
                reduction=2 * TPB,
                mistakes={
                    "only the first of each thread's two elements was added: load x[i] and x[i + TPB].": lambda x: (
                        pair_sums_spec(np.where((np.arange(x.size) // TPB) % 2 == 0, x, 0).astype(x.dtype))
                    )
                },
                budget=Budget(reads_per_element={"x": 1}),
            ),
            _a.sum_two_per_thread_kernel,
        ),
        Exercise(
            "05",
            "scan_block",
            Problem(
                "scan_block_kernel",
                block_scan_spec,
                lambda n, rng: random_arrays(rng, n),
                sizes=[1, 5, 100, 300],
                launch=lambda x, out, block_sums: (block_sums.size, TPB),
                out_names=["out", "block_sums"],
                rtol=1e-5,
                atol=1e-5,
                mistakes={
                    "you computed an exclusive scan (x[0] + ... + x[i-1]); this one includes x[i]: start from "
                    "buf[0, tx] = x[i].": _exclusive_scan
                },
            ),
            _a.scan_block_kernel,
        ),
    ]


# --- 06 · CuPy and interop ----------------------------------------------------------------------------


def _elementwise_host(spec_fn: Callable[[], dict[str, str]]) -> Callable[..., None]:
    """The ``host=`` function that runs the learner's ``ElementwiseKernel`` spec and writes its result."""

    def axpy_elementwise_spec(a: Any, x: Any, y: Any, z: Any) -> None:
        z[...] = run_elementwise(spec_fn(), a, x, y)

    return axpy_elementwise_spec


def _lesson06() -> list[Exercise]:
    return [
        Exercise(
            "06",
            "squared_diff",
            Problem(
                "squared_diff_kernel",
                lambda x, y: (x - y) ** 2,
                lambda n, rng: random_arrays(rng, n, n),
                sizes=[1, 100, 300, 1000],
                launch=launch_1d(TPB),
                budget=Budget(reads_per_element={"x": 1, "y": 1}),
            ),
            _a.squared_diff_kernel,
        ),
        Exercise(
            "06",
            "axpy_elementwise",
            Problem(
                "axpy_elementwise_spec",
                lambda a, x, y: a * x + y,
                lambda n, rng: (np.float32(rng.uniform(-2, 2)), *random_arrays(rng, n, n)),
                sizes=[1, 100, 1000],
                host=_elementwise_host(_a.axpy_elementwise_spec),
                out_names=["z"],
            ),
            _a.axpy_elementwise_spec,
            adapt=_elementwise_host,
        ),
        Exercise(
            "06",
            "leaky_relu",
            Problem(
                "leaky_relu_kernel",
                lambda x: np.where(x > 0, x, np.float32(0.01) * x),
                lambda n, rng: random_arrays(rng, n),
                sizes=[1, 100, 300],
                launch=launch_1d(TPB),
                mistakes={
                    "negative inputs became 0: that is the plain ReLU; multiply them by 0.01 instead.": lambda x: (
                        np.maximum(x, 0)
                    )
                },
            ),
            _a.leaky_relu_kernel,
        ),
    ]


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
                sizes=[(3, 3), (5, 7), (12, 9), (20, 19)],
                launch=launch,
                reduction=K * K,  # each output is a sum of K*K products
                mistakes={
                    "the filter is flipped (w[K-1-a, K-1-b]): deep learning's convolution uses w[a, b] as it is.": lambda x, w: (
                        conv_single_spec(x, w[::-1, ::-1].copy())
                    )
                },
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
                sizes=[(3, 3), (4, 6), (9, 7), (13, 10)],
                launch=launch,
                out_names=["cols"],
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
                sizes=[(2, 2), (4, 6), (7, 9), (17, 34)],
                launch=launch,
                mistakes={
                    "you averaged the window; a max-pool keeps its largest value.": lambda x: (
                        x[: x.shape[0] // 2 * 2, : x.shape[1] // 2 * 2]
                        .reshape(x.shape[0] // 2, 2, x.shape[1] // 2, 2)
                        .mean(axis=(1, 3))
                    )
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
                sizes=[(1, 3, 3), (4, 6, 9), (5, 11, 8)],  # (F, H, W)
                launch=launch,
                reduction=K * K,
                budget=Budget(reads_per_element={"x": K * K}),
            ),
            _a.conv2d_all_filters_kernel,
        ),
    ]


# --- 08 · backpropagation -----------------------------------------------------------------------------


def _relu_inputs(n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    dout, x = random_arrays(rng, n, n)
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
                out_names=["db"],
                reduction=lambda dout: dout.shape[0],
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
                out_names=["dw"],
                reduction=lambda dout, x: dout.shape[0],
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
                out_names=["dx"],
                mistakes={"dx equals dout everywhere: ReLU blocks the gradient where y == 0.": lambda dout, y: dout},
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
                out_names=["dx"],
                mistakes={
                    "the gradient was spread evenly over the window: only the winner (arg) reached the output, "
                    "so only it gets dout.": _spread_evenly
                },
            ),
            _a.maxpool2x2_backward_kernel,
        ),
    ]


# --- 10 · scaling up ----------------------------------------------------------------------------------


def _unscale_inputs(n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.float32]:
    g = (rng.standard_normal(n) * 1e3).astype(np.float32)
    if n > 10:  # what an overflowed FP16 backward hands over
        g[3], g[n // 2] = np.inf, np.nan
    return g, np.float32(1 / 1024)


def _unscale_spec(g: np.ndarray, inv: np.float32) -> tuple[np.ndarray, np.ndarray]:
    out = (g * inv).astype(np.float32)
    return out, np.array([np.count_nonzero(~np.isfinite(out))], np.int32)


def _lesson10() -> list[Exercise]:
    return [
        Exercise(
            "10",
            "unscale",
            Problem(
                "unscale_kernel",
                _unscale_spec,
                _unscale_inputs,
                sizes=[1, 100, 300, 1000],
                launch=launch_1d(TPB, arg=2),
                out_init=0,
                out_names=["out", "found_inf"],
            ),
            _a.unscale_kernel,
        ),
    ]


EXERCISES_LIST: list[Exercise] = _lesson05() + _lesson06() + _lesson07() + _lesson08() + _lesson10()
