"""Session 25's learner review of lessons 11-12 and labs 11-12 (simulator mode): each wrong answer the reviewer tried
gets a verdict that names that mistake (not another one), exact counts are scored exactly, the CNN's throughput
is measured over a window long enough to mean something, no NumPy warning reaches a verdict, and the lab 12
challenge scores a racy ``lse`` store the same in the notebook and at grading."""

from __future__ import annotations

import ast
import inspect
import math
import textwrap
import warnings
from pathlib import Path

import nbformat
import numpy as np
import pytest
from numba import cuda, float32

import gpulab
from gpulab import lessons, problems, systolic
from gpulab.lessons import answers_12
from gpulab.transformer import flash, formats
from kernel_edits import edited_kernel

ROOT = Path(__file__).resolve().parents[1]
LESSON11 = ROOT / "notebooks" / "11_energy_cost_hardware.ipynb"
LESSON12 = ROOT / "notebooks" / "12_transformers.ipynb"
LAB11 = ROOT / "labs" / "solutions" / "lab11_energy_cost_hardware.ipynb"
LAB12 = ROOT / "labs" / "solutions" / "lab12_transformers.ipynb"
L = problems.lab12


def _cells(path: Path) -> list[str]:
    return [c.source for c in nbformat.read(path, as_version=4).cells if c.cell_type == "code"]


def _trap(y, x):
    return float(np.sum(np.diff(x) * (y[1:] + y[:-1]) / 2))


def _hint(result) -> str:
    assert not result.passed, result
    return result.hint


# --- lesson 11 ------------------------------------------------------------------------------------------


def test_the_clock_count_prediction_is_exact():
    """M1: 9 clocks (the last clock's index) for 10 was "right" under compare's default 25 % tolerance."""
    (cell,) = [c for c in _cells(LESSON11) if "my_guess_clocks, run.cycles" in c]
    call = next(
        n for n in ast.walk(ast.parse(cell)) if isinstance(n, ast.Call) and getattr(n.func, "attr", "") == "compare"
    )
    tol = {k.arg: ast.literal_eval(k.value) for k in call.keywords if k.arg == "tolerance"}.get("tolerance", 0.25)
    assert "too low" in lessons.compare(9, 10, unit="clocks", what="simulated", tolerance=tol)


@pytest.mark.parametrize(
    ("fn", "words", "not_words"),
    [
        (lambda i, p, b: np.minimum(p * 1e3, b * 1e9 * i), "no x 1e9", "np.minimum"),  # M2
        (lambda i, p, b: np.maximum(p * 1e3, b * i), "smaller of the two roofs", "1e9"),
        (lambda i, p, b: np.minimum(p * 1024, b * i), "not 1024", ""),
        (lambda i, p, b: np.minimum(p * 1e3, b / i), "not bandwidth / intensity", ""),
    ],
)
def test_attainable_names_each_slip(fn, words, not_words):
    hint = _hint(lessons.check("11", "attainable", fn))
    assert words in hint and (not not_words or not_words not in hint), hint


