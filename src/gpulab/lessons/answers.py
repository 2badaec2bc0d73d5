"""Reference answers of the lesson exercises that have no kernel in :mod:`gpulab.kernels`.

Nothing here is imported by a lesson's text: a learner sees a kernel only by asking for it with
``gpulab.lessons.reveal(lesson, name)``. Each kernel is real CUDA (``PTX_SIGNATURES`` are compiled by
the tests) and follows the package's conventions: x is the fastest thread index and maps to the
last, contiguous array axis (``j, i = cuda.grid(2)``).
"""

from __future__ import annotations

from numba import cuda, float32

__all__ = [
    "BLUR_TPB",
    "PTX_SIGNATURES",
    "STRIP_TN",
    "T32",
    "T32_ROWS",
    "blur3_kernel",
    "linear_relu_kernel",
    "matmul_strip_kernel",
    "matvec_kernel",
    "transpose_tiled32_kernel",
]

T32 = 32  # transpose tile: 32 x 32 elements ...
T32_ROWS = 8  # ... moved by 32 x 8 threads, 4 elements each
BLUR_TPB = 32  # threads per block of the 3-point blur (a constant: shared.array needs one)
STRIP_TN = 4  # outputs per thread in the register-tiled strip matmul


@cuda.jit
def transpose_tiled32_kernel(a, out):
    # 33 floats per row: element [r, c] sits in bank (r * 33 + c) % 32 = (r + c) % 32, so the 32
    # lanes of a warp reading down a column (c fixed, r = 0..31) hit 32 different banks.
    tile = cuda.shared.array((32, 33), float32)
    tx = cuda.threadIdx.x
    ty = cuda.threadIdx.y
    col0 = cuda.blockIdx.x * 32
    row0 = cuda.blockIdx.y * 32
    for r in range(ty, 32, 8):  # each thread loads 4 rows of the tile, 8 apart
        i = row0 + r
        j = col0 + tx
        if i < a.shape[0] and j < a.shape[1]:
            tile[r, tx] = a[i, j]  # coalesced: lanes walk along a row of a
    cuda.syncthreads()  # the whole tile is loaded before anyone reads it transposed
    for r in range(ty, 32, 8):
        oi = col0 + r  # row of out = column of a
        oj = row0 + tx  # column of out = row of a
        if oi < a.shape[1] and oj < a.shape[0]:
            out[oi, oj] = tile[tx, r]  # coalesced write; column read of the tile, conflict-free


@cuda.jit
def matvec_kernel(A, x, y):
    i = cuda.grid(1)  # one thread per row of A
    if i < y.size:
        acc = float32(0.0)
        for k in range(A.shape[1]):
            acc += A[i, k] * x[k]
        y[i] = acc


@cuda.jit
def linear_relu_kernel(X, W, b, Y):
    j, i = cuda.grid(2)  # j = output feature (column), i = sample (row)
    if i < Y.shape[0] and j < Y.shape[1]:
        acc = b[j]
        for k in range(X.shape[1]):
            acc += X[i, k] * W[k, j]
        Y[i, j] = max(acc, float32(0.0))


@cuda.jit
def blur3_kernel(x, out):
    # a block's BLUR_TPB elements plus one halo element on each side
    buf = cuda.shared.array(34, float32)
    tx = cuda.threadIdx.x
    i = cuda.grid(1)
    n = x.size
    buf[tx + 1] = x[i] if i < n else float32(0.0)
    if tx == 0:
        buf[0] = x[i - 1] if 0 < i <= n else float32(0.0)
    if tx == cuda.blockDim.x - 1:
        buf[tx + 2] = x[i + 1] if i + 1 < n else float32(0.0)
    cuda.syncthreads()  # the block's slice and both halos are in shared memory
    if i < n:
        out[i] = (buf[tx] + buf[tx + 1] + buf[tx + 2]) / float32(3.0)


@cuda.jit
def matmul_strip_kernel(A, B, C):
    # Each thread computes STRIP_TN = 4 outputs of one row of C, at columns j0, j0 + W, j0 + 2W,
    # j0 + 3W (W = threads along x in the grid): neighbouring lanes still read neighbouring columns
    # of B, and every A[i, k] loaded into a register serves 4 multiply-adds instead of 1.
    acc = cuda.local.array(4, float32)
    j0, i = cuda.grid(2)
    W = cuda.gridDim.x * cuda.blockDim.x
    for t in range(4):
        acc[t] = 0.0
    if i < C.shape[0]:
        for k in range(A.shape[1]):
            a = A[i, k]  # one global load, reused 4 times
            for t in range(4):
                j = j0 + t * W
                if j < C.shape[1]:
                    acc[t] += a * B[k, j]
        for t in range(4):
            j = j0 + t * W
            if j < C.shape[1]:
                C[i, j] = acc[t]


PTX_SIGNATURES = [
    (transpose_tiled32_kernel, "void(float32[:, :], float32[:, :])"),
    (matvec_kernel, "void(float32[:, :], float32[:], float32[:])"),
    (linear_relu_kernel, "void(float32[:, :], float32[:, :], float32[:], float32[:, :])"),
    (blur3_kernel, "void(float32[:], float32[:])"),
    (matmul_strip_kernel, "void(float32[:, :], float32[:, :], float32[:, :])"),
]
