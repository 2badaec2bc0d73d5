"""The exercises of lessons 00-04 as data (threads and grids, memory, 2-D indexing, matmul): what each
kernel must compute, on which inputs, launched how, and the known mistakes that get a named hint (what a
kernel with each of them computes: :mod:`.mistakes_00_04`). Reference answers: :mod:`.answers`. Collected, with every other ``ex_*.py`` module's, by :mod:`.problems`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ..exercises import Budget, Problem
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
from .mistakes_00_04 import (
    blur_halo,
    blur_wraps,
    strip_three_outputs,
    transpose_one_row_per_thread,
    with_duplicate_write_hint,
)

__all__ = ["EXERCISES_LIST"]


def _vec(n: int, rng: np.random.Generator) -> np.ndarray:
    return rng.uniform(-1, 1, n).astype(np.float32)


def _mat(shape: Sequence[int], rng: np.random.Generator) -> np.ndarray:
    return rng.uniform(-1, 1, tuple(shape)).astype(np.float32)


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
            "the rows).": transpose_one_row_per_thread,
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
            "j0 + W, j0 + 2W and j0 + 3W (`for t in range(4)`), each with its own accumulator.": strip_three_outputs,
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
            checker=with_duplicate_write_hint(
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
            checker=with_duplicate_write_hint(
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
            checker=with_duplicate_write_hint(
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
                    "negative index). Take 0 there: `x[i - 1] if i > 0 else 0.0`.": blur_wraps,
                    "wrong only where a block of 32 threads begins and ends: the halo is missing. Thread 0 must "
                    "also load x[i - 1] into buf[0], and the block's last thread x[i + 1] into buf[tx + 2] "
                    "(0.0 outside the array).": lambda x: blur_halo(x, keep_left=False, keep_right=False),
                    "wrong only at the last element of a block of 32 threads: the right halo is missing. The "
                    "block's last thread (tx == 31) must also load x[i + 1] into buf[tx + 2] (0.0 past the end "
                    "of x).": lambda x: blur_halo(x, keep_left=True, keep_right=False),
                    "wrong only at the first element of a block of 32 threads: the left halo is missing. Thread "
                    "0 must also load x[i - 1] into buf[0] (0.0 before the start of x).": lambda x: blur_halo(
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
            checker=with_duplicate_write_hint(
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
