"""sum_rows (a bias gradient, ``d.sum(axis=0)``) on a GPU: two deterministic passes (chunks of rows, then the
chunks), run here in the simulator at small sizes, compiled to PTX, and emulated in float32 at full size.

The emulation adds in the kernels' exact order; the simulator tests check it bit for bit against the kernels, so
its full-size errors (conv1's bias at batch 128: 100,352 rows) are the kernels' errors on a GPU.
"""

from __future__ import annotations

import numpy as np
import pytest

from gpulab.kernels import nn_ops
from gpulab.kernels.nn_sum_rows import sum_rows, sum_rows_chunks, sum_rows_partials

F32 = np.float32


def emulate_two_pass(d: np.ndarray, chunks: int) -> tuple[np.ndarray, np.ndarray]:
    """(partials, sums) of sum_rows' two passes in float32, in the order the kernels add: pass 1 starts each
    (chunk, column) at float32 0 and adds the chunk's rows in order; pass 2 adds the partials in order."""
    m, f = d.shape
    rows = -(-m // chunks)
    padded = np.zeros((chunks * rows, f), F32)  # zeros past the end: adding +0.0 changes no float32 sum
    padded[:m] = d
    blocks = padded.reshape(chunks, rows, f)
    partials = np.zeros((chunks, f), F32)
    for r in range(rows):
        partials += blocks[:, r]  # (chunks, F): row r of every chunk, one float32 rounding each
    sums = np.zeros(f, F32)
    for i in range(chunks):
        sums += partials[i]
    return partials, sums


def sequential_f32(d: np.ndarray) -> np.ndarray:
    """One float32 accumulator per column over every row in order: the single-pass kernel, float32."""
    acc = np.zeros(d.shape[1], F32)
    for r in range(d.shape[0]):
        acc += d[r]
    return acc


def test_chunks_give_tens_of_thousands_of_threads_at_training_sizes():
    assert sum_rows_chunks(100_352, 32) == 1024  # conv1's bias at batch 128: 98 rows a chunk, 32,768 threads
    assert sum_rows_chunks(25_088, 64) == 512  # conv2's: 49 rows a chunk, 32,768 threads
    assert sum_rows_chunks(128, 10) == 8  # a linear layer's: chunks of 16 rows
    assert sum_rows_chunks(1, 1) == sum_rows_chunks(0, 5) == 1


@pytest.mark.parametrize(("m", "f", "chunks"), [(1, 1, 1), (37, 5, 3), (5, 3, 8), (100, 40, 7), (64, 33, 16)], ids=str)
def test_two_passes_in_the_simulator_match_the_emulation_bit_for_bit(m, f, chunks):
    """The GPU's launch shape (one thread per (chunk, column), blocks of 32 x 8) run in the simulator; chunks
    past the last row (5 rows in 8 chunks) sum to 0; columns past one block (40, 33) use a second block."""
    d = np.random.default_rng(m * f).standard_normal((m, f)).astype(F32)
    want_partials, want = emulate_two_pass(d, chunks)
    partials = np.asarray(sum_rows_partials(d, chunks))
    np.testing.assert_array_equal(partials, want_partials)
    got = np.asarray(sum_rows(partials, two_pass=False))  # pass 2: one thread per column over the partials
    np.testing.assert_array_equal(got, want)
    np.testing.assert_allclose(got, d.astype(np.float64).sum(0), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("shape", [(37, 5), (300, 7)])
def test_sum_rows_two_pass_is_what_a_gpu_runs(shape):
    d = np.random.default_rng(1).standard_normal(shape).astype(F32)
    got = np.asarray(sum_rows(d, two_pass=True))
    np.testing.assert_array_equal(got, emulate_two_pass(d, sum_rows_chunks(*shape))[1])
    np.testing.assert_allclose(got, d.astype(np.float64).sum(0), rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(np.asarray(sum_rows(d, two_pass=False)), sequential_f32(d))  # the simulator's


def test_bad_chunks_is_a_usage_error():
    from gpulab.errors import UsageError

    with pytest.raises(UsageError, match="chunks must be at least 1"):
        sum_rows_partials(np.zeros((3, 2), F32), 0)


@pytest.mark.parametrize(("m", "f"), [(100_352, 32), (25_088, 64)])
def test_float32_two_pass_accuracy_at_full_size(m, f):
    """Float32 accumulators, emulated at conv1's and conv2's sizes (batch 128) against a float64 sum.

    Measured (seed 0, m = 100,352), the worst column: on N(0, 1) off by 3.4e-4 = 4.2e-9 of its sum of |d| (one
    float32 loop: 5.2e-3 = 6.5e-8; the float64 loop before: 2.7e-5, the result's rounding to float32); with a
    common offset of 1,000 (every partial large, the sums 1e8) by 1.3e-6 of the sum (one loop: 4.6e-6; before:
    3.9e-8); at a gradient's scale (N(0, 1e-3^2)) the tests' rtol = atol = 1e-5 holds. On N(0, 1) that
    tolerance fails for the few columns whose sum happens to be near 0 (3.4e-4 > 1e-5 + 1e-5 |sum|): a float64
    accumulator would meet it; a float32 bias gradient of that size does not need it."""
    rng = np.random.default_rng(0)
    chunks = sum_rows_chunks(m, f)
    normal = rng.standard_normal((m, f)).astype(F32)
    offset = (1000 + rng.standard_normal((m, f))).astype(F32)
    grad = (1e-3 * rng.standard_normal((m, f))).astype(F32)
    eps = float(np.finfo(F32).eps)  # 1.19e-7
    for d, bound in ((normal, eps / 4), (offset, 20 * eps), (grad, eps / 4)):
        exact = d.astype(np.float64).sum(0)
        scale = np.abs(d.astype(np.float64)).sum(0)
        two = emulate_two_pass(d, chunks)[1].astype(np.float64)
        one = sequential_f32(d).astype(np.float64)
        assert np.max(np.abs(two - exact) / scale) <= bound
        assert np.max(np.abs(two - exact)) * 3 <= np.max(np.abs(one - exact))  # >= 3x closer than one loop
    np.testing.assert_allclose(emulate_two_pass(grad, chunks)[1], grad.astype(np.float64).sum(0), rtol=1e-5, atol=1e-5)


def test_the_pass_one_kernel_is_compiled_by_the_ptx_tier():
    assert (nn_ops.sum_rows_partials_kernel, "void(float32[:, ::1], float32[:, ::1])") in nn_ops.PTX_SIGNATURES
