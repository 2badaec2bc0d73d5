"""The harness names array shapes a GPU cannot compile, which the simulator runs anyway."""

from __future__ import annotations

import math

import pytest
from numba import cuda, float32

from gpulab import lessons
from gpulab.exercises.static import array_shape_check, runtime_shapes
from gpulab.lessons import answers_05_10
from gpulab.source import define

HEAD = "import math\nfrom numba import cuda, float32\n"

BLOCK_MAX = """
@cuda.jit
def block_max_kernel(x, partial):
    buf = cuda.shared.array({shape}, float32)
    tx = cuda.threadIdx.x
    i = cuda.grid(1)
    buf[tx] = x[i] if i < x.size else float32(-math.inf)
    cuda.syncthreads()  # the block's values are in buf
    s = cuda.blockDim.x // 2
    while s > 0:
        if tx < s:
            buf[tx] = max(buf[tx], buf[tx + s])
        cuda.syncthreads()  # this level is done
        s //= 2
    if tx == 0:
        partial[cuda.blockIdx.x] = buf[0]
"""


def _block_max(shape: str, **consts):
    ns = {"cuda": cuda, "float32": float32, "math": math, **consts}
    return define(BLOCK_MAX.format(shape=shape), "block_max_kernel", ns)


def test_a_runtime_shape_is_named_and_costs_half_the_points():
    # correct in the simulator (one buf element per thread), refused by a GPU's compiler
    res = lessons.check("05", "block_max", _block_max("cuda.blockDim.x"))
    assert res.status == "failed" and res.score == res.max_score / 2, res
    assert (
        "`cuda.shared.array(cuda.blockDim.x, ...)` (line 4): `cuda.blockDim.x` is known only at launch" in res.message
    )
    assert "must be known when the kernel is compiled" in res.message and "TPB = 128" in res.hint


@pytest.mark.parametrize(
    "shape,words",
    [
        ("x.size", "`x.size` is known only at launch"),
        ("x.shape[0] // 4", "`x.shape` is known only at launch"),
        ("partial", "`partial` is an argument of the kernel"),
        ("len(x)", "`len(x)` is computed when the kernel runs"),
        ("WIDTH", "`WIDTH` is a float, not a whole number"),
    ],
)
def test_each_kind_of_runtime_shape_gets_its_reason(shape, words):
    found = runtime_shapes(_block_max(shape, WIDTH=256.0))
    assert [(line, kind, text) for line, kind, text, _ in found] == [(4, "shared", shape)]
    assert words in found[0][3]


@pytest.mark.parametrize("shape", ["x.size", "WIDTH"])
def test_a_kernel_that_fails_for_its_runtime_shape_is_also_told_about_it(shape):
    # buf of x.size elements is too small for the block; a float size makes the simulator raise
    res = lessons.check("05", "block_max", _block_max(shape, WIDTH=256.0))
    assert not res.passed and res.score == 0
    assert f"Also, `cuda.shared.array({shape}, ...)` (line 4)" in res.message, res.message


@pytest.mark.parametrize("shape", ["TPB", "256", "(TPB,)", "2 * 64 * 2", "SHAPE[0]"])
def test_constant_shapes_pass(shape):
    kernel = _block_max(shape, TPB=256, SHAPE=(256, 1))
    assert runtime_shapes(kernel) == []
    assert lessons.check("05", "block_max", kernel).passed


def test_a_local_name_is_followed_to_what_it_was_set_to():
    src = """
@cuda.jit
def k(x, out):
    n = x.shape[0]
    acc = cuda.local.array(n, float32)
    m = 8
    ok = cuda.local.array(shape=(m, 2), dtype=float32)
    out[0] = acc[0] + ok[0, 0]
"""
    kernel = define(src, "k", {"cuda": cuda, "float32": float32})
    found = runtime_shapes(kernel)
    assert [(kind, shape) for _, kind, shape, _ in found] == [("local", "n")]
    check = array_shape_check(kernel)
    assert check is not None and not check.passed and "cuda.local.array(n, ...)" in check.message


