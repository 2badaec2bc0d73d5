"""The predict-then-measure steps of lessons 07, 08 and 10: each guess is entered before the lesson measures it,
the committed (simulator) outputs show the figure the lesson's text explains, and exact counts are not called
right when they are off by one."""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import numpy as np
import pytest

from gpulab import lessons, nn, scaling
from gpulab.kernels import conv_out_size
from gpulab.nn import ops as nn_ops_numpy

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = {"07": "07_convolution.ipynb", "08": "08_backprop.ipynb", "10": "10_scaling_up.ipynb"}


def _wide_mixed_saving(batch: int) -> float:
    """Percent of the FP32 total that mixed precision saves for lesson 10's 8x wider CNN with Adam."""
    wide = scaling.cnn_footprint(channels=(256, 512), hidden=1024)
    b32 = sum(scaling.memory_budget(wide, batch, optimizer="adam", precision="fp32").values())
    b16 = sum(scaling.memory_budget(wide, batch, optimizer="adam", precision="mixed").values())
    return round(100 * (1 - b16 / b32), 1)


def _latency_bound_devices() -> int:
    """Lesson 10's ring model: the first N with 2(N-1)·α > 2(N-1)/N·S/B, for the course CNN's gradients
    (S bytes in float32), B = 25 GB/s and α = 5 µs (the lesson's assumed link figures)."""
    s = 4 * scaling.cnn_footprint().params
    return int(s / (25e9 * 5e-6)) + 1


def _sgd_extra_images() -> int:
    """Lesson 10: how many more images the largest SGD batch holds than the largest Adam batch on 16 GB."""
    wide = scaling.cnn_footprint(channels=(256, 512), hidden=1024)
    return scaling.max_batch_size(wide, 16e9, optimizer="sgd") - scaling.max_batch_size(wide, 16e9, optimizer="adam")


