"""gpulab.answers: the reference answers of lessons 05-10 match the lesson sources, compile to PTX, and
the helpers the lessons use (reveal, use, compare, run_elementwise) behave."""

import json
import math
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from numba import cuda

from gpulab import answers
from gpulab.answers.lesson06 import run_elementwise
from gpulab.exercises import check_kernel, random_arrays

ROOT = Path(__file__).resolve().parents[1]
LESSON_FILES = {
    "lesson05": "05_reductions_atomics", "lesson06": "06_cupy_interop", "lesson07": "07_convolution",
    "lesson08": "08_backprop", "lesson10": "10_scaling_up",
}
BEGIN, END = "### BEGIN SOLUTION", "### END SOLUTION"


def _solution_cells(nb_name):
    nb = json.loads((ROOT / "notebooks" / f"{nb_name}.ipynb").read_text())
    for cell in nb["cells"]:
        src = "".join(cell["source"])
        if cell["cell_type"] == "code" and BEGIN in src:
            yield src


@pytest.mark.parametrize("lesson", sorted(LESSON_FILES))
def test_every_exercise_has_its_answer_and_they_agree(lesson):
    """The solution region of each exercise cell is exactly the body of the answer in gpulab.answers."""
    names = []
    for src in _solution_cells(LESSON_FILES[lesson]):
        name = next(l.split("def ", 1)[1].split("(")[0] for l in src.splitlines() if l.startswith("def "))
        names.append(name)
        region = src.split(BEGIN, 1)[1].split(END, 1)[0]
        body = textwrap.dedent(answers.source(name)).split("\n", 1)[1]  # drop the decorator or def line
        body = body.split(":\n", 1)[1] if body.startswith("def ") else body
        assert textwrap.dedent(region).strip() == textwrap.dedent(body).strip(), f"{lesson}: {name} differs"
    mod = __import__(f"gpulab.answers.{lesson}", fromlist=["__all__"])
    assert sorted(names) == sorted(mod.__all__), f"{lesson}: exercises {names}, answers {mod.__all__}"
    assert len(names) >= (3 if lesson in ("lesson05", "lesson07", "lesson08") else 1)


def test_reveal_prints_the_source(capsys):
    answers.reveal("scan_block_kernel")
    out = capsys.readouterr().out
    assert "def scan_block_kernel(x, out, block_sums):" in out and "syncthreads" in out
    with pytest.raises(KeyError, match="answers exist for"):
        answers.reference("no_such_kernel")


def test_use_falls_back_to_the_reference(capsys):
    class R:
        passed, status = False, "not implemented"

    mine = object()
    assert answers.use(R(), mine, "relu_backward_kernel") is answers.reference("relu_backward_kernel")
    assert "not implemented" in capsys.readouterr().out
    R.passed = True
    assert answers.use(R(), mine, "relu_backward_kernel") is mine


def test_compare_explains_with_and_without_a_prediction():
    c = answers.compare(None, 512, unit="updates", why="one per element")
    assert "No prediction entered" in str(c) and "512 updates" in str(c) and "Why: one per element" in str(c)
    assert "spot on" in str(answers.compare(500, 512))
    assert "2x" in str(answers.compare(1024, 512)) or "2 x" in str(answers.compare(1024, 512))
    assert "(right)" in str(answers.compare("Pairwise", "pairwise"))
    assert "<b>" in answers.compare(3, 3)._repr_html_()


def test_run_elementwise_model():
    x, y = np.arange(4, dtype=np.float32), np.ones(4, np.float32)
    spec = answers.reference("axpy_elementwise_spec")()
    assert np.array_equal(run_elementwise(spec, np.float32(2), x, y), 2 * x + y)
    assert np.array_equal(run_elementwise({"in_params": "float32 x", "out_params": "float32 z",
                                           "operation": "z = 0.5f * x;"}, x), 0.5 * x)
    with pytest.raises(ValueError, match="ternary"):
        run_elementwise({"in_params": "float32 x", "out_params": "float32 z", "operation": "z = x > 0 ? x : 0"}, x)
    with pytest.raises(ValueError, match="2 arguments"):
        run_elementwise(spec, x, y)


# ----------------------------------------------------------------------------- known mistakes get their hint
TPB = 128


def _block_max_spec(x):
    blocks = max(1, math.ceil(x.size / TPB))
    padded = np.full(blocks * TPB, -np.inf, np.float32)
    padded[: x.size] = x
    return padded.reshape(blocks, TPB).max(axis=1)


@cuda.jit
def zero_padded_max_kernel(x, partial):
    if cuda.threadIdx.x == 0:
        m = 0.0
        for k in range(cuda.blockIdx.x * TPB, min(x.size, (cuda.blockIdx.x + 1) * TPB)):
            m = max(m, x[k])
        partial[cuda.blockIdx.x] = m


def test_block_max_with_zero_padding_is_named():
    res = check_kernel(zero_padded_max_kernel, _block_max_spec,
                       inputs=lambda n, rng: random_arrays(rng, n, low=-2.0, high=-0.5), sizes=[1, 100],
                       launch=lambda x, partial: (partial.size, TPB), out_names=["partial"],
                       mistakes={"padding with 0": lambda x: np.maximum(_block_max_spec(x), 0)})
    assert not res.passed and res.hint == "padding with 0", res


