"""viz.memory: shared-memory bank conflicts counted in the simulator; viz.threads: warp divergence."""

from __future__ import annotations

import numpy as np
from numba import cuda, float32

from gpulab.kernels.memory import transpose_tiled_kernel
from gpulab.lessons.answers import transpose_tiled32_kernel
from gpulab.trace import trace
from gpulab.viz import bank_conflicts, divergence_counts, divergence_map, warp_paths


@cuda.jit
def column_read_unpadded(a, out):
    tile = cuda.shared.array((32, 32), float32)
    tx = cuda.threadIdx.x
    tile[tx, 0] = a[tx]  # a warp writes down a column: 32 words, 32 apart -> one bank
    cuda.syncthreads()  # the column is written before it is read
    out[tx] = tile[0, tx]  # a warp reads along a row: 32 banks


@cuda.jit
def broadcast_read(a, out):
    buf = cuda.shared.array(32, float32)
    tx = cuda.threadIdx.x
    buf[tx] = a[tx]
    cuda.syncthreads()  # buf is complete before everyone reads word 0
    out[tx] = buf[0]  # every lane reads the same word: one broadcast, no conflict


def test_transpose_16x17_is_two_way_and_32x33_conflict_free():
    a = np.arange(256, dtype=np.float32).reshape(16, 16)
    out = np.zeros_like(a)
    b16 = bank_conflicts(transpose_tiled_kernel, (1, 1), (16, 16), a, out)["tile"]
    assert np.array_equal(out, a.T)
    assert b16["worst"] == 2 and b16["wavefronts"] == 2 * b16["requests"]
    a32 = np.arange(32 * 32, dtype=np.float32).reshape(32, 32)
    out32 = np.zeros_like(a32)
    b32 = bank_conflicts(transpose_tiled32_kernel, (1, 1), (32, 8), a32, out32)["tile"]
    assert np.array_equal(out32, a32.T)
    assert b32["worst"] == 1 and b32["wavefronts"] == b32["requests"] == 64


def test_column_of_unpadded_tile_is_32_way_and_broadcast_is_free():
    a = np.arange(32, dtype=np.float32)
    out = np.zeros_like(a)
    rec = bank_conflicts(column_read_unpadded, 1, 32, a, out)["tile"]
    assert rec["by_kind"]["w"] == (1, 32) and rec["by_kind"]["r"] == (1, 1)
    rec = bank_conflicts(broadcast_read, 1, 32, a, out)["buf"]
    assert rec["worst"] == 1 and np.all(out == a[0])


@cuda.jit
def _parity(x, even, odd):
    i = cuda.grid(1)
    if i < x.size:
        if i % 2 == 0:
            even[i] = x[i]
        else:
            odd[i] = x[i]


def test_divergence_counts_and_map():
    x = np.ones(80, np.float32)  # 2 blocks of 64: the last warp is half idle
    log = trace(_parity, 2, 64, x, np.zeros_like(x), np.zeros_like(x), names=("x", "even", "odd"))
    counts = divergence_counts(log, ("even", "odd"))
    assert counts["warps"] == 4  # 2 blocks x 2 warps
    paths = warp_paths(log, ("even", "odd"))
    assert paths[((0, 0, 0), 0)][:4] == [0, 1, 0, 1]
    assert paths[((1, 0, 0), 1)] == [-1] * 32  # threads 96..127 are past the end
    assert counts["divergent"] == 3 and counts["passes"] == 6
    fig = divergence_map(log, ("even", "odd"))
    assert "3 of 4 warps diverge" in fig.layout.title.text
