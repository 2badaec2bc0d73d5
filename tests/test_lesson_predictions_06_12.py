"""The predictions added to lessons 00, 02, 04, 06, 09, 11 and 12: each has a blank guess cell before the cell that
answers it, the exact ones are compared exactly, and the facts their answers rest on hold in the library
and in NumPy."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import numpy as np
import pytest

from gpulab import interop, lessons
from gpulab.transformer import formats

ROOT = Path(__file__).resolve().parents[1]
# {notebook: {prediction variable: the tolerance its lessons.compare call must pass}}
NEW = {
    "00_why_gpus.ipynb": {"guess_rate_ratio": 0.5, "guess_numpy_years": 0.25},
    "02_memory.ipynb": {"guess_warps_per_sm": 0.25},
    "04_shared_memory_tiling.ipynb": {"guess_regtiled_loads": 0.25},
    "06_cupy_interop.ipynb": {
        "predicted_mixed_bytes": 0,
        "predicted_stride_bytes": 0,
        "predicted_acc16_factor": 0.5,
        "predicted_naive_softplus": 0.25,  # a word answer ("inf"): compared word for word, no tolerance passed
        "predicted_fused_bytes": 0.25,
        "predicted_chain_bytes": 0,
        "predicted_device_chain_bytes": 0,  # the second half of the chain question: 4 in once, 4 out once
        "predicted_small_speedup": 0.25,  # a word answer ("smaller"), no tolerance passed
    },
    "09_train_cnn.ipynb": {
        "predicted_biggest_layer": 0.25,  # a word answer ("conv2"): compared word for word, no tolerance passed
        "predicted_first_loss": 0.35,  # ln 10 = 2.30 for equal logits; an untrained CNN starts somewhat above
        "predicted_cpu_gflops": 0.25,  # MFLOP per image x images/s of the run's last epoch
        "predicted_test_accuracy": 0.25,
    },
    "11_energy_cost_hardware.ipynb": {"my_guess_h100_hours": 0.25},
    "12_transformers.ipynb": {
        "predicted_scores_gb": 0.25,
        "predicted_e4m3_max": 0,
        "predicted_one_token_dq": 0,  # exactly 0: one token's weight is 1 whatever its score
    },
}
ANSWERS = {
    "predicted_mixed_bytes": 20,
    "predicted_stride_bytes": 160,
    "predicted_e4m3_max": 448,
    "predicted_chain_bytes": 16,
    "predicted_device_chain_bytes": 8,
}


def _code_cells(path: Path) -> list[str]:
    nb = json.loads(path.read_text(encoding="utf-8"))
    return ["".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code"]


def _compare_calls(cells: list[str]) -> dict[str, tuple[int, float]]:
    """{prediction variable: (index of the code cell comparing it, the tolerance passed, 0.25 if none)}."""
    found = {}
    for k, src in enumerate(cells):
        if "lessons.compare(" not in src:
            continue
        for node in ast.walk(ast.parse(src)):
            if isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "compare":
                kw = {a.arg: a.value for a in node.keywords}
                tol = ast.literal_eval(kw["tolerance"]) if "tolerance" in kw else 0.25
                found[node.args[0].id] = (k, tol)
    return found


@pytest.mark.parametrize("folder", ["notebooks", "notebooks/learner"])
@pytest.mark.parametrize("name", sorted(NEW))
def test_each_new_prediction_is_blank_and_answered_after_the_guess(name, folder):
    cells = _code_cells(ROOT / folder / name)
    calls = _compare_calls(cells)
    for var, tol in NEW[name].items():
        guess = [k for k, src in enumerate(cells) if src.startswith(f"{var} = None  #")]
        assert len(guess) == 1, f"{name}: no (or several) blank guess cells for {var}"
        k, got_tol = calls[var]
        assert k > guess[0], f"{name}: {var} is compared before the learner can guess it"
        assert got_tol == tol, f"{name}: {var} compared with tolerance {got_tol}, expected {tol}"


@pytest.mark.parametrize(("var", "right"), ANSWERS.items())
def test_exact_answers_are_not_right_when_off_by_a_little(var, right):
    tol = next(t for per_nb in NEW.values() for v, t in per_nb.items() if v == var)
    assert lessons.compare(right, right, tolerance=tol).split("\n")[0].endswith("right.")
    for wrong in (right - 4, right + 4, right * 1.1):  # 16 or 24 bytes, 156 or 164, 444 or 452: close, wrong
        assert not lessons.compare(wrong, right, tolerance=tol).split("\n")[0].endswith("right.")


def test_a_float64_array_promotes_a_float32_expression_and_a_python_float_does_not():
    x = np.ones(8, np.float32)
    w = np.random.default_rng(1).standard_normal(8)
    assert w.dtype == np.float64
    z = x * w
    assert z.dtype == np.float64 and x.itemsize + w.itemsize + z.itemsize == 20
    assert (x * 2.0).dtype == np.float32


def test_the_array_interface_of_a_transpose_shares_the_pointer_and_swaps_the_strides():
    a = np.arange(1000, dtype=np.float32).reshape(25, 40)
    assert interop.array_interface(a)["strides"] is None  # C-ordered: strides follow from the shape
    info = interop.array_interface(a.T)
    assert info["shape"] == (40, 25) and info["strides"] == (4, 160)
    assert interop.data_pointer(a.T) == interop.data_pointer(a)
    c = np.ascontiguousarray(a.T)
    assert interop.data_pointer(c) != interop.data_pointer(a) and c.strides == (100, 4)


def test_e4m3_decodes_to_448_at_most_with_two_nan_patterns():
    values = formats.decode(np.arange(256), "e4m3")
    finite = np.unique(values[~np.isnan(values)])
    assert int(np.isnan(values).sum()) == 2 and finite[-1] == 448 and finite[-2] == 416
    assert finite[-1] == formats.format("e4m3").max and finite[0] == -448
    assert formats.decode(0b0_1111_110, "e4m3") == 448  # S.1111.110: exponent 15 is a number's exponent


def test_the_naive_softplus_at_100_is_inf_in_float32_and_the_word_answer_compares():
    """Lesson 06's Exercise 2 prediction: log(1 + exp(100)) in float32 is inf (exp(100) = 2.7e43 > 3.4e38), and
    lessons.compare takes the answer as the word "inf", so a number is not right and "inf" or float("inf") is."""
    with np.errstate(over="ignore"):
        naive = np.log1p(np.exp(np.float32(100)))
    assert str(naive) == "inf"
    assert lessons.compare(float("inf"), str(naive)).split("\n")[0].endswith("right.")
    assert lessons.compare("inf", str(naive)).split("\n")[0].endswith("right.")
    assert lessons.compare(3.4e38, str(naive)).split("\n")[0].endswith("not quite.")


@pytest.mark.parametrize("path", sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb")), ids=lambda p: p.name[:2])
def test_every_compare_in_a_lesson_says_why(path):
    """A compare that only says right / too high / too low teaches nothing: each lessons.compare passes why=."""
    silent = []
    for k, src in enumerate(_code_cells(path)):
        if "lessons.compare(" not in src:
            continue
        for node in ast.walk(ast.parse(src)):
            if isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "compare":
                if "why" not in {kw.arg for kw in node.keywords}:
                    silent.append(f"code cell {k}: compare({ast.unparse(node.args[0])}, ...)")
    assert not silent, f"{path.name}: compares without why=: {silent}"
