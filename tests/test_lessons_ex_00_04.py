"""What a beginner sees for the usual mistakes in the exercises of lessons 01-04 (gpulab.lessons.ex_00_04) and
in the harness's generic verdicts they reach (gpulab.exercises.diagnose / explain): each wrong kernel below is one
a learner writes, and the verdict must name the mistake and the fix, not point at something else (atomics in a
lesson that has not met them, a bounds guard for an argument in the wrong place, tiles in a kernel without any).

The last tests read the learner versions of lessons 00-02: text next to the code it describes, and answer cells
that take a learner's odd forms ((16, 8) as a list or a string, "True" as a word) without a traceback.

Most verdicts here come from the simulator (an IndexError naming the thread, the access log of writes), so the
module runs in simulator mode only."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from numba import cuda, float32

import gpulab
from gpulab import lessons
from gpulab.exercises.races import WRITE_RACE_HINT
from gpulab.lessons.problems import hints_of
from gpulab.source import define
from kernel_edits import edited_kernel

pytestmark = pytest.mark.skipif(
    gpulab.is_gpu(), reason="the verdicts come from the simulator's IndexError and access log"
)


def _failed(lesson, name, kernel):
    res = lessons.check(lesson, name, kernel)
    assert not res.passed, res
    return res


# --- 01 · a grid-stride loop that steps by the wrong amount: two threads write one element, all values right


@cuda.jit
def stride_by_block(a, b, out):
    for k in range(cuda.grid(1), out.size, cuda.blockDim.x):
        out[k] = a[k] + b[k]


@cuda.jit
def stride_by_one(a, b, out):
    for k in range(cuda.grid(1), out.size):
        out[k] = a[k] + b[k]


@pytest.mark.parametrize("kernel", [stride_by_block, stride_by_one])
def test_grid_stride_with_the_wrong_step_is_told_the_step_not_atomics(kernel):
    res = _failed("01", "grid_stride", kernel)
    assert "both wrote out[" in res.message
    assert res.hint != WRITE_RACE_HINT and "atomic" not in res.hint
    assert "cuda.gridsize(1)" in res.hint and "exactly one thread" in res.hint


@cuda.jit
def scale2d_row_loop(alpha, a, out):
    i = cuda.grid(1)
    if i < out.shape[0]:
        for j in range(out.shape[1]):
            out[i, j] = alpha * a[i, j]


def test_scale2d_written_as_a_loop_over_rows_is_pointed_at_cuda_grid_2():
    res = _failed("01", "scale2d", scale2d_row_loop)
    assert "atomic" not in res.hint and "j, i = cuda.grid(2)" in res.hint


# --- 01 / 02 · errors that are not a missing bounds guard


def add_without_jit(a, b, out):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = a[i] + b[i]


def test_a_kernel_without_cuda_jit_is_told_to_add_it():
    res = lessons.check("01", "add", add_without_jit)
    assert not res.passed and "@cuda.jit" in res.hint


@cuda.jit
def add_whole_arrays(a, b, out):
    out[:] = a + b


def test_whole_array_arithmetic_in_a_kernel_is_named():
    res = lessons.check("01", "add", add_whole_arrays)
    assert not res.passed and "whole arrays" in res.hint and "`out[i] = 2 * x[i]`" in res.hint
    assert "a[i] + b[i]" not in res.hint  # an example, not this exercise's answer


@cuda.jit
def add_index_from_the_wrong_formula(a, b, out):
    i = cuda.blockIdx.x * cuda.threadIdx.x + cuda.blockDim.x
    if i < out.size:
        out[i] = a[i] + b[i]


@cuda.jit
def add_returns_its_result(a, b, out):
    i = cuda.grid(1)
    if i < out.size:
        return a[i] + b[i]


@pytest.mark.parametrize("kernel", [add_index_from_the_wrong_formula, add_returns_its_result])
def test_nothing_written_for_one_element_names_the_index_and_return_not_only_the_guard(kernel):
    res = _failed("01", "add", kernel)
    assert "single element" in res.hint
    assert "cannot return" in res.hint and "blockIdx.x * blockDim.x + threadIdx.x" in res.hint


@cuda.jit
def linear_relu_returns_early(X, W, b, Y):
    j, i = cuda.grid(2)
    if i < Y.shape[0] and j < Y.shape[1]:
        acc = float32(0.0)
        for k in range(X.shape[1]):
            acc += X[i, k] * W[k, j]
        acc += b[j]
        if acc < 0:
            return
        Y[i, j] = acc


def test_nothing_written_for_one_element_of_a_matrix_speaks_of_cuda_grid_2():
    res = _failed("03", "linear_relu", linear_relu_returns_early)
    assert "single element" in res.hint and "j, i = cuda.grid(2)" in res.hint and "cuda.grid(1)" not in res.hint


@cuda.jit
def saxpy_alpha_indexed(alpha, x, y, out):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = alpha[i] * x[i] + y[i]


@cuda.jit
def saxpy_parameters_out_of_order(x, y, alpha, out):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = alpha * x[i] + y[i]


@pytest.mark.parametrize("kernel", [saxpy_alpha_indexed, saxpy_parameters_out_of_order])
def test_a_number_indexed_like_an_array_is_not_called_a_missing_guard(kernel):
    res = _failed("02", "saxpy", kernel)
    assert "indexed a number, not an array" in res.message
    assert "guard" not in res.hint and "order" in res.hint


# --- 02 · the tiled transpose with the tile's origin from the block size


@cuda.jit
def transpose_tiled_origin_16(a, out):
    tile = cuda.shared.array((32, 33), float32)
    tx, ty = cuda.threadIdx.x, cuda.threadIdx.y
    bx, by = cuda.blockIdx.x * 16, cuda.blockIdx.y * 16
    for r in range(ty, 32, 8):
        if by + r < a.shape[0] and bx + tx < a.shape[1]:
            tile[r, tx] = a[by + r, bx + tx]
    cuda.syncthreads()  # the tile is loaded
    for r in range(ty, 32, 8):
        if bx + r < out.shape[0] and by + tx < out.shape[1]:
            out[bx + r, by + tx] = tile[tx, r]


def test_tiled_transpose_with_overlapping_tiles_is_told_where_a_tile_starts():
    res = _failed("02", "transpose_tiled", transpose_tiled_origin_16)
    assert "atomic" not in res.hint and "cuda.blockIdx.y * 32" in res.hint


@cuda.jit
def transpose_one_element_per_thread(a, out):
    j, i = cuda.grid(2)
    if i < a.shape[0] and j < a.shape[1]:
        out[j, i] = a[i, j]


@cuda.jit
def transpose_tile_corner_one_row_per_thread(a, out):
    # (with the tile and one row per thread, the read of tile[tx, ty] meets unset shared memory: its own hint)
    tx, ty = cuda.threadIdx.x, cuda.threadIdx.y
    col0, row0 = cuda.blockIdx.x * 32, cuda.blockIdx.y * 32
    if row0 + ty < a.shape[0] and col0 + tx < a.shape[1]:
        out[col0 + tx, row0 + ty] = a[row0 + ty, col0 + tx]


@pytest.mark.parametrize("kernel", [transpose_one_element_per_thread, transpose_tile_corner_one_row_per_thread])
def test_tiled_transpose_with_one_row_per_thread_is_told_each_thread_moves_four(kernel):
    # the check launches what the lesson says: ceil(rows / 32) blocks along y, a 32 x 32 tile per 32 x 8 threads
    res = _failed("02", "transpose_tiled", kernel)
    assert "[(1, 2), (32, 8)]" in str(res) or "[(2, 1), (32, 8)]" in str(res), res
    assert "never written" in res.hint and "range(ty, 32, 8)" in res.hint, res


# --- 03 · loops that stop one short, and the dense layer's bias and ReLU


@cuda.jit
def matvec_one_short(A, x, y):
    i = cuda.grid(1)
    if i < y.size:
        acc = float32(0.0)
        for k in range(A.shape[1] - 1):
            acc += A[i, k] * x[k]
        y[i] = acc


@cuda.jit
def matmul_one_short(A, B, C):
    j, i = cuda.grid(2)
    if i < C.shape[0] and j < C.shape[1]:
        acc = float32(0.0)
        for k in range(A.shape[1] - 1):
            acc += A[i, k] * B[k, j]
        C[i, j] = acc


def test_a_loop_over_k_that_stops_one_short_is_named():
    assert "stops one short" in _failed("03", "matvec", matvec_one_short).hint
    hint = _failed("03", "matmul_naive", matmul_one_short).hint
    assert "stops one short" in hint and "range(K - 1)" in hint  # not only "the last partial tile" (no tiles here)


def _linear_relu(body):
    """A linear_relu kernel whose last lines (after the dot product in ``acc``) are ``body``."""
    src = (
        "def linear_relu_kernel(X, W, b, Y):\n"
        "    j, i = cuda.grid(2)\n"
        "    if i < Y.shape[0] and j < Y.shape[1]:\n"
        "        acc = float32(0.0)\n"
        "        for k in range(X.shape[1]):\n"
        "            acc += X[i, k] * W[k, j]" + ("" if body.startswith(" +") else "\n") + body + "\n"
    )
    return cuda.jit(define(src, "linear_relu_kernel", {"cuda": cuda, "float32": float32}))


@pytest.mark.parametrize(
    "body, named",
    [
        ("        Y[i, j] = max(acc + b[i], 0.0)", "b[j] (not b[i])"),
        ("        Y[i, j] = acc + b[j]", "the ReLU is missing"),
        ("        Y[i, j] = max(acc, 0.0) + b[j]", "the ReLU comes before the bias"),
        ("        Y[i, j] = max(acc, 0.0)", "the bias is missing"),
        (" + b[j]\n        Y[i, j] = max(acc, 0.0)", "the bias is added K times"),
    ],
)
def test_linear_relu_mistakes_are_named(body, named):
    assert named in _failed("03", "linear_relu", _linear_relu(body)).hint


# --- 04 · the blur's halo and the register strip


def _blur(left, right):
    """A blur3 kernel with ``left`` / ``right`` as the halo loads of the block's first and last thread."""
    src = (
        "def blur3_kernel(x, out):\n"
        "    buf = cuda.shared.array(34, float32)\n"
        "    i = cuda.grid(1)\n"
        "    tx = cuda.threadIdx.x\n"
        "    n = x.size\n"
        "    buf[tx + 1] = x[i] if i < n else 0.0\n"
        "    if tx == 0:\n"
        f"        buf[0] = {left}\n"
        "    if tx == cuda.blockDim.x - 1:\n"
        f"        buf[tx + 2] = {right}\n"
        "    cuda.syncthreads()  # the block's elements and its halo are loaded\n"
        "    if i < n:\n"
        "        out[i] = (buf[tx] + buf[tx + 1] + buf[tx + 2]) / 3.0\n"
    )
    return cuda.jit(define(src, "blur3_kernel", {"cuda": cuda, "float32": float32}))


