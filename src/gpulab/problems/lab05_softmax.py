"""Lab 05's row softmax, two ways: one block per row (shared-memory trees) and one warp per row (shuffles).

Both take rows of values in [-20, 20], each row but the first shifted by up to +-1e4, so a softmax that does not
subtract the row's maximum overflows (``exp(89)`` is already inf in float32). The expected result is computed
in float64 and rounded to float32; the tolerance (rtol 1e-4, atol 1e-6) holds at gpu sizes for the float32 order
of each kernel's additions (``tests/test_gpu_sizes.py`` emulates both). :mod:`.lab05` re-exports this module.

The warp version, ``softmax_warp_kernel(x, out)``, is how softmax is written in attention kernels: a block of
``WARP_TPB`` = 128 threads is 4 warps, warp ``w`` of block ``b`` takes row ``4 * b + w``, its lanes stride over
the row's columns, and the row's maximum and sum of exponentials are combined across the warp with
``cuda.shfl_xor_sync`` butterflies, which leave the result in every lane (no shared memory, no barrier). Its
named mistakes are what the NumPy functions below compute: shuffling down (only lane 0 ends with the maximum and
the sum), no maximum subtracted, and a lane that takes only its first column (no stride loop). A shuffle behind a
guard (`if col < cols:`) stops the simulator, whose verdict names the line (:mod:`gpulab.exercises.raised`). Its
budget asks for no shared memory, at most 3 reads of each element of x, at most 3 * ceil(cols / 32) reads by one
lane and at least 5 shuffles by the busiest lane: a correct kernel without shuffles (each lane reducing the whole
row itself, or one lane per row looping over it) gets half the points and :data:`SHUFFLE_BUDGET_HINT`. The block
softmax's budget: at most 3 * ceil(cols / TPB) reads by one thread, and its two trees' shared reads (:class:`Tree`).
"""

from __future__ import annotations

import numpy as np

from ..exercises import Budget, Problem, Tree
from ..kernels._launch import blocks_for, ceil_div

__all__ = [
    "NO_MAX_HINT",
    "ROWS_PER_BLOCK",
    "SHUFFLE_BUDGET_HINT",
    "SOFTMAX",
    "SOFTMAX_WARP",
    "TPB",
    "WARP",
    "WARP_TPB",
    "softmax_inputs",
    "softmax_spec",
]

TPB = 64  # threads per block (= per row) of the block softmax
WARP = 32  # lanes per warp
ROWS_PER_BLOCK = 4  # warps per block of the warp softmax, one row each
WARP_TPB = WARP * ROWS_PER_BLOCK  # 128 threads per block of the warp softmax
SOFTMAX_SHIFT = 1.0e4  # rows are shifted by up to +-SOFTMAX_SHIFT
NO_MAX_HINT = "exp overflowed (inf or nan): subtract the row's maximum before math.exp, so every exponent is <= 0."


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


def _lanes(x: np.ndarray) -> np.ndarray:
    """``x`` as (rows, lane, k): column ``k * 32 + lane`` of each row, NaN past the end (the lane has no column)."""
    rows, cols = x.shape
    padded = np.full((rows, blocks_for(cols, WARP) * WARP), np.nan)
    padded[:, :cols] = x
    return padded.reshape(rows, -1, WARP).transpose(0, 2, 1)


def _down(v: np.ndarray, combine: np.ufunc) -> np.ndarray:
    """``v = combine(v, cuda.shfl_down_sync(FULL, v, k))`` for k = 16, 8, 4, 2, 1 along the last axis (the lanes):
    lane l reads lane l + k, or its own value past lane 31 (CUDA's rule)."""
    lane = np.arange(WARP)
    k = WARP // 2
    while k > 0:
        src = np.where(lane + k < WARP, lane + k, lane)
        v = combine(v, v[..., src])
        k //= 2
    return v


def _shuffled_down(x: np.ndarray) -> np.ndarray:
    """The warp softmax with ``shfl_down_sync`` in place of ``shfl_xor_sync``: lane l ends with the maximum and the
    sum of the lanes the tree brought it (lane 0: the whole row; lanes near 31 add their own sum to itself)."""
    v = _lanes(x.astype(np.float64))  # (rows, lane, k)
    with np.errstate(invalid="ignore"):
        m = _down(np.where(np.isnan(v), -np.inf, v).max(axis=2), np.maximum)  # (rows, lane)
        e = np.exp(v - m[:, :, None])
    s = _down(np.nansum(e, axis=2), np.add)
    out = e / s[:, :, None]  # (rows, lane, k); NaN where the lane has no column
    return out.transpose(0, 2, 1).reshape(x.shape[0], -1)[:, : x.shape[1]].astype(np.float32)


