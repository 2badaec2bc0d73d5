"""Every lesson and lab solution runs headless under plain nbclient (what nbconvert, papermill and
nbgrader use), not only under nbval, each within a budget (30 s in simulator mode by default). The
learner versions of the lessons run under nbclient in tests/test_lessons.py.

One test per notebook, so pytest-xdist spreads them (``-n auto --dist load``). The budget is the
kernel's CPU time (user + system, read by a cell appended to the copy that runs): that is the work
a notebook asks for, and it does not grow when the other test worker shares a 2-core machine, as
wall time does (a CI run measured lesson 01 at 37 s wall for about 20 s of CPU). A stall (e.g. a widget
that displays inside ``interactive``) burns no CPU, so wall time is bounded separately: each cell
may take at most STALL_S, and the whole run at most WALL_FACTOR x the budget.
``GPULAB_NBCLIENT_BUDGET_S`` changes the budget (slow machines).
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
from nbrun import SlicedClient  # noqa: E402  (after the importorskip)

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted(ROOT.glob("notebooks/[0-9]*.ipynb")) + sorted(ROOT.glob("labs/solutions/*.ipynb"))
BUDGET_S = float(os.environ.get("GPULAB_NBCLIENT_BUDGET_S", "30"))
# lab09 trains a CNN end to end on the learner's kernels in the simulator: 26 s of CPU here (2026-12-01, alone
# and beside a second nbclient run alike), the most of any notebook. CPU time still depends on the CPU's speed, so
# it keeps some headroom below issue 11's 60 s (which the notebook itself asserts) for slower CI machines.
SLOW_BUDGET_S = {"lab09_training.ipynb": 45.0}
STALL_S = 120.0  # no single cell may wait longer than this (a stall burns wall time, not CPU)
WALL_FACTOR = 4.0  # the whole run, in wall time, even on a shared machine

CPU_PROBE = (
    "import json as _j, resource as _r\n"
    "_s, _c = _r.getrusage(_r.RUSAGE_SELF), _r.getrusage(_r.RUSAGE_CHILDREN)\n"
    "print('GPULAB_CPU_S=' + _j.dumps(_s.ru_utime + _s.ru_stime + _c.ru_utime + _c.ru_stime))"
)


def _cpu_seconds(nb) -> float:
    """The kernel's CPU seconds, printed by the probe cell appended last."""
    for out in nb.cells[-1].get("outputs", []):
        for line in out.get("text", "").splitlines():
            if line.startswith("GPULAB_CPU_S="):
                return float(json.loads(line.split("=", 1)[1]))
    raise AssertionError(f"the CPU-time probe printed nothing: {nb.cells[-1].get('outputs')}")


@pytest.mark.slow
@pytest.mark.parametrize("path", NOTEBOOKS, ids=[str(p.relative_to(ROOT)) for p in NOTEBOOKS])
def test_runs_under_plain_nbclient(path: Path, monkeypatch) -> None:
    monkeypatch.setenv("GPULAB_DEVICE", "simulator")
    nb = nbformat.read(path, as_version=4)
    budget = max(BUDGET_S, SLOW_BUDGET_S.get(path.name, 0.0))
    n_cells = len(nb.cells)
    nb.cells.append(nbformat.v4.new_code_cell(CPU_PROBE))
    client = SlicedClient(
        nb, timeout=STALL_S, kernel_name="python3", resources={"metadata": {"path": str(path.parent)}}
    )
    start = time.perf_counter()
    client.execute()
    elapsed = time.perf_counter() - start
    cpu = _cpu_seconds(nb)
    del nb.cells[n_cells:]
    errors = [
        o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []) if o.get("output_type") == "error"
    ]
    assert not errors, f"{path.name}: {errors[0].get('ename')}: {errors[0].get('evalue')}"
    if path.parent.name == "solutions":  # every reference solution earns every graded cell's points
        for cell in nb.cells:
            meta = cell.metadata.get("nbgrader", {})
            if cell.cell_type == "code" and meta.get("grade"):
                values = [o["data"]["text/plain"] for o in cell.outputs if o.get("output_type") == "execute_result"]
                assert values and float(values[-1]) == meta["points"], f"{path.name} {meta['grade_id']}: {values}"
    print(f"{path.relative_to(ROOT)}: {cpu:.1f} s CPU, {elapsed:.1f} s wall under nbclient")
    assert cpu <= budget, f"{path.name} used {cpu:.1f} s of CPU under nbclient (budget {budget:.0f} s)"
    assert elapsed <= WALL_FACTOR * budget, (
        f"{path.name} took {elapsed:.1f} s wall for {cpu:.1f} s of CPU under nbclient: something waits "
        f"(budget {WALL_FACTOR * budget:.0f} s wall)"
    )


def test_sliced_client_keeps_the_cell_timeout_and_the_outputs() -> None:
    """The 1 s polling (tests/nbrun.py) still stops a cell at its timeout, and still records outputs."""
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("print(6 * 7)"), nbformat.v4.new_code_cell("import time; time.sleep(30)")]
    client = SlicedClient(nb, timeout=3, kernel_name="python3")
    start = time.perf_counter()
    with pytest.raises(nbclient.exceptions.CellTimeoutError):
        client.execute()
    assert time.perf_counter() - start < 25
    assert nb.cells[0].outputs[0]["text"] == "42\n"
