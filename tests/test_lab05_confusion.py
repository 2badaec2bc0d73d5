"""Lab 05, exercise 5 (gpulab.problems.lab05_confusion): the confusion matrix counted per block in shared memory.
The lab's own solution passes with its PTX and budgets; each typical mistake, made in the solution's source, gets
its named hint (rows and columns exchanged, cells never zeroed or only cell tx, loops over the cells that stop at
TPB, no grid stride), a missing cuda.syncthreads() and a merge with `+=` are named by the race check, global
atomics only and one thread merging every cell are over budget (half the points), and the learner version is
"not implemented yet"."""

from __future__ import annotations

from pathlib import Path

import nbformat
import numpy as np
import pytest
from numba import cuda, int32

import gpulab
from gpulab.exercises.budgets import ATOMICS_HINT, ATOMICS_PER_THREAD_HINT
from gpulab.exercises.races import READ_DURING_ATOMICS_HINT, WRITE_RACE_HINT, ZERO_BEFORE_ATOMICS_HINT
from gpulab.problems import lab05
from gpulab.problems.lab05_confusion import CONFUSION_HINTS
from gpulab.source import define
from kernel_edits import edited_kernel

LAB05 = Path(__file__).resolve().parents[1] / "labs" / "solutions" / "lab05_reductions.ipynb"
SRC = next(
    c.source
    for c in nbformat.read(str(LAB05), as_version=4).cells
    if c.source.startswith("@cuda.jit\ndef confusion_kernel")
)
NAMESPACE = {"cuda": cuda, "int32": int32, "TPB": lab05.TPB, "MAX_CELLS": lab05.MAX_CELLS}
PLACEHOLDER = '    raise NotImplementedError("replace this line with your code")'
simulator_only = pytest.mark.skipif(gpulab.is_gpu(), reason="the filler, races and budgets are the simulator's")

ZERO = (
    "    for c in range(tx, cells, TPB):  # more cells than threads: each thread zeroes several\n"
    "        counts[c] = 0\n"
)
SYNC_ZERO = "    cuda.syncthreads()  # wait until every cell is zeroed before any thread adds to one\n"
SYNC_MERGE = "    cuda.syncthreads()  # wait until the block's pairs are all counted before reading the cells\n"
MERGE_LOOP = "    for c in range(tx, cells, TPB):\n        if"
MERGE = "cuda.atomic.add(cm, (c // classes, c % classes), counts[c])"
CELL = "labels[i] * classes + predictions[i]"
STRIDE = "for i in range(cuda.grid(1), labels.size, cuda.gridsize(1)):"


def _kernel(*edits: tuple[str, str]):
    return edited_kernel(SRC, "confusion_kernel", NAMESPACE, *edits)


@pytest.mark.ptx
def test_the_solution_passes_with_its_ptx():
    res = lab05.CONFUSION.check(_kernel())
    assert res.passed and res.score == lab05.CONFUSION.points == 3, res
    assert any(c.name == "PTX" and c.passed for c in res.checks), res.checks


def test_the_solution_passes_the_hidden_sizes_and_the_placeholder_is_not_implemented_yet():
    res = lab05.CONFUSION.check(_kernel(), sizes=[(63, 4), (65, 32), (1000, 7)], seed=506, ptx=None)
    assert res.passed, res
    stub = _kernel((SRC.split("    ### BEGIN SOLUTION")[1], "\n" + PLACEHOLDER + "\n"))
    blank = lab05.CONFUSION.check(stub)
    assert blank.status == "not implemented" and blank.score == 0 and "not implemented yet" in blank.message, blank


@simulator_only
@pytest.mark.parametrize(
    ("edits", "hint"),
    [
        ([(CELL, "predictions[i] * classes + labels[i]")], "transposed"),
        ([(ZERO, "")], "unzeroed"),
        ([(ZERO, "    counts[tx] = 0\n")], "tx only"),
        (
            [(ZERO, "    counts[tx] = 0\n"), (MERGE_LOOP, "    for c in range(tx, min(cells, TPB), TPB):\n        if")],
            "upper empty",
        ),
        (
            [(STRIDE, "for i in range(cuda.grid(1), min(labels.size, cuda.gridsize(1)), cuda.gridsize(1)):")],
            "no stride",
        ),
    ],
)
def test_each_result_mistake_gets_its_named_hint(edits, hint):
    res = lab05.CONFUSION.check(_kernel(*edits), ptx=None)
    assert not res.passed and res.score == 0 and res.hint == CONFUSION_HINTS[hint], (res.status, res.message, res.hint)


@simulator_only
@pytest.mark.parametrize(
    ("edit", "hint", "words"),
    [
        ((SYNC_ZERO, ""), ZERO_BEFORE_ATOMICS_HINT, "added to it with cuda.atomic.add"),
        ((SYNC_MERGE, ""), READ_DURING_ATOMICS_HINT, "was adding to it with cuda.atomic.add"),
        ((MERGE, "cm[c // classes, c % classes] += counts[c]"), WRITE_RACE_HINT, "without cuda.atomic"),
    ],
    ids=["no-sync-after-zeroing", "no-sync-before-merge", "merge-with-plus-equals"],
)
def test_races_are_named(edit, hint, words):
    res = lab05.CONFUSION.check(_kernel(edit), ptx=None)
    assert not res.passed and res.score == 0 and hint in res.hint, (res.status, res.message, res.hint)
    assert words in res.message + res.hint, (res.message, res.hint)


@simulator_only
def test_global_atomics_only_is_correct_but_over_budget():
    naive = define(
        f"@cuda.jit\ndef confusion_kernel(labels, predictions, cm):\n    {STRIDE}\n"
        "        cuda.atomic.add(cm, (labels[i], predictions[i]), 1)\n",
        "confusion_kernel",
        dict(NAMESPACE),
    )
    res = lab05.CONFUSION.check(naive, ptx=None)
    assert res.status == "over budget" and res.score == 1.5 and res.hint == ATOMICS_HINT, res
    assert "1500 cuda.atomic updates of cm" in res.message, res.message


@simulator_only
def test_thread_0_merging_every_cell_is_over_budget():
    res = lab05.CONFUSION.check(
        _kernel((MERGE_LOOP, "    for c in range(0, cells if tx == 0 else 0):\n        if")), ptx=None
    )
    assert res.status == "over budget" and res.score == 1.5 and res.hint == ATOMICS_PER_THREAD_HINT, res


def test_the_inputs_hit_both_edges_and_the_spec_puts_labels_in_rows():
    labels, predictions, classes = lab05.confusion_inputs((100, 3), np.random.default_rng(0))
    assert classes == 3 and labels.dtype == predictions.dtype == np.int32
    assert {0, 2} <= set(labels.tolist()) and {0, 2} <= set(predictions.tolist())
    cm = lab05.confusion_spec(np.int32([0, 0, 1]), np.int32([1, 1, 2]), 3)
    assert cm.dtype == np.int32 and cm[0, 1] == 2 and cm[1, 2] == 1 and cm.sum() == 3
