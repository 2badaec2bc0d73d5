# mypy: disable-error-code="call-arg, var-annotated, operator, call-overload"
"""Fused, tiled attention: the FlashAttention idea in one kernel (lesson 12).

The naive path (:func:`gpulab.transformer.attention.attention_naive`) writes the n x m scores to global
memory, reads them back to scale and mask, again for the softmax, and once more for ``P @ v``. The fused
kernel never stores them. A block of ``BK x BQ`` threads owns ``BQ`` query rows (``threadIdx.y`` = the
row, ``threadIdx.x`` = a key of the tile, or a column of the output: x along the last axis):

1. load its ``BQ`` rows of q into shared memory, once;
2. for each tile of ``BK`` keys: load ``k`` and ``v`` rows of the tile into shared memory, compute the
   ``BQ x BK`` scores into shared memory (thread (x, y) computes score (y, x)), then each row updates its
   **online softmax**: a running maximum ``m_i`` and a running sum ``l_i`` of ``exp(s - m_i)``. When
   the maximum grows from ``m_old`` to ``m_new``, everything summed so far was scaled by
   ``exp(-m_old)`` instead of ``exp(-m_new)``, so the sum and the output accumulator are multiplied by
   ``alpha = exp(m_old - m_new) <= 1`` before the tile's terms are added;
3. write ``out[row] = acc / l_i``.

Every exponent is ``s - m_new <= 0``, so logits of any size give no overflow. Causal blocks stop at the
last key tile their rows can see. Global traffic: q read once, k and v once per block of query rows
(``ceil(n / BQ)`` times), out written once; :func:`predicted_bytes` counts it exactly, for this kernel
and for the naive path's kernels, and :func:`measure_bytes` counts it with :func:`gpulab.trace.trace`.
The two agree exactly (tests/test_attention.py): naive / fused = 5.0 for n = m = d = 16, 5.17 for
n = m = 32, d = 16, 6.37 for a causal n = 9, m = 30, d = 8; predicted 2.85 for n = m = 1024, d = 64 and
5.42 for the same sizes causal (the fused kernel skips the key tiles past the diagonal, the naive path
computes and masks them).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
from numba import cuda, float32

from .. import runtime
from ..kernels._launch import LaunchError, allocate_like, ceil_div, check_launch, check_out
from ..kernels.matmul import TILE as MATMUL_TILE
from ..kernels.reduce import SOFTMAX_TPB
from .attention import MASK_BLOCK, check_qkv, default_scale

__all__ = [
    "ACC",
    "BK",
    "BQ",
    "DMAX",
    "PAD",
    "PTX_SIGNATURES",
    "BytesPrediction",
    "benchmark_attention",
    "bytes_table",
    "flash_attention",
    "flash_attention_kernel",
    "launch_config",
    "measure_bytes",
    "predicted_bytes",
]

BQ = 16  # query rows per block (threadIdx.y)
BK = 16  # keys per tile (threadIdx.x); also the stride of a thread's output columns
DMAX = 64  # the largest head width d (and dv) the kernel holds in shared memory
ACC = DMAX // BK  # output columns per thread: tx, tx + BK, tx + 2 BK, ...
PAD = DMAX + 1  # shared rows padded by one word: the threads of a warp read sK[tx, c] in different banks


@cuda.jit
def flash_attention_kernel(q, k, v, scale, causal, out):
    tx = cuda.threadIdx.x  # a key of the tile (scores) or an output column (accumulator)
    ty = cuda.threadIdx.y  # the query row within the block
    n = q.shape[0]
    m = k.shape[0]
    d = q.shape[1]
    dv = v.shape[1]
    row0 = cuda.blockIdx.x * BQ
    row = row0 + ty
    sQ = cuda.shared.array((BQ, PAD), float32)
    sK = cuda.shared.array((BK, PAD), float32)
    sV = cuda.shared.array((BK, PAD), float32)
    sS = cuda.shared.array((BQ, BK), float32)
    acc = cuda.local.array(ACC, float32)
    for a in range(ACC):
        acc[a] = 0.0

    # 1. This block's query rows, read from global memory once (rows past n are zeros).
    for c in range(tx, d, BK):
        sQ[ty, c] = q[row, c] if row < n else float32(0.0)
    row_max = float32(-math.inf)  # running maximum m_i of this row's scores
    row_sum = float32(0.0)  # running sum l_i of exp(score - row_max)

    offset = m - n  # causal: query i sees keys j <= i + offset
    last_key = m - 1
    if causal != 0:
        last_key = min(m - 1, min(row0 + BQ, n) - 1 + offset)  # the same for every thread of the block
    for k0 in range(0, last_key + 1, BK):
        # 2a. The tile's keys and values (BQ threads in y copy BK rows; x walks the columns: coalesced).
        for r in range(ty, BK, BQ):
            for c in range(tx, d, BK):
                sK[r, c] = k[k0 + r, c] if k0 + r < m else float32(0.0)
            for c in range(tx, dv, BK):
                sV[r, c] = v[k0 + r, c] if k0 + r < m else float32(0.0)
        cuda.syncthreads()  # wait until the q rows and the k, v tiles are in shared memory

        # 2b. Score (ty, tx) of the tile, scaled and masked.
        key = k0 + tx
        s = float32(0.0)
        for c in range(d):
            s += sQ[ty, c] * sK[tx, c]
        s *= scale
        if key >= m or row >= n or (causal != 0 and key > row + offset):
            s = float32(-math.inf)  # masked: exp gives it weight 0
        sS[ty, tx] = s
        cuda.syncthreads()  # wait until the whole BQ x BK tile of scores is in shared memory

        # 2c. Online softmax for this row: new maximum, rescale what was summed, add the tile.
        tile_max = float32(-math.inf)
        for j in range(BK):
            tile_max = max(tile_max, sS[ty, j])
        new_max = max(row_max, tile_max)
        if new_max != -math.inf:  # the row has seen a visible key (else nothing to add yet)
            alpha = math.exp(row_max - new_max)  # exp(-inf) = 0 on the first visible tile
            row_sum *= alpha
            for a in range(ACC):
                acc[a] *= alpha
            for j in range(BK):
                p = math.exp(sS[ty, j] - new_max)  # <= 1: no overflow, however large the logits
                row_sum += p
                for a in range(ACC):
                    c = tx + a * BK
                    if c < dv:
                        acc[a] += p * sV[j, c]
            row_max = new_max
        cuda.syncthreads()  # wait until every thread is done with sK, sV, sS before the next tile

    # 3. Normalise and write this row once.
    if row < n:
        for a in range(ACC):
            c = tx + a * BK
            if c < dv:
                out[row, c] = acc[a] / row_sum


def launch_config(n: int) -> tuple[int, tuple[int, int]]:
    """``(blocks, threads)``: one block of ``(BK, BQ)`` threads per ``BQ`` query rows."""
    return max(1, ceil_div(n, BQ)), (BK, BQ)


def flash_attention(
    q: Any, k: Any, v: Any, *, causal: bool = False, scale: float | None = None, out: Any = None, kernel: Any = None
) -> Any:
    """Attention in one fused kernel: ``out = softmax(q @ k.T * scale, masked) @ v`` (n, dv), float32.

    ``kernel`` is :func:`flash_attention_kernel` (default) or yours with the same signature
    ``(q, k, v, scale, causal, out)`` and launch (``launch_config``). d and dv must be at most
    :data:`DMAX`. NumPy arrays (simulator) or CuPy arrays (gpu mode).
    """
    n, m, d, dv = check_qkv(q, k, v, causal=causal, dtype=np.float32)
    if d > DMAX or dv > DMAX:
        raise LaunchError(
            f"the fused kernel holds rows of up to DMAX={DMAX} values in shared memory, but d={d} and "
            f"dv={dv}. Split the heads (d <= {DMAX}) or use attention_naive."
        )
    if out is None:
        out = allocate_like(q, (n, dv), np.float32)
    check_out(out, (n, dv), np.float32)
    if n == 0 or dv == 0:
        return out
    blocks, threads = launch_config(n)
    check_launch(blocks, threads)
    kern = flash_attention_kernel if kernel is None else kernel
    kern[blocks, threads](
        q, k, v, np.float32(default_scale(d) if scale is None else scale), np.int32(bool(causal)), out
    )
    return out


# --------------------------------------------------------------------------------------------------
# Global-memory traffic: predicted (counted from the kernels' loops) and measured (gpulab.trace)
# --------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class BytesPrediction:
    """Global bytes moved by each kernel of the naive path and by the fused kernel."""

    naive: dict[str, int]
    fused: int

    @property
    def naive_total(self) -> int:
        return sum(self.naive.values())

    @property
    def ratio(self) -> float:
        """naive bytes / fused bytes: how many times more traffic the unfused path moves."""
        return self.naive_total / self.fused


def _tiled_matmul_bytes(M: int, K: int, N: int, tile: int, itemsize: int) -> int:
    """The course's tiled matmul (lesson 04): each block reads its K-strips of A and B once, guarded at
    the edges, so A is read ceil(N / tile) times, B ceil(M / tile) times; C is written once."""
    return itemsize * (M * K * ceil_div(N, tile) + K * N * ceil_div(M, tile) + M * N)


def _fused_keys_loaded(n: int, m: int, causal: bool) -> int:
    """Key rows the fused kernel loads, summed over its blocks (whole tiles up to the last visible key)."""
    total = 0
    for row0 in range(0, n, BQ):
        last = m - 1 if not causal else min(m - 1, min(row0 + BQ, n) - 1 + m - n)
        total += sum(min(BK, m - k0) for k0 in range(0, last + 1, BK))
    return total


def predicted_bytes(
    n: int,
    m: int,
    d: int,
    dv: int | None = None,
    *,
    causal: bool = False,
    itemsize: int = 4,
    matmul_tile: int = MATMUL_TILE,
    softmax_threads: int = SOFTMAX_TPB,
) -> BytesPrediction:
    """Global bytes of each kernel, counted from their loops (the traffic the simulator measures).

    Naive path (``attention_naive`` with the tiled matmul): ``QK^T`` and ``PV`` as tiled matmuls
    (operands re-read once per tile of the other side); ``scale+mask`` reads and writes the n x m scores;
    the library softmax reads each row three times (maximum, sum, normalise) plus the first element
    once per thread, and writes P. Fused: q once, k and v once per block of ``BQ`` rows (causal: only
    the tiles up to the diagonal), out once. The causal mask kernel does not read the scores it masks.

    For m = n, d = dv and large n (tile = BQ = 16) the n x m terms dominate: naive about
    ``n m (7 + 3 d / 16 + ceil(d / 16))`` elements, fused about ``n m (2 d / 16)`` (k and v re-read once
    per block of 16 queries), a ratio of about 5.5 for d = 16 and 2.9 for d = 64; causal fused kernels
    skip about half the key tiles, which roughly doubles it. Bigger query blocks (more shared memory, as
    on real GPUs) shrink the fused traffic further; the naive n x m traffic stays.
    """
    dv = d if dv is None else int(dv)
    b = int(itemsize)
    visible = n * m - n * (n - 1) // 2 if causal else n * m
    naive = {
        "QK^T": _tiled_matmul_bytes(n, d, m, matmul_tile, b),
        "scale+mask": b * (visible + n * m),  # masked scores are written (-inf) without being read
        "softmax": b * (n * (softmax_threads + 3 * m) + n * m),
        "PV": _tiled_matmul_bytes(n, m, dv, matmul_tile, b),
    }
    keys = _fused_keys_loaded(n, m, causal)
    fused = b * (n * d + keys * (d + dv) + n * dv)
    return BytesPrediction(naive, fused)


def measure_bytes(
    n: int, m: int, d: int, dv: int | None = None, *, causal: bool = False, seed: int = 0, kernel: Any = None
) -> BytesPrediction:
    """Count the global bytes each kernel moves with :func:`gpulab.trace.trace` (runs in the simulator on
    the CPU in either mode: keep n, m small, e.g. 32). ``kernel``: the fused kernel to count (your lesson-12
    kernel, with :func:`flash_attention_kernel`'s signature and launch; default: that one). The results are
    checked against :func:`~gpulab.transformer.attention.attention_reference`, so the counts are of correct runs."""
    from ..kernels.matmul import launch_config as mm_launch
    from ..kernels.matmul import matmul_tiled_kernel
    from ..kernels.reduce import softmax_rows_kernel
    from ..trace import trace
    from .attention import attention_reference, scale_mask_kernel

    dv = d if dv is None else int(dv)
    rng = np.random.default_rng(seed)
    q = rng.standard_normal((n, d)).astype(np.float32)
    k = rng.standard_normal((m, d)).astype(np.float32)
    v = rng.standard_normal((m, dv)).astype(np.float32)
    check_qkv(q, k, v, causal=causal)
    scale = np.float32(default_scale(d))
    flag = np.int32(bool(causal))
    expected = attention_reference(q, k, v, causal=causal)

    naive: dict[str, int] = {}
    s = np.zeros((n, m), np.float32)
    naive["QK^T"] = trace(
        matmul_tiled_kernel,
        *mm_launch(matmul_tiled_kernel, n, m),
        q,
        np.ascontiguousarray(k.T),
        s,
        names=("A", "B", "C"),
    ).bytes_moved()
    grid = (ceil_div(m, MASK_BLOCK[0]), ceil_div(n, MASK_BLOCK[1]))
    naive["scale+mask"] = trace(
        scale_mask_kernel, grid, MASK_BLOCK, s, scale, flag, s, names=("s", "scale", "causal", "out")
    ).bytes_moved()
    p = np.zeros((n, m), np.float32)
    naive["softmax"] = trace(softmax_rows_kernel, n, SOFTMAX_TPB, s, p, names=("x", "out")).bytes_moved()
    o_naive = np.zeros((n, dv), np.float32)
    naive["PV"] = trace(
        matmul_tiled_kernel, *mm_launch(matmul_tiled_kernel, n, dv), p, v, o_naive, names=("A", "B", "C")
    ).bytes_moved()
    o_fused = np.zeros((n, dv), np.float32)
    blocks, threads = launch_config(n)
    fused = trace(
        flash_attention_kernel if kernel is None else kernel,
        blocks,
        threads,
        q,
        k,
        v,
        scale,
        flag,
        o_fused,
        names=("q", "k", "v", "scale", "causal", "out"),
    ).bytes_moved()
    for name, got in (("naive", o_naive), ("fused", o_fused)):
        if not np.allclose(got, expected, rtol=1e-3, atol=1e-4):
            raise AssertionError(
                f"measure_bytes: the {name} path's result differs from attention_reference "
                f"(max error {np.abs(got - expected).max():.3g}); its byte count would mean nothing."
            )
    return BytesPrediction(naive, fused)


def bytes_table(n: int, m: int, d: int, dv: int | None = None, *, causal: bool = False) -> list[dict[str, Any]]:
    """Predicted and measured bytes per kernel, as rows ``{"kernel", "predicted", "measured"}``."""
    pred = predicted_bytes(n, m, d, dv, causal=causal)
    meas = measure_bytes(n, m, d, dv, causal=causal)
    rows = [{"kernel": f"naive {k}", "predicted": pred.naive[k], "measured": meas.naive[k]} for k in pred.naive]
    rows.append({"kernel": "naive total", "predicted": pred.naive_total, "measured": meas.naive_total})
    rows.append({"kernel": "fused", "predicted": pred.fused, "measured": meas.fused})
    rows.append({"kernel": "ratio naive / fused", "predicted": pred.ratio, "measured": meas.ratio})
    return rows


def benchmark_attention(
    n: int, d: int, *, m: int | None = None, causal: bool = False, repeat: int = 5, seed: int = 0
) -> list[dict[str, Any]]:
    """Time the naive path (:func:`~gpulab.transformer.attention.attention_naive`, tiled matmul), the
    fused kernel and the array library's attention (CuPy with cuBLAS in gpu mode, NumPy in simulator
    mode) on random float32 inputs (d = dv), each checked against the float64 reference first.

    Rows ``{"path", "seconds", "n", "m", "d", "causal", "mode", "device"}``, fused first. In simulator
    mode the seconds are the CPU simulator's and say nothing about a GPU: keep n small (e.g. 32).
    """
    from ..timing import benchmark, device_name
    from .attention import attention_naive, attention_reference
    from .backward import attention_forward

    m = n if m is None else int(m)
    rng = np.random.default_rng(seed)
    q_h, k_h, v_h = (rng.standard_normal(shape).astype(np.float32) for shape in ((n, d), (m, d), (m, d)))
    q, k, v = (runtime.to_device(a) for a in (q_h, k_h, v_h))
    expected = attention_reference(q_h, k_h, v_h, causal=causal)
    paths = {
        "fused (flash_attention_kernel)": lambda: flash_attention(q, k, v, causal=causal),
        "naive (matmul, scale+mask, softmax, matmul)": lambda: attention_naive(q, k, v, causal=causal)[0],
        "CuPy / cuBLAS" if runtime.is_gpu() else "NumPy": lambda: attention_forward(q, k, v, causal=causal)[0],
    }
    rows = []
    for name, fn in paths.items():
        got = runtime.to_host(fn())
        if not np.allclose(got, expected, rtol=1e-3, atol=1e-3):
            raise AssertionError(
                f"benchmark_attention: {name} differs from attention_reference "
                f"(max error {np.abs(got - expected).max():.3g}); not timing a wrong result."
            )
        res = benchmark(fn, repeat=repeat, label=name)
        rows.append(
            {
                "path": name,
                "seconds": res.median,
                "n": n,
                "m": m,
                "d": d,
                "causal": causal,
                "mode": runtime.mode(),
                "device": device_name(),
            }
        )
    return rows


# (kernel, signature) pairs compiled to PTX by the tests.
PTX_SIGNATURES = [
    (flash_attention_kernel, "void(float32[:, :], float32[:, :], float32[:, :], float32, int32, float32[:, :])"),
]
