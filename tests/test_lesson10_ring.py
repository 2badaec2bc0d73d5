"""Lesson 10's ring all-reduce: an all-gather that adds instead of copying, and a reduce-scatter one step too
long, fail with their names (they failed with a bare expected/got)."""

import inspect
import textwrap

import numpy as np
import pytest

from gpulab import lessons, scaling


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
    assert edit[0] in src
    ns = {"np": np, "Sequence": list}
    exec(src.replace(*edit), ns)  # noqa: S102 - the library's own source with one learner's edit
    res = lessons.check("10", "ring_allreduce", ns["ring_steps"])
    assert not res.passed and words in res.hint, res