GOOD_LEFT = "x[i - 1] if 0 < i <= n else 0.0"
GOOD_RIGHT = "x[i + 1] if i + 1 < n else 0.0"


@pytest.mark.parametrize(
    "left, right, named",
    [
        ("x[i - 1] if i <= n else 0.0", GOOD_RIGHT, "x[-1]"),
        ("0.0", "0.0", "the halo is missing"),
        (GOOD_LEFT, "0.0", "the right halo is missing"),
        ("0.0", GOOD_RIGHT, "the left halo is missing"),
    ],
)
def test_blur3_halo_mistakes_are_named(left, right, named):
    assert lessons.check("04", "blur3", _blur(GOOD_LEFT, GOOD_RIGHT)).passed
    assert named in _failed("04", "blur3", _blur(left, right)).hint


_NS = {"cuda": cuda, "float32": float32}


def _strip_src(outputs=4, stride="cuda.gridDim.x * cuda.blockDim.x", init=True):
    return (
        "def matmul_strip_kernel(A, B, C):\n"
        "    j0, i = cuda.grid(2)\n"
        f"    W = {stride}\n"
        "    acc = cuda.local.array(4, float32)\n"
        + ("    for t in range(4):\n        acc[t] = 0.0\n" if init else "")
        + "    if i < C.shape[0]:\n"
        "        for k in range(A.shape[1]):\n"
        "            a = A[i, k]\n"
        f"            for t in range({outputs}):\n"
        "                if j0 + t * W < C.shape[1]:\n"
        "                    acc[t] += a * B[k, j0 + t * W]\n"
        f"        for t in range({outputs}):\n"
        "            if j0 + t * W < C.shape[1]:\n"
        "                C[i, j0 + t * W] = acc[t]\n"
    )


