# mypy: disable-error-code="call-arg, var-annotated, operator, call-overload"
"""Scaled dot-product attention from the course's own kernels (lesson 12).

For queries ``q`` (n, d), keys ``k`` (m, d) and values ``v`` (m, dv)::

    S = (q @ k.T) * scale                 # (n, m) scores, scale = 1 / sqrt(d)
    S[i, j] = -inf where j > i + (m - n)  # causal: query i sees keys up to its own position
    P = softmax(S, axis=1)                # row softmax, the row maximum subtracted first
    out = P @ v                           # (n, dv)

:func:`attention_reference` is the float64 NumPy reference. :func:`attention_naive` runs it as three
steps on the GPU (or the simulator): the learner's matmul for ``q @ k.T``, a scale-and-mask kernel, the
lesson-05 row softmax, and the matmul again for ``P @ v``; every step reads and writes the n x m matrix
in global memory. :func:`attention_costs` counts the FLOPs and bytes of each step, for that path and for
the fused kernel of :mod:`gpulab.transformer.flash`, which never stores the n x m matrix.

With ``m - n`` as the offset, the causal mask also covers decoding: a block of n new queries attends to
the m - n cached keys before them and to the keys of the block up to its own position.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
from numba import cuda

from .. import runtime
from ..kernels._launch import LaunchError, allocate_like, check_array, check_launch, check_out
from ..kernels.matmul import matmul
from ..kernels.reduce import SOFTMAX_TPB, softmax_rows_kernel

__all__ = [
    "MASK_BLOCK",
    "PTX_SIGNATURES",
    "AttentionCosts",
    "attention_costs",
    "attention_naive",
    "attention_reference",
    "causal_mask",
    "check_qkv",
    "default_scale",
    "scale_mask",
    "scale_mask_kernel",
]

MASK_BLOCK = (16, 16)  # (x, y) threads per block of the scale-and-mask kernel: x along the keys
SCORES_BLOCK = (16, 8)  # a scores kernel (lesson 12, exercise 1) runs with the launch its check used


def default_scale(d: int) -> float:
    """``1 / sqrt(d)``: keeps the scores' spread independent of the head dimension d."""
    return 1.0 / math.sqrt(d) if d > 0 else 1.0


def check_qkv(q: Any, k: Any, v: Any, *, causal: bool = False, dtype: Any = None) -> tuple[int, int, int, int]:
    """Check shapes (q (n, d), k (m, d), v (m, dv)) and return ``(n, m, d, dv)``; raises with what to fix."""
    for name, a in (("q", q), ("k", k), ("v", v)):
        check_array(name, a, ndim=2, dtype=dtype)
    n, d = (int(s) for s in q.shape)
    m, dk = (int(s) for s in k.shape)
    mv, dv = (int(s) for s in v.shape)
    if dk != d:
        raise LaunchError(
            f"q is {n}x{d} and k is {m}x{dk}: queries and keys need the same width d "
            f"(q.shape[1] == k.shape[1]). Pass k with {d} columns."
        )
    if mv != m:
        raise LaunchError(f"k has {m} rows and v has {mv}: every key needs one value (k.shape[0] == v.shape[0]).")
    if m == 0:
        raise LaunchError("k and v have no rows: attention needs at least one key per query.")
    if causal and n > m:
        raise LaunchError(
            f"causal attention with n={n} queries and m={m} keys: query i sees keys j <= i + "
            f"(m - n), so the first {n - m} queries would see none. Pass at least as many keys as "
            "queries (m >= n), or causal=False."
        )
    return n, m, d, dv


def causal_mask(n: int, m: int, *, offset: int | None = None, strict: bool = False, xp: Any = np) -> Any:
    """``mask[i, j]`` True where query i may attend key j: ``j <= i + (m - n)`` (bool, (n, m)), so the last query
    sees every key. Another ``offset`` than ``m - n``, or ``strict`` (``j < i + offset``), gives the masks of
    learners' known mistakes (no offset: ``offset=0``; one key too many: ``offset=m - n + 1``).

    ``xp`` is the array module to build it in: CuPy builds it on the GPU. Built with NumPy, the mask for n = m = 4096
    took 6.4 ms of host time before its copy to the GPU, ten times the 0.63 ms of the CuPy attention it masks
    (measured on the H200 machine, 2026-12-04)."""
    keys, queries = xp.arange(m)[None, :], xp.arange(n)[:, None]
    limit = queries + (m - n if offset is None else offset)
    return keys < limit if strict else keys <= limit


