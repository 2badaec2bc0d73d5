"""AUDIT (gpu-audit branch): the one GPU run's plan, checked without a GPU.

The stages run in order within ``--deadline`` (420 s), each at most its budget, and a stage is skipped when less
than ``RESERVE + MIN_STAGE`` seconds are left. The budgets of the stages before ``tests`` add up to more than the
deadline leaves, so when the earlier stages take their budgets, the GPU tests (the 25 files in ``GPU_TESTS``, the
stage that finds gpu-mode bugs) are skipped. This test is marked xfail (strict) until the plan is changed: it
passes, and the xfail must be removed, once the tests stage is reached in the worst case.
"""

from __future__ import annotations

import pytest

from gpulab import gpucheck


def _worst_case_rows() -> list[dict]:
    """The stages as run_stages would run them if every stage used its whole budget (no process is started)."""
    rows, used = [], 0.0
    for name in gpucheck.STAGES:
        remaining = gpucheck.DEADLINE - used
        limit = min(gpucheck.BUDGET[name], remaining - gpucheck.RESERVE)
        if remaining - gpucheck.RESERVE < gpucheck.MIN_STAGE:
            rows.append({"stage": name, "seconds": None})  # skipped, as run_stages does
            continue
        used += limit
        rows.append({"stage": name, "seconds": limit})
    return rows


def test_the_worst_case_model_follows_run_stages_rules():
    rows = _worst_case_rows()
    assert [r["stage"] for r in rows] == list(gpucheck.STAGES)
    assert sum(r["seconds"] or 0 for r in rows) <= gpucheck.DEADLINE - gpucheck.RESERVE


@pytest.mark.xfail(
    strict=True,
    reason="AUDIT: the stages before 'tests' have 520 s of budgets for 400 s of deadline; the GPU tests are "
    "skipped unless the earlier stages finish 130 s early. Run 'tests' earlier or size the budgets to fit.",
)
def test_the_gpu_tests_stage_runs_even_when_earlier_stages_use_their_budgets():
    rows = {r["stage"]: r["seconds"] for r in _worst_case_rows()}
    assert rows["tests"] is not None and rows["tests"] >= gpucheck.BUDGET["tests"] / 2, rows
