"""Lab 08, exercise 4: the dropout backward that regenerates its mask (problems.lab08.DROPOUT_BACKWARD) and the
training step that hands it the forward's states (problems.lab08.DROPOUT_STEP). The mistakes are made in the lab's
own solution code; the credit is the harness's (full, half for a kernel that is right but not CUDA, zero)."""

from __future__ import annotations

import re
from pathlib import Path

import nbformat
import numpy as np
import pytest
from numba import cuda, float32
from numba.cuda.random import xoroshiro128p_uniform_float32

import gpulab
from gpulab import ptx
from gpulab.grading import report
from gpulab.lessons import dropout as lesson
from gpulab.exercises.raised import RNG_WORDS_HINT, STATES_COPY_HINT
from gpulab.problems import _dropout, _stand_ins, lab08, lab08_dropout
from gpulab.problems.lab08_dropout import ADVANCED_HINT, REVERSED_HINT
from gpulab.source import define, standalone_source
from kernel_edits import edited

LAB08 = Path(__file__).resolve().parents[1] / "labs" / "solutions" / "lab08_backprop.ipynb"
NS = {
    "cuda": cuda,
    "float32": float32,
    "xoroshiro128p_uniform_float32": xoroshiro128p_uniform_float32,
    "DROPOUT_BLOCKS": lab08.DROPOUT_BLOCKS,
    "DROPOUT_TPB": lab08.DROPOUT_TPB,
    "as_states": lab08.as_states,
}


def _cell(start: str) -> str:
    nb = nbformat.read(str(LAB08), as_version=4)
    return next(c.source for c in nb.cells if c.source.startswith(start))


def _kernel(src: str):
    return define(src, "dropout_backward_kernel", dict(NS))


def _backward_solution() -> str:
    """The solution kernel without its comments (the mistakes below edit its lines)."""
    return re.sub(r"(?<=\S)  # .*$", "", _cell("@cuda.jit\ndef dropout_backward_kernel"), flags=re.M)


def _step(src: str):
    """``dropout_step`` from ``src`` with the lab's given forward and its solution backward."""
    ns = dict(NS)
    given = _cell("from numba import float32")
    forward = given[given.index("@cuda.jit") :]
    ns["dropout_forward_kernel"] = define(forward, "dropout_forward_kernel", dict(NS))
    ns["dropout_backward_kernel"] = _kernel(_backward_solution())
    return define(src, "dropout_step", ns)


LOOP = "for i in range(tid, dy.size, cuda.gridsize(1)):"
DRAW = "u = xoroshiro128p_uniform_float32(states, tid)"
BACKWARD_MISTAKES = {
    "no_scaling": (("dy[i] / (float32(1.0) - p)", "dy[i]"), "dx is dy where kept, not dy / (1 - p)"),
    "inverted": (("if u >= p:", "if u < p:"), "keep and drop are swapped"),
    "thread_idx": (("(states, tid)", "(states, cuda.threadIdx.x)"), "state index is cuda.threadIdx.x"),
    "no_grid_stride": ((LOOP, "for i in range(tid, min(tid + 1, dy.size)):"), "each thread must loop"),
}


@pytest.mark.parametrize("label", sorted(BACKWARD_MISTAKES))
def test_backward_mistakes_are_named_and_score_zero(label):
    (old, new), hint = BACKWARD_MISTAKES[label]
    res = lab08.DROPOUT_BACKWARD.check(_kernel(edited(_backward_solution(), (old, new))), ptx=None)
    if label == "thread_idx" and not gpulab.is_simulator():  # on a GPU the blocks race for the shared states:
        assert not res.passed and res.score == 0, res  # a mix of draws, which no replay names
        return
    assert not res.passed and res.score == 0 and hint in res.hint, (label, res)


def test_one_draw_per_thread_is_named():
    src = edited(_backward_solution(), (f"    {LOOP}\n        {DRAW}", f"    {DRAW}\n    {LOOP}"))
    res = lab08.DROPOUT_BACKWARD.check(_kernel(src), ptx=None)
    assert not res.passed and "repeats every cuda.gridsize(1)" in res.hint, res


