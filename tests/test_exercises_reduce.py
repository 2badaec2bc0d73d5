"""Harness on reductions and atomics: races, barriers, atomics hints; ``reduction=`` tolerances. In gpu mode the
kernels run on the GPU and host functions get CuPy arrays; the race and barrier verdicts, which come from the
simulator's access log, skip there."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest
from numba import cuda, float32

import gpulab
from gpulab import runtime
from gpulab.exercises import Problem, check_kernel, random_arrays, rounding_bound

TPB = 32
ACCESS_LOG = pytest.mark.skipif(
    gpulab.is_gpu(),
    reason="the verdict comes from the simulator's access log (who wrote and read what, which barriers each thread "
    "reached); on a GPU a one-warp block often gives the right values anyway, and a barrier not all threads reach "
    "is undefined behaviour",
)


def block_sums(x):
    blocks = max(1, math.ceil(x.size / TPB))
    padded = np.zeros(blocks * TPB, np.float64)
    padded[: x.size] = x
    return padded.reshape(blocks, TPB).sum(axis=1).astype(np.float32)


def check_block_sum(kernel, **kw):
    opts = dict(
        spec=block_sums,
        inputs=lambda n, rng: random_arrays(rng, n),
        sizes=[40, 100],
        launch=lambda x, p: (p.shape[0], TPB),
        reduction=TPB,
    )
    opts.update(kw)
    return check_kernel(kernel, **opts)


@cuda.jit
def block_sum(x, partial):
    buf = cuda.shared.array(TPB, float32)
    tx = cuda.threadIdx.x
    i = cuda.grid(1)
    buf[tx] = x[i] if i < x.shape[0] else float32(0.0)
    cuda.syncthreads()  # wait until every thread stored its element
    s = TPB // 2
    while s > 0:
        if tx < s:
            buf[tx] += buf[tx + s]
        cuda.syncthreads()  # wait until this halving step is complete
        s //= 2
    if tx == 0:
        partial[cuda.blockIdx.x] = buf[0]


@cuda.jit
def block_sum_no_step_sync(x, partial):
    buf = cuda.shared.array(TPB, float32)
    tx = cuda.threadIdx.x
    i = cuda.grid(1)
    buf[tx] = x[i] if i < x.shape[0] else float32(0.0)
    cuda.syncthreads()  # wait until every thread stored its element
    s = TPB // 2
    while s > 0:
        if tx < s:
            buf[tx] += buf[tx + s]
        s //= 2  # (the barrier that should end each halving step is missing)
    if tx == 0:
        partial[cuda.blockIdx.x] = buf[0]


@cuda.jit
def block_sum_every_thread_writes_total(x, partial):
    buf = cuda.shared.array(TPB, float32)
    total = cuda.shared.array(1, float32)
    tx = cuda.threadIdx.x
    i = cuda.grid(1)
    buf[tx] = x[i] if i < x.shape[0] else float32(0.0)
    cuda.syncthreads()  # wait until every thread stored its element
    s = TPB // 2
    while s > 0:
        if tx < s:
            buf[tx] += buf[tx + s]
        cuda.syncthreads()  # wait until this halving step is complete
        s //= 2
    total[0] = buf[0]  # a race: every thread writes total[0] (the same value, so the result is right)
    cuda.syncthreads()  # wait until total is written
    if tx == 0:
        partial[cuda.blockIdx.x] = total[0]


@cuda.jit
def block_sum_no_load_sync(x, partial):
    buf = cuda.shared.array(TPB, float32)
    tx = cuda.threadIdx.x
    i = cuda.grid(1)
    buf[tx] = x[i] if i < x.shape[0] else float32(0.0)
    s = TPB // 2  # (the barrier after the load is missing)
    while s > 0:
        if tx < s:
            buf[tx] += buf[tx + s]
        cuda.syncthreads()  # wait until this halving step is complete
        s //= 2
    if tx == 0:
        partial[cuda.blockIdx.x] = buf[0]


@cuda.jit
def block_sum_sync_in_branch(x, partial):
    buf = cuda.shared.array(TPB, float32)
    tx = cuda.threadIdx.x
    i = cuda.grid(1)
    buf[tx] = x[i] if i < x.shape[0] else float32(0.0)
    cuda.syncthreads()  # wait until every thread stored its element
    s = TPB // 2
    while s > 0:
        if tx < s:
            buf[tx] += buf[tx + s]
            cuda.syncthreads()  # inside the branch: only threads tx < s get here
        s //= 2
    if tx == 0:
        partial[cuda.blockIdx.x] = buf[0]


def test_tree_reduction_passes():
    res = check_block_sum(block_sum)
    assert res.passed, res
    if gpulab.is_simulator():  # the barrier check reads the simulator's access log
        assert "every barrier reached by every thread" in str(res)
    else:
        assert "same result when re-run; not checked on a GPU" in str(res)


def _gpu_mode_on_the_simulator(monkeypatch):
    """The check's gpu-mode path (no access log, no schedule changes), run by the simulator on NumPy arrays."""
    monkeypatch.setattr(runtime, "is_gpu", lambda: True)
    monkeypatch.setattr(runtime, "is_simulator", lambda: False)
    monkeypatch.setattr(runtime, "xp", lambda: np)
    monkeypatch.setattr(runtime, "to_device", np.asarray)
    monkeypatch.setattr(runtime, "to_host", np.asarray)
    monkeypatch.setattr(runtime, "synchronize", lambda: None)


