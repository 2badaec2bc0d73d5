"""The exercises of lessons 00-04 as data (threads and grids, memory, 2-D indexing, matmul): what each
kernel must compute, on which inputs, launched how, and the known mistakes that get a named hint.
Reference answers: :mod:`.answers`. Collected, with every other ``ex_*.py`` module's, by :mod:`.problems`.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..exercises import Problem
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
from .exercise import Exercise

__all__ = ["EXERCISES_LIST"]


def _vec(n: int, rng: np.random.Generator) -> np.ndarray:
    return rng.uniform(-1, 1, n).astype(np.float32)


def _mat(shape: Sequence[int], rng: np.random.Generator) -> np.ndarray:
    return rng.uniform(-1, 1, tuple(shape)).astype(np.float32)


def _problems() -> list[Exercise]:
    alpha = np.float32(2.5)
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
                out_names=["out"],
            ),
            add_kernel,
        ),
        Exercise(
            "01",
            "scale2d",
            Problem(
                "scale2d_kernel",
                lambda al, a: al * a,
                lambda s, rng: (alpha, _mat(s, rng)),
                sizes=[(1, 1), (5, 37), (20, 33)],
                launch=lambda al, a, out: grid_2d(*out.shape, (16, 16)),
                out_names=["out"],
            ),
            scale2d_kernel,
        ),
        Exercise(
            "01",
            "grid_stride",
            Problem(
                "add_grid_stride_kernel",
                lambda a, b: a + b,
                lambda n, rng: (_vec(n, rng), _vec(n, rng)),
                sizes=[1, 63, 64, 65, 200],
                launch=lambda a, b, out: (2, 32),
                out_names=["out"],
            ),
            add_grid_stride_kernel,
        ),
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
                out_names=["out"],
            ),
            saxpy_kernel,
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
                out_names=["out"],
            ),
            transpose_naive_kernel,
        ),
        Exercise(
            "02",
            "transpose_tiled",
            Problem(
                "transpose_tiled_kernel",
                lambda a: np.ascontiguousarray(a.T),
                lambda s, rng: (_mat(s, rng),),
                sizes=[(1, 1), (9, 40), (33, 20)],
                launch=lambda a, out: grid_2d(*a.shape, (32, 8)),
                out_names=["out"],
            ),
            _ans.transpose_tiled32_kernel,
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
                reduction=lambda A, x: A.shape[1],
                out_names=["y"],
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
                reduction=lambda X, W, b: X.shape[1] + 1,
                out_names=["Y"],
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
                out_names=["out"],
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
                reduction=lambda A, B: A.shape[1],
                out_names=["C"],
            ),
            matmul_tiled_kernel,
        ),
        Exercise(
            "04",
            "matmul_strip",
            Problem(
                "matmul_strip_kernel",
                lambda A, B: A @ B,
                lambda s, rng: (_mat(s[:2], rng), _mat(s[1:], rng)),
                sizes=[(1, 1, 1), (17, 33, 9), (20, 16, 70)],
                launch=lambda A, B, C: grid_2d(C.shape[0], ceil_div(C.shape[1], _ans.STRIP_TN), (16, 16)),
                reduction=lambda A, B: A.shape[1],
                out_names=["C"],
            ),
            _ans.matmul_strip_kernel,
        ),
    ]
    return ex


EXERCISES_LIST: list[Exercise] = _problems()
