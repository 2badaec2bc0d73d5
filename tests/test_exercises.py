"""The exercise harness: right kernels pass, each usual mistake gets the verdict that names it."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest
from numba import cuda, float32

from gpulab import exercises
from gpulab.exercises import Budget, check_kernel, kernel_source, random_arrays

TPB = 32
TILE = 8


def add_inputs(n, rng):
    return random_arrays(rng, n, n)


def check_add(kernel, **kw):
    opts = dict(spec=lambda a, b: a + b, inputs=add_inputs, sizes=[0, 1, 7, 100, 300], threads=[128, 32])
    opts.update(kw)
    return check_kernel(kernel, **opts)


# --- correct kernels and valid alternatives --------------------------------------------------------


@cuda.jit
def add_good(a, b, out):
    i = cuda.grid(1)
    if i < out.shape[0]:
        out[i] = a[i] + b[i]


@cuda.jit
def add_grid_stride(a, b, out):
    for i in range(cuda.grid(1), out.shape[0], cuda.gridsize(1)):
        out[i] = a[i] + b[i]


def test_correct_kernel_passes_with_several_block_sizes():
    res = check_add(add_good, threads=[128, 32, 256, 1], points=2)
    assert res.passed and res.score == 2 and res.max_score == 2
    assert res.status == "passed" and bool(res)
    assert "races" in str(res)


def test_grid_stride_loop_is_accepted_with_a_small_fixed_grid():
    res = check_add(add_grid_stride, threads=None, launch=lambda a, b, out: (2, 32), sizes=[0, 1, 50, 200, 1000])
    assert res.passed, res


# --- the usual mistakes ----------------------------------------------------------------------------


@cuda.jit
def add_no_guard(a, b, out):
    i = cuda.grid(1)
    out[i] = a[i] + b[i]


@cuda.jit
def add_off_by_one(a, b, out):
    i = cuda.grid(1)
    if i < out.shape[0] - 1:
        out[i] = a[i] + b[i]


@cuda.jit
def add_writes_past_end(a, b, out):
    i = cuda.grid(1)
    if i < out.shape[0]:
        out[i + 1] = a[i] + b[i]


@cuda.jit
def add_does_nothing(a, b, out):
    i = cuda.grid(1)  # noqa: F841


@cuda.jit
def add_hangs(a, b, out):
    i = cuda.grid(1)
    while i < out.shape[0]:  # forgot i += cuda.gridsize(1)
        out[i] = a[i] + b[i]


@cuda.jit
def add_placeholder(a, b, out):
    raise NotImplementedError("replace this line with your code")


def test_missing_bounds_guard_names_thread_block_and_fix():
    res = check_add(add_no_guard)
    assert not res.passed and res.score == 0 and res.status == "failed"
    # which of the idle threads fails first depends on the schedule; the verdict names one of them
    assert re.search(r"thread \((\d+), 0, 0\) of block \(0, 0, 0\) indexed past the end", res.message)
    # the empty input already catches it: index 0 of a 0-element array
    assert "size=0, seed=0" in res.message and "add_no_guard[(1,), (128,)]" in res.message
    assert "missing bounds guard" in res.hint


def test_off_by_one_guard():
    res = check_add(add_off_by_one, sizes=[7, 100])
    assert not res.passed
    assert "out[6]" in res.message and "expected" in res.message and "got nan" in res.message
    assert "last element was never written" in res.hint and "off-by-one" in res.hint


def test_off_by_one_at_size_one_points_at_the_guard():
    res = check_add(add_off_by_one, sizes=[0, 1, 7])
    assert "too strict" in res.hint


def test_writing_out_of_bounds():
    res = check_add(add_writes_past_end, sizes=[7])
    assert not res.passed
    assert "thread (6, 0, 0) of block (0, 0, 0)" in res.message and "out of bounds" in res.message
    assert "bounds guard" in res.hint


def test_output_untouched():
    res = check_add(add_does_nothing, sizes=[7])
    assert "did the kernel write to out" in res.hint


def test_hang_is_stopped_and_reported():
    res = check_add(add_hangs, sizes=[0, 5], timeout=1.5)
    assert res.status == "timeout" and res.score == 0
    assert "did not finish within 1.5 s" in res.message and "thread (0, 0, 0) of block (0, 0, 0)" in res.message
    assert "infinite loop" in res.hint
    # the stuck simulator threads were stopped: a later check runs normally
    assert check_add(add_good, sizes=[5]).passed


def test_placeholder_is_not_implemented_not_a_crash():
    res = check_add(add_placeholder, points=3)
    assert res.status == "not implemented" and res.score == 0 and res.max_score == 3
    assert "not implemented yet" in str(res)


def test_not_implemented_in_a_host_function():
    def my_host(a, b, out):
        raise NotImplementedError

    res = check_add(None, threads=None, host=my_host)
    assert res.status == "not implemented"


@cuda.jit
def copy_swapped(a, out):
    i, j = cuda.grid(2)
    if i < out.shape[0] and j < out.shape[1]:
        out[i, j] = a[j, i]


def test_swapped_row_and_column_is_named_on_a_square_input():
    res = check_kernel(copy_swapped, spec=lambda a: a.copy(), inputs=lambda s, rng: random_arrays(rng, s),
                       sizes=[(6, 6), (5, 9)], threads=(4, 4))
    assert not res.passed and "row and column are swapped" in res.hint


def test_exercise_specific_mistake_hint():
    @cuda.jit
    def transpose_copies(a, out):
        i, j = cuda.grid(2)
        if i < out.shape[0] and j < out.shape[1]:
            out[i, j] = a[i, j]

    res = check_kernel(transpose_copies, spec=lambda a: np.ascontiguousarray(a.T),
                       inputs=lambda s, rng: random_arrays(rng, s), sizes=[(5, 5)], threads=(4, 4),
                       mistakes={"copied instead of transposing": lambda a: a})
    assert res.hint == "copied instead of transposing"


@cuda.jit
def reverse_no_sync(x, out):
    buf = cuda.shared.array(TPB, float32)
    tx = cuda.threadIdx.x
    i = cuda.grid(1)
    if i < x.shape[0]:
        buf[tx] = x[i]
    if i < x.shape[0]:
        out[i] = buf[TPB - 1 - tx]


@cuda.jit
def reverse_sync(x, out):
    buf = cuda.shared.array(TPB, float32)
    tx = cuda.threadIdx.x
    i = cuda.grid(1)
    if i < x.shape[0]:
        buf[tx] = x[i]
    cuda.syncthreads()  # wait until the block's elements are in buf
    if i < x.shape[0]:
        out[i] = buf[TPB - 1 - tx]


def reverse_spec(x):
    return x.reshape(-1, TPB)[:, ::-1].ravel().copy()


def test_missing_syncthreads_is_flagged_as_a_race():
    res = check_kernel(reverse_no_sync, spec=reverse_spec, inputs=lambda n, rng: random_arrays(rng, n),
                       sizes=[64], threads=TPB)
    assert not res.passed
    # found directly (who wrote, who read), not only as a result that changes between schedules
    assert "shared memory race in block (0, 0, 0)" in res.hint and "cuda.syncthreads()" in res.hint
    ok = check_kernel(reverse_sync, spec=reverse_spec, inputs=lambda n, rng: random_arrays(rng, n),
                      sizes=[32, 96], threads=TPB)
    assert ok.passed, ok


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


def _count(kernel):
    return check_kernel(kernel, spec=lambda x: np.array([x.sum()], np.int32),
                        inputs=lambda n, rng: np.ones(n, np.int32), sizes=[256, 512],
                        launch=lambda x, out: (x.shape[0] // 64, 64), out_init=0)


def test_non_atomic_update_is_a_race_and_atomic_passes():
    bad = _count(count_not_atomic)
    assert not bad.passed and "cuda.atomic.add" in bad.hint
    assert _count(count_atomic).passed


# --- efficiency budgets and PTX --------------------------------------------------------------------


@cuda.jit
def copy_uncoalesced(a, out):
    i, j = cuda.grid(2)  # x -> row: neighbouring threads are a whole row apart
    if i < a.shape[0] and j < a.shape[1]:
        out[i, j] = a[i, j]


@cuda.jit
def copy_coalesced(a, out):
    j, i = cuda.grid(2)  # x -> column
    if i < a.shape[0] and j < a.shape[1]:
        out[i, j] = a[i, j]


def test_coalescing_budget():
    common = dict(spec=lambda a: a.copy(), inputs=lambda s, rng: random_arrays(rng, s), sizes=[(40, 40)],
                  budget=Budget(sectors={"a": 2.0, "out": 2.0}), points=2)
    good = check_kernel(copy_coalesced, launch=lambda a, out: ((2, 5), (32, 8)), **common)
    assert good.passed, good
    bad = check_kernel(copy_uncoalesced, launch=lambda a, out: ((2, 5), (32, 8)), **common)
    assert bad.status == "over budget" and bad.score == 1
    assert "coalescing of a" in bad.message and "threadIdx.x" in bad.hint


@cuda.jit
def matmul_naive(A, B, C):
    i, j = cuda.grid(2)
    if i < C.shape[0] and j < C.shape[1]:
        acc = float32(0.0)
        for k in range(A.shape[1]):
            acc += A[i, k] * B[k, j]
        C[i, j] = acc


@cuda.jit
def matmul_tiled(A, B, C):
    sA = cuda.shared.array((TILE, TILE), float32)
    sB = cuda.shared.array((TILE, TILE), float32)
    i, j = cuda.grid(2)
    tx = cuda.threadIdx.x
    ty = cuda.threadIdx.y
    acc = float32(0.0)
    for t in range((A.shape[1] + TILE - 1) // TILE):
        k = t * TILE
        sA[tx, ty] = A[i, k + ty] if i < A.shape[0] and k + ty < A.shape[1] else float32(0.0)
        sB[tx, ty] = B[k + tx, j] if k + tx < B.shape[0] and j < B.shape[1] else float32(0.0)
        cuda.syncthreads()  # wait until both tiles are loaded
        for kk in range(TILE):
            acc += sA[tx, kk] * sB[kk, ty]
        cuda.syncthreads()  # wait until every thread used the tiles before they are overwritten
    if i < C.shape[0] and j < C.shape[1]:
        C[i, j] = acc


def _matmul(kernel, **kw):
    def inputs(s, rng):
        m, k, n = s
        return random_arrays(rng, (m, k), (k, n))

    budget = Budget(reads_per_element={"A": lambda s: math.ceil(s[2] / TILE), "B": lambda s: math.ceil(s[0] / TILE)},
                    shared_bytes=2 * TILE * TILE * 4)
    return check_kernel(kernel, spec=lambda A, B: A @ B, inputs=inputs, sizes=[(1, 1, 1), (13, 10, 7), (16, 9, 16)],
                        threads=(TILE, TILE), rtol=1e-4, atol=1e-5, budget=budget, **kw)


def test_read_budget_separates_naive_from_tiled_matmul():
    naive = _matmul(matmul_naive)
    assert naive.status == "over budget" and "reads of A" in naive.message and "shared memory" in naive.hint
    tiled = _matmul(matmul_tiled)
    assert tiled.passed, tiled
    assert "512 bytes of shared memory" in str(tiled)


def test_kernel_source_rebuilds_constants_and_imports():
    src = kernel_source(matmul_tiled)
    assert "TILE = 8" in src and "from numba import float32" in src and "def matmul_tiled(A, B, C):" in src
    assert src.startswith("from numba import cuda")


@pytest.mark.ptx
def test_ptx_check_accepts_real_cuda_and_rejects_python_only_code():
    @cuda.jit
    def fill_with_list(out):
        i = cuda.grid(1)
        xs = [1.0, 2.0]
        if i < out.shape[0]:
            out[i] = xs[0]

    bad = check_kernel(fill_with_list, spec=lambda x: np.ones_like(x), inputs=lambda n, rng: (np.zeros(n, np.float32),),
                       sizes=[5], threads=8, args=lambda ins, outs: outs, ptx="void(float32[:])")
    assert bad.status == "failed" and bad.score == 0.5 and "NVVM rejected" in bad.message
    good = _matmul(matmul_tiled, ptx="void(float32[:, :], float32[:, :], float32[:, :])")
    assert good.passed and any(c.name == "PTX" and c.passed for c in good.checks)


# --- API and presentation --------------------------------------------------------------------------


def test_inputs_are_fresh_for_every_run():
    @cuda.jit
    def double_in_place_then_copy(x, out):
        i = cuda.grid(1)
        if i < x.shape[0]:
            x[i] = 2 * x[i]
            out[i] = x[i]

    res = check_kernel(double_in_place_then_copy, spec=lambda x: 2 * x, inputs=lambda n, rng: random_arrays(rng, n),
                       sizes=[5, 40], threads=[32, 8])
    assert res.passed, res


def test_scalar_inputs_are_described_plainly():
    case = exercises.Case(3, 0, (np.float32(2.5), np.zeros((2, 3), np.float32)), ())
    assert case.describe() == "size=3, seed=0 (inputs: 2.5, float32(2, 3))"


def test_launch_options_are_exclusive():
    with pytest.raises(ValueError, match="exactly one of threads=, launch= or host="):
        check_kernel(add_good, spec=lambda a, b: a + b, inputs=add_inputs, sizes=[3], threads=32, launch=lambda *a: (1, 32))


def test_result_renders_as_text_and_html():
    res = check_add(add_no_guard)
    text, page = str(res), res._repr_html_()
    assert text.startswith("[FAIL] add_no_guard: failed (0/1 points)") and "hint:" in text
    assert "<div" in page and "missing bounds guard" in page and "0/1 points" in page
    assert res.to_dict()["status"] == "failed"


def test_grade_log_collects_results(tmp_path, monkeypatch):
    log = tmp_path / "log.jsonl"
    monkeypatch.setenv("GPULAB_GRADE_LOG", str(log))
    check_add(add_good, sizes=[3])
    check_add(add_placeholder)
    lines = log.read_text().splitlines()
    assert len(lines) == 2 and '"passed": true' in lines[0] and '"not implemented"' in lines[1]


def test_switch_interval_is_restored():
    import sys

    before = sys.getswitchinterval()
    check_kernel(reverse_no_sync, spec=reverse_spec, inputs=lambda n, rng: random_arrays(rng, n), sizes=[64], threads=TPB)
    assert sys.getswitchinterval() == before
    assert exercises._SCHEDULES  # schedules used for re-runs are configured


@cuda.jit
def block_sum_missing_sync(x, partial):
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


def test_shared_memory_race_names_the_threads_and_the_array():
    def spec(x):
        blocks = max(1, math.ceil(x.size / TPB))
        padded = np.zeros(blocks * TPB, np.float64)
        padded[: x.size] = x
        return padded.reshape(blocks, TPB).sum(axis=1).astype(np.float32)

    res = check_kernel(block_sum_missing_sync, spec=spec, inputs=lambda n, rng: random_arrays(rng, n),
                       sizes=[40, 100], launch=lambda x, p: (p.shape[0], TPB), rtol=1e-4, atol=1e-5)
    assert not res.passed
    text = res.message + res.hint
    assert re.search(r"shared memory race in block \(0, 0, 0\): thread \(\d+, 0, 0\) wrote buf\[\d+\] and thread "
                     r"\(\d+, 0, 0\) (read|wrote) it with no cuda.syncthreads\(\) in between", text), text


@cuda.jit
def matmul_tiled_no_second_sync(A, B, C):
    sA = cuda.shared.array((TILE, TILE), float32)
    sB = cuda.shared.array((TILE, TILE), float32)
    i, j = cuda.grid(2)
    tx = cuda.threadIdx.x
    ty = cuda.threadIdx.y
    acc = float32(0.0)
    for t in range((A.shape[1] + TILE - 1) // TILE):
        k = t * TILE
        sA[tx, ty] = A[i, k + ty] if i < A.shape[0] and k + ty < A.shape[1] else float32(0.0)
        sB[tx, ty] = B[k + tx, j] if k + tx < B.shape[0] and j < B.shape[1] else float32(0.0)
        cuda.syncthreads()  # wait until both tiles are loaded
        for kk in range(TILE):
            acc += sA[tx, kk] * sB[kk, ty]
        # (missing: the barrier before the next iteration overwrites the tiles)
    if i < C.shape[0] and j < C.shape[1]:
        C[i, j] = acc


def test_missing_barrier_before_overwrite_is_found_even_when_results_look_right():
    res = _matmul(matmul_tiled_no_second_sync)
    assert not res.passed and res.score == 0
    text = res.message + res.hint
    assert "shared memory race" in text and re.search(r"wrote s[AB]\[\d+, \d+\]", text), text


@cuda.jit(device=True)
def _clamp01(v):
    return min(max(v, 0.0), 1.0)


@cuda.jit
def clamp_kernel(x, out):
    buf = cuda.shared.array(TPB, np.float32)
    i = cuda.grid(1)
    if i < x.shape[0]:
        buf[cuda.threadIdx.x] = _clamp01(x[i]) * math.pi / math.pi
        out[i] = buf[cuda.threadIdx.x]


def test_kernel_source_includes_device_functions_and_module_aliases():
    src = kernel_source(clamp_kernel)
    assert "import numpy as np" in src and "import math" in src and "TPB = 32" in src
    assert "@cuda.jit(device=True)\ndef _clamp01(v):" in src
    assert src.index("def _clamp01") < src.index("def clamp_kernel")
    namespace: dict = {}
    exec(compile(src, "<rebuilt>", "exec"), namespace)  # the rebuilt module runs on its own
    assert "clamp_kernel" in namespace and "_clamp01" in namespace