def _strip(**kw):
    return cuda.jit(define(_strip_src(**kw), "matmul_strip_kernel", dict(_NS)))


def test_strip_mistakes_are_named():
    assert lessons.check("04", "matmul_strip", _strip()).passed
    # 3 outputs per thread: the grid rounds up to whole blocks, so only N = 64 (exactly 16 threads x 4) shows it
    assert "never written: each thread computes 4 outputs" in _failed("04", "matmul_strip", _strip(outputs=3)).hint
    hint = _failed("04", "matmul_strip", _strip(stride="cuda.blockDim.x")).hint
    assert "atomic" not in hint and "W = cuda.gridDim.x * cuda.blockDim.x" in hint


def test_an_uninitialised_local_array_is_suggested_when_results_change_between_runs():
    hint = _failed("04", "matmul_strip", _strip(init=False)).hint
    assert "cuda.local.array" in hint and "acc[t] = 0.0" in hint


# --- 03 / 04 · Python that only the simulator runs: the check compiles the kernel to PTX as well


@cuda.jit
def matmul_with_np_dot(A, B, C):
    j, i = cuda.grid(2)
    if i < C.shape[0] and j < C.shape[1]:
        C[i, j] = np.dot(A[i, :], B[:, j])


@pytest.mark.ptx
def test_kernels_only_the_simulator_runs_lose_half_the_points():
    res = lessons.check("03", "matmul_naive", matmul_with_np_dot)
    assert res.status == "failed" and res.score == 0.5 and "uses `np.dot(...)`" in res.message, res
    listed = (  # the strip kernel with its 4 accumulators in a Python list
        "    acc = cuda.local.array(4, float32)\n    for t in range(4):\n        acc[t] = 0.0\n",
        "    acc = [0.0, 0.0, 0.0, 0.0]\n",
    )
    res = lessons.check("04", "matmul_strip", cuda.jit(edited_kernel(_strip_src(), "matmul_strip_kernel", _NS, listed)))
    assert res.status == "failed" and res.score == 0.5 and "a Python list (`[0.0, 0.0, 0.0, 0.0]`)" in res.message


