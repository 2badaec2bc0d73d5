"""The exercises of lessons 00-04 as data (threads and grids, memory, 2-D indexing, matmul): what each
kernel must compute, on which inputs, launched how, and the known mistakes that get a named hint.
Reference answers: :mod:`.answers`. Collected, with every other ``ex_*.py`` module's, by :mod:`.problems`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ..exercises import Budget, CheckResult, Problem
from ..exercises.races import DUPLICATE_STORE_HINT, WRITE_RACE_HINT
from ..kernels._launch import ceil_div
from ..kernels.elementwise import (
    add_grid_stride_kernel,
    add_kernel,
    saxpy_kernel,
    scale2d_kernel,
)
from ..kernels.matmul import TILE as MATMUL_TILE
from ..kernels.matmul import matmul_naive_kernel, matmul_tiled_kernel
from ..kernels.memory import transpose_naive_kernel
from ..problems import grid_2d, launch_1d
from . import answers as _ans
from . import device_fns, pipelined
from .exercise import Exercise, as_host

__all__ = ["EXERCISES_LIST"]


def _vec(n: int, rng: np.random.Generator) -> np.ndarray:
    return rng.uniform(-1, 1, n).astype(np.float32)


def _mat(shape: Sequence[int], rng: np.random.Generator) -> np.ndarray:
    return rng.uniform(-1, 1, tuple(shape)).astype(np.float32)


def _blur(x: np.ndarray, left: np.ndarray, right: np.ndarray) -> np.ndarray:
    """``(left + x + right) / 3`` in float32, as the blur's spec computes it."""
    return (left + x + right).astype(np.float32) / np.float32(3)


def _blur_halo(x: np.ndarray, *, keep_left: bool, keep_right: bool) -> np.ndarray:
    """The 3-point blur with the halo of every block of ``BLUR_TPB`` threads left at 0 (on the sides not kept):
    what a kernel computes that never loads ``x[i - 1]`` / ``x[i + 1]`` from the next block."""
    left = np.concatenate([[0], x[:-1]]).astype(np.float32)
    right = np.concatenate([x[1:], [0]]).astype(np.float32)
    starts = np.arange(x.size) % _ans.BLUR_TPB == 0
    ends = (np.arange(x.size) % _ans.BLUR_TPB == _ans.BLUR_TPB - 1) | (np.arange(x.size) == x.size - 1)
    if not keep_left:
        left[starts] = 0
    if not keep_right:
        right[ends] = 0
    return _blur(x, left, right)


def _blur_wraps(x: np.ndarray) -> np.ndarray:
    """The blur with ``x[i - 1]`` unguarded at i = 0: Python (and the simulator) read ``x[-1]``, the last element."""
    right = np.concatenate([x[1:], [0]]).astype(np.float32)
    return _blur(x, np.roll(x, 1), right)


def _with_duplicate_write_hint(
    problem: Problem, hint: str, over_budget: dict[str, str] | None = None
) -> Callable[[Any], CheckResult]:
    """A checker that runs ``problem`` and, where two threads wrote the same output element (all values
    right), gives ``hint`` instead of the harness's general advice about atomics: in these exercises each
    element has one owner, so the index is what is wrong, and cuda.atomic (lesson 05) is not the fix.
    ``over_budget``: ``{budget check name: hint}`` for a correct kernel over that limit of the problem's budget,
    in place of the harness's hint (which speaks of shared memory where the exercise's point is another)."""

    def checker(kernel: Any, *, trusted: bool = False) -> CheckResult:
        res = problem.check(kernel, trusted=trusted)
        if res.hint in (WRITE_RACE_HINT, DUPLICATE_STORE_HINT):
            res.hint = hint
        elif res.status == "over budget":
            res.hint = next((h for name, h in (over_budget or {}).items() if f"but {name}:" in res.message), res.hint)
        return res

    return checker


