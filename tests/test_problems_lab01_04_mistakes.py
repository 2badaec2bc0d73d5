"""The usual beginner mistakes in labs 01-04 get a hint that names them (``mistakes=`` of the lab problems):
an unguarded ``x[i - 1]`` that Python wraps to the last element, a missing halo, a rotation turned the wrong way
(or, in lab 02's challenge, left a transpose or moved one element per thread of a 32 x 8 block),
a loop over the wrong count, the dense layer's weights in lesson 03's layout and its bias and ReLU in the wrong
place, a whole-array reverse. Verdicts from the simulator's runs."""

from __future__ import annotations

import pytest
from numba import cuda, float32

import gpulab
from gpulab import problems
from gpulab.source import define

pytestmark = pytest.mark.skipif(gpulab.is_gpu(), reason="an unguarded x[-1] wraps in the simulator only")


def _jit(src: str, name: str):
    return cuda.jit(define(src, name, {"cuda": cuda, "float32": float32}))


def _hint(problem, kernel) -> str:
    res = problem.check(kernel)
    assert not res.passed, res
    return res.hint


def test_lab01_stencil_that_reads_x_minus_1_is_told_it_wraps():
    kernel = _jit(
        "def stencil3_kernel(x, out):\n"
        "    i = cuda.grid(1)\n"
        "    n = x.size\n"
        "    if i < n:\n"
        "        right = x[i + 1] if i + 1 < n else 0.0\n"
        "        out[i] = x[i - 1] + x[i] + right\n",
        "stencil3_kernel",
    )
    assert "x[-1]" in _hint(problems.lab01.STENCIL3, kernel)


def _stencil_shared(left: str, right: str):
    return _jit(
        "def stencil_shared_kernel(x, out):\n"
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
        "        out[i] = buf[tx] + buf[tx + 1] + buf[tx + 2]\n",
        "stencil_shared_kernel",
    )


LEFT, RIGHT = "x[i - 1] if 0 < i <= n else 0.0", "x[i + 1] if i + 1 < n else 0.0"


@pytest.mark.parametrize(
    "left, right, named",
    [
        ("x[i - 1] if i <= n else 0.0", RIGHT, "x[-1]"),
        ("0.0", "0.0", "the halo is missing"),
        (LEFT, "0.0", "the right halo is missing"),
        ("0.0", RIGHT, "the left halo is missing"),
    ],
)
def test_lab04_stencil_halo_mistakes_are_named(left, right, named):
    problem = problems.lab04.STENCIL_SHARED
    assert problem.check(_stencil_shared(LEFT, RIGHT)).status in ("passed", "over budget")  # the values are right
    assert named in _hint(problem, _stencil_shared(left, right))


@pytest.mark.parametrize(
    "store, named",
    [
        ("out[a.shape[1] - 1 - j, i] = a[i, j]", "counterclockwise"),
        ("out[a.shape[1] - 1 - j, a.shape[0] - 1 - i] = a[i, j]", "other diagonal"),
        ("out[i, a.shape[1] - 1 - j] = a[i, j]", "mirrored left to right"),
        ("out[i, j] = a[i, j]", "copied instead of rotating"),
        ("out[j, i] = a[i, j]", "lesson 02's transpose_naive"),
    ],
)
def test_lab02_rotation_index_mistakes_are_named(store, named):
    kernel = _jit(
        "def rotate_kernel(a, out):\n"
        "    j, i = cuda.grid(2)\n"
        "    if i < a.shape[0] and j < a.shape[1]:\n"
        f"        {store}\n",
        "rotate_kernel",
    )
    assert named in _hint(problems.lab02.ROTATE, kernel)


