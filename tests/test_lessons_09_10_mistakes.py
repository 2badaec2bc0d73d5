"""Lessons 09 and 10: the ring all-reduce with an all-gather that adds or a reduce-scatter one step too long, and
the network's multiply-adds returned in odd forms or in millions, fail with their names (before: a bare
expected/got, or a float() error blamed on the learner's code)."""

import inspect
import textwrap

import numpy as np
import pytest

from gpulab import lessons, scaling
from kernel_edits import edited


@pytest.mark.parametrize(
    ("edit", "words"),
    [
        (
            (
                "bufs[(i + 1) % n][chunk[(i + 1 - step) % n]] = msgs[i]",
                "bufs[(i + 1) % n][chunk[(i + 1 - step) % n]] += msgs[i]",
            ),
            "the all-gather copies the summed chunk",
        ),
        (
            ("    for step in range(n - 1):  # reduce-scatter", "    for step in range(n):  # reduce-scatter"),
            "N-1 steps, not N",
        ),
    ],
)
def test_a_ring_with_one_line_wrong_is_named(edit, words):
    src = textwrap.dedent(inspect.getsource(scaling.ring_steps))
    ns = {"np": np, "Sequence": list}
    exec(edited(src, edit), ns)  # noqa: S102 - the library's own source with one learner's edit
    res = lessons.check("10", "ring_allreduce", ns["ring_steps"])
    assert not res.passed and words in res.hint, res


@pytest.mark.parametrize(
    ("result", "words"),
    [
        ("4,241,152", "it returned a str: '4,241,152'"),
        ({"total": 4241152}, "it returned a dict"),
        ((225792, 3612672, 401408, 1280), "it returned a tuple"),
    ],
)
def test_lesson09_macs_in_an_odd_form_is_told_to_return_one_number(result, words):
    """Before: 'ValueError in your code: could not convert string to float', or a hint about CUDA features."""
    res = lessons.check("09", "cnn_forward_macs", lambda size, channels, hidden, classes: result)
    assert res.status == "error" and "must return one number" in res.message and words in res.message, res


def test_lesson09_macs_in_millions_is_named():
    def millions(size, channels, hidden, classes):
        c1, c2 = channels
        return (
            size * size * c1 * 9 + (size // 2) ** 2 * c2 * c1 * 9 + c2 * (size // 4) ** 2 * hidden + hidden * classes
        ) / 1e6

    res = lessons.check("09", "cnn_forward_macs", millions)
    assert not res.passed and "in millions" in res.hint, res
