"""Matrix multiply, the llm.c ``dev/cuda`` way: a reference, then kernels that get faster (lessons 03-04).

NumPy reference: ``C = A @ B`` with ``A`` of shape (M, K), ``B`` of shape (K, N), ``C`` of shape (M, N)::

    for i in range(M):
        for j in range(N):
            C[i, j] = sum(A[i, k] * B[k, j] for k in range(K))

The ladder (each version validated against :func:`matmul_reference`):

1. ``matmul_naive_kernel``: one thread per output element, every operand read from global memory.
2. ``matmul_tiled_kernel``: a block of TILE x TILE threads stages TILE x TILE tiles of A and B in shared
   memory, so each global element is loaded once per block instead of once per thread.
3. ``matmul_regtiled_kernel``: a block computes a BM x BN tile of C; each thread keeps TM x TN
   outputs in registers, so every value taken from shared memory is used TM or TN times.

Then cuBLAS (CuPy's ``@``), which is what a deep-learning framework calls.
"""

from __future__ import annotations

import os
import sys
from typing import Any
from collections.abc import Callable

import numpy as np
from numba import cuda, float32

from .. import runtime
from ._launch import LaunchError, allocate_like, blocks_for, check_array, check_launch, check_out
from .grid_stride import device_args

__all__ = [
    "BK",
    "BM",
    "BN",
    "MATMUL_KERNELS",
    "PTX_SIGNATURES",
    "TM",
    "TN",
    "TILE",
    "benchmark_ladder",
    "disable_tf32",
    "launch_config",
    "matmul",
    "matmul_flops",
    "matmul_naive_kernel",
    "matmul_reference",
    "matmul_regtiled_kernel",
    "matmul_tiled_kernel",
    "operands",
]

# Naive and shared-memory tiled kernels: blocks of TILE x TILE threads (256 threads for TILE = 16).
TILE = 16

# Register-tiled kernel: a block computes a BM x BN tile of C, walking K in steps of BK; each thread
# computes TM x TN outputs, so a block has (BN // TN) x (BM // TM) = 16 x 16 = 256 threads.
BM = 64
BN = 64
BK = 16
TM = 4
TN = 4
RT_THREADS_X = BN // TN  # 16 threads along the columns of the tile
RT_THREADS_Y = BM // TM  # 16 threads along the rows
RT_THREADS = RT_THREADS_X * RT_THREADS_Y  # 256
A_LOADS = (BM * BK) // RT_THREADS  # elements of the A tile each thread copies (4)
B_LOADS = (BK * BN) // RT_THREADS  # elements of the B tile each thread copies (4)
assert (BM * BK) % RT_THREADS == 0 and (BK * BN) % RT_THREADS == 0, "each thread must copy whole elements"


# --------------------------------------------------------------------------------------------------
# v1: naive
# --------------------------------------------------------------------------------------------------
@cuda.jit
def matmul_naive_kernel(A, B, C):
    # x runs fastest across a warp, so x picks the column: neighbouring threads then read neighbouring
    # elements of B's row k and write neighbouring elements of C (coalesced accesses).
    j, i = cuda.grid(2)  # j = column of C, i = row of C
    if i < C.shape[0] and j < C.shape[1]:  # bounds guard: the grid is rounded up to whole blocks
        acc = float32(0.0)
        for k in range(A.shape[1]):
            acc += A[i, k] * B[k, j]  # two global loads for one multiply-add
        C[i, j] = acc


