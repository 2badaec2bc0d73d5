"""GPU-only cells of lab 05 and lesson 12 at their gpu-mode sizes, with the kernels' float32 arithmetic emulated
(the tier of tests/test_gpu_sizes.py; no GPU needed). Each test reads the cell's figures and tolerance from the
notebook, so a change there shows here.

* lab05 cell 21 times both softmax kernels on 16384 x 1024 and refuses to time a kernel whose result is not
  allclose(rtol=1e-4, atol=1e-6) to the spec: the solution kernels must pass.
* lesson 12 cells 15 and 23 assert allclose(out, float64 reference, rtol=1e-3, atol=1e-4) for causal attention of
  n = 4096 tokens, d = 64: the unfused kernels (scores, online softmax, tiled P @ v) and the fused one. Rows of a
  causal attention are independent, so the first 64 and the last 256 query rows (the shortest and the longest
  sums, up to 4096 keys) stand for all 4096 at a sixteenth of the cost.
* lesson 04 cell 40: kernels.matmul.benchmark_ladder's validation against cuBLAS at 4096^3.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from gpulab import problems
from test_gpu_sizes import _lesson_online_softmax, _lesson_scores, _online_attention, _softmax, _softmax_warp
from test_gpu_sizes import seq_matmul

F32 = np.float32
ROOT = Path(__file__).resolve().parents[1]


def cell(path: str, needle: str) -> str:
    """The source of the notebook's one code cell containing ``needle``."""
    cells = json.loads((ROOT / path).read_text())["cells"]
    found = ["".join(c["source"]) for c in cells if c["cell_type"] == "code" and needle in "".join(c["source"])]
    assert len(found) == 1, f"{path}: {len(found)} code cells contain {needle!r}"
    return found[0]


@pytest.mark.parametrize("emulation", [_softmax, _softmax_warp], ids=["softmax_kernel", "softmax_warp_kernel"])
def test_lab05_cell21_both_softmax_kernels_pass_its_allclose_at_16384x1024(emulation):
    src = cell("labs/solutions/lab05_reductions.ipynb", "rows, cols = 16384, 1024")
    assert "np.allclose(gpulab.to_host(out_d), expected, rtol=1e-4, atol=1e-6)" in src
    x = problems.lab05.softmax_inputs((16384, 1024), np.random.default_rng(0))
    out = np.zeros_like(x)
    emulation(x, out)
    expected = problems.lab05.softmax_spec(x).astype(np.float64)
    used = np.abs(out - expected) / (1e-6 + 1e-4 * np.abs(expected))
    assert used.max() < 0.1, used.max()  # measured: 0.0022 (block per row), 0.0025 (warp per row)


@pytest.fixture(scope="module")
def lesson12_qkv():
    src = cell("notebooks/12_transformers.ipynb", "n, d = sizes(gpu=")
    assert "rng = np.random.default_rng(0)" in src and "sizes(gpu=(4096, 64)" in src
    rng = np.random.default_rng(0)
    return tuple(rng.standard_normal((4096, 64)).astype(F32) for _ in range(3))


ROWS = {"first 64 rows": slice(0, 64), "last 256 rows": slice(4096 - 256, 4096)}


def _keys(rows: slice, k, v):
    """The keys and values rows ``rows`` can see (all keys up to the last row; causal offset m - n lines up)."""
    return k[: rows.stop], v[: rows.stop]


@pytest.mark.parametrize("rows", list(ROWS))
def test_lesson12_cell15_unfused_attention_at_n4096(lesson12_qkv, rows):
    from gpulab.transformer import attention

    src = cell("notebooks/12_transformers.ipynb", "out_naive, p_naive = attention.attention_naive(")
    assert "np.allclose(to_host(out_naive), ref, rtol=1e-3, atol=1e-4)" in src
    q, k, v = lesson12_qkv
    sl = ROWS[rows]
    q, (k, v) = q[sl], _keys(sl, k, v)
    scale = F32(attention.default_scale(q.shape[1]))
    s = np.empty((q.shape[0], k.shape[0]), F32)
    _lesson_scores(q, k, scale, 1, s)  # exercise 1: acc += q * k in order, * scale, masked
    p = np.empty_like(s)
    _lesson_online_softmax(s, p)  # exercise 2
    out = seq_matmul(p, v)  # lesson 04's tiled matmul: one float32 accumulator, keys in order
    ref = attention.attention_reference(q, k, v, causal=True)
    used = np.abs(out - ref) / (1e-4 + 1e-3 * np.abs(ref))
    assert used.max() < 0.1, used.max()  # measured: 0.0030 (first 64 rows), 0.0018 (last 256)


@pytest.mark.parametrize("rows", list(ROWS))
def test_lesson12_cell23_fused_attention_at_n4096(lesson12_qkv, rows):
    from gpulab.transformer import attention, flash

    src = cell("notebooks/12_transformers.ipynb", "out_fused = flash.flash_attention(")
    assert "np.allclose(to_host(out_fused), ref, rtol=1e-3, atol=1e-4)" in src
    q, k, v = lesson12_qkv
    sl = ROWS[rows]
    q, (k, v) = q[sl], _keys(sl, k, v)
    out = _online_attention(q, k, v, F32(attention.default_scale(q.shape[1])), True, flash.BK)[0]
    ref = attention.attention_reference(q, k, v, causal=True)
    used = np.abs(out - ref) / (1e-4 + 1e-3 * np.abs(ref))
    assert used.max() < 0.1, used.max()  # measured: 0.0031 (first 64 rows), 0.0005 (last 256)


def test_lesson04_cell40_ladder_validation_at_4096():
    """lesson 04 cell 40 runs kernels.matmul.benchmark_ladder(4096, 4096, 4096), which first asserts each kernel
    allclose to cuBLAS (rtol 1e-3, atol 1e-3 * sqrt(K)). The ladder's kernels add k in order into one float32
    accumulator per output; cuBLAS's order is unknown, emulated as split-K with 16 partials added in a random order.
    Rows 0..31 of the product (the check is per element)."""
    import inspect

    from gpulab.kernels.matmul import benchmark_ladder

    assert "rows = benchmark_ladder(size, size, size" in cell("notebooks/04_shared_memory_tiling.ipynb", "size = 4096")
    assert "atol=1e-3 * max(1.0, np.sqrt(K))" in inspect.getsource(benchmark_ladder)
    K = 4096
    rng = np.random.default_rng(0)  # benchmark_ladder's seed=0 and draws
    a = rng.standard_normal((K, K), dtype=np.float32)[:32]
    b = rng.standard_normal((K, K), dtype=np.float32)
    ours = seq_matmul(a, b)
    bounds = np.linspace(0, K, 17).astype(int)
    parts = np.stack([seq_matmul(a[:, s:e], b[s:e]) for s, e in zip(bounds[:-1], bounds[1:])])
    parts = np.take_along_axis(parts, np.argsort(np.random.default_rng(1).random(parts.shape), axis=0), axis=0)
    cublas = np.zeros_like(ours)
    for part in parts:
        cublas += part
    used = np.abs(ours - cublas) / (1e-3 * np.sqrt(K) + 1e-3 * np.abs(cublas))
    assert used.max() < 0.1, used.max()  # measured: 0.0048