def test_the_solution_kernel_gets_full_points_and_a_kernel_that_is_not_cuda_half():
    res = lab08.DROPOUT_BACKWARD.check(_kernel(_backward_solution()))
    assert res.passed and res.score == 2, res
    listed = edited(_backward_solution(), ("dx[i] = float32(0.0)", "dx[i] = [float32(0.0)][0]"))  # a list
    half = lab08.DROPOUT_BACKWARD.check(_kernel(listed))
    if gpulab.is_gpu():  # a GPU compiles the kernel before it runs: no result, no points, and the reason
        assert half.status == "error" and half.score == 0, half
        assert "the simulator runs it, a GPU kernel cannot" in str(half), half
        return
    if any(c.name == "PTX" and "not checked" in c.message for c in half.checks):
        pytest.skip("NVVM is not installed: the PTX check cannot run")
    assert half.status == "failed" and half.score == 1, half


STEP_MISTAKES = {
    "advanced": (ADVANCED_HINT, "dx"),
    "copy_after_forward": (ADVANCED_HINT, "dx"),
    "reversed": (REVERSED_HINT, "y"),
}


def _step_mistake(label: str) -> str:
    src = re.sub(r"(?<=\S)  # .*$", "", _cell("def dropout_step"), flags=re.M)
    lines = src.splitlines()
    copy, fwd, bwd = (next(k for k, line in enumerate(lines) if s in line) for s in ("copy()", "forward", "backward"))
    if label == "advanced":
        return edited(src, ("as_states(saved), p, dx)", "as_states(words), p, dx)"))
    if label == "copy_after_forward":  # the copy is taken once the forward has advanced the states
        lines[copy], lines[fwd] = lines[fwd], lines[copy]
    if label == "reversed":  # backward first, then the forward on the same (now advanced) states
        lines[fwd], lines[bwd] = lines[bwd].replace("saved", "words"), lines[fwd]
    return "\n".join(lines)


@pytest.mark.parametrize("label", sorted(STEP_MISTAKES))
def test_step_mistakes_with_the_states_are_named(label):
    hint, output = STEP_MISTAKES[label]
    res = lab08.DROPOUT_STEP.check(host=_step(_step_mistake(label)))
    assert not res.passed and res.score == 0 and res.hint == hint, (label, res)
    assert res.message.startswith(f"{output}["), res


def test_the_cell_gives_partial_credit_for_a_right_kernel_and_a_wrong_step():
    kernel = _kernel(_backward_solution())
    right, wrong = _step(_cell("def dropout_step")), _step(_step_mistake("advanced"))
    full = [lab08.DROPOUT_BACKWARD.check(kernel, ptx=None), lab08.DROPOUT_STEP.check(host=right)]
    assert report(*full, points=3) == 3
    part = [lab08.DROPOUT_BACKWARD.check(kernel, ptx=None), lab08.DROPOUT_STEP.check(host=wrong)]
    assert report(*part, points=3) == 2


def test_the_lab_shares_lesson_08s_replay_and_mistakes():
    lab_hints = list(lab08.DROPOUT_BACKWARD.mistakes)
    lesson_hints = list(lesson.MISTAKES)
    assert lab_hints[2:6] == lesson_hints[2:6]  # no else, swapped, threadIdx.x, one draw: word for word
    assert [f.__name__ for f in lab08.DROPOUT_BACKWARD.mistakes.values()] == [
        f.__name__ for f in lesson.MISTAKES.values()
    ]
    assert lesson.new_states is _dropout.new_states and lesson.as_states is lab08.as_states


def test_after_replays_the_draws_that_follow_a_first_pass():
    words = _dropout.new_states(_dropout.THREADS, seed=3)
    n = 250  # threads 0-57 take 3 elements, the others 2
    states = words.copy().view(_dropout.xoroshiro.DTYPE)
    first = _dropout.xoroshiro.uniform_float32_streams(states.copy(), 6)
    after = _dropout.draws(words, n, "after")
    assert after[0] == first[3, 0] and after[60] == first[2, 60] and after[_dropout.THREADS] == first[4, 0]


def test_the_ptx_check_rebuilds_a_kernel_that_draws_random_numbers():
    src = standalone_source(_kernel(_backward_solution()))
    assert "from numba.cuda.random import xoroshiro128p_uniform_float32" in src


@pytest.mark.ptx
def test_the_solution_kernel_compiles_to_ptx():
    header = "from numba import cuda, float32\nfrom numba.cuda.random import xoroshiro128p_uniform_float32\n\n"
    res = ptx.compile_source(
        header + _backward_solution(), "dropout_backward_kernel", lab08.DROPOUT_BACKWARD.ptx, ccs=[(7, 5), (9, 0)]
    )
    assert res == {"7.5": "ok", "9.0": "ok"}, res


