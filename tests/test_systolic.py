"""gpulab.systolic: the cycle-level array computes A @ B in R + C + K - 2 clocks; the step exercise's verdicts."""

from __future__ import annotations

import numpy as np
import pytest

from gpulab import lessons, systolic
from gpulab.errors import UsageError


@pytest.mark.parametrize("shape", [(1, 1, 1), (1, 4, 3), (3, 1, 5), (4, 6, 2), (5, 5, 5)])
def test_systolic_matmul_equals_numpy(shape):
    r, k, c = shape
    rng = np.random.default_rng(sum(shape))
    a, b = rng.standard_normal((r, k)).astype(np.float32), rng.standard_normal((k, c)).astype(np.float32)
    run = systolic.systolic_matmul(a, b)
    np.testing.assert_allclose(run.c, a @ b, rtol=1e-5, atol=1e-5)
    assert run.cycles == r + c + k - 2 and sum(run.busy) == r * c * k
    assert run.utilization == pytest.approx(k / (r + c + k - 2))


def test_frames_follow_the_wavefront():
    rng = np.random.default_rng(0)
    a, b = rng.random((3, 4), dtype=np.float32), rng.random((4, 2), dtype=np.float32)
    run = systolic.systolic_matmul(a, b, keep_frames=True)
    for t, acc in enumerate(run.frames):  # after clock t, PE (i, j) has summed terms s <= t - i - j
        for i in range(3):
            for j in range(2):
                s_max = min(t - i - j, 3)
                want = float(a[i, : s_max + 1] @ b[: s_max + 1, j]) if s_max >= 0 else 0.0
                assert acc[i, j] == pytest.approx(want, abs=1e-6)
    assert systolic.wavefront(3, 2, 4, 0).tolist() == [[0, -1], [-1, -1], [-1, -1]]


def test_memory_reads_and_errors():
    assert systolic.systolic_reads(128, 128, 128) * 128 == systolic.simt_reads(128, 128, 128)
    with pytest.raises(UsageError, match="K matching"):
        systolic.systolic_matmul(np.ones((2, 3)), np.ones((2, 3)))


def test_check_step_verdicts():
    assert systolic.check_step(systolic.pe_step, points=2, trusted=True).score == 2  # gpulab's own step
    refused = systolic.check_step(systolic.pe_step, points=2)  # as a learner's answer: refused, nothing run
    assert refused.score == 0 and "gpulab's own reference implementation" in refused.message

    def todo(a_reg, b_reg, acc, a_in, b_in):
        raise NotImplementedError

    assert systolic.check_step(todo).status == "not implemented"

    def stale(a_reg, b_reg, acc, a_in, b_in):
        a_new, b_new, _ = systolic.pe_step(a_reg, b_reg, acc, a_in, b_in)
        return a_new, b_new, acc + a_reg * b_reg

    res = systolic.check_step(stale, trusted=True)  # built on gpulab's step: trusted, to reach its named mistake
    assert not res.passed and "last clock" in res.hint

    def swapped(a_reg, b_reg, acc, a_in, b_in):
        a_new, b_new = np.empty_like(a_reg), np.empty_like(b_reg)
        a_new[0, :], a_new[1:, :] = a_in, a_reg[:-1, :]
        b_new[:, 0], b_new[:, 1:] = b_in, b_reg[:, :-1]
        return a_new, b_new, acc + a_new * b_new

    res = systolic.check_step(swapped, sizes=[(3, 3)])
    assert not res.passed and "a travels down" in res.hint
    assert not systolic.check_step(lambda *x: x[0]).passed  # wrong return type: a verdict, not a crash


def _pe_in_place(a_reg, b_reg, acc, a_in, b_in):
    """The registers overwritten in order: each PE reads its neighbour's value of this clock."""
    r, c = a_reg.shape
    for i in range(r):
        for j in range(c):
            a_reg[i, j] = a_in[i] if j == 0 else a_reg[i, j - 1]
    for i in range(r):
        for j in range(c):
            b_reg[i, j] = b_in[j] if i == 0 else b_reg[i - 1, j]
    return a_reg, b_reg, acc + a_reg * b_reg


def _pe_swapped(a_reg, b_reg, acc, a_in, b_in):
    """a sent down the columns and b along the rows (sliced so that it runs on a single row too)."""
    r, c = a_reg.shape
    a_new, b_new = np.empty_like(a_reg), np.empty_like(b_reg)
    a_new[0, :], a_new[1:, :] = a_in[:c], a_reg[:-1, :]
    b_new[:, 0], b_new[:, 1:] = b_in[:r], b_reg[:, :-1]
    return a_new, b_new, acc + a_new * b_new


@pytest.mark.parametrize(
    ("step", "hint", "not_hint"),
    [
        # before: the in-place step got "a travels down and b right here" (on a single row, its a_reg is the swap's)
        (_pe_in_place, "a_in reached every column of its row in one clock", "a travels down"),
        (_pe_swapped, "a travels down and b right here", "in place"),
    ],
    ids=["in-place", "swapped"],
)
def test_lesson_11_pe_step_tells_registers_updated_in_place_from_a_and_b_swapped(step, hint, not_hint):
    res = lessons.check("11", "pe_step", step)
    assert not res.passed and res.hint.startswith(hint) and not_hint not in res.hint, res