def _first_columns_only(x: np.ndarray) -> list[np.ndarray]:
    """A lane that takes only column ``lane`` (no stride loop): the maximum and the sum of the first 32 columns;
    columns from 32 on never written (NaN, the check's first fill), or normalised with those."""
    first = x[:, :WARP].astype(np.float64)
    m = first.max(axis=1, keepdims=True)
    s = np.exp(first - m).sum(axis=1, keepdims=True)
    unwritten = np.full(x.shape, np.nan, np.float32)
    unwritten[:, :WARP] = (np.exp(first - m) / s).astype(np.float32)
    with np.errstate(over="ignore"):
        normalised = (np.exp(x.astype(np.float64) - m) / s).astype(np.float32)
    return [unwritten, normalised]


SHUFFLED_DOWN_HINT = (
    "only lane 0 ended with the row's maximum and sum: cuda.shfl_down_sync leaves lanes 1-31 with partial "
    "values (lane l gets the lanes above it that the tree brought it), and they normalised their columns with "
    "those (columns 0, 32, 64, ... are right). Use cuda.shfl_xor_sync(FULL, v, k) for k = 16, 8, 4, 2, 1: in a "
    "butterfly every lane ends with the result. Or keep the shuffles down and broadcast lane 0's value after "
    "the loop: `v = cuda.shfl_sync(FULL, v, 0)`."
)
FIRST_COLUMN_HINT = (
    "this is the softmax of each row's first 32 columns: each lane took only column `lane`, so the maximum and "
    "the sum left out columns 32 and up (which were not written, or were normalised with those). A row has "
    "x.shape[1] columns and a warp 32 lanes: let each lane stride over the row in every pass (the maximum, the "
    "sum, the writes) with `for col in range(lane, x.shape[1], 32):`."
)
SHUFFLE_BUDGET_HINT = (
    "combine the lanes' values with warp shuffles (`cuda.shfl_xor_sync`), which pass registers between the lanes "
    "of a warp: no shared memory, and each lane reads only its own columns of the row (`for col in range(lane, "
    "cols, 32):`), so x is read three times (for the maximum, the sum and the writes), not once per lane, and no "
    "lane loops over the whole row while the other 31 wait."
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
        NO_MAX_HINT: _softmax_unshifted,
        "this is softmax over each column: reduce along the row (x[row, j] for j in the row).": _softmax_columns,
    },
    # the row split over the block's threads (each reads its columns in 3 passes: max, sum, writes) and the partial
    # results combined by two shared-memory trees, not by one thread's loop over the row or over the partials
    budget=Budget(reads_per_thread=lambda s: 3 * ceil_div(s[1], TPB), shared_reads_per_thread=Tree(trees=2)),
    ptx="void(float32[:, :], float32[:, :])",  # a GPU must accept it, not only the simulator
    points=4,
)

SOFTMAX_WARP = Problem(
    "lab05.softmax_warp",
    spec=softmax_spec,
    inputs=softmax_inputs,
    # Rows that are not a multiple of 4 (warps with no row), rows shorter than a warp, one column, 70 columns (a
    # lane takes 2 or 3). The simulator runs each CUDA thread of a kernel with shuffles as a Python thread: small.
    sizes=[(1, 1), (3, 5), (6, 70)],
    gpu_sizes=[(1, 1), (3, 5), (6, 70), (4097, 1000)],
    launch=lambda x, out: (blocks_for(x.shape[0], ROWS_PER_BLOCK), WARP_TPB),  # one warp per row, 4 per block
    rtol=1e-4,
    atol=1e-6,
    mistakes={
        SHUFFLED_DOWN_HINT: _shuffled_down,
        NO_MAX_HINT: _softmax_unshifted,
        FIRST_COLUMN_HINT: _first_columns_only,
    },
    # each lane reads its own columns in 3 passes and the lanes combine by shuffles (the solution makes 10 per lane)
    budget=Budget(
        reads_per_element={"x": 3},
        reads_per_thread=lambda s: 3 * ceil_div(s[1], WARP),
        shared_bytes=0,
        min_shuffles=5,
        hint=SHUFFLE_BUDGET_HINT,
    ),
    ptx="void(float32[:, :], float32[:, :])",
    points=3,
)