def _strip_three_outputs(A: np.ndarray, B: np.ndarray) -> np.ndarray:
    """What a strip kernel computes with 3 outputs per thread instead of STRIP_TN = 4, under the check's launch
    (16 threads per block along x): the columns from 3W on are never written (NaN, the harness's fill)."""
    C = (A @ B).astype(np.float32)
    W = 16 * ceil_div(ceil_div(C.shape[1], _ans.STRIP_TN), 16)
    C[:, 3 * W :] = np.nan
    return C


def _transpose_one_row_per_thread(a: np.ndarray) -> list[np.ndarray]:
    """What a tiled transpose gives under the exercise's launch (32 x 8 threads, one block per 32 x 32 tile) when
    each thread moves one element instead of 4 rows: with ``cuda.grid(2)`` only the first 8 rows per block are
    covered, with the tile's corner at ``32 * blockIdx.y`` only rows 0-7 of each tile. Unwritten: NaN."""
    rows = a.shape[0]
    grid_rows = np.arange(rows) < 8 * ceil_div(rows, 32)  # i = cuda.grid(2)[1] < 8 x the blocks along y
    tile_rows = np.arange(rows) % 32 < 8  # row0 + ty
    made = []
    for covered in (grid_rows, tile_rows):
        out = np.ascontiguousarray(a.T).astype(np.float32)
        out[:, ~covered] = np.nan
        made.append(out)
    return made


