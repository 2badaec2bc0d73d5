"""Lesson 05's privatized histogram (gpulab.lessons.ex_05_histogram): the reference passes with its budgets, and
each typical mistake, made in the reference's source, gets its named hint: bins never zeroed, loops over the
bins that stop at TPB, an edge value dropped, no grid stride, a missing cuda.syncthreads() (seen as an atomic
racing a store or a read of the same shared bin), a merge with `+=` (two blocks writing one count), and the
global-atomics-only and one-thread-merges kernels over budget."""

from __future__ import annotations

import inspect
import textwrap

import numpy as np
import pytest
from numba import cuda, int32

import gpulab
from gpulab import lessons
from gpulab.exercises.budgets import ATOMICS_HINT, ATOMICS_PER_THREAD_HINT
from gpulab.exercises.races import READ_DURING_ATOMICS_HINT, WRITE_RACE_HINT, ZERO_BEFORE_ATOMICS_HINT
from gpulab.lessons import answers_05_10, ex_05_histogram
from gpulab.source import define
from kernel_edits import edited_kernel

EX = lessons.exercise("05", "histogram_privatized")
SRC = textwrap.dedent(inspect.getsource(answers_05_10.histogram_privatized_kernel.py_func))
NAMESPACE = {"cuda": cuda, "int32": int32, "TPB": answers_05_10.TPB, "BINS": answers_05_10.BINS}
HINTS = list(ex_05_histogram.HIST_MISTAKES)
simulator_only = pytest.mark.skipif(gpulab.is_gpu(), reason="the filler, races and budgets are the simulator's")


def _edited(*edits: tuple[str, str]):
    return edited_kernel(SRC, "histogram_privatized_kernel", NAMESPACE, *edits)


ZERO = "    for b in range(tx, BINS, TPB):  # 256 bins, 128 threads: each thread zeroes two\n        bins[b] = 0\n"
SYNC_ZERO = "    cuda.syncthreads()  # wait until every bin is zeroed before any thread adds to one\n"
SYNC_MERGE = "    cuda.syncthreads()  # wait until all of the block's values are counted before reading the bins\n"
MERGE = "cuda.atomic.add(hist, b, bins[b])"
STRIDE = "for i in range(cuda.grid(1), values.size, cuda.gridsize(1)):"


def test_the_reference_passes_with_its_budgets():
    res = EX.check(EX.reference, trusted=True)
    assert res.passed and res.score == EX.problem.points, res
    if not gpulab.is_gpu():
        assert any(c.name == "budget: global atomics on hist" and c.passed for c in res.checks), res.checks


@simulator_only
@pytest.mark.parametrize(
    ("edits", "hint"),
    [
        ([(ZERO, "")], HINTS[0]),  # never zeroed
        ([(ZERO, "    bins[tx] = 0\n")], HINTS[1]),  # zeroed bins[tx] only: 128 of 256
        (
            [
                (ZERO, "    bins[tx] = 0\n"),
                ("    for b in range(tx, BINS, TPB):\n        if", "    for b in range(tx, TPB, TPB):\n        if"),
            ],
            HINTS[2],
        ),
        (
            [
                (
                    "cuda.atomic.add(bins, values[i], 1)",
                    "if 0 < values[i] < BINS - 1:\n            cuda.atomic.add(bins, values[i], 1)",
                )
            ],
            HINTS[3],
        ),
        ([(STRIDE, "for i in range(cuda.grid(1), min(values.size, cuda.gridsize(1)), cuda.gridsize(1)):")], HINTS[4]),
    ],
    ids=["unzeroed", "zeroed-tx-only", "upper-bins-empty", "edges-dropped", "no-grid-stride"],
)
def test_each_result_mistake_gets_its_named_hint(edits, hint):
    res = EX.check(_edited(*edits))
    assert not res.passed and res.score == 0 and res.hint == hint, (res.status, res.message, res.hint)


@simulator_only
def test_a_missing_barrier_after_zeroing_is_named():
    res = EX.check(_edited((SYNC_ZERO, "")))
    assert not res.passed and res.score == 0, res
    assert ZERO_BEFORE_ATOMICS_HINT in res.hint and "with cuda.atomic.add" in res.hint, res.hint


@simulator_only
def test_a_missing_barrier_before_the_merge_is_named():
    res = EX.check(_edited((SYNC_MERGE, "")))
    assert not res.passed and res.score == 0, res
    assert READ_DURING_ATOMICS_HINT in res.hint and "while thread" in res.hint, res.hint


@simulator_only
def test_a_merge_with_plus_equals_is_a_race():
    res = EX.check(_edited((MERGE, "hist[b] += bins[b]")))
    assert not res.passed and res.score == 0 and res.hint == WRITE_RACE_HINT, (res.status, res.message, res.hint)
    assert "without cuda.atomic" in res.message, res.message


@simulator_only
def test_global_atomics_only_is_correct_but_over_budget():
    naive = define(
        f"def histogram_privatized_kernel(values, hist):\n    {STRIDE}\n        cuda.atomic.add(hist, values[i], 1)\n",
        "histogram_privatized_kernel",
        dict(NAMESPACE),
    )
    res = EX.check(cuda.jit(naive))
    assert res.status == "over budget" and res.score == EX.problem.points / 2 and res.hint == ATOMICS_HINT, res
    assert "1500 cuda.atomic updates of hist" in res.message, res.message


@simulator_only
def test_one_thread_merging_every_bin_is_over_budget():
    sequential = _edited(
        ("    for b in range(tx, BINS, TPB):\n        if", "    for b in range(0, BINS if tx == 0 else 0):\n        if")
    )
    res = EX.check(sequential)
    assert res.status == "over budget" and res.hint == ATOMICS_PER_THREAD_HINT, (res.status, res.message, res.hint)


def test_the_inputs_hold_both_edge_values_and_a_crowded_bin():
    values = ex_05_histogram.histogram_inputs(300, np.random.default_rng(1))
    assert values.dtype == np.int32 and values.min() == 0 and values.max() == ex_05_histogram.BINS - 1
    assert np.bincount(values).max() >= 100  # about half the values in one bin
