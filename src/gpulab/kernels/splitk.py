"""Split-K matrix multiply: many blocks for a product with a small output and a long K (the CNN's weight gradients).

A kernel of :mod:`gpulab.kernels.matmul` gives each block a tile of C, so it starts as many blocks as C has tiles.
A conv layer's weight gradient ``d.T @ cols`` has a tiny C and a huge K: conv1 of the course CNN at batch 128 is
(32 x 100,352) @ (100,352 x 9). On an H200 (132 SMs, 2026-12-04) the kernels backend still computed it with the
register-tiled kernel, 64 x 64 outputs a block, so the whole of C in ONE block walking all of K: 10.9 ms a call in
training, 63% of the summed per-op times of a step (make gpu-check's ``bench cnn --backend kernels --per-op``, CUDA
events around each op). Alone (timing.benchmark, median of 10, a diagnostic run the same day: the recording's
section ``gemm_shapes``) it took 9.686 ms, lesson 04's tiled kernel (16 x 16 tiles: C is 2 of them, 2 blocks)
2.897 ms, CuPy's ``a @ b`` (cuBLAS) 0.064 ms.

Split-K cuts K into S slices as well: block (x, y, z) computes tile (y, x) of C over slice z of K into
``partials[z]``, and a second kernel adds the S partials (:func:`gpulab.kernels.nn_kernels.sum_rows_kernel`, one
thread per element of C). No atomics, so the result is the same on every run. NumPy meaning::

    partials[z] = a[:, k0(z):k1(z)] @ b[k0(z):k1(z), :]      # slice z of K, whole tiles of TILE
    c = partials.sum(axis=0)

:func:`plan` decides, for the kernels backend's :func:`gpulab.kernels.nn_ops.gemm` on a GPU, whether to split and
into how many slices, and which of the matmul ladder's kernels to use when not.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

import numpy as np
from numba import cuda, float32

from .. import runtime
from ._launch import MAX_GRID_DIMS, allocate_like, ceil_div, check_array, check_launch, check_out, count
from .grid_stride import device_args, fast_simulator_arrays, launch_1d
from .matmul import BM, BN, TILE, matmul, operands
from .nn_kernels import sum_rows_kernel

__all__ = [
    "FALLBACK_SMS",
    "GemmPlan",
    "MIN_SLICE_TILES",
    "PTX_SIGNATURES",
    "SPLIT_MIN_K_TILES",
    "WAVES",
    "matmul_auto",
    "matmul_splitk",
    "matmul_splitk_kernel",
    "plan",
    "sm_count",
    "splitk_grid",
]

# plan(): aim for about WAVES x (number of SMs) blocks (an H200 SM holds 8 blocks of 256 threads, so 4 per SM all
# run at once); each slice at least MIN_SLICE_TILES tiles of K (4 x 16 = 64 multiply-adds per thread between
# writing a partial); split only when K has at least SPLIT_MIN_K_TILES tiles (1,024): a shorter loop took at most
# 64 x ~0.5-1 us per tile (the unsplit 16 x 16 kernel's per-tile time in the shapes measured below), about what one
# more launch costs on that H200 (65-135 us per numba launch).
WAVES = 4
MIN_SLICE_TILES = 4
SPLIT_MIN_K_TILES = 64
# SMs when the device cannot say (no GPU, or numba's simulator): a T4's, Colab's GPU and the emulated tier's.
FALLBACK_SMS = 40


@cuda.jit
def matmul_splitk_kernel(A, B, partials):
    sA = cuda.shared.array((TILE, TILE), float32)  # one tile of A, shared by the block's threads
    sB = cuda.shared.array((TILE, TILE), float32)  # one tile of B
    j, i = cuda.grid(2)  # j = column of C (x, the fastest index), i = row of C
    z = cuda.blockIdx.z  # which slice of K this block adds up
    tx = cuda.threadIdx.x
    ty = cuda.threadIdx.y
    K = A.shape[1]
    tiles = (K + TILE - 1) // TILE  # tiles along K
    per = (tiles + partials.shape[0] - 1) // partials.shape[0]  # tiles in a slice (the last slices may be short)
    acc = float32(0.0)
    for t in range(z * per, min(tiles, (z + 1) * per)):  # this slice's tiles; an empty slice writes zeros
        k0 = t * TILE
        # The tiled kernel's copy: one element of each tile per thread, zeros past the matrix edges.
        if i < A.shape[0] and k0 + tx < K:
            sA[ty, tx] = A[i, k0 + tx]
        else:
            sA[ty, tx] = float32(0.0)
        if k0 + ty < K and j < B.shape[1]:
            sB[ty, tx] = B[k0 + ty, j]
        else:
            sB[ty, tx] = float32(0.0)
        cuda.syncthreads()  # wait until every thread has written its element of sA and sB
        for k in range(TILE):
            acc += sA[ty, k] * sB[k, tx]
        cuda.syncthreads()  # wait until every thread is done reading the tiles before they are overwritten
    if i < partials.shape[1] and j < partials.shape[2]:
        partials[z, i, j] = acc


@functools.lru_cache(maxsize=1)
def sm_count() -> int:
    """The current device's number of SMs, read once (132 on an H100 or H200, 40 on a T4); :data:`FALLBACK_SMS`
    when it cannot be read (numba's simulator has no such attribute)."""
    from ..occupancy import device_sms

    return device_sms() or FALLBACK_SMS


@dataclass(frozen=True)
class GemmPlan:
    """How :func:`matmul_auto` computes an (M, K) @ (K, N) product: ``kernel`` is "splitk" (with ``slices`` > 1),
    "tiled" or "regtiled"; ``grid`` the launch's blocks (x over C's columns, y over its rows, z over K's slices)."""

    kernel: str
    slices: int
    grid: tuple[int, int, int]


def plan(M: int, N: int, K: int, sms: int | None = None) -> GemmPlan:
    """The launch for ``a @ b`` on a GPU with ``sms`` SMs (default :func:`sm_count`).

    Split K when C's 16 x 16 tiles are fewer than :data:`WAVES` x SMs (fewer than 4 blocks an SM: few warps to
    hide each load's latency, and every block walks all of K) and K is long (at least :data:`SPLIT_MIN_K_TILES`
    tiles): S slices so that tiles x S is about WAVES x SMs, each at least :data:`MIN_SLICE_TILES` tiles long. On an
    H200 (132 SMs), conv1's weight gradient at batch 128 (M=32, K=100,352, N=9) is 2 tiles x 262 slices, conv2's
    (M=64, K=25,088, N=288) 72 tiles x 8 slices; M = N = K = 4,096 is not split (65,536 tiles).
    """
    M, N, K = int(M), int(N), int(K)
    sms = int(sms) if sms is not None else sm_count()
    tiles_x, tiles_y = ceil_div(N, TILE), ceil_div(M, TILE)
    k_tiles = ceil_div(K, TILE)
    if tiles_x * tiles_y > 0 and k_tiles >= SPLIT_MIN_K_TILES:
        # more than 1 exactly when tiles < WAVES x SMs
        slices = min(ceil_div(WAVES * sms, tiles_x * tiles_y), k_tiles // MIN_SLICE_TILES, MAX_GRID_DIMS[2])
        per = ceil_div(k_tiles, slices)
        slices = ceil_div(k_tiles, per)  # no empty slice: e.g. 6,272 tiles in 264 slices of 24 are 262 slices
        if slices > 1:
            return GemmPlan("splitk", slices, (tiles_x, tiles_y, slices))
    # Not split: the register-tiled kernel (64 x 64 outputs a block, 16x fewer blocks than the tiled kernel) when
    # its grid gives every SM a block, else the 16 x 16 tiled kernel. With fewer blocks than SMs the tiled kernel's
    # 16x more blocks won on the H200 (2026-12-04, median of 10; results section gemm_shapes): (128, 3136, 128)
    # 0.261 ms tiled vs 0.556 ms register-tiled (64 blocks vs 4), (64, 25088, 288) 1.575 vs 3.192, (32, 100352, 9)
    # 2.897 vs 9.686.
    rt_x, rt_y = ceil_div(N, BN), ceil_div(M, BM)
    if rt_x * rt_y >= sms:
        return GemmPlan("regtiled", 1, (rt_x, rt_y, 1))
    return GemmPlan("tiled", 1, (tiles_x, tiles_y, 1))


def splitk_grid(M: int, N: int, slices: int) -> tuple[int, int, int]:
    """The split-K grid of 16 x 16 blocks: x over C's column tiles, y over its row tiles, z over K's slices."""
    return ceil_div(N, TILE), ceil_div(M, TILE), slices


def matmul_splitk(a: Any, b: Any, slices: int, out: Any = None, *, kernel: Any = None) -> Any:
    """``out = a @ b`` (float32, a (M, K), b (K, N)) with K cut into ``slices`` slices of whole 16-wide tiles.

    Launches ``kernel`` (default :func:`matmul_splitk_kernel`; lesson 09's exercise passes the learner's) on the
    grid :func:`splitk_grid` of 16 x 16 blocks into partials (slices, M, N), then ``sum_rows_kernel`` over them (one
    thread per element of C, in a fixed order); with one slice the kernel writes ``out`` directly. NumPy arrays in
    the simulator, CuPy or Numba device arrays on a GPU.
    """
    M, K, N = operands(a, b)
    slices = count("slices", slices, example="Use plan(M, N, K).slices, or 1 for no split.")
    if out is None:
        out = allocate_like(a, (M, N), np.float32)
    else:
        check_out(out, (M, N), np.float32, fix="Pass out=None to allocate it.")
    if M == 0 or N == 0:
        return out
    grid, block = splitk_grid(M, N, slices), (TILE, TILE)
    check_launch(grid, block)
    partials = out.reshape(1, M, N) if slices == 1 else allocate_like(a, (slices, M, N), np.float32)
    if runtime.is_simulator():
        fast_simulator_arrays()
    # device_args: CuPy arrays as Numba device arrays without a stream sync each (grid_stride.device_args says why)
    (kernel or matmul_splitk_kernel)[grid, block](*device_args(a, b, partials))
    if slices > 1:
        launch_1d(sum_rows_kernel, M * N, partials.reshape(slices, M * N), out.reshape(M * N))  # sum over z
    return out


def matmul_auto(a: Any, b: Any) -> Any:
    """``a @ b`` the way :func:`plan` says for this GPU: split-K, the tiled or the register-tiled kernel."""
    check_array("a", a, ndim=2, dtype=np.float32)
    check_array("b", b, ndim=2, dtype=np.float32)
    p = plan(a.shape[0], b.shape[1], a.shape[1])
    if p.kernel == "splitk":
        return matmul_splitk(a, b, p.slices)
    return matmul(a, b, kernel=p.kernel)


# (kernel, signature) pairs compiled to PTX by the tests (gpulab.kernels.all_ptx_signatures).
PTX_SIGNATURES = [
    (matmul_splitk_kernel, "void(float32[:, ::1], float32[:, ::1], float32[:, :, ::1])"),
]