def test_the_step_emulation_of_the_gpu_size_tier_is_the_solutions_arithmetic():
    from test_gpu_sizes import _dropout_step

    x, dy, words, p = lab08.DROPOUT_STEP.inputs((1001, 0.3), np.random.default_rng(2))
    got = [np.zeros_like(x), np.zeros_like(x)]
    emulated = [np.zeros_like(x), np.zeros_like(x)]
    _step(_cell("def dropout_step"))(x, dy, words.copy(), p, *got)
    _dropout_step(x, dy, words.copy(), p, *emulated)
    assert all(np.array_equal(a, b) for a, b in zip(got, emulated))


def _step_with(step_src: str, backward_src: str):
    """``dropout_step`` from ``step_src`` whose notebook's backward is ``backward_src``."""
    ns = dict(NS)
    given = _cell("from numba import float32")
    ns["dropout_forward_kernel"] = define(given[given.index("@cuda.jit") :], "dropout_forward_kernel", dict(NS))
    ns["dropout_backward_kernel"] = _kernel(backward_src)
    return define(step_src, "dropout_step", ns)


def test_a_wrong_backward_does_not_cost_the_steps_point():
    # the step runs with the lab's backward in place of the learner's: its point measures the states alone
    wrong = edited(_backward_solution(), ("dy[i] / (float32(1.0) - p)", "dy[i]"))
    right_step = _step_with(_cell("def dropout_step"), wrong)
    results = [lab08.DROPOUT_BACKWARD.check(_kernel(wrong), ptx=None), lab08.DROPOUT_STEP.check(host=right_step)]
    assert not results[0].passed and results[1].passed, results
    assert report(*results, points=3) == 1
    wrong_step = _step_with(_step_mistake("advanced"), wrong)  # and the states mistake is still named
    res = lab08.DROPOUT_STEP.check(host=wrong_step)
    assert not res.passed and res.hint == ADVANCED_HINT, res


def test_with_lab_backward_swaps_only_the_steps_own_name():
    step = _step_with(_cell("def dropout_step"), _backward_solution())
    swapped = lab08_dropout.with_lab_backward(step)
    assert swapped.__code__ is step.__code__ and swapped.__globals__ is not step.__globals__
    assert swapped.__globals__["dropout_backward_kernel"] is _stand_ins.dropout_kernel
    assert step.__globals__["dropout_backward_kernel"] is not _stand_ins.dropout_kernel  # not changed

    def emulated(x, dy, words, p, y, dx):  # names no backward kernel: run as it is
        return None

    assert lab08_dropout.with_lab_backward(emulated) is emulated


def test_copying_the_states_view_is_refused_as_on_a_gpu():
    # on a GPU as_states(words) is numba's DeviceNDArray, which has no .copy(); the simulator's view refuses it too
    src = edited(_cell("def dropout_step"), ("saved = words.copy()", "saved = as_states(words).copy()"))
    src = src.replace("as_states(saved), p, dx)", "saved, p, dx)")
    res = lab08.DROPOUT_STEP.check(host=_step(src))
    assert not res.passed and res.score == 0 and res.hint == STATES_COPY_HINT, res
    assert "line 3" in res.message and "gpulab's" not in res.message, res


def test_a_slice_of_the_words_is_told_it_is_a_view():
    src = edited(_cell("def dropout_step"), ("saved = words.copy()", "saved = words[:]"))
    res = lab08.DROPOUT_STEP.check(host=_step(src))
    assert not res.passed and res.hint == ADVANCED_HINT and "is a view" in res.hint, res


@pytest.mark.skipif(not gpulab.is_simulator(), reason="on a GPU numba refuses the uint64 words when it compiles")
def test_raw_words_given_to_the_backward_are_named():
    src = edited(_cell("def dropout_step"), ("as_states(saved), p, dx)", "saved, p, dx)"))
    res = lab08.DROPOUT_STEP.check(host=_step(src))
    assert not res.passed and res.hint == RNG_WORDS_HINT, res
    assert "dropout_backward_kernel[DROPOUT_BLOCKS, DROPOUT_TPB](dy, saved, p, dx)" in res.message, res
    assert "gpulab's" not in res.message, res


@pytest.mark.ptx
def test_the_stand_in_backward_compiles_to_ptx():
    import inspect

    res = ptx.compile_source(
        inspect.getsource(_stand_ins), "dropout_kernel", _stand_ins.DROPOUT_PTX, ccs=[(7, 5), (9, 0)]
    )
    assert res == {"7.5": "ok", "9.0": "ok"}, res
