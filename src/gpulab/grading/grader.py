"""Grade one submission: assemble it from the lab's source, run it in the sandbox, score the tests
(each test cell's row: :mod:`gpulab.grading.rows`).

When a cell kills the runner (timeout, crash, memory, output) the scores earned before it are
kept, that cell is skipped and the submission is run again from the start without it (at most
:data:`gpulab.grading.session.MAX_RESTARTS` times, within the submission's total time), so one
runaway cell costs its own exercise only; the table says which cell it was and why.

A grading process that does not start is started once more; when it fails again, every exercise it would
have run says "not graded" and why (none of the submission's code ran), and the notes hold its last output.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from .assemble import Cell, assemble, read_submission
from .audience import for_teacher
from .cell_notes import _code, _meta, defined_names, renamed_answer
from .rows import GradeRow, Graded, score_test
from .sandbox import Limits, Sandbox, bwrap_path, describe
from .session import RunnerDidNotStart, run

__all__ = [
    "NOT_STARTED",
    "check_device",
    "grade",
    "grade_notebook",
    "replaced_note",
    "ungraded",
]

NOT_STARTED = (
    "not graded: the grading process did not start (it was tried twice) before any of your code ran; "
    "this is not a score for your work, the notebook needs grading again. For the teacher: the notes say why"
)


def grading_device(device: str | None = None) -> str:
    """The mode submissions run in: ``device``, else ``$GPULAB_DEVICE``, else simulator."""
    device = device or os.environ.get("GPULAB_DEVICE", "simulator")
    return device if device in ("gpu", "simulator") else "simulator"


def check_device(device: str) -> None:
    """Refuse gpu mode where no CUDA driver can be used, once and before any submission runs (each would
    otherwise fail to start twice and score "not graded"). Raises UsageError with the reason."""
    from gpulab import runtime
    from gpulab.errors import UsageError

    if device != "gpu" or os.environ.get("GPULAB_COMPILE_ONLY") == "1":
        return
    probe = runtime.probe_driver()
    if not probe.found:
        raise UsageError(
            f"GPULAB_DEVICE=gpu was requested, but {probe.reason}, so nothing was graded and no feedback was "
            "written. Grade on the machine with the NVIDIA GPU (`nvidia-smi` must work), or in simulator mode: "
            "GPULAB_DEVICE=simulator python -m gpulab labs grade ..."
        )


def grade_notebook(
    submission: Path, source: Path, limits: Limits | None = None, device: str | None = None, data_dir: str | None = None
) -> Graded:
    """Grade ``submission`` against the lab ``source`` (a notebook in labs/solutions). Raises UsageError, before any
    of it runs, for a notebook that cannot be graded: not a notebook, no code in it, or another lab's (none of its
    answer cells is this lab's)."""
    limits = limits or Limits()
    device = grading_device(device)
    check_device(device)
    nb = read_submission(submission)
    from gpulab.errors import UsageError

    if not any(c.get("cell_type") == "code" and _code(c).strip() for c in nb.cells):
        raise UsageError(
            for_teacher(
                f"{submission} has no code in it ({len(nb.cells)} cell(s), none of them code with text), so nothing "
                "of it can be graded: an empty or wrong notebook?",
                "ask for the submission again",
            )
        )
    assembled = assemble(source, nb)
    if assembled.other_lab:  # another lab's notebook (or a much older release): every row would be a 0 that is not
        raise UsageError(f"{submission} {assembled.other_lab}")
    bwrap = bwrap_path()
    sandbox = Sandbox(limits, device, data_dir if data_dir is not None else os.environ.get("GPULAB_DATA_DIR"), bwrap)
    not_started = ""
    try:
        records, skipped, distrust, run_notes = run(assembled, sandbox)
    except RunnerDidNotStart as exc:
        records, skipped, distrust, run_notes = exc.records, exc.skipped, "", []
        not_started = str(exc)
    finally:
        sandbox.cleanup()
    notes = ([not_started[0].upper() + not_started[1:]] if not_started else []) + list(assembled.notes) + run_notes
    rows: list[GradeRow] = []
    stopped: list[str] = []  # every cell that was stopped (for the notes)
    pending: list[str] = []  # those stopped since the last test cell (for its row)
    answer_error = lost = never = ""
    answer: Cell | None = None  # the answer cell before this test cell
    for cell in assembled.cells:
        if cell.index in skipped:
            what = f"cell {cell.index + 1}" + (f" ({cell.grade_id})" if cell.grade_id else "")  # from 1, as notes
            stopped.append(f"{what} {skipped[cell.index]} and was skipped")
            if cell.kind != "test":
                pending.append(stopped[-1])
            if cell.kind == "answer":
                names = ", ".join(defined_names(cell.source)) or "its code"
                never = f"your answer cell never finished (a loop at top level?), so {names} was not defined"
        if cell.kind == "answer":
            answer = cell
            err = (records.get(cell.index) or {}).get("error")
            answer_error, lost = "", lost or cell.lost
            if err and err[0] != "NotImplementedError":
                first = err[1].splitlines()[0][:200] if err[1] else ""
                first = re.sub(r"\(<ipython-input-[^>]*>, (line \d+)\)", r"(\1)", first)
                answer_error = f"your answer cell {cell.grade_id} raised {err[0]}: {first}".rstrip(": ")
                notes.append(answer_error)
        if cell.kind != "test":
            continue
        replaced = (records.get(cell.index) or {}).get("replaced") or []
        if replaced:
            notes.append(replaced_note(replaced))
        if cell.index in skipped:
            rows.append(GradeRow(cell.grade_id, cell.points, 0.0, "stopped", f"this cell {skipped[cell.index]}"))
        elif not_started and cell.index not in records:
            rows.append(GradeRow(cell.grade_id, cell.points, 0.0, "not graded", NOT_STARTED))
        else:
            row = score_test(cell, records.get(cell.index), distrust or "not run")
            if row.status != "passed":
                if lost:  # the answer was not found: that, not "not implemented yet", is the row's reason
                    row.status, row.message, row.hint = "answer not found", lost, ""
                elif answer_error:
                    row.message = f"{answer_error}. {row.message}"
                elif never:  # the answer was stopped: that, not the NameError that follows, is the row's reason
                    row.status, row.message, row.hint = "stopped", f"{never} ({pending[-1]})", ""
                elif pending:
                    row.message = f"{'; '.join(pending)}. {row.message}"
                row.message = _name_in_added_cell(row.message, records.get(cell.index), assembled.added)
                row.hint = row.hint or renamed_answer(row.message, answer)
            rows.append(row)
        answer_error, lost, pending, never = "", "", [], ""
    notes += [s[0].upper() + s[1:] for s in stopped]
    if distrust:
        notes.append(f"the submission {distrust}: exercises from that cell on score 0")
    return Graded(str(submission), source.stem, device, describe(bwrap), rows, notes)