@pytest.mark.parametrize(
    ("name", "fn", "words"),
    [
        (
            "joules_per_image",
            lambda t, w, n: sum((t[k + 1] - t[k]) * (w[k] + w[k + 1]) / 2 for k in range(len(t) - 2)) / n,
            "the last interval is missing",
        ),
        ("joules_per_image", lambda t, w, n: _trap(w, t) // n, "floor division"),
        ("joules_per_image", lambda t, w, n: _trap(w, t) / len(t), "number of power samples"),
        ("cost_per_epoch", lambda n, ips, usd: n / ips / usd / 3600, "does not divide"),
        ("cost_per_epoch", lambda n, ips, usd: n * ips * usd / 3600, "no time"),
        ("cost_per_epoch", lambda n, ips, usd: usd / ips / 3600, "the cost of one image"),
    ],
)
def test_lesson_11_names_the_reviewers_slips(name, fn, words):
    assert words in _hint(lessons.check("11", name, fn))


@pytest.mark.skipif(hasattr(np, "trapz"), reason="this NumPy still has np.trapz")
def test_np_trapz_gone_names_np_trapezoid():
    """L2: NumPy 2.5 removed np.trapz; the hint said to check the order of the arguments."""
    hint = _hint(lessons.check("11", "joules_per_image", lambda t, w, n: np.trapz(w, t) / n))  # noqa: NPY201
    assert "np.trapezoid(y, x)" in hint and "order of its arguments" not in hint


def _broadcast(a_reg, b_reg, acc, a_in, b_in):
    a = np.broadcast_to(a_in[:, None], a_reg.shape).copy()
    b = np.broadcast_to(b_in[None, :], b_reg.shape).copy()
    return a, b, acc + a * b


def _swapped(a_reg, b_reg, acc, a_in, b_in):  # a moves down, b right: crashes on a single row
    a = np.empty_like(a_reg)
    a[0, :], a[1:, :] = a_in, a_reg[:-1, :]
    b = np.empty_like(b_reg)
    b[:, 0], b[:, 1:] = b_in, b_reg[:, :-1]
    return a, b, acc + a * b


def _rolled(a_reg, b_reg, acc, a_in, b_in):  # shifted the wrong way
    a = np.roll(a_reg, -1, axis=1)
    a[:, -1] = a_in
    b = np.roll(b_reg, -1, axis=0)
    b[-1, :] = b_in
    return a, b, acc + a * b


@pytest.mark.parametrize(
    ("step", "words"),
    [
        (_broadcast, "the edge input was copied into the whole row"),  # M6a: no register was updated in place
        (_swapped, "a travels down and b right"),  # M6b: named, not a crash on the 1 x 5 case
        (_rolled, "the values move the wrong way"),  # L1
    ],
)
def test_pe_step_names_the_mistake(step, words):
    for res in (systolic.check_step(step), lessons.check("11", "pe_step", step)):
        assert words in _hint(res)


def test_pe_step_may_return_a_list_and_gets_no_race_check():
    """L4: a list of the three arrays was refused; L9: a plain function was reported "ok races"."""

    def pe_step(a_reg, b_reg, acc, a_in, b_in):
        a, b = np.empty_like(a_reg), np.empty_like(b_reg)
        a[:, 0], a[:, 1:] = a_in, a_reg[:, :-1]
        b[0, :], b[1:, :] = b_in, b_reg[:-1, :]
        return [a, b, acc + a * b]

    res = lessons.check("11", "pe_step", pe_step)
    assert res.passed, res
    assert "thread schedules" not in str(res)


def test_the_epoch_throughput_is_measured_over_a_window():
    """M7: one epoch of 128 images timed once (min_seconds=0, 10-1500 ms under load) priced an MNIST epoch."""
    (cell,) = [c for c in _cells(LESSON11) if "energy.measure(lambda: train.fit" in c]
    call = next(
        n for n in ast.walk(ast.parse(cell)) if isinstance(n, ast.Call) and getattr(n.func, "attr", "") == "measure"
    )
    kw = {k.arg: k.value for k in call.keywords}
    min_s = eval(compile(ast.Expression(kw["min_seconds"]), "cell", "eval"), {"gpulab": gpulab})  # noqa: S307
    assert min_s >= 0.3 and ast.literal_eval(kw["warmup"]) >= 1
    assert "epoch.calls" in cell  # the throughput counts every epoch of the window
    (cost_cell,) = [c for c in _cells(LESSON11) if "epoch_s = " in c]
    assert "images / epoch.seconds" not in cost_cell


# --- lesson 12 ------------------------------------------------------------------------------------------


def _backward(*edits):
    cell = next(c for c in _cells(LESSON12) if c.startswith("def attention_backward("))
    src = "\n".join(ln for ln in cell.splitlines() if "SOLUTION" not in ln) + "\n"
    return edited_kernel(src, "attention_backward", {"np": np, "math": math}, *edits)


@pytest.mark.parametrize(
    ("edits", "words"),
    [
        ([("return dq, dk, dv", "return dv, dk, dq")], "returned in another order"),  # M3
        ([("return dq, dk, dv", "return dk, dq, dv")], "returned in another order"),
        ([("(dp * p).sum(axis=1, keepdims=True)", "(dp * p).sum(axis=0, keepdims=True)")], "a sum over axis 0"),
        ([("dv = p.T @ dout", "dv = p @ dout")], "P times dout leaves P untransposed"),
        (
            [
                ("s.max(axis=1, keepdims=True)", "s.max(axis=0, keepdims=True)"),
                ("p.sum(axis=1, keepdims=True)", "p.sum(axis=0, keepdims=True)"),
            ],
            "each column would sum to 1",
        ),
    ],
)
def test_attention_backward_names_the_mistake(edits, words):
    hint = _hint(lessons.check("12", "attention_backward", _backward(*edits)))
    assert words in hint and "the weights P come from the scaled scores" not in hint, hint


def test_flash_row_max_never_kept_is_named():
    """M4: the hint said row_max was reset inside the loop, which the learner had not done."""
    src = textwrap.dedent(inspect.getsource(flash.flash_attention_kernel.py_func))
    k = edited_kernel(src, "flash_attention_kernel", flash.__dict__, ("            row_max = new_max\n", ""))
    assert "the new maximum is never kept" in _hint(lessons.check("12", "flash", k))


THREE_PASS = """
@cuda.jit
def online_softmax_kernel(x, out):
    row = cuda.blockIdx.x
    tx = cuda.threadIdx.x
    cols = x.shape[1]
    s_max = cuda.shared.array(SOFTMAX_TPB, float32)
    s_sum = cuda.shared.array(SOFTMAX_TPB, float32)
    mx = float32(-math.inf)
    for j in range(tx, cols, SOFTMAX_TPB):
        mx = max(mx, x[row, j])
    s_max[tx] = mx
    cuda.syncthreads()  # maxima stored
    stride = SOFTMAX_TPB // 2
    while stride > 0:
        if tx < stride:
            s_max[tx] = max(s_max[tx], s_max[tx + stride])
        cuda.syncthreads()  # level merged
        stride //= 2
    rm = s_max[0]
    sm = float32(0.0)
    for j in range(tx, cols, SOFTMAX_TPB):
        sm += math.exp(x[row, j] - rm)
    s_sum[tx] = sm
    cuda.syncthreads()  # sums stored
    stride = SOFTMAX_TPB // 2
    while stride > 0:
        if tx < stride:
            s_sum[tx] += s_sum[tx + stride]
        cuda.syncthreads()  # level merged
        stride //= 2
    for j in range(tx, cols, SOFTMAX_TPB):
        out[row, j] = math.exp(x[row, j] - rm) / s_sum[0]
"""


def test_three_pass_softmax_gets_the_online_softmax_hint():
    """M5: the budget hint talked about a convolution's window and cuda.local.array."""
    ns = {"cuda": cuda, "float32": float32, "math": math, "SOFTMAX_TPB": answers_12.SOFTMAX_TPB}
    res = lessons.check("12", "online_softmax", edited_kernel(THREE_PASS, "online_softmax_kernel", ns))
    assert "Fold the first two passes into one" in _hint(res) and "window" not in res.hint


def test_a_transposed_k_gets_no_numpy_warning_and_a_readable_example():
    """L3: np.isclose warned about an infinite atol (expected -inf) on stderr, above the verdict; the hint's
    example used k both as the array and as an index (k[j, k])."""
    src = textwrap.dedent(inspect.getsource(answers_12.attention_scores_kernel.py_func))
    k = edited_kernel(src, "attention_scores_kernel", vars(answers_12), ("k[j, c]", "k[c, j]"))
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        res = lessons.check("12", "scores", k)
    assert "k transposed" in _hint(res) and "k[j, k]" not in res.hint


def test_filler_hint_is_silent_and_exact_for_infinities():
    from gpulab.simulator.memory import filler_hint

    exp = np.array([-np.inf, 1.0, 2.0], np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert filler_hint(np.array([0.0, 1.0, 2.0], np.float32), exp, "s", 1e-5, np.array([np.inf, 0, 0])) == ""


def test_error_stats_max_is_inf_when_a_value_overflowed():
    """L11: relative_error was inf while max_relative_error skipped the overflowed values (0.987)."""
    x = np.array([1.0, 3.0, 1000.0])  # 1000 -> NaN in E4M3
    st = formats.error_stats(x, "e4m3")
    assert st["relative_error"] == math.inf and st["max_relative_error"] == math.inf
    assert formats.error_stats(x, "e4m3", saturate=True)["max_relative_error"] < 1  # clamped: a finite error


@pytest.mark.parametrize(
    ("args", "words"),
    [
        ((50, 0.3722), "for 50% write 0.5"),  # L6
        ((6571, 1.825, "hours"), "in seconds?"),
    ],
)
def test_compare_names_a_percentage_or_seconds(args, words):
    assert words in lessons.compare(*args[:2], unit=args[2] if len(args) > 2 else "")


def test_compare_says_a_long_source_once():
    what = "ESTIMATED (time measured; watts from a power rating, as the reading says: not a measurement)"
    assert lessons.compare(142, 100, what=what).count(what) == 1  # L7


# --- labs 11 and 12 -------------------------------------------------------------------------------------


NUMBA_NOTEBOOKS = [
    p
    for p in sorted(
        [*(ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"), *(ROOT / "labs" / "solutions").glob("lab*.ipynb")]
    )
    if any(ln.startswith(("from numba", "import numba")) for c in _cells(p) for ln in c.splitlines())
]


@pytest.mark.parametrize("path", NUMBA_NOTEBOOKS, ids=[p.stem for p in NUMBA_NOTEBOOKS])
def test_the_import_cell_imports_gpulab_before_numba(path):
    """L8: after a restart, the import cell alone imported numba in gpu mode before gpulab chose the simulator."""
    assert {LESSON12, LAB11, LAB12} <= set(NUMBA_NOTEBOOKS)
    cell = next(c for c in _cells(path) if any(ln.startswith(("from numba", "import numba")) for ln in c.splitlines()))
    lines = cell.splitlines()
    first_numba = next(i for i, ln in enumerate(lines) if ln.startswith(("from numba", "import numba")))
    assert any(ln.startswith("import gpulab") for ln in lines[:first_numba]), cell


def _lab11(cell_no: int, fn_name: str, fn):
    """The lab's check cell ``cell_no`` (counted from 1, as the learner version shows it) run on ``fn``."""
    nb = nbformat.read(LAB11, as_version=4)
    ns: dict = {}
    exec(nb.cells[4].source, ns)  # noqa: S102 - the lab's own setup cell
    ns[fn_name] = fn
    check = nb.cells[cell_no - 1].source.split("### BEGIN HIDDEN TESTS")[0].replace("report(*results", "# report(")
    exec(check, ns)  # noqa: S102 - the lab's own check cell
    return ns["result"]


@cuda.jit
def _roofline_by_device(intensity, peak_gflops, bandwidth_gbps, out):
    j, i = cuda.grid(2)
    if i < out.shape[0] and j < out.shape[1]:
        out[i, j] = min(peak_gflops[j], bandwidth_gbps[j] * intensity[j])


def _hours(f, p, u):
    return f / (p * 1e12 * u) / 3600


def _steps(bytes_per_gb=1e9, latency=lambda n, lat: 2 * (n - 1) * lat):
    def step_times(n_gpus, compute_1gpu_s, grad_bytes, link_gbps, latency_s):
        n = np.asarray(n_gpus, dtype=np.float64)
        return compute_1gpu_s / n + 2 * (n - 1) / n * grad_bytes / (link_gbps * bytes_per_gb) + latency(n, latency_s)

    return step_times


@pytest.mark.parametrize(
    ("cell_no", "fn_name", "fn", "words"),
    [
        (8, "roofline_kernel", _roofline_by_device, "index it with i, not with j"),
        (13, "dynamic_joules_per_image", lambda t, w, idle, n: (_trap(w, t) - idle) / n, "subtracted once"),
        (13, "dynamic_joules_per_image", lambda t, w, idle, n: (_trap(w, t) - idle * t[-1]) / n, "does not start at 0"),
        (
            16,
            "run_cost",
            lambda f, p, u, usd, w: (_hours(f, p, u) * usd, _hours(f, p, u), w * _hours(f, p, u) / 1000),
            "another order",
        ),
        (16, "run_cost", lambda f, p, u, usd, w: {"hours": 1, "dollars": 2, "kwh": 3}, "returned a dict"),
        (21, "step_times", _steps(latency=lambda n, lat: lat), "not the latency once"),
        (21, "step_times", _steps(bytes_per_gb=2**30), "not 2**30"),
        (21, "step_times", _steps(latency=lambda n, lat: 2 * (n - 1) * lat * 1e-6), "no x 1e-6"),
    ],
)
def test_lab_11_names_the_reviewers_slips(cell_no, fn_name, fn, words):
    res = _lab11(cell_no, fn_name, fn)
    assert not res.passed and (words in res.hint or words in str(res)), res


@pytest.mark.parametrize("cell_no", [13, 16, 21])
def test_lab_11_host_functions_get_no_race_check(cell_no):
    names = {13: "dynamic_joules_per_image", 16: "run_cost", 21: "step_times"}
    nb = nbformat.read(LAB11, as_version=4)
    ns: dict = {}
    exec(nb.cells[4].source, ns)  # noqa: S102
    exec(nb.cells[cell_no - 2].source.replace("### BEGIN SOLUTION", "").replace("### END SOLUTION", ""), ns)  # noqa: S102
    res = _lab11(cell_no, names[cell_no], ns[names[cell_no]])
    assert res.passed and "thread schedules" not in str(res), res


def _lab12_kernel(name: str, *edits: tuple[str, str]):
    nb = nbformat.read(LAB12, as_version=4)
    (cell,) = [c.source for c in nb.cells if f"def {name}" in c.source]
    src = "".join(line + "\n" for line in cell.splitlines() if "SOLUTION" not in line)
    ns = {"math": math, "cuda": cuda, "float32": float32, "BQ": L.BQ, "BK": L.BK, "ACC": L.DMAX // L.BK}
    return edited_kernel(src, name, {**ns, "PAD": L.DMAX + 1, "TPB": L.TPB}, *edits, count=1)


def test_lab_12_racy_lse_fails_in_the_notebook_and_at_grading_alike():
    """L5: the hidden check ran with race_check=False, so a racy lse store got 0/4 in the notebook and 2/4 graded;
    the hint said "one element per block" where lse has one element per row."""
    racy = _lab12_kernel(
        "flash_lse_kernel", ("        if tx == 0:\n            lse[row]", "        if True:\n            lse[row]")
    )
    (check,) = [c for c in _cells(LAB12) if "FLASH_LSE.check(flash_lse_kernel, sizes" in c]
    ns = {"problems": problems, "flash_lse_kernel": racy, "report": lambda *r, points: None}
    exec(check.replace("### BEGIN HIDDEN TESTS", "").replace("### END HIDDEN TESTS", ""), ns)  # noqa: S102
    assert not ns["result"].passed and not ns["hidden"].passed
    assert "one row of a block's threads" in ns["result"].hint


def test_lab_12_own_shared_slot_is_named():
    k = _lab12_kernel("softmax_backward_kernel", ("- dot)", "- buf[tx])"))
    assert "Each thread read its own slot" in _hint(L.SOFTMAX_BACKWARD.check(k))


def test_compare_suggests_a_percentage_only_when_it_would_be_near():
    """1.2 for a measured 0.58 is just too high: read as 1.2% it would be 48 times too low, so no percentage slip."""
    said = lessons.compare(1.2, 0.58)
    assert "too high" in said and "%" not in said, said
