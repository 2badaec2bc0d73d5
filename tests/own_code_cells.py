"""The checks a notebook's cells make, without running them: each solution notebook's setup and answer cells are
run (imports, definitions, constants: cheap), then each check cell with the harness's ``run_problem`` replaced by
one that records ``(problem, kernel)`` and passes. Used by tests/test_exercises_own_code.py to ask
:mod:`gpulab.exercises.own_code` about every answer a lesson or lab ships. The pipelined host functions (lesson 02,
lab 02) are checked by :func:`gpulab.lessons.pipelined.check_pipelined`, whose own-code stage runs for real: only
what runs after it is replaced, so an answer it refused is not recorded (the entry's "problem" is then the
:class:`~gpulab.lessons.pipelined.Pipelined` operation)."""

from __future__ import annotations

import ast
import contextlib
import io
from pathlib import Path
from typing import Any

import nbformat

from gpulab.exercises import check as check_module
from gpulab.lessons import pipelined
from gpulab.exercises.result import CheckResult

ROOT = Path(__file__).resolve().parents[1]
_CHEAP = (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.ClassDef, ast.Assign, ast.AnnAssign, ast.Assert)


def _cheap(src: str) -> bool:
    """Only imports, definitions, assignments and print(...) calls: what sets up names, runs no kernel."""
    try:
        body = ast.parse(src).body
    except SyntaxError:  # a `!pip` line
        return False
    for node in body:
        if isinstance(node, _CHEAP):
            continue
        call = node.value if isinstance(node, ast.Expr) else None
        if (
            isinstance(call, ast.Call)
            and isinstance(call.func, ast.Name)
            and call.func.id in ("print", "quiet_warnings")
        ):
            continue
        return False
    return True


def _imports(src: str) -> str:
    try:
        body = ast.parse(src).body
    except SyntaxError:
        return ""
    return "\n".join(ast.unparse(n) for n in body if isinstance(n, (ast.Import, ast.ImportFrom)))


def _is_check(src: str) -> bool:
    return ".check(" in src or "check_kernel(" in src


def recorded_checks(path: Path) -> list[tuple[str, Any, Any]]:
    """``(cell label, problem, kernel)`` for every check the notebook's cells make on its answers."""
    nb = nbformat.read(str(path), as_version=4)
    seen: list[tuple[str, Any, Any]] = []
    ns: dict[str, Any] = {"__name__": "__main__"}
    label = ""

    def record(problem: Any, kernel: Any, name: str | None = None, *, trusted: bool = False) -> CheckResult:
        assert not trusted, f"{label}: a notebook's check passed trusted=True"
        seen.append((label, problem, kernel))
        return CheckResult(name or problem.name, "passed", float(problem.points), float(problem.points), "recorded")

    def record_pipelined(fn: Any, cases: Any, op: pipelined.Pipelined, seed: int) -> CheckResult:
        seen.append((label, op, fn))
        return CheckResult(op.name, "passed", 1.0, 1.0, "recorded")

    real, real_pipelined = check_module.run_problem, pipelined._check
    check_module.run_problem, pipelined._check = record, record_pipelined
    try:
        for i, cell in enumerate(nb.cells):
            if cell.cell_type != "code":
                continue
            meta = cell.metadata.get("nbgrader", {})
            label = f"{path.stem} cell {i} {meta.get('grade_id', '')}".strip()
            src = cell.source
            answer = bool(meta.get("solution")) or "### BEGIN SOLUTION" in src
            if not (answer or _cheap(src) or _is_check(src)):
                src = _imports(src)  # a demo: only the names it imports
            with contextlib.redirect_stdout(io.StringIO()):
                try:
                    exec(compile(src, f"<{label}>", "exec"), ns)  # noqa: S102 - the repository's own notebook
                except Exception:  # noqa: BLE001 - a demo part of a check cell needing what was not run
                    if answer:
                        raise
    finally:
        check_module.run_problem, pipelined._check = real, real_pipelined
    return seen