def attention_reference(q: Any, k: Any, v: Any, *, causal: bool = False, scale: float | None = None) -> np.ndarray:
    """Scaled dot-product attention in float64 NumPy (inputs of any array module; returns NumPy).

    Numerically stable: each row's maximum is subtracted before ``exp``, so logits of any size give
    finite results. ``scale`` defaults to ``1 / sqrt(d)``.
    """
    q64, k64, v64 = (np.asarray(runtime.to_host(a), dtype=np.float64) for a in (q, k, v))
    n, m, d, _ = check_qkv(q64, k64, v64, causal=causal)
    s = (q64 @ k64.T) * (default_scale(d) if scale is None else float(scale))  # (n, m)
    if causal:
        s = np.where(causal_mask(n, m), s, -np.inf)
    s = s - s.max(axis=1, keepdims=True)  # every row has a finite maximum: at least key 0 is visible
    p = np.exp(s)
    p /= p.sum(axis=1, keepdims=True)
    return p @ v64  # (n, dv)


@cuda.jit
def scale_mask_kernel(s, scale, causal, out):
    # One thread per score; x runs along the keys (the contiguous axis), y along the queries.
    j, i = cuda.grid(2)  # j = key, i = query
    n = s.shape[0]
    m = s.shape[1]
    if i < n and j < m:  # bounds guard: the grid is rounded up to whole blocks
        if causal != 0 and j > i + (m - n):
            out[i, j] = -math.inf  # exp(-inf) = 0: the softmax gives this key no weight
        else:
            out[i, j] = s[i, j] * scale


