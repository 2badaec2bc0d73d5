"""Lab 03 · naive matmul: vector-matrix product ``y = x @ A``, matmul, a fused dense layer ``relu(X @ W.T + b)``
with W stored as PyTorch's ``nn.Linear`` stores it. The first and the last are variants of lesson 03's ``matvec``
and ``linear_relu``: the lesson's answers fail them, with a verdict that says so.

Tolerances come from the arithmetic, not a constant: the expected values are computed in float64 and
a kernel may differ by the float32 rounding bound of a sum of K products (``reduction=``:
``min(gamma_K, 10 sqrt(K) u)`` times the sum of the products' magnitudes), which every order of summation a
correct kernel uses stays well inside at gpu sizes (K = 8192) as in the simulator, and a dropped product does not.
"""

from __future__ import annotations

import numpy as np

from ..exercises import Budget, Problem, random_arrays
from ._common import launch_2d

__all__ = ["DENSE_RELU", "MATMUL", "MATMUL_BLOCK", "VECMAT", "dense_inputs", "matmul_inputs", "vecmat_inputs"]

MATMUL_BLOCK = (16, 8)  # x: columns of C (16 neighbouring elements of a row), y: rows
_COALESCED = 2.0  # sectors per warp access at most twice the ideal


def matmul_inputs(shape: tuple[int, int, int], rng: np.random.Generator) -> tuple[np.ndarray, ...]:
    """A (M, K) and B (K, N) for shape = (M, K, N)."""
    m, k, n = shape
    return random_arrays(rng, (m, k), (k, n))


def vecmat_inputs(shape: tuple[int, int], rng: np.random.Generator) -> tuple[np.ndarray, ...]:
    """A (M, N) and x (M,) for shape = (M, N): y = x @ A has N elements."""
    return random_arrays(rng, shape, shape[0])


def dense_inputs(shape: tuple[int, int, int], rng: np.random.Generator) -> tuple[np.ndarray, ...]:
    """X (batch, n_in), W (n_out, n_in) as PyTorch's nn.Linear stores it, b (n_out,) for shape = (batch, n_in, n_out)."""
    batch, n_in, n_out = shape
    return random_arrays(rng, (batch, n_in), (n_out, n_in), (n_out,))


def _matvec_pasted(A: np.ndarray, x: np.ndarray) -> np.ndarray:
    """What lesson 03's matvec (``y[i] = sum over k < A.shape[1] of A[i, k] * x[k]`` for ``i < y.size``) writes
    into y of N elements where it stays inside A and x (M >= N): ``A @ x`` on a square A."""
    n = A.shape[1]
    return A[:n] @ x[:n]


# Vector times matrix, y = x @ A: thread j sums column j of A, so a warp's lanes read one row of A at a time
# (coalesced), where lesson 03's matvec (a thread per row) has them read 32 rows apart.
VECMAT = Problem(
    "lab03.vecmat",
    ptx="auto",  # a GPU must accept it: compiled for the types of the first case's arguments
    spec=lambda A, x: x @ A,
    inputs=vecmat_inputs,
    # M > N first: lesson 03's matvec pasted stays inside the arrays there and gets its named verdict
    sizes=[(1, 1), (5, 3), (70, 33), (33, 64)],
    gpu_sizes=[(1, 1), (5, 3), (33, 70), (8192, 4096)],
    threads=[64, 32],
    reduction=lambda A, x: A.shape[0],  # y[j] is a sum of M products
    mistakes={
        "y = A @ x, each thread summing a row of A: that is lesson 03's matvec (y[i] = sum over k of A[i, k] * "
        "x[k]), not the product this lab asks for. Here y = x @ A: thread j walks down column j of A, over all "
        "A.shape[0] rows, adding x's element of each row times A's element in that row of column j.": _matvec_pasted,
        "y[j] sums only the first N = A.shape[1] rows of A: the loop runs over the columns' count. It must run "
        "over the rows of A, M = A.shape[0] = x.size times: `for i in range(A.shape[0]):`.": (
            lambda A, x: x[: A.shape[1]] @ A[: A.shape[1]]
        ),
        "y[j] sums only the first M - 1 products: the loop over i stops one short (`range(M - 1)`?). It must run "
        "M = A.shape[0] times: `for i in range(A.shape[0]):`.": lambda A, x: x[:-1] @ A[:-1],
    },
    # traced where every warp is a full one (N = 64): 32 lanes read 32 neighbouring floats of a row of A, 4 sectors
    budget=Budget(sectors={"A": _COALESCED, "x": _COALESCED, "y": _COALESCED}, size=(33, 64)),
    points=2,
)

MATMUL = Problem(
    "lab03.matmul",
    ptx="auto",  # a GPU must accept it: compiled for the types of the first case's arguments
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
    spec=lambda X, W, b: np.maximum(X @ W.T + b, 0),
    inputs=dense_inputs,
    # n_in == n_out first: lesson 03's linear_relu pasted (W[k, j]) stays inside W there and gets its named verdict
    sizes=[(1, 1, 1), (6, 9, 9), (17, 12, 10)],
    gpu_sizes=[(1, 1, 1), (6, 9, 9), (64, 784, 128), (1000, 512, 10)],
    launch=launch_2d(MATMUL_BLOCK),
    reduction=lambda X, W, b: X.shape[1] + 1,  # n_in products and the bias
    mistakes={
        "W is read as W[k, j]: this is relu(X @ W + b), lesson 03's linear_relu, whose W has shape (n_in, n_out). "
        "This lab stores W as PyTorch's nn.Linear does, (n_out, n_in): the weights of output j are row j of W, so "
        "read W[j, k] (Y = relu(X @ W.T + b)).": lambda X, W, b: np.maximum(X @ W + b, 0),
        "this is X @ W.T + b without the ReLU: clamp negatives with max(acc, 0).": lambda X, W, b: X @ W.T + b,
        "this is relu(X @ W.T): the bias b[j] is missing.": lambda X, W, b: np.maximum(X @ W.T, 0),
        "this is relu(X @ W.T) + b: the ReLU comes before the bias. Add b[j] to the dot product first, then "
        "clamp with max(acc, 0).": lambda X, W, b: np.maximum(X @ W.T, 0) + b,
        "the bias is indexed by the row: b holds one value per output feature, a column of Y, so add b[j] "
        "(not b[i]).": lambda X, W, b: np.maximum(X @ W.T + b[: X.shape[0], None], 0),
        "the bias is added n_in times: `acc += X[i, k] * W[j, k] + b[j]` inside the loop adds it on every step. "
        "Add b[j] once, after the loop.": lambda X, W, b: np.maximum(X @ W.T + X.shape[1] * b, 0),
    },
    budget=Budget(
        reads_per_thread=lambda s: 2 * s[1] + 1,
        writes_per_thread=1,
        # X (a broadcast) and Y coalesced. W cannot be with x along the columns of Y: a warp's 16 lanes read W[j, k]
        # for 16 neighbouring j, a row of W apart (lesson 04's shared tiles fix that), so W has no limit here
        sectors={"X": _COALESCED, "Y": _COALESCED},
        hint="each thread reads its row of X, its row of W and b[j] once (2 * n_in + 1 reads) and writes Y[i, j] "
        "once: sum into a local variable that starts at the bias, and store its ReLU into Y once, after the loop "
        "(`Y[i, j] += ...` reads and writes Y on every step). With "
        "`j, i = cuda.grid(2)` (x along the columns of Y) the reads of X and the writes of Y are coalesced.",
    ),
    ptx="void(float32[:, :], float32[:, :], float32[:], float32[:, :])",  # a GPU must accept it
    points=3,
)