def test_the_course_reference_kernels_have_constant_shapes():
    assert array_shape_check(answers_05_10.block_max_kernel) is None


ADD = """
@cuda.jit
def add_kernel(a, b, out):
    i = cuda.grid(1)
    if i < out.size:
{body}
"""


@pytest.mark.parametrize(
    "body,words",
    [
        ("        pair = [a[i], b[i]]\n        out[i] = pair[0] + pair[1]", "a Python list (`[a[i], b[i]]`)"),
        ("        out[i] = sum(v for v in (a[i], b[i]))", "`sum(...)` (and 1 more)"),
        ("        out[i] = np.sum(np.array((a[i], b[i])))", "`np.sum(...)` (and 1 more)"),
        ("        print(f'i = {i}')\n        out[i] = a[i] + b[i]", "an f-string"),
        ("        out[i] = a[i] + b[i]\n        return out[i]", "`return out[i]`"),
        ("        d = {'x': a[i]}\n        out[i] = d['x'] + b[i]", "a Python dict"),
    ],
)
def test_python_a_gpu_cannot_compile_is_named_even_when_the_result_is_right(body, words):
    import numpy as np

    kernel = define(ADD.format(body=body), "add_kernel", {"cuda": cuda, "np": np})
    res = lessons.check("01", "add", kernel)
    assert res.status == "failed" and res.score == res.max_score / 2, res
    assert words in res.message and "the simulator runs it, a GPU kernel cannot" in res.message, res.message


def test_plain_kernels_and_signature_lists_are_not_flagged():
    from gpulab.exercises.static import python_only

    src = """
@cuda.jit(["void(float32[:], float32[:], float32[:])"])
def add_kernel(a, b, out):
    i = cuda.grid(1)
    if i >= out.size:
        return
    acc = cuda.local.array((2,), float32)
    acc[0], acc[1] = a[i], b[i]
    out[i] = max(acc[0], 0.0) + min(acc[1], 1e30) + np.float32(0.0)
"""
    import numpy as np

    kernel = define(src, "add_kernel", {"cuda": cuda, "np": np, "float32": float32})
    assert python_only(kernel) == []


def test_correct_kernels_that_compile_are_not_flagged():
    # each of these compiles to PTX (checked with gpulab.ptx.compile_sources): a review found them flagged
    from gpulab.exercises.static import python_only

    bodies = [
        "        out[i] = a[i] + b[i]\n        return None",
        "        def plus(u, v):\n            return u + v\n        out[i] = plus(a[i], b[i])",
        "        [x, y] = (a[i], b[i])\n        out[i] = x + y",
    ]
    for body in bodies:
        kernel = define(ADD.format(body=body), "add_kernel", {"cuda": cuda})
        assert python_only(kernel) == [], body


@pytest.mark.parametrize(
    "shape,words",
    [
        ("(TPB, TPB + 1)", "`TPB + 1` is arithmetic that Numba does not work out"),
        ("2 * TPB", "e.g. `SIZE = 2 * TPB`, and use that name"),
        ("TPB64", "`TPB64` is a NumPy int64; write a plain Python int"),
    ],
)
def test_shapes_numba_cannot_compile_from_constants_are_named(shape, words):
    import numpy as np

    found = runtime_shapes(_block_max(shape, TPB=128, TPB64=np.int64(128)))
    assert found and words in found[0][3], found


def test_literal_arithmetic_is_folded_and_passes():
    assert runtime_shapes(_block_max("(32 + 1) * 4")) == []


def test_a_local_array_hint_speaks_of_its_own_size_not_the_block():
    src = """
@cuda.jit
def k(x, w, out):
    acc = cuda.local.array(w.shape[1], float32)
    out[0] = acc[0]
"""
    check = array_shape_check(define(src, "k", {"cuda": cuda, "float32": float32}))
    assert check is not None and "cuda.local.array(K, float32)" in check.hint and "threads per block" not in check.hint
