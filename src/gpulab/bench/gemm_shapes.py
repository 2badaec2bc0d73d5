"""Section ``gemm_shapes`` of ``python -m gpulab bench lessons`` (lesson 09): the CNN's weight-gradient products
timed alone with each of the course's matmul kernels.

A conv layer's weight gradient ``d.T @ cols`` has a tiny C and a long K (conv1 at batch 128: (32 x 100,352) @
(100,352 x 9)). Each row times one kernel on one shape with :func:`gpulab.timing.benchmark` (CUDA events, median
of ``repeat``): the register-tiled kernel (64 x 64 outputs a block), lesson 04's tiled kernel (16 x 16), split-K
(:mod:`gpulab.kernels.splitk`, the sum of the partials included) and the array library's own ``a @ b`` (cuBLAS
through CuPy in gpu mode, NumPy in the simulator). Each result is checked against that reference first.
Rows ``{"M", "K", "N", "kernel", "blocks", "seconds"}`` (split-K's with ``"slices"``).

The first rows of this section, for an H200 on 2026-12-04, came from a diagnostic script run once outside
gpu-check (timing.benchmark medians of 10, the same three shapes, no split-K row; the script recorded no blocks:
their ``"blocks"`` were computed afterwards from the shapes); the file's ``sources`` says so.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from .. import runtime, timing
from ..kernels._launch import ceil_div

__all__ = ["SIZES", "gemm_shapes_rows"]

# (M, K, N): conv1's and conv2's weight gradients at batch 128 and channels (32, 64), and fc1's at 128 hidden units.
CNN_SHAPES = ((32, 100_352, 9), (64, 25_088, 288), (128, 3_136, 128))

SIZES: dict[str, dict[str, Any]] = {
    "gpu": {"shapes": CNN_SHAPES, "slices": None, "repeat": 10},
    "simulator": {"shapes": ((20, 70, 9),), "slices": 3, "repeat": 1},  # only exercises the code
}


def _blocks(kernel: str, M: int, N: int, slices: int = 1) -> int:
    """Blocks the launch starts: one per 64 x 64 (register-tiled) or 16 x 16 (tiled, split-K: per slice) of C; the
    latter is :func:`gpulab.kernels.splitk.splitk_grid`'s grid (one slice: the tiled kernel's)."""
    from ..kernels.matmul import BM, BN
    from ..kernels.splitk import splitk_grid

    if kernel == "regtiled":
        return ceil_div(N, BN) * ceil_div(M, BM)
    return math.prod(splitk_grid(M, N, slices))


def gemm_shapes_rows(
    shapes: Any = None, *, slices: int | None = None, repeat: int | None = None
) -> list[dict[str, Any]]:
    """Rows for each (M, K, N) of ``shapes`` (default: the mode's :data:`SIZES`): register-tiled, tiled, split-K
    and the reference ``a @ b``. ``slices``: split-K's slices for every shape; None: those
    :func:`gpulab.kernels.splitk.plan` picks for this GPU, and no split-K row for a shape it would not split."""
    from ..kernels.splitk import plan

    sz = SIZES[runtime.mode()]
    if shapes is None:
        shapes, slices = sz["shapes"], sz["slices"] if slices is None else slices
    repeat = sz["repeat"] if repeat is None else repeat
    rows: list[dict[str, Any]] = []
    for M, K, N in shapes:
        p = plan(M, N, K)
        s = slices if slices is not None else (p.slices if p.kernel == "splitk" else 0)
        rows += _shape_rows(M, K, N, s, repeat)
    return rows


def _shape_rows(M: int, K: int, N: int, slices: int, repeat: int) -> list[dict[str, Any]]:
    """One shape's rows: each kernel's product checked against the reference ``a @ b``, then timed."""
    from ..kernels.matmul import matmul
    from ..kernels.splitk import matmul_splitk

    xp = runtime.xp()
    rng = np.random.default_rng(0)
    a = xp.asarray(rng.standard_normal((M, K)).astype(np.float32))
    b = xp.asarray(rng.standard_normal((K, N)).astype(np.float32))
    ref = runtime.to_host(a @ b)
    runs: list[tuple[str, Any, dict[str, Any]]] = [
        ("regtiled", lambda: matmul(a, b, kernel="regtiled"), {"blocks": _blocks("regtiled", M, N)}),
        ("tiled", lambda: matmul(a, b, kernel="tiled"), {"blocks": _blocks("tiled", M, N)}),
    ]
    if slices:
        split = {"blocks": _blocks("splitk", M, N, slices), "slices": slices}
        runs.append(("splitk", lambda: matmul_splitk(a, b, slices), split))
    rows = []
    for name, fn, extra in runs:
        # float32 sums of K terms in another order than the reference's: a loose bound that a wrong product misses
        np.testing.assert_allclose(runtime.to_host(fn()), ref, rtol=1e-3, atol=1e-3 * np.sqrt(K))
        t = timing.benchmark(fn, repeat=repeat, label=f"{name} ({M}, {K}, {N})").median
        rows.append({"M": M, "K": K, "N": N, "kernel": name, **extra, "seconds": t})
    ref_name = "cupy" if runtime.is_gpu() else "numpy"
    t = timing.benchmark(lambda: a @ b, repeat=repeat, label=f"{ref_name} ({M}, {K}, {N})").median
    return rows + [{"M": M, "K": K, "N": N, "kernel": ref_name, "seconds": t}]
