"""The one GPU run's plan, checked without a GPU.

The stages run in order within ``--deadline`` (420 s), each at most its budget, and a stage is skipped when less
than ``RESERVE + MIN_STAGE`` seconds are left. An audit found the budgets of the stages before ``tests`` adding up to
520 s for 400 s of deadline, so the GPU tests (the files in ``GPU_TESTS``, the stage that finds gpu-mode bugs) ran
only if the notebooks and benchmarks finished 130 s early. ``tests`` now runs third; this holds it there.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpulab import gpucheck, gpucheck_plan as plan, gpucheck_summary as report, nbexec


def _worst_case_rows() -> list[dict]:
    """The stages as run_stages would run them if every stage used its whole budget (no process is started)."""
    rows, used = [], 0.0
    for name in plan.STAGES:
        remaining = plan.DEADLINE - used
        limit = min(plan.BUDGET[name], remaining - gpucheck.RESERVE)
        if remaining - gpucheck.RESERVE < gpucheck.MIN_STAGE:
            rows.append({"stage": name, "seconds": None})  # skipped, as run_stages does
            continue
        used += limit
        rows.append({"stage": name, "seconds": limit})
    return rows


def test_the_worst_case_model_follows_run_stages_rules():
    rows = _worst_case_rows()
    assert [r["stage"] for r in rows] == list(plan.STAGES)
    assert sum(r["seconds"] or 0 for r in rows) <= plan.DEADLINE - gpucheck.RESERVE


def test_the_gpu_tests_stage_runs_even_when_earlier_stages_use_their_budgets():
    rows = {r["stage"]: r["seconds"] for r in _worst_case_rows()}
    assert rows["tests"] == plan.BUDGET["tests"], rows
    assert rows["notebooks"] is not None and rows["notebooks"] >= plan.BUDGET["notebooks"] / 2, rows


def test_stages_builds_the_commands_in_the_order_of_STAGES(tmp_path):
    names = [name for name, _ in plan.stages("python3", tmp_path, record=True)]
    # an installed gpulab (make test-oldest) has no notebooks beside it: that stage is left out
    assert names == [s for s in plan.STAGES if s in names] and names[:3] == ["preflight", "doctor", "tests"]
    assert set(plan.STAGES) - set(names) <= {"notebooks"}


def test_the_notebooks_that_compare_timings_run_alone_and_the_summary_says_so(tmp_path):
    """Lessons 02 and 06 and lab 05 compare timings; among 8 notebooks sharing the H200 (2026-12-04) they read the
    others' work as their own (a stride-4 copy faster than stride 1; FP16/FP32 34.7x against 13.9x alone)."""
    cmd = dict(plan.stages("python3", tmp_path, record=True)).get("notebooks")
    if cmd is None:
        pytest.skip("an installed gpulab has no notebooks beside it")
    alone = cmd[cmd.index("--alone") + 1].split(",")
    listed = [c for c in cmd if c.endswith(".ipynb")]
    lone = [Path(p).stem for p in nbexec.split_alone([Path(p) for p in listed], alone)[1]]
    assert sorted(lone) == ["02_memory", "06_cupy_interop", "lab05_reductions"], lone  # not lab02 nor lab06
    nbs = [
        {"path": "notebooks/02_memory.ipynb", "status": "ok", "alone": True},
        {"path": "notebooks/01_threads_blocks_grids.ipynb", "status": "ok"},
    ]
    (tmp_path / "notebooks").mkdir()
    (tmp_path / "notebooks" / "notebooks.json").write_text(json.dumps(nbs))
    text = report.summary([{"stage": "notebooks", "rc": 0, "seconds": 90.0}], tmp_path)
    assert "notebooks: 2 of 2 ran without an error" in text
    assert "ran alone, one at a time after the others (their timings matter): 02_memory" in text