@pytest.mark.skipif(gpulab.is_gpu(), reason="runs the gpu-mode path on the simulator")
@pytest.mark.parametrize("kernel", [block_sum, block_sum_every_thread_writes_total], ids=["no race", "a race"])
def test_in_gpu_mode_a_passing_verdict_says_races_were_not_checked(kernel, monkeypatch):
    """On a GPU nothing logs shared-memory accesses: a racy kernel whose values come out right passes, with full
    points, and the verdict says that races were not checked and how to check them (simulator mode)."""
    _gpu_mode_on_the_simulator(monkeypatch)
    res = check_block_sum(kernel)
    assert res.passed and res.score == res.max_score, res
    races = [c for c in res.checks if c.name == "races"]
    assert len(races) == 1 and races[0].passed
    assert races[0].message.startswith("same result when re-run; not checked on a GPU: unsynchronised accesses")
    assert "GPULAB_DEVICE=simulator" in str(res) and "GPULAB_DEVICE=simulator" in res._repr_html_()


@pytest.mark.skipif(gpulab.is_gpu(), reason="compares with the simulator's verdict")
def test_in_simulator_mode_the_races_line_is_unchanged():
    res = check_block_sum(block_sum)
    (races,) = [c for c in res.checks if c.name == "races"]
    assert races.message == (
        "same result with different thread schedules, no unsynchronised accesses to shared memory or outputs, "
        "every barrier reached by every thread"
    )
    assert "not checked" not in str(res)


@ACCESS_LOG
def test_a_race_that_leaves_the_values_right_fails_in_simulator_mode():
    """The kernel that passes in gpu mode above (with the races line saying it was not checked) fails here."""
    res = check_block_sum(block_sum_every_thread_writes_total)
    assert not res.passed and "total[0]" in res.message + res.hint, res


@ACCESS_LOG
def test_missing_barrier_between_halving_steps():
    res = check_block_sum(block_sum_no_step_sync)
    assert not res.passed
    text = res.message + res.hint
    assert re.search(
        r"shared memory race in block \(0, 0, 0\): thread \(\d+, 0, 0\) wrote buf\[\d+\] and thread "
        r"\(\d+, 0, 0\) (read|wrote) it with no cuda.syncthreads\(\) in between",
        text,
    ), text
    assert "BEFORE the next overwrite" in text and "each step of a tree reduction" in text


