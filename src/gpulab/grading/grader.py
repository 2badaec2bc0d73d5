"""Grade one submission: assemble it from the lab's source, run it in the sandbox, score the tests.

A test cell scores the way nbgrader's autograder scores it, so the two graders agree: an error (or
text on stderr) earns 0, a number as the cell's value earns that many points (clipped to the
cell's points from the source), anything else earns full points. The verdict text (message, hint)
comes from the checks that :func:`gpulab.grading.report` saw.

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
from dataclasses import asdict, dataclass
from pathlib import Path

from .assemble import Cell, assemble, read_submission
from .audience import for_teacher
from .cell_notes import _code, _meta, defined_names, renamed_answer
from .sandbox import Limits, Sandbox, bwrap_path, describe
from .session import RunnerDidNotStart, run

__all__ = [
    "NOT_STARTED",
    "PTX_NOT_CHECKED",
    "GradeRow",
    "Graded",
    "check_device",
    "grade",
    "grade_notebook",
    "format_table",
    "ptx_footnote",
    "replaced_note",
    "ungraded",
]

NOT_STARTED = (
    "not graded: the grading process did not start (it was tried twice) before any of your code ran; "
    "this is not a score for your work, the notebook needs grading again. For the teacher: the notes say why"
)

PTX_NOT_CHECKED = (
    "PTX not checked: no NVVM on this machine (the PTX compiler could not run), so {what} got {their} points without "
    "the check that the kernel compiles for a GPU; install gpulab[grade] (numba-cuda[cu12] brings NVVM) and grade again"
)
"""The grade table's footnote (and the class table's last line) when some exercise's PTX check did not run."""


def ptx_footnote(exercises: int, submissions: int = 0) -> str:
    """:data:`PTX_NOT_CHECKED` for ``exercises`` marked exercises (of ``submissions`` notebooks, when given)."""
    what = f"{exercises} exercise{'s' if exercises != 1 else ''} marked *"
    if submissions:
        what += f" (in {submissions} submission{'s' if submissions != 1 else ''})"
    return PTX_NOT_CHECKED.format(what=what, their="its" if exercises == 1 else "their")


@dataclass
class GradeRow:
    """One exercise's row. ``status``: "passed", "partial" (some of its points, not all), "failed" and the other
    statuses of a check's verdict ("not implemented", "over budget", "error", ...; 0 points), or the grader's own:
    "not run", "stopped", "tampered", "answer not found", "not graded" (no score: an empty cell in the CSV).
    ``verdict``: the status of the check whose message the row shows ("" when no check reported one), so a
    "partial" row still says whether the check found it over budget or wrong on some inputs. ``ptx_not_checked``:
    a check of the cell skipped its PTX step because the compiler (NVVM) could not run where it was graded."""

    grade_id: str
    points: float
    score: float
    status: str
    message: str
    hint: str = ""
    verdict: str = ""
    ptx_not_checked: bool = False


@dataclass
class Graded:
    """One graded submission."""

    notebook: str
    lab: str
    mode: str
    sandbox: str
    rows: list[GradeRow]
    notes: list[str]

    @property
    def score(self) -> float:
        return round(sum(r.score for r in self.rows), 3)

    @property
    def max_score(self) -> float:
        return round(sum(r.points for r in self.rows), 3)

    @property
    def not_graded(self) -> bool:
        """Whether an exercise is "not graded" (the grading process did not start, or the notebook could not be read
        or is another lab's): the notebook needs grading again, or handing in again."""
        return any(r.status == "not graded" for r in self.rows)

    @property
    def why_not_graded(self) -> str:
        """The reason the first "not graded" exercise gives ("" when every exercise was graded)."""
        return next((r.message for r in self.rows if r.status == "not graded"), "")

    @property
    def ptx_not_checked(self) -> list[str]:
        """The exercises whose PTX check did not run (no NVVM where they were graded)."""
        return [r.grade_id for r in self.rows if r.ptx_not_checked]

    def to_dict(self) -> dict:
        return {
            "notebook": self.notebook,
            "lab": self.lab,
            "mode": self.mode,
            "sandbox": self.sandbox,
            "score": self.score,
            "max_score": self.max_score,
            "notes": self.notes,
            "not_graded": self.not_graded,
            "ptx_not_checked": self.ptx_not_checked,
            "exercises": [asdict(r) for r in self.rows],
        }


# --------------------------------------------------------------------------------------------------
# Scoring


def _key_lines(text: str) -> list[str]:
    """A verdict's message in short: its first line (what is wrong), then its input and launch lines."""
    lines = [ln.strip() for ln in (text or "").strip().splitlines() if ln.strip()]
    return lines[:1] + [ln for ln in lines[1:] if ln.startswith(("input:", "launch:"))]