def test_lab02_rotation_one_past_the_end_is_not_told_to_add_a_guard():
    """Its guard is there: the launch gives one thread per element of `a`, so the index is what is wrong."""
    kernel = _jit(
        "def rotate_kernel(a, out):\n"
        "    j, i = cuda.grid(2)\n"
        "    if i < a.shape[0] and j < a.shape[1]:\n"
        "        out[j, a.shape[0] - i] = a[i, j]\n",
        "rotate_kernel",
    )
    hint = _hint(problems.lab02.ROTATE, kernel)
    assert "a bounds guard is not the fix" in hint and "one too large" in hint and "missing bounds guard" not in hint


def _rotate_tiled(store: str):
    return _jit(
        "def rotate_tiled_kernel(a, out):\n"
        "    tile = cuda.shared.array((32, 33), float32)\n"
        "    tx = cuda.threadIdx.x\n"
        "    ty = cuda.threadIdx.y\n"
        "    row0 = cuda.blockIdx.y * 32\n"
        "    col0 = cuda.blockIdx.x * 32\n"
        "    m = a.shape[0]\n"
        "    for r in range(ty, 32, 8):\n"
        "        if row0 + r < m and col0 + tx < a.shape[1]:\n"
        "            tile[r, tx] = a[row0 + r, col0 + tx]\n"
        "    cuda.syncthreads()  # the tile is loaded\n"
        "    for r in range(ty, 32, 8):\n"
        "        if col0 + r < a.shape[1] and row0 + tx < m:\n"
        f"            {store}\n",
        "rotate_tiled_kernel",
    )


@pytest.mark.parametrize(
    "store, named",
    [
        ("out[col0 + r, row0 + tx] = tile[tx, r]", "lesson 02's transpose_tiled"),
        ("out[a.shape[1] - 1 - col0 - r, row0 + tx] = tile[tx, r]", "counterclockwise"),
    ],
)
def test_lab02_tiled_rotation_mistakes_are_named(store, named):
    problem = problems.lab02.ROTATE_TILED
    assert problem.check(_rotate_tiled("out[col0 + r, m - 1 - (row0 + tx)] = tile[tx, r]")).passed
    assert named in _hint(problem, _rotate_tiled(store))


def test_lab02_tiled_rotation_with_one_element_per_thread_is_told_to_move_four_rows():
    """Exercise 2's kernel pasted in: under the challenge's launch (a 32 x 8 block per 32 x 32 tile) it covers a
    quarter of the rows of a, so columns of out stay unwritten."""
    kernel = _jit(
        "def rotate_tiled_kernel(a, out):\n"
        "    j, i = cuda.grid(2)\n"
        "    if i < a.shape[0] and j < a.shape[1]:\n"
        "        out[j, a.shape[0] - 1 - i] = a[i, j]\n",
        "rotate_tiled_kernel",
    )
    assert "each thread handles 4 rows" in _hint(problems.lab02.ROTATE_TILED, kernel)


@pytest.mark.parametrize(
    "loop, named",
    [
        ("range(A.shape[0] - 1)", "stops one short"),
        ("range(A.shape[1])", "only the first N = A.shape[1] rows"),
    ],
)
def test_lab03_vecmat_loop_bound_mistakes_are_named(loop, named):
    kernel = _jit(
        "def vecmat_kernel(A, x, y):\n"
        "    j = cuda.grid(1)\n"
        "    if j < y.size:\n"
        "        acc = float32(0.0)\n"
        f"        for i in {loop}:\n"
        "            acc += x[i] * A[i, j]\n"
        "        y[j] = acc\n",
        "vecmat_kernel",
    )
    assert named in _hint(problems.lab03.VECMAT, kernel)


def test_lab03_vecmat_that_sums_a_row_of_a_is_named():
    kernel = _jit(
        "def vecmat_kernel(A, x, y):\n"
        "    j = cuda.grid(1)\n"
        "    if j < y.size:\n"
        "        acc = float32(0.0)\n"
        "        for i in range(A.shape[1]):\n"
        "            acc += A[j, i] * x[i]\n"
        "        y[j] = acc\n",
        "vecmat_kernel",
    )
    assert "y = A @ x, each thread summing a row of A" in _hint(problems.lab03.VECMAT, kernel)