# --------------------------------------------------------------------------------------------------
# v2: shared-memory tiles
# --------------------------------------------------------------------------------------------------
@cuda.jit
def matmul_tiled_kernel(A, B, C):
    sA = cuda.shared.array((TILE, TILE), float32)  # one tile of A, shared by the block's threads
    sB = cuda.shared.array((TILE, TILE), float32)  # one tile of B
    j, i = cuda.grid(2)  # j = column of C, i = row of C
    tx = cuda.threadIdx.x
    ty = cuda.threadIdx.y
    K = A.shape[1]
    acc = float32(0.0)
    for t in range((K + TILE - 1) // TILE):  # walk along K one tile at a time
        k0 = t * TILE
        # Each thread copies ONE element of each tile; zeros pad the tiles past the matrix edges.
        if i < A.shape[0] and k0 + tx < K:
            sA[ty, tx] = A[i, k0 + tx]
        else:
            sA[ty, tx] = 0.0
        if k0 + ty < K and j < B.shape[1]:
            sB[ty, tx] = B[k0 + ty, j]
        else:
            sB[ty, tx] = 0.0
        cuda.syncthreads()  # wait until every thread has written its element of sA and sB
        for k in range(TILE):
            acc += sA[ty, k] * sB[k, tx]  # TILE multiply-adds from shared memory, no global loads
        cuda.syncthreads()  # wait until every thread is done reading the tiles before they are overwritten
    if i < C.shape[0] and j < C.shape[1]:
        C[i, j] = acc


# --------------------------------------------------------------------------------------------------
# v3: register tiles (each thread computes TM x TN outputs)
# --------------------------------------------------------------------------------------------------
@cuda.jit
def matmul_regtiled_kernel(A, B, C):
    sA = cuda.shared.array((BM, BK), float32)  # BM x BK slab of A
    sB = cuda.shared.array((BK, BN), float32)  # BK x BN slab of B
    acc = cuda.local.array((TM, TN), float32)  # this thread's TM x TN outputs, kept in registers
    a_reg = cuda.local.array(TM, float32)
    b_reg = cuda.local.array(TN, float32)

    tx = cuda.threadIdx.x  # 0 .. BN // TN - 1
    ty = cuda.threadIdx.y  # 0 .. BM // TM - 1
    tid = ty * RT_THREADS_X + tx  # linear thread id in the block, 0 .. 255
    row0 = cuda.blockIdx.y * BM  # first row of C this block computes
    col0 = cuda.blockIdx.x * BN  # first column
    M = A.shape[0]
    K = A.shape[1]
    N = B.shape[1]

    for m in range(TM):  # constant trip counts: the compiler unrolls these loops and keeps acc in registers
        for n in range(TN):
            acc[m, n] = 0.0

    for k0 in range(0, K, BK):
        # Copy the slabs with all 256 threads. Consecutive threads take consecutive elements of a row,
        # so a warp reads contiguous runs of global memory (coalesced).
        for l in range(A_LOADS):
            e = tid + l * RT_THREADS
            r = e // BK
            c = e % BK
            if row0 + r < M and k0 + c < K:
                sA[r, c] = A[row0 + r, k0 + c]
            else:
                sA[r, c] = 0.0
        for l in range(B_LOADS):
            e = tid + l * RT_THREADS
            r = e // BN
            c = e % BN
            if k0 + r < K and col0 + c < N:
                sB[r, c] = B[k0 + r, col0 + c]
            else:
                sB[r, c] = 0.0
        cuda.syncthreads()  # wait until both slabs are completely in shared memory

        for k in range(BK):
            # This thread's rows are ty, ty + 16, ...; its columns tx, tx + 16, ... (strided, so that
            # neighbouring threads read neighbouring shared-memory words: no bank conflicts).
            for m in range(TM):
                a_reg[m] = sA[ty + m * RT_THREADS_Y, k]
            for n in range(TN):
                b_reg[n] = sB[k, tx + n * RT_THREADS_X]
            for m in range(TM):  # TM * TN multiply-adds for TM + TN shared-memory loads
                for n in range(TN):
                    acc[m, n] += a_reg[m] * b_reg[n]
        cuda.syncthreads()  # wait until every thread is done with the slabs before the next copy overwrites them

    for m in range(TM):
        i = row0 + ty + m * RT_THREADS_Y
        for n in range(TN):
            j = col0 + tx + n * RT_THREADS_X
            if i < M and j < N:
                C[i, j] = acc[m, n]


# The ladder in order, name -> kernel (cuBLAS is the reference, not a kernel of ours).
MATMUL_KERNELS: dict[str, Any] = {
    "naive": matmul_naive_kernel,
    "tiled": matmul_tiled_kernel,
    "regtiled": matmul_regtiled_kernel,
}


def launch_config(kernel: Any, M: int, N: int) -> tuple[tuple[int, int], tuple[int, int]]:
    """``(blocks, threads)`` for computing an (M, N) result with one of :data:`MATMUL_KERNELS`.

    The grid's x dimension runs over the columns of C and y over its rows.
    """
    if kernel is matmul_regtiled_kernel:
        return (blocks_for(N, BN), blocks_for(M, BM)), (RT_THREADS_X, RT_THREADS_Y)
    if kernel is matmul_naive_kernel or kernel is matmul_tiled_kernel:
        return (blocks_for(N, TILE), blocks_for(M, TILE)), (TILE, TILE)
    raise LaunchError(
        f"matmul does not know how to launch {getattr(kernel, '__name__', kernel)!r}. Pass one of "
        f"{', '.join(MATMUL_KERNELS)} (by name or as gpulab.kernels.matmul_<name>_kernel), or launch "
        "your own kernel directly with kernel[blocks, threads](a, b, out)."
    )


def _resolve(kernel: Any) -> Any:
    if kernel is None:
        return matmul_regtiled_kernel
    if isinstance(kernel, str):
        try:
            return MATMUL_KERNELS[kernel]
        except KeyError:
            raise LaunchError(
                f"unknown matmul kernel {kernel!r}; expected one of {', '.join(MATMUL_KERNELS)}."
            ) from None
    return kernel


def operands(a: Any, b: Any) -> tuple[int, int, int]:
    """``(M, K, N)`` of float32 matrices a (M, K) and b (K, N); raises with what to fix when they do not fit."""
    check_array("a", a, ndim=2, dtype=np.float32)
    check_array("b", b, ndim=2, dtype=np.float32)
    M, K = (int(s) for s in a.shape)
    K2, N = (int(s) for s in b.shape)
    if K != K2:
        raise LaunchError(
            f"inner dimensions differ: a is {M}x{K} and b is {K2}x{N}, but a @ b needs a.shape[1] == "
            f"b.shape[0] ({K} != {K2}). Check the order of the operands, or transpose one (b.T)."
        )
    return M, K, N


def matmul(a: Any, b: Any, out: Any = None, *, kernel: Any = None) -> Any:
    """``out = a @ b`` for float32 matrices a (M, K) and b (K, N), computed by one of our kernels.

    ``kernel`` is a name from :data:`MATMUL_KERNELS` or the kernel itself; the default is the
    register-tiled kernel, the fastest on a GPU and also in the simulator (it launches 16x fewer
    threads than the others). Arrays are NumPy (simulator) or CuPy / Numba device arrays (gpu mode);
    ``out`` is allocated with the inputs' array module when not given.
    """
    M, K, N = operands(a, b)
    if out is None:
        out = allocate_like(a, (M, N), np.float32)  # Numba device arrays in, one out (no host round trip)
    else:
        check_array("out", out, ndim=2)
        if tuple(out.shape) != (M, N):
            raise LaunchError(
                f"out must have shape (M, N) = ({M}, {N}) for a {M}x{K} times {K}x{N} product, "
                f"but has shape {tuple(out.shape)}. Pass out=None to allocate it."
            )
        check_out(out, (M, N), np.float32, fix="Pass out=None to allocate it.")
    kern = _resolve(kernel)
    if M == 0 or N == 0:
        return out
    blocks, threads = launch_config(kern, M, N)
    check_launch(blocks, threads)
    # device_args: CuPy arrays as Numba device arrays without numba-cuda 0.22's stream sync per argument (three
    # host-blocking syncs per product otherwise; grid_stride.device_args says why none is needed)
    kern[blocks, threads](*device_args(a, b, out))  # K == 0 gives zeros: every accumulator starts at 0
    return out


def matmul_reference(a: Any, b: Any) -> Any:
    """``a @ b`` by the library of the inputs' array module: cuBLAS via CuPy, or NumPy's BLAS."""
    xp = runtime.array_module(a, b)
    return xp.matmul(a, b)


def matmul_flops(M: int, N: int, K: int) -> int:
    """Floating-point operations of an (M, K) x (K, N) product: one multiply and one add per term."""
    return 2 * int(M) * int(N) * int(K)


def disable_tf32() -> bool:
    """Make CuPy's float32 matmuls (cuBLAS) compute in full float32, not on TF32 tensor cores, for a fair race.

    CuPy decides at its first float32 product, from ``CUPY_TF32`` (default ``0``: TF32 off), unless told before
    (CuPy 13 and 14: ``cupy/_core/_routines_linalg.pyx``, ``get_compute_type``). Before CuPy is imported this sets
    ``CUPY_TF32=0``; after, it sets CuPy's float32 compute type to the default (full FP32) directly, so that it
    holds even when ``CUPY_TF32=1`` was set or a TF32 product already ran. Returns True when CuPy's float32
    products run in full float32 from now on; False only with a CuPy that has no compute-type setting (it says
    whether ``CUPY_TF32`` is off then).
    """
    if "cupy" not in sys.modules:
        os.environ["CUPY_TF32"] = "0"
        return True
    try:
        from cupy._core import _routines_linalg as linalg

        linalg.set_compute_type(np.float32, linalg.COMPUTE_TYPE_DEFAULT)
    except (ImportError, AttributeError):  # another CuPy (or the emulated tier's stand-in)
        return os.environ.get("CUPY_TF32", "0") == "0"
    return True


def benchmark_ladder(
    M: int, N: int, K: int, *, repeat: int = 5, kernels: Any = None, seed: int = 0
) -> list[dict[str, Any]]:
    """Time each kernel of the ladder and the library reference on random (M, K) x (K, N) inputs.

    Every result is checked against :func:`matmul_reference` first. Returns one row per entry,
    ``{"kernel", "M", "N", "K", "seconds", "gflops", "percent_of_reference", "mode", "reference"}``;
    the last row is the reference (``"cuBLAS"`` in gpu mode, ``"NumPy"`` in the simulator).
    In simulator mode the timings are CPU-simulator timings, not GPU timings.
    """
    from ..timing import benchmark, gflops

    rng = np.random.default_rng(seed)
    a_h = rng.standard_normal((M, K), dtype=np.float32)
    b_h = rng.standard_normal((K, N), dtype=np.float32)
    a_d, b_d = runtime.to_device(a_h), runtime.to_device(b_h)
    expected = runtime.to_host(matmul_reference(a_d, b_d))
    names = list(kernels) if kernels is not None else list(MATMUL_KERNELS)
    flops = matmul_flops(M, N, K)
    ref_name = "cuBLAS" if runtime.is_gpu() else "NumPy"
    rows: list[dict[str, Any]] = []
    for name in names:
        out_d = matmul(a_d, b_d, kernel=name)
        got = runtime.to_host(out_d)
        np.testing.assert_allclose(
            got,
            expected,
            rtol=1e-3,
            atol=1e-3 * max(1.0, np.sqrt(K)),
            err_msg=f"matmul kernel {name!r} disagrees with {ref_name}",
        )
        res = benchmark(matmul, a_d, b_d, out_d, kernel=name, repeat=repeat, label=name)
        rows.append({"kernel": name, "seconds": res.median})
    res = benchmark(matmul_reference, a_d, b_d, repeat=repeat, label=ref_name)
    rows.append({"kernel": ref_name, "seconds": res.median})
    ref_seconds = rows[-1]["seconds"]
    for row in rows:
        row.update(
            M=M,
            N=N,
            K=K,
            mode=runtime.mode(),
            reference=ref_name,
            gflops=gflops(flops, row["seconds"]),
            percent_of_reference=100.0 * ref_seconds / row["seconds"],
        )
    return rows


# (kernel, signature) pairs compiled to PTX by the tests: proof that each kernel is real CUDA.
_SIG = "void(float32[:, :], float32[:, :], float32[:, :])"
PTX_SIGNATURES: list[tuple[Callable[..., Any], str]] = [
    (matmul_naive_kernel, _SIG),
    (matmul_tiled_kernel, _SIG),
    (matmul_regtiled_kernel, _SIG),
]