@cuda.jit
def relu_backward_passthrough(dout, y, dx):
    i = cuda.grid(1)
    if i < dx.size:
        dx[i] = dout[i]


def test_relu_backward_that_ignores_the_mask_is_named():
    def inputs(n, rng):
        dout, x = random_arrays(rng, n, n)
        return dout, np.maximum(x, 0)

    res = check_kernel(relu_backward_passthrough, lambda dout, y: np.where(y > 0, dout, 0).astype(dout.dtype),
                       inputs=inputs, sizes=[100], launch=lambda dout, y, dx: (1, TPB), out_names=["dx"],
                       mistakes={"ReLU blocks the gradient": lambda dout, y: dout})
    assert not res.passed and res.hint == "ReLU blocks the gradient" and res.message.startswith("dx["), res


@cuda.jit
def conv_flipped_kernel(x, w, out):
    j, i = cuda.grid(2)
    if i < out.shape[0] and j < out.shape[1]:
        acc = 0.0
        for a in range(w.shape[0]):
            for b in range(w.shape[1]):
                acc += x[i + a, j + b] * w[w.shape[0] - 1 - a, w.shape[1] - 1 - b]
        out[i, j] = acc


def test_flipped_convolution_is_named_with_a_j_i_launch():
    def spec(x, w):
        v = np.lib.stride_tricks.sliding_window_view(x, w.shape)
        return np.einsum("ijab,ab->ij", v, w).astype(x.dtype)

    res = check_kernel(conv_flipped_kernel, spec, inputs=lambda s, rng: random_arrays(rng, s, (3, 3)),
                       sizes=[(5, 7), (12, 9)],
                       launch=lambda x, w, out: ((math.ceil(out.shape[1] / 16), math.ceil(out.shape[0] / 8)), (16, 8)),
                       reduction=9, mistakes={"flipped": lambda x, w: spec(x, w[::-1, ::-1].copy())})
    assert not res.passed and res.hint == "flipped", res
    good = check_kernel(answers.reference("conv2d_single_kernel"), spec,
                        inputs=lambda s, rng: random_arrays(rng, s, (3, 3)), sizes=[(5, 7), (12, 9)],
                        launch=lambda x, w, out: ((math.ceil(out.shape[1] / 16), math.ceil(out.shape[0] / 8)), (16, 8)),
                        reduction=9)
    assert good.passed, good


# ----------------------------------------------------------------------------- PTX
KERNELS = [(n, s) for n, s in [
    ("dot_atomic_kernel", "void(float32[:], float32[:], float32[:])"),
    ("block_max_kernel", "void(float32[:], float32[:])"),
    ("sum_two_per_thread_kernel", "void(float32[:], float32[:])"),
    ("scan_block_kernel", "void(float32[:], float32[:], float32[:])"),
    ("squared_diff_kernel", "void(float32[:], float32[:], float32[:])"),
    ("leaky_relu_kernel", "void(float32[:], float32[:])"),
    ("conv2d_single_kernel", "void(float32[:, :], float32[:, :], float32[:, :])"),
    ("im2col_single_kernel", "void(float32[:, :], float32[:, :])"),
    ("maxpool2x2_kernel", "void(float32[:, :], float32[:, :])"),
    ("conv2d_all_filters_kernel", "void(float32[:, :], float32[:, :, :], float32[:, :, :])"),
    ("bias_grad_kernel", "void(float32[:, :], float32[:])"),
    ("linear_weight_grad_kernel", "void(float32[:, :], float32[:, :], float32[:, :])"),
    ("relu_backward_kernel", "void(float32[:], float32[:], float32[:])"),
    ("maxpool2x2_backward_kernel", "void(float32[:, :], int32[:, :], float32[:, :])"),
    ("unscale_kernel", "void(float32[:], float32, float32[:], int32[:])"),
]]


def test_every_answer_kernel_is_listed_for_ptx():
    listed = {n for n, _ in KERNELS}
    kernels = {n for m in answers.lessons() for n in __import__(f"gpulab.answers.{m}", fromlist=["x"]).__all__
               if hasattr(answers.reference(n), "py_func")}
    assert listed == kernels


_CHILD = """
import json, sys
from numba import cuda
from gpulab import answers
out = {}
for name, sig in json.load(sys.stdin):
    fn = answers.reference(name).py_func
    for cc in ((7, 5), (9, 0)):
        try:
            cuda.compile_ptx(fn, sig, cc=cc)
        except Exception as exc:
            out[f"{name} sm_{cc[0]}{cc[1]}"] = f"{type(exc).__name__}: {exc}"[:500]
print(json.dumps(out))
"""


@pytest.mark.ptx
def test_answer_kernels_compile_to_ptx():
    """One child process (numba in compile-only gpu mode, as gpulab.ptx does) compiles every answer kernel."""
    env = dict(os.environ, GPULAB_DEVICE="gpu", GPULAB_COMPILE_ONLY="1", NUMBA_ENABLE_CUDASIM="0")
    proc = subprocess.run([sys.executable, "-c", _CHILD], input=json.dumps(KERNELS), capture_output=True, text=True,
                          env=env, timeout=600, check=False)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    assert proc.returncode == 0 and lines, proc.stderr[-3000:]
    assert json.loads(lines[-1]) == {}
