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


def _ring_counting_all_devices(buffers):
    """A ring all-reduce whose sent adds up every device's messages."""
    n = len(buffers)
    bufs = [np.array(b, dtype=np.float32) for b in buffers]
    bounds = np.linspace(0, bufs[0].size, n + 1).astype(int)
    chunk = [slice(bounds[k], bounds[k + 1]) for k in range(n)]
    sent = 0
    for step in range(n - 1):
        msgs = [bufs[i][chunk[(i - step) % n]].copy() for i in range(n)]
        for i in range(n):
            bufs[(i + 1) % n][chunk[(i - step) % n]] += msgs[i]
            sent += msgs[i].nbytes
    for step in range(n - 1):
        msgs = [bufs[i][chunk[(i + 1 - step) % n]].copy() for i in range(n)]
        for i in range(n):
            bufs[(i + 1) % n][chunk[(i + 1 - step) % n]] = msgs[i]
            sent += msgs[i].nbytes
    return bufs, sent


def _ring_passing_whole_buffers(buffers):
    total = np.sum([np.array(b, np.float32) for b in buffers], axis=0)
    return [total.copy() for _ in buffers], 2 * (len(buffers) - 1) * buffers[0].nbytes


@pytest.mark.parametrize("fn", [_ring_counting_all_devices, _ring_passing_whole_buffers])
def test_a_ring_sending_n_times_the_bytes_is_told_both_causes(fn):
    """Before: whole buffers passed round were told 'sent counts ... device 0, not all N devices together'.
    Both give 2(N-1) whole buffers at every N (that divides the length, as in the check's sizes), so the hint names
    both."""
    res = lessons.check("10", "ring_allreduce", fn)
    assert not res.passed and "all N devices" in res.hint and "whole buffer" in res.hint, res
    for n in (2, 3, 5):  # the two counts agree at every N, not only at N = 2
        x = [np.ones(60, np.float32)] * n
        assert _ring_counting_all_devices(x)[1] == _ring_passing_whole_buffers(x)[1]