@ACCESS_LOG
def test_missing_barrier_after_the_load():
    res = check_block_sum(block_sum_no_load_sync)
    assert not res.passed and "AFTER the load" in res.hint, res


@ACCESS_LOG
def test_barrier_inside_the_reduction_branch():
    res = check_block_sum(block_sum_sync_in_branch)
    assert not res.passed
    assert "cuda.syncthreads() inside a branch that not all threads of block" in res.message + res.hint


# --- atomics --------------------------------------------------------------------------------------


@cuda.jit
def count_not_atomic(x, out):
    i = cuda.grid(1)
    if i < x.shape[0]:
        out[0] += x[i]


@cuda.jit
def count_atomic(x, out):
    i = cuda.grid(1)
    if i < x.shape[0]:
        cuda.atomic.add(out, 0, x[i])


@cuda.jit
def histogram_same_index(x, out):
    i = cuda.grid(1)
    if i < x.shape[0]:
        out[i // 2] = x[i]  # two threads per element, half the elements never written


def _count(kernel):
    return check_kernel(
        kernel,
        spec=lambda x: np.array([x.sum()], np.int32),
        inputs=lambda n, rng: np.ones(n, np.int32),
        sizes=[256, 512],
        launch=lambda x, out: (x.shape[0] // 64, 64),
        out_init=0,
    )


@ACCESS_LOG
def test_non_atomic_update_is_a_race():
    bad = _count(count_not_atomic)
    assert not bad.passed and "cuda.atomic.add" in bad.hint


def test_atomic_update_passes():
    assert _count(count_atomic).passed


@ACCESS_LOG
def test_elements_never_written_never_get_an_atomics_hint():
    res = check_kernel(
        histogram_same_index,
        spec=lambda x: x.copy(),
        inputs=lambda n, rng: random_arrays(rng, n),
        sizes=[64],
        threads=32,
    )
    assert not res.passed
    assert "atomic" not in res.hint, res.hint
    assert "same output index" in res.hint and "never written" in res.hint


def test_a_spec_returning_a_scalar_sum_is_the_exercises_setup_error():
    res = check_kernel(
        count_atomic,
        spec=lambda x: x.sum(),
        inputs=lambda n, rng: np.ones(n, np.int32),
        sizes=[64],
        launch=lambda x, out: (1, 64),
        out_init=0,
    )
    assert res.status == "setup error" and res.score == 0
    assert "not in your code" in res.message and "np.array([total]" in res.message


# --- reduction=: tolerances from the arithmetic ---------------------------------------------------


def _matmul_problem(**kw):
    def inputs(s, rng):
        m, k, n = s
        return random_arrays(rng, (m, k), (k, n))

    opts = dict(name="matmul", spec=lambda A, B: A @ B, inputs=inputs, sizes=[(32, 4096, 32)])
    opts.update(kw)
    return Problem(**opts)


def sequential_float32(A, B, C):
    """A GPU thread's loop, emulated: one float32 accumulator per output, k in order (on the host: the harness
    passes CuPy arrays in gpu mode)."""
    A, B = runtime.to_host(A), runtime.to_host(B)
    acc = np.zeros(C.shape, np.float32)
    for k in range(A.shape[1]):
        acc = (acc + A[:, k, None] * B[None, k, :]).astype(np.float32)
    C[...] = runtime.to_device(acc)


def dropped_term(A, B, C):
    C[...] = A[:, :-1] @ B[:-1, :]


def test_reduction_bound_accepts_a_sequential_float32_sum_that_a_fixed_tolerance_rejects():
    with_bound = _matmul_problem(reduction=lambda A, B: A.shape[1]).check(host=sequential_float32)
    assert with_bound.passed, with_bound
    assert "rounding bound" in with_bound.message
    fixed = _matmul_problem(rtol=1e-4, atol=1e-5).check(host=sequential_float32)
    assert not fixed.passed and fixed.status == "failed"


def test_reduction_bound_still_rejects_a_wrong_result():
    res = _matmul_problem(reduction=lambda A, B: A.shape[1]).check(host=dropped_term)
    assert not res.passed
    assert "allowed error: the float32 rounding bound for sums of 4,096 terms" in res.message


def test_reduction_bound_at_large_k_for_a_real_kernel():
    @cuda.jit
    def row_dot(A, B, C):  # one thread per output, K = 2048 terms each
        j, i = cuda.grid(2)
        if i < C.shape[0] and j < C.shape[1]:
            acc = float32(0.0)
            for k in range(A.shape[1]):
                acc += A[i, k] * B[k, j]
            C[i, j] = acc

    res = _matmul_problem(sizes=[(2, 2048, 3)], threads=(4, 2), reduction=2048).check(row_dot)
    assert res.passed, res


def test_rounding_bound_values():
    u = 2.0**-24
    assert math.isclose(rounding_bound(1), u / (1 - u))
    assert math.isclose(rounding_bound(4096), 4096 * u / (1 - 4096 * u))
    assert rounding_bound(10, np.float64) < 1e-14


def test_probable_bound_is_the_worst_case_for_short_sums_and_grows_as_sqrt_n_beyond():
    from gpulab.exercises.compare import probable_bound

    u = 2.0**-24
    assert probable_bound(64) == rounding_bound(64)  # n <= lam**2 = 100: gamma_n itself
    assert math.isclose(probable_bound(1 << 20), 10 * 1024 * u)  # 109x below gamma_(2**20)
    assert math.isclose(probable_bound(1 << 20, lam=20), 20 * 1024 * u)
    with pytest.raises(ValueError, match="too long"):
        probable_bound(1 << 30)


def test_reduction_counts_terms_per_output():
    """reduction=(n0, n1): each output's tolerance from its own count (a backward pass's dx and dW differ)."""
    from gpulab.exercises.compare import float64_reference, probable_bound, reduction_len

    A, B = random_arrays(np.random.default_rng(0), (3, 400), (400, 2))
    spec = lambda A, B: (A @ B, (A @ B).T.copy())  # noqa: E731
    assert reduction_len(lambda A, B: (400, 7), (A, B), 1) == 7 and reduction_len(9, (A, B), 1) == 9
    _, (t0, t1) = float64_reference(spec, (A, B), spec(A, B), (400, 7), 0.0)
    scale = np.abs(A).astype(np.float64) @ np.abs(B).astype(np.float64)
    np.testing.assert_allclose(t0, probable_bound(401) * scale)
    np.testing.assert_allclose(t1, probable_bound(8) * scale.T)


def test_reduction_too_long_for_the_output_precision_is_a_setup_error():
    res = _matmul_problem(sizes=[(2, 4, 2)], reduction=1 << 30).check(host=sequential_float32)
    assert res.status == "setup error" and "too long for float32" in res.message, res


@cuda.jit
def block_sum_never_writes(x, partial):
    buf = cuda.shared.array(TPB, float32)
    tx = cuda.threadIdx.x
    i = cuda.grid(1)
    buf[tx] = x[i] if i < x.shape[0] else float32(0.0)
    cuda.syncthreads()  # wait until every thread stored its element
    s = TPB // 2
    while s > 0:
        if tx < s:
            buf[tx] += buf[tx + s]
        cuda.syncthreads()  # wait until this level of the tree is done
        s //= 2
    if tx == TPB:  # no thread has this index: the result is never written
        partial[cuda.blockIdx.x] = buf[0]


def test_a_reduction_that_never_writes_its_one_result_is_not_told_about_n_equal_1():
    res = check_block_sum(block_sum_never_writes, sizes=[30])  # one block: partial has one element
    assert not res.passed
    assert "whose one element sums up (or reduces) 30 input values" in res.hint, res.hint
    assert "n == 1" not in res.hint
