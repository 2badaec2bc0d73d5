"""Lab 03 · naive matmul: matrix-vector product, matmul, a fused dense layer ``relu(X @ W + b)``.

Tolerances come from the arithmetic, not a constant: the expected values are computed in float64 and
a kernel may differ by the float32 rounding bound of a sum of K products (``reduction=``), which is
what a correct kernel can reach at gpu sizes (K = 4096) as well as in the simulator.
"""

from __future__ import annotations

import numpy as np

from ..exercises import Budget, Problem, random_arrays
from ._common import launch_2d

__all__ = ["DENSE_RELU", "MATMUL", "MATMUL_BLOCK", "MATVEC", "dense_inputs", "matmul_inputs"]

MATMUL_BLOCK = (16, 8)  # x: columns of C (16 neighbouring elements of a row), y: rows
_COALESCED = 2.0  # sectors per warp access at most twice the ideal


def matmul_inputs(shape: tuple[int, int, int], rng: np.random.Generator) -> tuple[np.ndarray, ...]:
    """A (M, K) and B (K, N) for shape = (M, K, N)."""
    m, k, n = shape
    return random_arrays(rng, (m, k), (k, n))


def dense_inputs(shape: tuple[int, int, int], rng: np.random.Generator) -> tuple[np.ndarray, ...]:
    """X (batch, n_in), W (n_in, n_out), b (n_out,) for shape = (batch, n_in, n_out)."""
    batch, n_in, n_out = shape
    return random_arrays(rng, (batch, n_in), (n_in, n_out), (n_out,))


MATVEC = Problem(
    "lab03.matvec",
    spec=lambda A, x: A @ x,
    inputs=lambda shape, rng: random_arrays(rng, shape, shape[1]),
    sizes=[(1, 1), (5, 3), (70, 33)],
    gpu_sizes=[(1, 1), (70, 33), (8192, 4096)],
    threads=[64, 32],
    reduction=lambda A, x: A.shape[1],  # y[i] is a sum of K products
    mistakes={
        "y[i] sums only the first K - 1 products: the loop over k stops one short (`range(K - 1)`?). It must run "
        "K = A.shape[1] times: `for k in range(A.shape[1]):`.": lambda A, x: A[:, :-1] @ x[:-1],
    },
    points=2,
)

MATMUL = Problem(
    "lab03.matmul",
    spec=lambda A, B: A @ B,
    inputs=matmul_inputs,
    sizes=[(1, 1, 1), (8, 8, 8), (13, 10, 7), (20, 5, 33)],
    gpu_sizes=[(1, 1, 1), (8, 8, 8), (13, 10, 7), (2048, 1024, 1536)],
    launch=launch_2d(MATMUL_BLOCK),  # grid (ceil(N / 16), ceil(M / 8)) over C
    reduction=lambda A, B: A.shape[1],
    budget=Budget(sectors={"A": _COALESCED, "B": _COALESCED, "C": _COALESCED}),
    points=3,
)

DENSE_RELU = Problem(
    "lab03.dense_relu",
    spec=lambda X, W, b: np.maximum(X @ W + b, 0),
    inputs=dense_inputs,
    sizes=[(1, 1, 1), (6, 9, 5), (17, 12, 10)],
    gpu_sizes=[(1, 1, 1), (64, 784, 128), (1000, 512, 10)],
    launch=launch_2d(MATMUL_BLOCK),
    reduction=lambda X, W, b: X.shape[1] + 1,  # n_in products and the bias
    mistakes={
        "this is X @ W + b without the ReLU: clamp negatives with max(acc, 0).": lambda X, W, b: X @ W + b,
        "this is relu(X @ W): the bias b[j] is missing.": lambda X, W, b: np.maximum(X @ W, 0),
        "this is relu(X @ W) + b: the ReLU comes before the bias. Add b[j] to the dot product first, then "
        "clamp with max(acc, 0).": lambda X, W, b: np.maximum(X @ W, 0) + b,
        "the bias is indexed by the row: b holds one value per output feature, a column of Y, so add b[j] "
        "(not b[i]).": lambda X, W, b: np.maximum(X @ W + b[: X.shape[0], None], 0),
        "the bias is added n_in times: `acc += X[i, k] * W[k, j] + b[j]` inside the loop adds it on every step. "
        "Add b[j] once, after the loop.": lambda X, W, b: np.maximum(X @ W + X.shape[1] * b, 0),
    },
    budget=Budget(
        reads_per_thread=lambda s: 2 * s[1] + 1,
        writes_per_thread=1,
        sectors={"X": _COALESCED, "W": _COALESCED, "Y": _COALESCED},
    ),
    ptx="void(float32[:, :], float32[:, :], float32[:], float32[:, :])",  # a GPU must accept it
    points=3,
)
