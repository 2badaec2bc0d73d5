"""The exercises of lessons 05-11 (gpulab.lessons.ex_05_10, ex_11): each lesson's solutions are exactly the
reference answers, the kernel lessons have at least three exercises, known mistakes get their named hint,
the function exercises go through the same harness, and the reference kernels compile to PTX.

(Every reference passing its own check is test_lessons.py's test_every_reference_passes_its_check.)
"""

from __future__ import annotations

import ast
import inspect
import json
import textwrap
from pathlib import Path

import numpy as np
import pytest
from numba import cuda

from gpulab import lessons
from gpulab.errors import UsageError
from gpulab.lessons import answers_05_10
from gpulab.lessons.elementwise import run_elementwise

ROOT = Path(__file__).resolve().parents[1]
BEGIN, END = "### BEGIN SOLUTION", "### END SOLUTION"
KERNEL_LESSONS = {
    "05": "05_reductions_atomics",
    "06": "06_cupy_interop",
    "07": "07_convolution",
    "08": "08_backprop",
    "09": "09_train_cnn",
    "10": "10_scaling_up",
}


def _solution_cells(nb_name: str):
    nb = json.loads((ROOT / "notebooks" / f"{nb_name}.ipynb").read_text(encoding="utf-8"))
    for cell in nb["cells"]:
        src = "".join(cell["source"])
        if cell["cell_type"] == "code" and BEGIN in src:
            yield src


def _body(fn) -> str:
    """The body of a function's source, without decorator, ``def`` line and docstring (a library function's)."""
    src = textwrap.dedent(inspect.getsource(getattr(fn, "py_func", fn)))
    stmts = ast.parse(src).body[0].body
    if isinstance(stmts[0], ast.Expr) and isinstance(stmts[0].value, ast.Constant) and len(stmts) > 1:
        return "\n".join(src.splitlines()[stmts[0].end_lineno :])  # the lines after the docstring
    return src.split(":\n", 1)[1] if src.startswith("def ") else src.split("\n", 1)[1].split(":\n", 1)[1]


@pytest.mark.parametrize("lesson", sorted(KERNEL_LESSONS))
def test_every_exercise_has_its_answer_and_they_agree(lesson):
    """The solution region of each exercise cell is exactly the body of the exercise's reference answer, and
    every exercise of the lesson appears in it."""
    ours = {e.problem.name: e for (les, _), e in lessons.EXERCISES.items() if les == lesson}
    # host functions checked by check_function against cases (no reference answer; their tests check the cases)
    functions = {name for les, name in lessons.FUNCTION_EXERCISES if les == lesson}
    names = []
    for src in _solution_cells(KERNEL_LESSONS[lesson]):
        name = next(ln.split("def ", 1)[1].split("(")[0] for ln in src.splitlines() if ln.startswith("def "))
        if name in functions:
            continue
        names.append(name)
        assert name in ours, f"{lesson}: the lesson's exercise {name} is not in gpulab.lessons"
        region = src.split(BEGIN, 1)[1].split(END, 1)[0]
        assert textwrap.dedent(region).strip() == textwrap.dedent(_body(ours[name].reference)).strip(), (
            f"{lesson}: {name} differs from its reference in gpulab.lessons.answers_05_10"
        )
    assert sorted(names) == sorted(ours), f"{lesson}: exercises in the lesson {names}, in gpulab.lessons {sorted(ours)}"
    assert len(names) >= (3 if lesson in ("05", "07", "08") else 2 if lesson == "09" else 1)


def test_lesson11_checks_each_function_exercise():
    text = (ROOT / "notebooks" / "11_energy_cost_hardware.ipynb").read_text(encoding="utf-8")
    for lesson, name in lessons.EXERCISES:
        if lesson == "11":
            assert f'lessons.check(\\"11\\", \\"{name}\\"' in text, name


def test_reveal_prints_the_source():
    text = lessons.reveal("05", "scan_block", display=False)
    assert "def scan_block_kernel(x, out, block_sums):" in text and "syncthreads" in text
    with pytest.raises(UsageError, match="lesson 05.s exercises: .*scan_block"):
        lessons.reveal("05", "no_such_exercise", display=False)


def test_or_reference_falls_back_to_the_reference(capsys):
    @cuda.jit
    def relu_backward_kernel(dout, y, dx):
        raise NotImplementedError

    result = lessons.check("08", "relu_backward", relu_backward_kernel)
    assert result.status == "not implemented"
    ref = lessons.exercise("08", "relu_backward").reference
    assert lessons.or_reference(result, relu_backward_kernel, "08", "relu_backward") is ref
    assert "reference kernel" in capsys.readouterr().out
    passed = lessons.exercise("08", "relu_backward").check(ref, trusted=True)  # gpulab's own: no own-code stage
    assert lessons.or_reference(passed, relu_backward_kernel, "08", "relu_backward") is relu_backward_kernel