# --- 02 / 04 · correct kernels that skip the point of the exercise: over budget, with the exercise's hint


@cuda.jit
def blur3_from_global_memory(x, out):
    i = cuda.grid(1)
    n = x.size
    if i < n:
        left = x[i - 1] if i > 0 else 0.0
        right = x[i + 1] if i + 1 < n else 0.0
        out[i] = (left + x[i] + right) / 3.0


@cuda.jit
def tiled_without_tiles(A, B, C):
    j, i = cuda.grid(2)
    if i < C.shape[0] and j < C.shape[1]:
        acc = float32(0.0)
        for k in range(A.shape[1]):
            acc += A[i, k] * B[k, j]
        C[i, j] = acc


@cuda.jit
def transpose_tiled_without_a_tile(a, out):
    # the exercise's launch and rows (32 x 8 threads, 4 rows of a 32 x 32 tile each), straight from a to out
    tx, ty = cuda.threadIdx.x, cuda.threadIdx.y
    col0, row0 = cuda.blockIdx.x * 32, cuda.blockIdx.y * 32
    for r in range(ty, 32, 8):
        if row0 + r < a.shape[0] and col0 + tx < a.shape[1]:
            out[col0 + tx, row0 + r] = a[row0 + r, col0 + tx]


@pytest.mark.parametrize(
    "lesson, name, kernel, limit",
    [
        ("04", "blur3", blur3_from_global_memory, "budget: reads of x"),
        ("04", "matmul_tiled", tiled_without_tiles, "budget: reads of A"),
        ("02", "transpose_tiled", transpose_tiled_without_a_tile, "budget: coalescing of out"),
    ],
)
def test_a_correct_kernel_without_the_exercises_shared_memory_is_over_budget(lesson, name, kernel, limit):
    res = lessons.check(lesson, name, kernel)
    assert res.status == "over budget" and f"but {limit}:" in res.message, res