def _pipelined(alpha: Any, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """The reference pipelined_saxpy as a function that returns its result (for the exercise's Problem)."""
    out = np.empty_like(x)
    pipelined.pipelined_saxpy(alpha, x, y, out, 64, 2)
    return out


_ONE_OWNER = "Two threads wrote the same element: each element must be written by exactly one thread. "


def _problems() -> list[Exercise]:
    alpha = np.float32(2.5)
    scale2d = Problem(
        "scale2d_kernel",
        lambda al, a: al * a,
        lambda s, rng: (alpha, _mat(s, rng)),
        sizes=[(1, 1), (5, 37), (20, 33)],
        launch=lambda al, a, out: grid_2d(*out.shape, (16, 16)),
        ptx="auto",  # a GPU must compile it too (NVVM, ptxas; sm_75), for the first case's argument types
        out_names=["out"],
    )
    grid_stride = Problem(
        "add_grid_stride_kernel",
        lambda a, b: a + b,
        lambda n, rng: (_vec(n, rng), _vec(n, rng)),
        sizes=[1, 63, 64, 65, 200],
        launch=lambda a, b, out: (2, 32),
        ptx="auto",
        out_names=["out"],
    )
    transpose_tiled = Problem(
        "transpose_tiled_kernel",
        lambda a: np.ascontiguousarray(a.T),
        lambda s, rng: (_mat(s, rng),),
        sizes=[(1, 1), (9, 40), (33, 20)],
        # one 32 x 32 tile per block of 32 x 8 threads (each thread moves 4 rows of it), as the lesson says
        launch=lambda a, out: ((ceil_div(a.shape[1], 32), ceil_div(a.shape[0], 32)), (32, 8)),
        ptx="auto",
        out_names=["out"],
        budget=Budget(sectors={"a": 2.0, "out": 2.0}),  # the point of the tile: a naive transpose writes strided
        mistakes={
            "columns of out were never written: each block has 32 x 8 threads but moves a whole 32 x 32 tile, so "
            "each thread handles 4 rows of it, ty, ty + 8, ty + 16 and ty + 24 (`for r in range(ty, 32, 8)`), "
            "from row cuda.blockIdx.y * 32 of a (one element per thread, with cuda.grid(2), covers a quarter of "
            "the rows).": _transpose_one_row_per_thread,
        },
    )
    strip = Problem(
        "matmul_strip_kernel",
        lambda A, B: A @ B,
        lambda s, rng: (_mat(s[:2], rng), _mat(s[1:], rng)),
        # N = 64: the grid has exactly N / 4 threads along x, so a thread that computes fewer than 4 outputs
        # leaves columns unwritten (with other N the grid rounds up to whole blocks and hides it)
        sizes=[(1, 1, 1), (17, 33, 9), (20, 16, 70), (3, 5, 64)],
        launch=lambda A, B, C: grid_2d(C.shape[0], ceil_div(C.shape[1], _ans.STRIP_TN), (16, 16)),
        reduction=lambda A, B: A.shape[1],
        out_names=["C"],
        # A[i, k] loaded once per thread and k: W times in all, W = the threads along x (not once per output)
        budget=Budget(
            reads_per_element={"A": lambda s: 16 * ceil_div(ceil_div(s[2], _ans.STRIP_TN), 16)},
            sectors={"B": 2.0},  # neighbouring lanes, neighbouring columns of B
        ),
        ptx="void(float32[:, :], float32[:, :], float32[:, :])",  # 4 accumulators in a Python list run only here
        mistakes={
            "the columns from j0 + 3W on were never written: each thread computes 4 outputs, at columns j0, "
            "j0 + W, j0 + 2W and j0 + 3W (`for t in range(4)`), each with its own accumulator.": _strip_three_outputs,
        },
    )
    ex = [
        # 01 · threads, blocks and grids
        Exercise(
            "01",
            "add",
            Problem(
                "add_kernel",
                lambda a, b: a + b,
                lambda n, rng: (_vec(n, rng), _vec(n, rng)),
                sizes=[1, 7, 100, 300],
                threads=[128, 32],
                ptx="auto",
                out_names=["out"],
            ),
            add_kernel,
        ),
        Exercise(
            "01",
            "scale2d",
            scale2d,
            scale2d_kernel,
            checker=_with_duplicate_write_hint(
                scale2d,
                _ONE_OWNER + "Take both indices from the 2-D grid, `j, i = cuda.grid(2)`, and write only "
                "out[i, j]: one thread per element, no loop over a row or column.",
            ),
        ),
        Exercise(
            "01",
            "grid_stride",
            grid_stride,
            add_grid_stride_kernel,
            checker=_with_duplicate_write_hint(
                grid_stride,
                _ONE_OWNER + "In a grid-stride loop every thread starts at its own global index, "
                "`cuda.grid(1)`, and steps by the number of threads in the whole grid, `cuda.gridsize(1)` "
                "(blocks x threads per block): not by cuda.blockDim.x, cuda.gridDim.x or 1. "
                "`for k in range(cuda.grid(1), out.size, cuda.gridsize(1)):`",
            ),
        ),
        # a device function, checked inside a given kernel (lessons.device_fns names its mistakes)
        Exercise("01", "at", device_fns.problem(), device_fns.at, checker=device_fns.check_at),
        # 02 · memory
        Exercise(
            "02",
            "saxpy",
            Problem(
                "saxpy_kernel",
                lambda al, x, y: al * x + y,
                lambda n, rng: (alpha, _vec(n, rng), _vec(n, rng)),
                sizes=[1, 31, 300],
                threads=[128, 32],
                ptx="auto",
                out_names=["out"],
            ),
            saxpy_kernel,
        ),
        # a host function that feeds the GPU on streams: checked by lessons.pipelined (named mistakes included)
        Exercise(
            "02",
            "pipelined_saxpy",
            Problem(
                pipelined.NAME,
                lambda al, x, y: al * x + y,
                lambda n, rng: (alpha, _vec(n, rng), _vec(n, rng)),
                sizes=[7, 300],
                host=as_host(lambda al, x, y: _pipelined(al, x, y), 3, pipelined.NAME),
                out_names=["out"],
                race_check=False,  # a host function: its streams are checked from the record, not by races
                # no PTX check: the learner writes host code (copies, launches, streams); the kernel is saxpy's
            ),
            pipelined.pipelined_saxpy,
            checker=pipelined.check_pipelined,
        ),
        Exercise(
            "02",
            "transpose_naive",
            Problem(
                "transpose_naive_kernel",
                lambda a: np.ascontiguousarray(a.T),
                lambda s, rng: (_mat(s, rng),),
                sizes=[(1, 1), (5, 37), (20, 33)],
                launch=lambda a, out: grid_2d(*a.shape, (16, 16)),
                ptx="auto",
                out_names=["out"],
            ),
            transpose_naive_kernel,
        ),
        Exercise(
            "02",
            "transpose_tiled",
            transpose_tiled,
            _ans.transpose_tiled32_kernel,
            checker=_with_duplicate_write_hint(
                transpose_tiled,
                _ONE_OWNER + "A block moves one 32 x 32 tile although it has 32 x 8 threads: its tile starts at "
                "row cuda.blockIdx.y * 32 and column cuda.blockIdx.x * 32 of a (not blockDim.y or blockDim.x "
                "times the block index, and not cuda.grid(2)), and each thread handles rows ty, ty + 8, ty + 16, "
                "ty + 24 of the tile.",
            ),
        ),
        # 03 · matmul, one thread per output
        Exercise(
            "03",
            "matmul_naive",
            Problem(
                "matmul_naive_kernel",
                lambda A, B: A @ B,
                lambda s, rng: (_mat(s[:2], rng), _mat(s[1:], rng)),
                sizes=[(1, 1, 1), (17, 33, 9), (20, 16, 35)],
                launch=lambda A, B, C: grid_2d(*C.shape, (16, 16)),
                reduction=lambda A, B: A.shape[1],
                out_names=["C"],
                # the simulator runs np.dot(A[i, :], B[:, j]) and sum(... for k in ...); a GPU does not
                ptx="void(float32[:, :], float32[:, :], float32[:, :])",
            ),
            matmul_naive_kernel,
        ),
        Exercise(
            "03",
            "matvec",
            Problem(
                "matvec_kernel",
                lambda A, x: A @ x,
                lambda s, rng: (_mat(s, rng), _vec(s[1], rng)),
                sizes=[(1, 1), (37, 20), (70, 9)],
                threads=[32, 64],
                ptx="auto",
                reduction=lambda A, x: A.shape[1],
                out_names=["y"],
                mistakes={
                    "y[i] sums only the first K - 1 products: the loop over k stops one short (`range(K - 1)`?). "
                    "It must run K = A.shape[1] times: `for k in range(A.shape[1]):`.": lambda A, x: A[:, :-1] @ x[:-1],
                },
            ),
            _ans.matvec_kernel,
        ),
        Exercise(
            "03",
            "linear_relu",
            Problem(
                "linear_relu_kernel",
                lambda X, W, b: np.maximum(X @ W + b, 0),
                lambda s, rng: (_mat(s[:2], rng), _mat(s[1:], rng), _vec(s[2], rng)),
                sizes=[(1, 1, 1), (9, 20, 33), (20, 12, 17)],
                launch=lambda X, W, b, Y: grid_2d(*Y.shape, (16, 16)),
                ptx="auto",
                reduction=lambda X, W, b: X.shape[1] + 1,
                out_names=["Y"],
                mistakes={
                    "Y has negative values: the ReLU is missing. After adding the bias, keep max(value, 0.0), "
                    "e.g. `Y[i, j] = max(acc, 0.0)`.": lambda X, W, b: X @ W + b,
                    "Y is min(X @ W + b, 0): the ReLU keeps the larger of the value and 0, `max(acc, 0.0)`, "
                    "not `min`.": lambda X, W, b: np.minimum(X @ W + b, 0),
                    "the bias is indexed by the row: b holds one value per output feature, a column of Y, so "
                    "add b[j] (not b[i]).": lambda X, W, b: np.maximum(X @ W + b[: X.shape[0], None], 0),
                    "the ReLU comes before the bias: add b[j] to the dot product first, then take "
                    "max(value, 0.0).": lambda X, W, b: np.maximum(X @ W, 0) + b,
                    "the bias is missing: Y = max(X @ W + b, 0), with b[j] added once to the dot product.": (
                        lambda X, W, b: np.maximum(X @ W, 0)
                    ),
                    "the bias is added K times: `acc += X[i, k] * W[k, j] + b[j]` inside the loop adds it on every "
                    "step. Add b[j] once, after the loop.": lambda X, W, b: np.maximum(X @ W + X.shape[1] * b, 0),
                },
            ),
            _ans.linear_relu_kernel,
        ),
        # 04 · shared memory and tiling
        Exercise(
            "04",
            "blur3",
            Problem(
                "blur3_kernel",
                lambda x: (
                    (np.concatenate([[0], x[:-1]]) + x + np.concatenate([x[1:], [0]])).astype(np.float32)
                    / np.float32(3)
                ),
                lambda n, rng: (_vec(n, rng),),
                sizes=[1, 2, 31, 32, 33, 100],
                rtol=1e-5,
                atol=1e-6,
                launch=launch_1d(_ans.BLUR_TPB, arg=0),
                ptx="auto",
                out_names=["out"],
                # from shared memory: x[i] read by its own thread, and once more as a neighbouring block's halo
                budget=Budget(reads_per_element={"x": 2}),
                mistakes={
                    "out[0] used the LAST element of x as its left neighbour: at i = 0, x[i - 1] is x[-1], which "
                    "counts from the end of the array, in Python and in numba on a GPU alike (numba wraps a "
                    "negative index). Take 0 there: `x[i - 1] if i > 0 else 0.0`.": _blur_wraps,
                    "wrong only where a block of 32 threads begins and ends: the halo is missing. Thread 0 must "
                    "also load x[i - 1] into buf[0], and the block's last thread x[i + 1] into buf[tx + 2] "
                    "(0.0 outside the array).": lambda x: _blur_halo(x, keep_left=False, keep_right=False),
                    "wrong only at the last element of a block of 32 threads: the right halo is missing. The "
                    "block's last thread (tx == 31) must also load x[i + 1] into buf[tx + 2] (0.0 past the end "
                    "of x).": lambda x: _blur_halo(x, keep_left=True, keep_right=False),
                    "wrong only at the first element of a block of 32 threads: the left halo is missing. Thread "
                    "0 must also load x[i - 1] into buf[0] (0.0 before the start of x).": lambda x: _blur_halo(
                        x, keep_left=False, keep_right=True
                    ),
                },
            ),
            _ans.blur3_kernel,
        ),
        Exercise(
            "04",
            "matmul_tiled",
            Problem(
                "matmul_tiled_kernel",
                lambda A, B: A @ B,
                lambda s, rng: (_mat(s[:2], rng), _mat(s[1:], rng)),
                sizes=[(1, 1, 1), (17, 33, 9), (9, 20, 18)],
                launch=lambda A, B, C: grid_2d(*C.shape, (MATMUL_TILE, MATMUL_TILE)),
                ptx="auto",
                reduction=lambda A, B: A.shape[1],
                out_names=["C"],
                # through shared tiles: each element of A loaded once per block column, of B once per block row
                budget=Budget(
                    reads_per_element={
                        "A": lambda s: ceil_div(s[2], MATMUL_TILE),
                        "B": lambda s: ceil_div(s[0], MATMUL_TILE),
                    }
                ),
            ),
            matmul_tiled_kernel,
        ),
        Exercise(
            "04",
            "matmul_strip",
            strip,
            _ans.matmul_strip_kernel,
            checker=_with_duplicate_write_hint(
                strip,
                _ONE_OWNER + "A thread's 4 columns are W apart, with W = cuda.gridDim.x * cuda.blockDim.x, the "
                "number of threads along x in the whole grid (cuda.blockDim.x alone is one block's): then the "
                "threads' columns j0, j0 + W, j0 + 2W, j0 + 3W never meet.",
                over_budget={
                    "budget: reads of A": "load A[i, k] once per k into a register, `a = A[i, k]`, before the loop "
                    "over the 4 outputs, and multiply by `a` in all four: one load serves 4 multiply-adds.",
                    "budget: coalescing of B": "a thread's 4 columns must be W apart (j0, j0 + W, j0 + 2W, j0 + 3W), "
                    "not next to each other (4 * j0 + t): then the 16 lanes of a half-warp read 16 neighbouring "
                    "elements of B's row k.",
                },
            ),
        ),
    ]
    return ex


EXERCISES_LIST: list[Exercise] = _problems()
