"""The exercises of lessons 05-08 as data: what each kernel must compute, on which inputs, launched how,
the known mistakes that get a named hint, and the memory budgets. Reference answers: :mod:`.answers_05_10`.

A lesson checks one with ``lessons.check("05", "block_max", block_max_kernel)``. The specs that later
cells of a lesson reuse (``windows``, ``conv_single_spec``, ...) are importable from here. Lessons 07
(convolution) and 08 (backpropagation) are defined in :mod:`.conv_backprop` and joined in here, in order;
lessons 09 and 10 are in :mod:`.ex_09_10`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ..exercises import Budget, Problem, Tree, random_arrays
from ..problems import launch_1d, pad_to_blocks
from . import answers_05_10 as _a
from . import gpu_ufunc
from .conv_backprop import (
    BLOCK as BLOCK,
    EXERCISES_07_08,
    K as K,
    all_filters_spec as all_filters_spec,
    conv_single_spec as conv_single_spec,
    im2col_spec as im2col_spec,
    pool_back_spec as pool_back_spec,
    pool_spec as pool_spec,
    windows as windows,
)
from .elementwise import run_elementwise
from ..errors import UsageError
from .exercise import Exercise, returned_none

__all__ = [
    "BLOCK",
    "EXERCISES_LIST",
    "all_filters_spec",
    "block_max_spec",
    "block_scan_spec",
    "block_sums_spec",
    "conv_single_spec",
    "im2col_spec",
    "pair_sums_spec",
    "pool_back_spec",
    "pool_spec",
    "windows",
]

TPB = _a.TPB  # threads per block, 1-D exercises


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


def block_sums_spec(x: np.ndarray) -> np.ndarray:
    """The sum of each block of TPB elements."""
    return pad_to_blocks(x, TPB).sum(axis=1, dtype=x.dtype)


# Known mistakes of the warp-shuffle block sum. Lanes are (block, warp, lane) with 0 past the end; a shuffle that
# reads past lane 31 (shfl_down) or below lane 0 (shfl_up) returns the lane's own value.
def _lanes(x: np.ndarray) -> np.ndarray:
    return pad_to_blocks(x, TPB, 0, np.float64).reshape(-1, TPB // 32, 32)


def _even_lanes(x: np.ndarray) -> list[np.ndarray]:  # the loop stops at offset 2: lane 0 adds lanes 0, 2, ..., 30
    lanes = _lanes(x)
    even, whole = lanes[..., ::2].sum(axis=2), lanes.sum(axis=2)  # (blocks, warps): per warp
    # both loops stop early (warp 0 then adds warps 0, 2), only the first one, or only the second one
    return [v.astype(x.dtype) for v in (even[:, ::2].sum(axis=1), even.sum(axis=1), whole[:, ::2].sum(axis=1))]


def _first_warp_only(x: np.ndarray) -> np.ndarray:  # no second stage: thread 0 writes its warp's sum
    return _lanes(x)[:, 0, :].sum(axis=1).astype(x.dtype)


def _shuffled_up(x: np.ndarray) -> list[np.ndarray]:  # shfl_up_sync: lane 0 reads below the warp, doubles 5 times
    lanes = _lanes(x)
    first, whole = lanes[..., 0], lanes.sum(axis=2)  # (blocks, warps)
    # both stages shuffle up, only the first one, or only the second one
    return [v.astype(x.dtype) for v in (1024 * first[:, 0], 32 * first.sum(axis=1), 32 * whole[:, 0])]


def _padded_with_minus_inf(x: np.ndarray) -> np.ndarray:  # lanes past the end loaded -inf, as in block_max
    out = block_sums_spec(x)
    if x.size % TPB:
        out[-1] = -np.inf  # the last block is the one that runs past the end
    return out


def _padded_with_an_element(x: np.ndarray) -> list[np.ndarray]:  # lanes past the end loaded x[0] or x[n - 1]
    pad = -x.size % TPB
    made = []
    for value in (x[0], x[-1]):
        out = block_sums_spec(x)
        out[-1] = np.float32(out[-1] + np.float64(pad) * np.float64(value))
        made.append(out)
    return made if pad else []


def _exclusive_scan(x: np.ndarray) -> np.ndarray:  # a known mistake: out[i] without x[i]
    return block_scan_spec(x)[0] - x


def _scan_reads_loaded_row(x: np.ndarray) -> np.ndarray:  # a known mistake: every step reads row 0, never swaps
    per_block = pad_to_blocks(x, TPB, 0, np.float64)
    last = per_block.copy()
    last[:, TPB // 2 :] += per_block[:, : TPB // 2]  # only the last step (offset TPB // 2) survives
    return last.ravel()[: x.size].astype(np.float32)


def _max_of_even_positions(x: np.ndarray) -> np.ndarray:  # a known mistake: `while s > 1`, the last step missing
    return pad_to_blocks(x, TPB, -np.inf, np.float32)[:, ::2].max(axis=1)


def _overlapping_pairs(x: np.ndarray) -> np.ndarray:  # a known mistake: i = cuda.grid(1), block b starts at b * TPB
    blocks = -(-x.size // (2 * TPB))
    return np.array([x[b * TPB : (b + 2) * TPB].sum(dtype=np.float64) for b in range(blocks)], dtype=x.dtype)


# A block reduction of lesson 05: each thread reads one element of x, and the block's values are combined by
# halving (a tree: log2(TPB) steps of 2 reads per thread, 15 at TPB = 128), not by one thread's loop (TPB reads).
_TREE_BUDGET = Budget(reads_per_element={"x": 1}, reads_per_thread=1, shared_reads_per_thread=Tree())


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
                ptx="auto",  # a GPU must compile it too (NVVM, ptxas; sm_75), for the first case's argument types
                out_init=0,
                out_names=["total"],
                reduction=lambda a, b: a.size,  # a float32 sum of n products: its rounding bound is the tolerance
                mistakes={
                    "total holds only one product: `total[0] = ...` overwrites what the other threads wrote. Add "
                    "atomically instead: cuda.atomic.add(array, index, value) adds value to array[index] in one "
                    "indivisible step.": lambda a, b: (a * b)[-1:] if a.size else np.zeros(1, a.dtype)
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
                ptx="auto",
                out_names=["partial"],
                mistakes={
                    "the maximum is 0 where every value is negative: threads past the end loaded 0. Load "
                    "float32(-math.inf) there, which never wins a max.": lambda x: np.maximum(block_max_spec(x), 0),
                    "partial holds the maximum of the even positions only: the tree stopped one step early "
                    "(`while s > 1`?). Run the steps down to s = 1, which compares buf[0] with buf[1].": (
                        _max_of_even_positions
                    ),
                },
                budget=_TREE_BUDGET,
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
                ptx="auto",
                out_names=["partial"],
                reduction=2 * TPB,
                mistakes={
                    "only the first of each thread's two elements was added: load x[i] and x[i + TPB].": lambda x: (
                        pair_sums_spec(np.where((np.arange(x.size) // TPB) % 2 == 0, x, 0).astype(x.dtype))
                    ),
                    "the blocks overlap: block b started at b * TPB (`i = cuda.grid(1)`?), so it summed "
                    "x[b * TPB : b * TPB + 2 * TPB]. Each block covers 2 * TPB elements: start at "
                    "i = cuda.blockIdx.x * (2 * TPB) + cuda.threadIdx.x.": _overlapping_pairs,
                },
                budget=Budget(reads_per_element={"x": 1}, reads_per_thread=2, shared_reads_per_thread=Tree()),
            ),
            _a.sum_two_per_thread_kernel,
        ),
        Exercise(
            "05",
            "warp_sum",
            Problem(
                "warp_sum_kernel",
                block_sums_spec,
                lambda n, rng: random_arrays(rng, n),
                # 300: the last block has a partial warp and two warps with no element at all.
                sizes=[1, 200, 300],
                launch=lambda x, partial: (partial.size, TPB),
                ptx="auto",
                out_names=["partial"],
                reduction=TPB,
                mistakes={
                    "partial holds the sum of the even lanes only: the shuffle loop stopped before offset 1 "
                    "(`while offset > 1`?). Run offset = 16, 8, 4, 2, 1: the last step adds lane 1 into lane 0.": (
                        _even_lanes
                    ),
                    "partial holds the sum of the block's first 32 elements, warp 0's: the other warps' sums were "
                    "never added. Lane 0 of each warp writes its sum to a shared array; after cuda.syncthreads(), "
                    "warp 0 reads those and shuffles once more.": _first_warp_only,
                    "lane 0 ended with its own value doubled at every step, not a sum: cuda.shfl_up_sync reads lane - offset, "
                    "which is below lane 0, so lane 0 gets its own value back. Use cuda.shfl_down_sync, which "
                    "moves the sums down to lane 0.": _shuffled_up,
                    "partial is -inf for the blocks that run past the end of x: the lanes past the end loaded "
                    "-inf (as for the block maximum). For a sum they load 0, which adds nothing: "
                    "`v = x[i] if i < x.size else float32(0.0)`.": _padded_with_minus_inf,
                    "the last block's sum is off by copies of one element: the lanes past the end of x loaded a "
                    "real element (x[0], or x[n - 1] through a clamped index) and added it once each. A lane with "
                    "nothing to contribute still takes part in the shuffles, with a value that adds nothing: "
                    "`v = x[i] if i < x.size else float32(0.0)`.": _padded_with_an_element,
                },
                budget=Budget(
                    reads_per_element={"x": 1},
                    reads_per_thread=1,
                    barriers_per_thread=1,
                    min_shuffles=5,
                    shared_reads_per_thread=Tree(),
                ),
            ),
            _a.warp_sum_kernel,
        ),
        Exercise(
            "05",
            "scan_block",
            Problem(
                "scan_block_kernel",
                block_scan_spec,
                lambda n, rng: random_arrays(rng, n),
                # 5 first: at n = 1, out and block_sums have the same shape, and a mistake in one could be
                # named after the other's
                sizes=[5, 1, 100, 300],
                launch=lambda x, out, block_sums: (block_sums.size, TPB),
                ptx="auto",
                out_names=["out", "block_sums"],
                rtol=1e-5,
                atol=1e-5,
                mistakes={
                    "you computed an exclusive scan (x[0] + ... + x[i-1]); this one includes x[i]: start from "
                    "buf[0, tx] = x[i].": _exclusive_scan,
                    "each step read the values as loaded (row 0), not the previous step's result, so only the "
                    "last step's addition survives: after each step's cuda.syncthreads(), swap src and dst "
                    "(src = dst) and read row src in the next step.": _scan_reads_loaded_row,
                },
                # log2(TPB) steps: Hillis and Steele read 2 values per thread and step (16 in all at TPB = 128), a
                # work-efficient scan's two sweeps up to 5; a loop of one thread over the block reads TPB.
                budget=Budget(
                    reads_per_element={"x": 1},
                    reads_per_thread=1,
                    shared_reads_per_thread=Tree(per_step=6, what="a scan"),
                    hint="let every thread take part in every step: in step d, thread tx adds the value 2^d places "
                    "to its left (`buf[dst, tx] = buf[src, tx] + buf[src, tx - offset]` for tx >= offset), then "
                    "cuda.syncthreads() and swap the rows: log2(TPB) steps, not one thread's loop over the block.",
                ),
            ),
            _a.scan_block_kernel,
        ),
    ]


# --- 06 · CuPy and interop ----------------------------------------------------------------------------


def _elementwise_host(spec_fn: Callable[[], dict[str, str]]) -> Callable[..., None]:
    """The ``host=`` function that runs the learner's ``ElementwiseKernel`` spec and writes its result."""

    def axpy_elementwise_spec(a: Any, x: Any, y: Any, z: Any) -> None:
        spec = spec_fn()
        if spec is None:
            raise UsageError(returned_none(getattr(spec_fn, "__name__", "axpy_elementwise_spec")))
        z[...] = run_elementwise(spec, a, x, y)

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
                ptx="auto",
                budget=Budget(reads_per_element={"x": 1, "y": 1}),
                mistakes={
                    "out is x - y**2: ** binds tighter than -, so only y was squared. Take the difference first, "
                    "into a local variable (x and y are then read once), and square that.": lambda x, y: x - y**2,
                    "out is x - y, not squared: keep the difference in a local variable and multiply it by itself.": (
                        lambda x, y: x - y
                    ),
                },
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
                # no PTX check: CuPy composes an ElementwiseKernel on the host from the learner's C strings (no numba)
                out_names=["z"],
                mistakes={  # in_params declared in another order: the arguments bind by position, not by name
                    "in_params bind to the arguments by position, not by name: the check calls kernel(a, x, y), "
                    "so declare them in that order, 'float32 a, float32 x, float32 y'.": lambda a, x, y: [
                        a * y + x,  # declared x, y, a or a, y, x
                        x * y + a,  # declared y, x, a or y, a, x
                    ],
                },
            ),
            _a.axpy_elementwise_spec,
            adapt=_elementwise_host,
        ),
        Exercise(
            "06",
            "softplus",
            Problem(
                "softplus",
                gpu_ufunc.softplus_spec,
                gpu_ufunc.softplus_inputs,
                sizes=[12, 300],
                host=gpu_ufunc.ufunc_host(gpu_ufunc.GPUUfunc(_a.softplus)),
                out_names=["out"],
                mistakes=gpu_ufunc.MISTAKES,
                ptx="float32(float32)",  # the scalar function, compiled as numba-cuda compiles it: a device function
            ),
            gpu_ufunc.GPUUfunc(_a.softplus),
            adapt=gpu_ufunc.ufunc_host,
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
                ptx="auto",
                mistakes={
                    "negative inputs became 0: that is the plain ReLU; multiply them by 0.01 instead.": lambda x: (
                        np.maximum(x, 0)
                    ),
                    "negative inputs were multiplied by 0.1; the slope here is 0.01.": lambda x: np.where(
                        x > 0, x, np.float32(0.1) * x
                    ),
                },
            ),
            _a.leaky_relu_kernel,
        ),
    ]


EXERCISES_LIST: list[Exercise] = _lesson05() + _lesson06() + EXERCISES_07_08