def _worst(results: list[dict]) -> dict | None:
    """The verdict a cell's row shows: its first failing check's (or the last check's when all passed).

    A cell that checks several functions (lab 09: relu and relu_backward, im2col and col2im) and finds one of them
    wrong shows each by name, a line per function: its first failing verdict's key lines (what is wrong, then the input
    and launch lines) or "passed", and each failing function's hint; so a teacher sees col2im's mistake even when
    im2col's comes first, and which function a 1/2 is for. Hidden checks of a function add nothing (its first failing
    verdict stands for it). The row's status is the lowest-scoring failing verdict's."""
    if not results:
        return None
    failing = [r for r in results if r.get("status") != "passed"]
    if not failing:
        return results[-1]
    shown: dict[str, dict] = {}  # each function's verdict: its first failing one, else its first
    for r in results:
        name = str(r.get("name") or "")
        if name not in shown or (shown[name].get("status") == "passed" and r.get("status") != "passed"):
            shown[name] = r
    if len(shown) < 2:
        return failing[0]
    lines: list[str] = []
    for name, r in shown.items():
        key = _key_lines(r.get("message") or "") if r.get("status") != "passed" else []
        lines.append(f"{name}: {key[0] if key else r.get('status') or 'failed'}")
        lines += [f"  {ln}" for ln in key[1:]]
    wrong = {name: r for name, r in shown.items() if r.get("status") != "passed"}
    hints = [f"{name}: {r['hint']}" for name, r in wrong.items() if r.get("hint")]

    def share(r: dict) -> float:  # the share of its points a verdict earned
        top = float(r.get("max_score") or 0)
        return float(r.get("score") or 0) / top if top > 0 else 0.0

    lowest = min(wrong.values(), key=share)
    return {**lowest, "message": "\n".join(lines), "hint": " | ".join(hints)}


def _error_text(ename: str, evalue: str, failed_message: str) -> str:
    """The row's text for a test cell that raised: the failing check's verdict when there is one; else the error
    itself, every line (up to 1000 characters): the op a CapstoneError names is on its second line, and a check that
    passed earlier in the cell (lab 09's tiny training step, before training stops on a NaN) says nothing about why
    the cell failed. A NotImplementedError of a stub still in the cell reads "not implemented yet"; one with its own
    text (lab 09's NotReadyToTrain: each op not yet yours, and why) shows that text."""
    if failed_message:
        return failed_message[:1000]
    from ..release import CODE_STUB  # raise NotImplementedError("..."): the student version's stub

    if ename == "NotImplementedError" and (not evalue.strip() or f'"{evalue.strip()}"' in CODE_STUB):
        return "not implemented yet"
    if ename == "NotImplementedError":
        return evalue.strip()[:1000]
    text = f"{ename}: {evalue.strip()}" if evalue.strip() else ename
    return text[:1000]


def score_test(cell: Cell, rec: dict | None, why_not_run: str) -> GradeRow:
    """A test cell's row, scored like nbgrader's autograder: "passed" with all its points, "partial" with some (the
    check's own status in ``verdict``), else the verdict's status ("failed" when there is none); marked
    ``ptx_not_checked`` when one of its checks could not run the PTX compiler (its points are the same)."""
    row = _scored(cell, rec, why_not_run)
    results = (rec or {}).get("results") or []
    row.ptx_not_checked = any(isinstance(r, dict) and r.get("ptx_not_checked") is True for r in results)
    return row


def _scored(cell: Cell, rec: dict | None, why_not_run: str) -> GradeRow:
    points = cell.points
    if rec is None:
        return GradeRow(cell.grade_id, points, 0.0, "not run", why_not_run)
    if rec.get("tampered"):
        return GradeRow(
            cell.grade_id,
            points,
            0.0,
            "tampered",
            f"the checker was changed while this exercise ran: {rec['tampered']}",
        )
    verdict = _worst(rec.get("results") or [])
    message = ((verdict or {}).get("message") or "").strip()  # all its lines: the input and launch too
    hint = (verdict or {}).get("hint", "") or ""
    checked = str((verdict or {}).get("status") or "")
    status = "failed" if checked in ("", "passed") else checked  # the status of a row that earns nothing
    err = rec.get("error")
    if err:
        ename, evalue = err
        text = _error_text(ename, evalue or "", message if checked not in ("", "passed") else "")
        if ename == "NotImplementedError" or checked == "not implemented":
            return GradeRow(cell.grade_id, points, 0.0, "not implemented", text, hint, checked)
        return GradeRow(cell.grade_id, points, 0.0, status, text, hint, checked)
    if rec.get("stderr"):
        first = rec["stderr"].strip().splitlines()[0][:200] if rec["stderr"].strip() else ""
        said = f"the cell wrote to stderr, which nbgrader scores 0: {first}"
        return GradeRow(cell.grade_id, points, 0.0, status, f"{message}\n{said}" if message else said, hint, checked)
    value = rec.get("value")
    score = points if value is None else min(max(float(value), 0.0), points)
    score = round(score, 3)
    if score >= points:
        return GradeRow(cell.grade_id, points, points, "passed", message or "passed", "", checked)
    return GradeRow(cell.grade_id, points, score, "partial" if score > 0 else status, message, hint, checked)


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


def format_table(rows: list[GradeRow], title: str = "") -> str:
    """A plain-text score table."""
    w = max([len("exercise")] + [len(r.grade_id) for r in rows])
    lines = [title] if title else []
    lines.append(f"{'exercise':<{w}}  {'score':>9}  {'status':<16} message")
    for r in rows:
        msg = " / ".join(ln.strip() for ln in r.message.splitlines() if ln.strip())
        msg = msg if len(msg) <= 100 else msg[:97] + "..."
        status = f"{r.status} *" if r.ptx_not_checked else r.status
        lines.append(f"{r.grade_id:<{w}}  {r.score:>4g}/{r.points:<4g}  {status:<16} {msg}")
    total, maximum = sum(r.score for r in rows), sum(r.points for r in rows)
    lines.append(f"{'total':<{w}}  {total:>4g}/{maximum:<4g}")
    unchecked = sum(r.ptx_not_checked for r in rows)
    if unchecked:
        lines.append(f"* {ptx_footnote(unchecked)}.")
    return "\n".join(lines)
