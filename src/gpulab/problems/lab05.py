"""Lab 05 · reductions: an atomic sum, a histogram, a block tree reduction, a row softmax.

Sums are judged against a float64 reference within the float32 rounding bound of n terms (atomics add
in any order, so no order is assumed). Softmax inputs include rows shifted by up to +-1e4, so a
softmax that does not subtract the row's maximum overflows (``exp(89)`` is already inf in float32).
"""

from __future__ import annotations

import numpy as np

from ..exercises import Budget, Problem, random_arrays
from ._common import launch_1d, pad_to_blocks

__all__ = ["BLOCK_SUM", "HISTOGRAM", "SOFTMAX", "SUM_ATOMIC", "TPB", "block_sum_spec", "softmax_inputs", "softmax_spec"]

TPB = 64  # threads per block
SOFTMAX_SHIFT = 1.0e4  # rows are shifted by up to +-SOFTMAX_SHIFT


def block_sum_spec(x: np.ndarray) -> np.ndarray:
    """One sum per block of TPB elements (zeros past the end)."""
    return pad_to_blocks(x, TPB).sum(axis=1)


def softmax_inputs(shape: tuple[int, int], rng: np.random.Generator) -> np.ndarray:
    """Rows of values in [-20, 20], each row but the first shifted by a constant in [-1e4, 1e4]."""
    rows, cols = shape
    shift = rng.uniform(-SOFTMAX_SHIFT, SOFTMAX_SHIFT, size=(rows, 1))
    shift[0] = 0.0
    return (shift + rng.uniform(-20.0, 20.0, size=(rows, cols))).astype(np.float32)


def softmax_spec(x: np.ndarray) -> np.ndarray:
    """Row softmax computed in float64 (subtracting the row maximum), rounded to float32."""
    x64 = x.astype(np.float64)
    e = np.exp(x64 - x64.max(axis=1, keepdims=True))
    return (e / e.sum(axis=1, keepdims=True)).astype(np.float32)


def _softmax_unshifted(x: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore", invalid="ignore", under="ignore"):
        e = np.exp(x.astype(np.float32))
        return (e / e.sum(axis=1, keepdims=True)).astype(np.float32)


def _softmax_columns(x: np.ndarray) -> np.ndarray:
    e = np.exp(x.astype(np.float64) - x.max(0))
    return (e / e.sum(0)).astype(np.float32)


SUM_ATOMIC = Problem(
    "lab05.sum_atomic",
    spec=lambda x: np.array([x.sum(dtype=np.float64)], dtype=x.dtype),
    inputs=lambda n, rng: random_arrays(rng, n, low=0.0, high=1.0),
    sizes=[0, 1, 100, 700],
    gpu_sizes=[0, 1, 100, 1 << 20],
    launch=launch_1d(TPB, arg=0),  # one thread per input element
    out_init=0,
    reduction=lambda x: max(1, x.size),  # any order of additions
    points=2,
)

HISTOGRAM = Problem(
    "lab05.histogram",
    spec=lambda labels: np.bincount(labels, minlength=10).astype(np.int32),
    inputs=lambda n, rng: rng.integers(0, 10, size=n).astype(np.int32),
    sizes=[0, 1, 50, 600],
    gpu_sizes=[0, 1, 50, 1 << 20],
    launch=launch_1d(TPB, arg=0),
    out_init=0,
    points=2,
)

BLOCK_SUM = Problem(
    "lab05.block_sum",
    spec=block_sum_spec,
    inputs=lambda n, rng: random_arrays(rng, n),
    sizes=[1, 64, 100, 300],
    gpu_sizes=[1, 64, 100, 1 << 20],
    launch=lambda x, partial: (partial.shape[0], TPB),  # one block per partial sum
    reduction=TPB,
    budget=Budget(reads_per_element={"x": 1}, shared_bytes=TPB * 4),
    ptx="void(float32[:], float32[:])",  # a GPU must accept it: shared.array(cuda.blockDim.x) runs only in the simulator
    points=3,
)

SOFTMAX = Problem(
    "lab05.softmax",
    spec=softmax_spec,
    inputs=softmax_inputs,
    sizes=[(1, 1), (3, 5), (4, 70)],
    gpu_sizes=[(1, 1), (3, 5), (4, 70), (4096, 1000)],
    launch=lambda x, out: (x.shape[0], TPB),  # one block per row
    rtol=1e-4,
    atol=1e-6,
    mistakes={
        "exp overflowed (inf or nan): subtract the row's maximum before math.exp, so every exponent is <= 0.": _softmax_unshifted,
        "this is softmax over each column: reduce along the row (x[row, j] for j in the row).": _softmax_columns,
    },
    ptx="void(float32[:, :], float32[:, :])",  # a GPU must accept it, not only the simulator
    points=4,
)