def test_strip_that_reloads_a_or_packs_its_columns_is_told_why():
    reload = edited_kernel(_strip_src(), "matmul_strip_kernel", _NS, ("acc[t] += a * B", "acc[t] += A[i, k] * B"))
    res = lessons.check("04", "matmul_strip", cuda.jit(reload))
    assert res.status == "over budget" and "`a = A[i, k]`" in res.hint, res
    packed = edited_kernel(_strip_src(), "matmul_strip_kernel", _NS, ("j0 + t * W", "4 * j0 + t"))
    res = lessons.check("04", "matmul_strip", cuda.jit(packed))
    assert res.status == "over budget" and "W apart" in res.hint, res


# --- the kernel's parameter list, and a barrier in a branch reported with one full stop


@cuda.jit
def add_two_parameters(a, b):
    i = cuda.grid(1)
    if i < a.size:
        a[i] = a[i] + b[i]


@cuda.jit
def add_with_n(a, b, out, n):
    i = cuda.grid(1)
    if i < n:
        out[i] = a[i] + b[i]


@pytest.mark.parametrize("kernel", [add_two_parameters, add_with_n])
def test_a_parameter_list_that_does_not_match_is_named(kernel):
    res = lessons.check("01", "add", kernel)
    assert not res.passed and "parameters do not match" in res.hint and "add_kernel(a, b, out)" in res.hint


@cuda.jit
def blur3_returns_before_the_barrier(x, out):
    buf = cuda.shared.array(34, float32)
    i = cuda.grid(1)
    tx = cuda.threadIdx.x
    n = x.size
    if i >= n:
        return
    buf[tx + 1] = x[i]
    if tx == 0:
        buf[0] = x[i - 1] if i > 0 else 0.0
    if tx == cuda.blockDim.x - 1:
        buf[tx + 2] = x[i + 1] if i + 1 < n else 0.0
    cuda.syncthreads()  # never reached by the threads past the end
    out[i] = (buf[tx] + buf[tx + 1] + buf[tx + 2]) / 3.0


def test_a_barrier_after_an_early_return_is_named_in_one_sentence():
    hint = _failed("04", "blur3", blur3_returns_before_the_barrier).hint
    assert "inside a branch" in hint and "do not `return` before a barrier" in hint and ".." not in hint


# --- lesson text and answer cells that a learner reads or fills in (checked in the learner versions)

LEARNER = Path(__file__).resolve().parents[1] / "notebooks" / "learner"


def _cells(stem: str) -> list[tuple[str, str]]:
    nb = json.loads(next(LEARNER.glob(f"{stem}_*.ipynb")).read_text(encoding="utf-8"))
    return [(c["cell_type"], "".join(c["source"])) for c in nb["cells"]]