def test_compare_numbers_words_and_sources():
    assert "right" in lessons.compare(500, 512) and "too high" in lessons.compare(1024, 512)
    assert "2x the measured value" in lessons.compare(1024, 512)
    assert "right" in lessons.compare("Pairwise", "pairwise")
    assert "not quite" in lessons.compare("sequential", "pairwise")
    assert "The answer: no" in lessons.compare(None, "no", why="ReLU has no derivative at 0")
    assert "spec-sheet ridge 295" in lessons.compare(300, 295, what="spec-sheet ridge")
    assert lessons.compare(None, 10, what="simulated").startswith("Simulated: 10")


def test_run_elementwise_model():
    x, y = np.arange(4, dtype=np.float32), np.ones(4, np.float32)
    spec = answers_05_10.axpy_elementwise_spec()
    assert np.array_equal(run_elementwise(spec, np.float32(2), x, y), 2 * x + y)
    assert np.array_equal(
        run_elementwise({"in_params": "float32 x", "out_params": "float32 z", "operation": "z = 0.5f * x;"}, x), 0.5 * x
    )
    with pytest.raises(ValueError, match="ternary"):
        run_elementwise({"in_params": "float32 x", "out_params": "float32 z", "operation": "z = x > 0 ? x : 0"}, x)
    with pytest.raises(ValueError, match="2 arguments"):
        run_elementwise(spec, x, y)
    sq = {"in_params": "float32 x, float32 y", "out_params": "float32 z"}
    assert np.allclose(run_elementwise({**sq, "operation": "z = pow(x - y, 2);"}, x, y), (x - y) ** 2)
    assert np.allclose(run_elementwise({**sq, "operation": "z = fmaxf(x, y) * expf(0.0f);"}, x, y), np.fmax(x, y))
    with pytest.raises(ValueError, match="uses 'powf2', which is neither a parameter \\(x, y\\)"):
        run_elementwise({**sq, "operation": "z = powf2(x, 2);"}, x, y)
    with pytest.raises(ValueError, match="must be a C identifier.*got 'my kernel'"):
        run_elementwise({**sq, "operation": "z = x;", "name": "my kernel"}, x, y)


def test_elementwise_exercise_checks_the_learners_spec():
    def todo():
        raise NotImplementedError

    assert lessons.check("06", "axpy_elementwise", todo).status == "not implemented"
    wrong = lessons.check(
        "06",
        "axpy_elementwise",
        lambda: {"in_params": "float32 a, float32 x, float32 y", "out_params": "float32 z", "operation": "z = a * x"},
    )
    assert wrong.status == "failed", wrong


# --- known mistakes get their named hint ----------------------------------------------------------------
TPB = answers_05_10.TPB


@cuda.jit
def zero_padded_max_kernel(x, partial):
    if cuda.threadIdx.x == 0:
        m = 0.0
        for k in range(cuda.blockIdx.x * TPB, min(x.size, (cuda.blockIdx.x + 1) * TPB)):
            m = max(m, x[k])
        partial[cuda.blockIdx.x] = m


def test_block_max_with_zero_padding_is_named():
    res = lessons.check("05", "block_max", zero_padded_max_kernel)
    assert not res.passed and res.hint.startswith("the maximum is 0 where every value is negative"), res


@cuda.jit
def relu_backward_passthrough(dout, y, dx):
    i = cuda.grid(1)
    if i < dx.size:
        dx[i] = dout[i]


def test_relu_backward_that_ignores_the_mask_is_named():
    res = lessons.check("08", "relu_backward", relu_backward_passthrough)
    assert not res.passed and res.hint.startswith("dx equals dout everywhere") and res.message.startswith("dx["), res


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
    res = lessons.check("07", "conv2d_single", conv_flipped_kernel)
    assert not res.passed and res.hint.startswith("the filter is flipped"), res


def test_function_exercises_of_lesson_11():
    def todo(*args):
        raise NotImplementedError

    for name in ("joules_per_image", "attainable", "cost_per_epoch", "pe_step"):
        assert lessons.check("11", name, todo).status == "not implemented", name
    left = lessons.check("11", "joules_per_image", lambda t, p, n: float(np.sum(np.diff(t) * p[:-1])) / n)
    assert not left.passed and "left Riemann sum" in left.hint, left
    per_second = lessons.check("11", "cost_per_epoch", lambda images, ips, usd: images / ips * usd)
    assert not per_second.passed and "3600" in per_second.hint, per_second
    assert lessons.check("11", "attainable", lambda i, p, b: np.minimum(p * 1e3, b * i)).passed