@pytest.mark.parametrize(
    "weight, tail, named",
    [
        ("W[j, k]", "\n        Y[i, j] = max(acc + b[i], 0.0)", "b[j] (not b[i])"),
        ("W[j, k]", "\n        Y[i, j] = max(acc, 0.0) + b[j]", "the ReLU comes before the bias"),
        ("W[j, k]", " + b[j]\n        Y[i, j] = max(acc, 0.0)", "the bias is added n_in times"),
        ("W[j, k]", "\n        Y[i, j] = acc + b[j]", "without the ReLU"),
        ("W[j, k]", "\n        Y[i, j] = max(acc, 0.0)", "the bias b[j] is missing"),
        ("W[k, j]", "\n        Y[i, j] = max(acc + b[j], 0.0)", "linear_relu, whose W has shape (n_in, n_out)"),
    ],
)
def test_lab03_dense_relu_layout_bias_and_relu_mistakes_are_named(weight, tail, named):
    kernel = _jit(
        "def dense_relu_kernel(X, W, b, Y):\n"
        "    j, i = cuda.grid(2)\n"
        "    if i < Y.shape[0] and j < Y.shape[1]:\n"
        "        acc = float32(0.0)\n"
        "        for k in range(X.shape[1]):\n"
        f"            acc += X[i, k] * {weight}" + tail + "\n",
        "dense_relu_kernel",
    )
    assert named in _hint(problems.lab03.DENSE_RELU, kernel)


def test_lab03_dense_relu_accumulating_in_y_is_told_to_use_a_register():
    """Over the per-thread budget by adding into Y: the hint says to add into a local variable, not the reductions'
    advice (a shared-memory tree, warp shuffles) it got before."""
    kernel = _jit(
        "def dense_relu_kernel(X, W, b, Y):\n"
        "    j, i = cuda.grid(2)\n"
        "    if i < Y.shape[0] and j < Y.shape[1]:\n"
        "        Y[i, j] = b[j]\n"
        "        for k in range(X.shape[1]):\n"
        "            Y[i, j] += X[i, k] * W[j, k]\n"
        "        Y[i, j] = max(Y[i, j], float32(0.0))\n",
        "dense_relu_kernel",
    )
    res = problems.lab03.DENSE_RELU.check(kernel)
    assert res.status == "over budget" and res.score == res.max_score / 2, res
    assert "sum into a local variable" in res.hint and "shared-memory tree" not in res.hint, res
    assert "acc = b[j]" not in res.hint, res  # an outline of the fix, not the kernel's lines


def test_lab04_block_reverse_of_the_whole_array_is_named():
    kernel = _jit(
        "def block_reverse_kernel(x, out):\n"
        "    i = cuda.grid(1)\n"
        "    if i < x.size:\n"
        "        out[i] = x[x.size - 1 - i]\n",
        "block_reverse_kernel",
    )
    assert "reversed as a whole" in _hint(problems.lab04.BLOCK_REVERSE, kernel)


def test_an_index_past_the_end_by_a_thread_with_work_is_not_told_to_add_a_guard():
    # a launch= from launch_1d gives one thread per output element, so a guarded thread that indexes past the
    # end of an input has work to do: the index is wrong, not the guard (before: "missing bounds guard?")
    from numba import cuda

    from gpulab.exercises import check_kernel, random_arrays
    from gpulab.problems._common import launch_1d
    from gpulab.source import define

    src = """
@cuda.jit
def add_kernel(a, b, out):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = a[i] + b[i + 1]
"""
    res = check_kernel(
        define(src, "add_kernel", {"cuda": cuda}),
        spec=lambda a, b: a + b,
        inputs=lambda n, rng: random_arrays(rng, n, n),
        sizes=[5, 40],
        launch=launch_1d(32),
    )
    assert not res.passed and "indexed past the end" in res.message, res
    assert "a bounds guard is not the fix" in res.hint and "missing bounds guard" not in res.hint, res