def replaced_note(replaced: list[str]) -> str:
    """The note for a submission whose cells replaced part of the checker (the grader put it back)."""
    named = [str(r).removesuffix(" was replaced") for r in replaced]
    what = "; ".join(named[:6]) + (f" and {len(named) - 6} more" if len(named) > 6 else "")
    return (
        f"the submission tried to change the checker: it replaced {what}. The grader put the real one back "
        "before the check ran, so the exercise scored what the real check gives"
    )


def ungraded(submission: Path, source: Path, reason: str) -> Graded:
    """A submission that could not be graded (unreadable, nothing in it to grade, another lab's): each of the lab's
    exercises is "not graded" with ``reason`` (an empty cell in the CSV, never a 0), and the notes say it too."""
    import nbformat

    message = "not graded: " + reason.replace(str(submission), Path(submission).name)  # the table has its student
    rows = [
        GradeRow(str(meta.get("grade_id") or f"cell-{k}"), float(meta.get("points") or 0), 0.0, "not graded", message)
        for k, c in enumerate(nbformat.read(str(source), as_version=4).cells)
        if c.cell_type == "code" and (meta := _meta(c)).get("grade")
    ]
    return Graded(str(submission), Path(source).stem, "", "", rows, [message])


def _name_in_added_cell(message: str, rec: dict | None, added: dict[str, str]) -> str:
    """Say so when a row's NameError names something only a cell the student added defines."""
    err = (rec or {}).get("error") or ("", "")
    for name in re.findall(r"name '(\w+)' is not defined", f"{message}\n{err[1] or ''}"):
        if name in added:
            where = added[name] if added[name].startswith("your edit") else f"{added[name]}, a cell you added"
            return (
                f"{name} is defined only in {where}, which the grader does not run: put it in the answer cell "
                f"that uses it. {message}"
            )
    return message


def grade(
    notebook: Path,
    timeout: float = 120,
    kernel_name: str = "python3",
    source: Path | None = None,
    root: Path | None = None,
    limits: Limits | None = None,
) -> list[GradeRow]:
    """Rows for one submission (kept for ``gpulab.labs.grade`` callers)."""
    from gpulab.labs import find_root

    from .assemble import source_for

    if source is None:
        root = root or find_root()
        source = source_for(Path(notebook), root / "labs" / "solutions")
    limits = limits or Limits(cell_timeout=timeout)
    return grade_notebook(Path(notebook), Path(source), limits).rows