def _cell_with(stem: str, text: str) -> str:
    found = [src for _, src in _cells(stem) if text in src]
    assert len(found) == 1, (stem, text, len(found))
    return found[0]


def test_lesson00_text_matches_its_code_and_asks_for_numbers_without_commas():
    assert "(32, 48, N_PY)" in _cell_with("00", "rates_py = {}")
    assert "n = 32 and 48 as well" in _cell_with("00", "Does the loop's speed depend on n?")
    assert "1,000?" not in _cell_with("00", "How many times") and "without\ncommas" in _cell_with(
        "00", "How many times"
    )


def test_lesson02_exercise2_states_the_rules_and_leaves_the_code_outline_to_the_hint():
    text = _cell_with("02", "**Exercise 2.** Write the host function `pipelined_saxpy")
    assert "Allocate nothing inside the loop" in text and "Synchronize once, after the loop" in text
    outline = hints_of("02", "pipelined_saxpy")[1]
    for fragment in ("Loop over the chunk starts", "views of the buffers cut to that length", "blocks of 128 threads"):
        assert fragment not in text and fragment in outline, fragment
    for code in ("bufs = [[", "for b in bufs[k % n_streams]", "(size + 127) // 128"):  # an outline, not the code
        assert code not in outline, code


def test_lesson03_states_the_shapes_of_linear_relu_and_lesson04_numbers_its_exercises_in_order():
    text = _cell_with("03", "`linear_relu_kernel(X, W, b, Y)`")
    assert all(shape in text for shape in ("`X` is\n`(M, K)`", "`W` is `(K, N)`", "`b` is `(N,)`", "`Y` is `(M, N)`"))
    numbers = [int(src.split("**Exercise ")[1][0]) for kind, src in _cells("04") if "**Exercise " in src]
    assert numbers == sorted(numbers) == list(range(1, len(numbers) + 1)), numbers


def test_lesson01_and_02_paragraphs_sit_next_to_what_they_explain():
    cells = _cells("01")
    text = [src for _, src in cells]
    stride = next(k for k, src in enumerate(text) if "thread 5 of block 0 handles" in src)
    assert "## Launch limits" not in text[stride] and "**Predict.** One block of 32 threads" in text[stride]
    assert 'lessons.check("01", "grid_stride"' in text[stride - 1]  # right after the check it describes
    text2 = [src for _, src in _cells("02")]
    host = next(k for k, src in enumerate(text2) if "the host link is usually far slower" in src)
    assert "**Exercise 1.**" in text2[host] and "## Coalescing" not in text2[host]


@pytest.mark.parametrize(
    "value, says",
    [
        ((16, 8), "correct"),
        ([16, 8], "correct"),
        (16, "is not a block shape"),
        ("(16, 8)", "is not a block shape"),
        ((0, 8), "is not a block shape"),
        ((8, 4), "fewer than the 64 asked for"),
        ((48, 24), "more than the 1024"),
        ((16, 16), "bx must divide 48"),
    ],
)
def test_lesson01_block_shape_answer_takes_any_form(value, says, capsys):
    from gpulab.kernels import blocks_for

    src = _cell_with("01", "def idle_threads")
    exec(src, {"np": np, "blocks_for": blocks_for, "my_block": value})  # noqa: S102 - the lesson's own cell
    assert says in capsys.readouterr().out


@pytest.mark.parametrize("value, right", [(True, True), ("True", True), ("yes", True), (False, False), ("no", False)])
def test_lesson02_fp16_answer_accepts_words(value, right, capsys):
    from gpulab.timing import PEAKS

    src = _cell_with("02", "guess_fp16_above_ridge = None")
    exec(src.replace("guess_fp16_above_ridge = None", f"guess_fp16_above_ridge = {value!r}"), {"PEAKS": PEAKS})  # noqa: S102
    assert capsys.readouterr().out.count("right:" if right else "not quite:") == 1