# {prediction variable: (lesson, the figure the simulator run shows, an answer that must not count as right)}
EXPECTED = {
    "predicted_cols_ratio": ("07", 3 * 3, 8),  # k² for stride 1, padding 1
    "predicted_stride2_positions": ("07", conv_out_size(8, 3, 2, 1) ** 2, 15),
    "predicted_x_loads_per_output": ("07", 9 / 8, 1),  # K² / F with F = 8
    "predicted_nonzero_grads": ("08", 2 * 3 * (6 // 2) * (10 // 2), 91),  # one winner per 2x2 window
    "predicted_corner_copies": ("08", 4, 9),
    "predicted_state_mib": ("08", 64 * 4096 * 16 / 2**20, 1),  # 16-byte states, not 4-byte floats
    "predicted_mixed_saving": ("10", _wide_mixed_saving(64), 50),
    "predicted_ring_sent": ("10", 2 * 7 / 8, 2),
    "predicted_latency_bound_devices": ("10", _latency_bound_devices(), 20),
    "predicted_sgd_extra_images": ("10", _sgd_extra_images(), 30),  # Adam's 8 bytes per parameter, in images
}
# {word prediction: (lesson, the answer the simulator run shows, a wrong answer)}
WORDS = {
    "predicted_changes_with_f": ("07", "im2col", "both"),
    "predicted_big_scale": ("10", "overflow", "underflow"),
    "predicted_uneven_split": ("10", "error", "approximate"),
}
# Measured figures that are not counts: the range the committed run's figure must fall in
RANGES = {
    "predicted_error_growth": (30, 300),  # the float32 rounding experiment: a factor near 100
    "predicted_bad_pool_error": (0.1, 10),  # an averaging max-pool backward: every gradient wrong, of order 1
    "predicted_float32_error": (1e-3, 1),  # float32 losses: rounding noise over 2h, far above float64's 1e-10
}
NEW = [*EXPECTED, *RANGES, *WORDS]


def _cells(lesson: str, folder: str = "notebooks") -> list[dict]:
    return json.loads((ROOT / folder / NOTEBOOKS[lesson]).read_text(encoding="utf-8"))["cells"]


def _compare_call(lesson: str, name: str) -> tuple[int, ast.Call]:
    """(cell index, the lessons.compare call) that compares prediction ``name``."""
    for k, cell in enumerate(_cells(lesson)):
        src = "".join(cell["source"])
        if cell["cell_type"] == "code" and f"lessons.compare({name}" in src:
            calls = [
                n
                for n in ast.walk(ast.parse(src))
                if isinstance(n, ast.Call) and getattr(n.func, "attr", "") == "compare" and n.args[0].id == name
            ]
            return k, calls[0]
    raise AssertionError(f"lesson {lesson} does not compare {name}")


def _lesson_of(name: str) -> str:
    return EXPECTED[name][0] if name in EXPECTED else WORDS[name][0] if name in WORDS else "08"


@pytest.mark.parametrize("name", NEW)
def test_the_guess_comes_first_blank_and_after_a_predict_cell(name):
    lesson = _lesson_of(name)
    k, _ = _compare_call(lesson, name)
    for folder in ("notebooks", "notebooks/learner"):
        cells = _cells(lesson, folder)
        (g,) = [i for i, c in enumerate(cells) if "".join(c["source"]).startswith(f"{name} = None  # your guess")]
        assert g < k, f"{folder}: the guess of {name} comes after its measurement"
        text = "".join(cells[g - 1]["source"])
        assert cells[g - 1]["cell_type"] == "markdown" and "**Predict first" in text, (folder, name, text)


@pytest.mark.parametrize("name", NEW)
def test_the_committed_run_shows_the_figure_the_text_explains(name):
    lesson = _lesson_of(name)
    k, _ = _compare_call(lesson, name)
    out = "".join("".join(o.get("text", "")) for o in _cells(lesson)[k]["outputs"])
    if name in WORDS:
        assert f"The answer: {WORDS[name][1]}." in out, out
        return
    found = re.search(r"^(?:Measured|Counted|Modelled[^:]*): ([\d,.]+)", out, re.MULTILINE)
    assert found, out
    shown = float(found.group(1).replace(",", "").rstrip("."))
    if name in RANGES:
        low, high = RANGES[name]
        assert low < shown < high, out
    else:
        assert shown == pytest.approx(EXPECTED[name][1], rel=1e-3), out


@pytest.mark.parametrize("name", list(EXPECTED))
def test_the_answer_is_right_and_a_near_miss_is_not(name):
    lesson, answer, near_miss = EXPECTED[name]
    _, call = _compare_call(lesson, name)
    tol = {kw.arg: ast.literal_eval(kw.value) for kw in call.keywords if kw.arg == "tolerance"}.get("tolerance", 0.25)
    assert lessons.compare(answer, answer, tolerance=tol).split("\n")[0].endswith("right.")
    assert "right" not in lessons.compare(near_miss, answer, tolerance=tol).split("\n")[0].split(":")[-1], name


@pytest.mark.parametrize("name", list(WORDS))
def test_a_word_answer_is_right_in_any_case_and_the_other_word_is_not(name):
    _, answer, wrong = WORDS[name]
    assert "right." in lessons.compare(answer.upper(), answer).split("\n")[0]
    assert "not quite" in lessons.compare(wrong, answer).split("\n")[0]


def test_col2im_of_ones_counts_the_copies_of_each_pixel():
    """Lesson 08's corner-pixel prediction: with padding 1 a corner pixel sits in 4 windows, an edge one in 6, an
    interior one in k² = 9, and the counts add up to the non-padding entries of cols."""
    ops = nn_ops_numpy.get("numpy")
    x_shape, k = (1, 1, 6, 5), 3
    ho, wo = conv_out_size(6, k, 1, 1), conv_out_size(5, k, 1, 1)
    copies = ops.col2im(np.ones((ho * wo, k * k), np.float32), x_shape, k, k, 1, 1)[0, 0]
    assert copies[0, 0] == copies[-1, -1] == 4 and copies[0, 2] == copies[3, 0] == 6 and copies[2, 2] == 9
    cols, _, _ = ops.im2col(np.ones(x_shape, np.float32), k, k, 1, 1)
    assert copies.sum() == cols.sum()


def test_maxpool_backward_sends_one_gradient_per_window():
    """Lesson 08's count: non-overlapping 2x2 windows give exactly one nonzero input gradient each."""
    rng = np.random.default_rng(3)
    pool = nn.MaxPool2d(2)
    pool.forward(rng.standard_normal((2, 3, 6, 10)))
    dx = pool.backward(rng.standard_normal((2, 3, 3, 5)))
    assert np.count_nonzero(dx) == 2 * 3 * 3 * 5