@pytest.mark.parametrize(
    ("size", "channels", "hidden", "classes"), [(28, (32, 64), 128, 10), (28, (8, 16), 64, 10), (8, (3, 5), 7, 4)]
)
def test_cnn_forward_macs_is_what_running_the_network_counts(size, channels, hidden, classes):
    """Lesson 09's reference counts the same multiply-adds as nn.cost.WorkMeter running mnist_cnn on one image."""
    from gpulab import nn
    from gpulab.nn.cost import WorkMeter, cnn_forward_macs

    net = nn.mnist_cnn(image_size=size, channels=channels, hidden=hidden, classes=classes, dropout=0.0)
    meter = WorkMeter()
    net.use_ops(meter)
    net.eval()
    net.forward(np.zeros((1, 1, size, size), np.float32))
    assert cnn_forward_macs(size, channels, hidden, classes) == meter.work["matmul"]


def _macs_without_padding(image_size, channels, hidden, classes=10):
    c1, c2 = channels
    s = image_size
    return (s - 2) ** 2 * c1 * 9 + (s // 2 - 2) ** 2 * c2 * c1 * 9 + c2 * (s // 4) ** 2 * hidden + hidden * classes


def test_lesson09_counting_mistakes_are_named():
    from gpulab.nn.cost import cnn_forward_macs

    def flops(*a):
        return 2 * cnn_forward_macs(*a)

    def convs_only(image_size, channels, hidden, classes=10):
        c1, c2 = channels
        return image_size**2 * c1 * 9 + (image_size // 2) ** 2 * c2 * c1 * 9

    for fn, words in [(flops, "counts FLOPs"), (_macs_without_padding, "padding=1"), (convs_only, "two linear")]:
        res = lessons.exercise("09", "cnn_forward_macs").check(fn, trusted=True)  # variants of gpulab's answer
        assert not res.passed and words in res.hint, res
    assert lessons.check("09", "cnn_forward_macs", lambda *a: None).status == "error"


@cuda.jit
def confusion_last_max_kernel(logits, labels, m):
    r = cuda.grid(1)
    if r < logits.shape[0]:
        best = 0
        for k in range(1, logits.shape[1]):
            if logits[r, k] >= logits[r, best]:
                best = k
        cuda.atomic.add(m, (labels[r], best), 1)


@cuda.jit
def confusion_transposed_kernel(logits, labels, m):
    r = cuda.grid(1)
    if r < logits.shape[0]:
        best = 0
        for k in range(1, logits.shape[1]):
            if logits[r, k] > logits[r, best]:
                best = k
        cuda.atomic.add(m, (best, labels[r]), 1)


@cuda.jit
def confusion_not_atomic_kernel(logits, labels, m):
    r = cuda.grid(1)
    if r < logits.shape[0]:
        best = 0
        for k in range(1, logits.shape[1]):
            if logits[r, k] > logits[r, best]:
                best = k
        m[labels[r], best] += 1


def test_lesson09_confusion_mistakes_are_named():
    ties = lessons.check("09", "confusion", confusion_last_max_kernel)
    assert not ties.passed and "first of the largest" in ties.hint, ties
    flipped = lessons.check("09", "confusion", confusion_transposed_kernel)
    assert not flipped.passed and "rows are the true labels" in flipped.hint, flipped
    racy = lessons.check("09", "confusion", confusion_not_atomic_kernel)  # right counts in the simulator, still a race
    assert not racy.passed and "without cuda.atomic" in racy.message and "cuda.atomic.add" in racy.hint, racy


def _reduce_scatter_only(buffers):
    n = len(buffers)
    bufs = [np.array(b, dtype=np.float32) for b in buffers]
    bounds = np.linspace(0, bufs[0].size, n + 1).astype(int)
    for step in range(n - 1):
        k = [(i - step) % n for i in range(n)]
        msgs = [bufs[i][bounds[k[i]] : bounds[k[i] + 1]].copy() for i in range(n)]
        for i in range(n):
            bufs[(i + 1) % n][bounds[k[i]] : bounds[k[i] + 1]] += msgs[i]
    return bufs, bufs[0].nbytes * (n - 1) // n  # half of what the whole ring sends


def test_lesson10_ring_mistakes_are_named():
    from gpulab import scaling

    def every_device(buffers):
        bufs, sent = scaling.ring_steps(buffers)
        return bufs, sent * len(buffers)

    def values(buffers):
        bufs, sent = scaling.ring_steps(buffers)
        return bufs, sent // 4

    def mean(buffers):
        bufs, sent = scaling.ring_steps(buffers)
        return [b / len(buffers) for b in bufs], sent

    cases = [
        (every_device, "all N devices"),
        (values, "4 per float32"),
        (mean, "the mean"),
        (_reduce_scatter_only, "only the reduce-scatter"),
    ]
    for fn, words in cases:
        res = lessons.exercise("10", "ring_allreduce").check(fn, trusted=True)  # variants of gpulab's answer
        assert not res.passed and words in res.hint, (fn.__name__, res)
    res = lessons.check("10", "ring_allreduce", lambda buffers: buffers)
    assert res.status == "error" and "must return a pair" in str(res) and "returned a list of" in str(res), res
    res = lessons.check("10", "ring_allreduce", lambda buffers: [buffers, 0])
    assert res.status == "error" and "`return bufs, sent`; it returned a list of 2" in str(res), res
    res = lessons.check("10", "ring_allreduce", lambda buffers: (buffers[:1], 0))
    assert res.status == "error" and "every device's whole buffer" in str(res), res


def test_as_host_writes_what_the_function_returns():
    out = np.zeros(3, np.float32)
    lessons.as_host(lambda a: 2 * a, 1, "double")(np.arange(3, dtype=np.float32), out)
    assert np.array_equal(out, [0, 2, 4])
    with pytest.raises(UsageError, match="must return 2"):
        lessons.as_host(lambda a: a, 1, "one")(np.arange(3), out, out)
    with pytest.raises(UsageError, match="returned None.*return"):
        lessons.as_host(lambda a: None, 1, "forgot")(np.arange(3), out)
    with pytest.raises(UsageError, match=r"returned 1 value\(s\).*3 are expected"):
        lessons.as_host(lambda a: 1.0, 1, "scalar")(np.arange(3), out)
    one = np.zeros(1, np.float32)
    with pytest.raises(UsageError, match="returned the text '0.000'; return the number itself"):
        lessons.as_host(lambda a: f"{a.sum():.3f}", 1, "formatted")(np.zeros(3), one)  # NumPy would read it as 0


def test_a_function_exercise_without_return_is_told_so():
    # before: "got nan" and a hint about softmax's exp overflowing, for a cost in dollars
    verdict = lessons.check("11", "cost_per_epoch", lambda images, ips, usd: None)
    assert verdict.status == "error" and "returned None" in str(verdict) and "softmax" not in str(verdict), verdict


# --- PTX ------------------------------------------------------------------------------------------------


def test_every_reference_kernel_is_listed_for_ptx():
    listed = {k for k, _ in answers_05_10.PTX_SIGNATURES}
    kernels = {
        e.reference
        for (les, _), e in lessons.EXERCISES.items()
        if "05" <= les <= "10" and hasattr(e.reference, "py_func")
    }
    # a lesson exercise whose reference is a library kernel (lesson 05's add_offsets_kernel, lesson 09's
    # matmul_splitk_kernel) is compiled with its module's PTX_SIGNATURES (tests/test_kernels_scan.py, test_splitk.py)
    from gpulab.kernels import scan, splitk

    library = {k for k, _ in scan.PTX_SIGNATURES + splitk.PTX_SIGNATURES}
    assert listed | (kernels & library) == kernels


@pytest.fixture(scope="module")
def compiled_05_10():
    """Every reference kernel of lessons 05-10 compiled for sm_75 and sm_90 in one NVVM process (a process per
    kernel cost about 2.5 s of CPU each, a process per target about 2.5 s more)."""
    from gpulab import ptx

    source = inspect.getsource(answers_05_10)
    items = {
        k.py_func.__name__: {"source": source, "name": k.py_func.__name__, "signature": sig}
        for k, sig in answers_05_10.PTX_SIGNATURES
    }
    return ptx.compile_sources(items, ccs=((7, 5), (9, 0)))


@pytest.mark.ptx
@pytest.mark.parametrize(
    "kernel,signature",
    answers_05_10.PTX_SIGNATURES,
    ids=lambda x: getattr(getattr(x, "py_func", x), "__name__", str(x)),
)
def test_reference_kernels_compile_to_ptx(kernel, signature, compiled_05_10):
    name = kernel.py_func.__name__
    for cc, res in compiled_05_10.items():
        assert res.get(name) == "ok", f"{name} ({signature}) for sm_{cc[0]}{cc[1]}: {res.get(name)}"