def scale_mask(s: Any, scale: float, causal: bool = False, out: Any = None) -> Any:
    """``out = s * scale``, with ``-inf`` above the causal diagonal when ``causal`` (one thread per score)."""
    check_array("s", s, ndim=2, dtype=np.float32)
    n, m = (int(x) for x in s.shape)
    if out is None:
        out = allocate_like(s, (n, m), np.float32)
    check_out(out, (n, m), np.float32)
    if n and m:
        bx, by = MASK_BLOCK
        blocks = ((m + bx - 1) // bx, (n + by - 1) // by)  # x over the columns, y over the rows
        check_launch(blocks, MASK_BLOCK)
        scale_mask_kernel[blocks, MASK_BLOCK](s, np.float32(scale), np.int32(bool(causal)), out)
    return out


def attention_naive(
    q: Any,
    k: Any,
    v: Any,
    *,
    causal: bool = False,
    scale: float | None = None,
    matmul_kernel: Any = "tiled",
    softmax_kernel: Any = None,
    softmax_threads: int = SOFTMAX_TPB,
    scores_kernel: Any = None,
) -> tuple[Any, Any]:
    """Attention as separate kernels; returns ``(out, weights)``: out (n, dv) and the attention weights
    P = softmax(scaled, masked scores), the n x m matrix that this path keeps in global memory.

    ``matmul_kernel`` (a name of :data:`gpulab.kernels.matmul.MATMUL_KERNELS` or your kernel from
    lessons 03/04, launched by :func:`gpulab.kernels.matmul.matmul`) computes ``q @ k.T`` and ``P @ v``;
    ``scores_kernel`` (lesson 12's exercise 1, ``(q, k, scale, causal, s)``, one thread per score with x
    along the keys), when given, computes the scaled, masked scores in one kernel instead of the matmul
    and :func:`scale_mask`; ``softmax_kernel`` (default: the library's
    :func:`~gpulab.kernels.reduce.softmax_rows_kernel`, or your lesson-05 kernel with the signature
    ``(x, out)``) runs with one block of ``softmax_threads`` threads per row. float32 NumPy arrays
    (simulator) or CuPy arrays (gpu mode).
    """
    n, m, d, dv = check_qkv(q, k, v, causal=causal, dtype=np.float32)
    xp = runtime.array_module(q, k, v)
    sc = default_scale(d) if scale is None else scale
    if scores_kernel is None:
        kt = xp.ascontiguousarray(k.T)  # (d, m): the matmul kernels take row-major operands
        s = matmul(q, kt, kernel=matmul_kernel)  # (n, m) raw scores, written to global memory
        s = scale_mask(s, sc, causal, out=s)  # in place
    else:  # scores, scale and mask in one kernel: one thread per score, x along the keys
        s = allocate_like(q, (n, m), np.float32)
        if n and m:
            bx, by = SCORES_BLOCK
            blocks = ((m + bx - 1) // bx, (n + by - 1) // by)
            check_launch(blocks, SCORES_BLOCK)
            scores_kernel[blocks, SCORES_BLOCK](q, k, np.float32(sc), np.int32(bool(causal)), s)
    p = allocate_like(s, (n, m), np.float32)
    if n:
        kern = softmax_rows_kernel if softmax_kernel is None else softmax_kernel
        check_launch(n, softmax_threads)
        kern[n, softmax_threads](s, p)  # one block per row
    out = matmul(p, v, kernel=matmul_kernel)  # (n, dv)
    return out, p


@dataclass(frozen=True)
class AttentionCosts:
    """FLOPs and compulsory global-memory bytes of attention, per step (each array read or written once).

    ``naive`` and ``fused`` map a step name to ``(flops, bytes)``. The naive path stores the n x m
    scores and weights between steps; the fused kernel reads q, k, v once and writes out once.
    Counted, not measured: a kernel that re-reads an operand moves more (see
    :func:`gpulab.transformer.flash.predicted_bytes` for the exact traffic of the course's kernels).
    """

    n: int
    m: int
    d: int
    dv: int
    causal: bool
    dtype_bytes: int
    naive: dict[str, tuple[int, int]]
    fused: dict[str, tuple[int, int]]

    def total(self, path: str = "naive") -> tuple[int, int]:
        """``(flops, bytes)`` of a path (``"naive"`` or ``"fused"``)."""
        steps = self.naive if path == "naive" else self.fused
        return sum(f for f, _ in steps.values()), sum(b for _, b in steps.values())

    def intensity(self, path: str = "naive") -> float:
        """FLOPs per byte of global traffic (arithmetic intensity) of a path."""
        f, b = self.total(path)
        return f / b if b else math.inf

    def rows(self) -> list[dict[str, Any]]:
        """One row per step and path, plus totals: ``{"path", "step", "flops", "bytes", "flops_per_byte"}``."""
        out = []
        for path, steps in (("naive", self.naive), ("fused", self.fused)):
            for step, (f, b) in [*steps.items(), ("total", self.total(path))]:
                out.append(
                    {"path": path, "step": step, "flops": f, "bytes": b, "flops_per_byte": f / b if b else math.inf}
                )
        return out

    def __str__(self) -> str:
        head = f"attention n={self.n}, m={self.m}, d={self.d}, dv={self.dv}, causal={self.causal}"
        lines = [head, f"{'path':6} {'step':14} {'FLOPs':>14} {'bytes':>14} {'FLOP/B':>8}"]
        for r in self.rows():
            lines.append(
                f"{r['path']:6} {r['step']:14} {r['flops']:>14,} {r['bytes']:>14,} {r['flops_per_byte']:>8.2f}"
            )
        return "\n".join(lines)

    def _repr_html_(self) -> str:
        cells = "".join(
            f"<tr><td>{r['path']}</td><td>{r['step']}</td><td>{r['flops']:,}</td><td>{r['bytes']:,}</td>"
            f"<td>{r['flops_per_byte']:.2f}</td></tr>"
            for r in self.rows()
        )
        return (
            f"<table><tr><th>path</th><th>step</th><th>FLOPs</th><th>bytes</th><th>FLOP/byte</th></tr>{cells}</table>"
        )


def attention_costs(
    n: int, d: int, *, m: int | None = None, dv: int | None = None, causal: bool = False, dtype_bytes: int = 4
) -> AttentionCosts:
    """FLOPs and compulsory bytes per step of attention with n queries, m keys (default n), width d.

    FLOPs count a multiply-add as 2 and ``exp``, ``max``, a division as 1 each. Causal attention
    computes the full matrix in the naive path (the mask is applied afterwards), and about half of it
    in the fused kernel, which skips the key blocks past the diagonal (counted here as exactly the
    visible scores; the kernel's whole tiles are a little more).
    """
    m = n if m is None else int(m)
    dv = d if dv is None else int(dv)
    n, d, b = int(n), int(d), int(dtype_bytes)
    nm = n * m
    visible = nm - n * (n - 1) // 2 if causal else nm  # causal: sum over i of (i + m - n + 1) keys
    naive = {
        "QK^T": (2 * nm * d, b * (n * d + m * d + nm)),
        "scale+mask": (nm, b * (visible + nm)),  # masked scores are written without being read
        "softmax": (5 * nm, b * 2 * nm),  # max, subtract, exp, sum, divide; read S, write P
        "PV": (2 * nm * dv, b * (nm + m * dv + n * dv)),
    }
    fused = {
        "fused": (2 * visible * d + 5 * visible + 2 * visible * dv, b * (n * d + m * d + m * dv + n * dv)),
    }
    return AttentionCosts(n, m, d, dv, bool(causal), b, naive, fused)


# (kernel, signature) pairs compiled to PTX by the tests.
PTX_SIGNATURES = [
    (scale_mask_kernel, "void(float32[:, :], float32, int32, float32[:, :])"),
]
