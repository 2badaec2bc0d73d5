"""What a graded exercise is: its row (:class:`GradeRow`), a submission's rows (:class:`Graded`), the row a test
cell's record scores (:func:`score_test`) and the plain-text table of rows (:func:`format_table`).

A test cell scores the way nbgrader's autograder scores it, so the two graders agree: an error (or
text on stderr) earns 0, a number as the cell's value earns that many points (clipped to the
cell's points from the source), anything else earns full points. The verdict text (message, hint)
comes from the checks that :func:`gpulab.grading.report` saw. Running a submission to get the records is
:mod:`gpulab.grading.grader`'s.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from .assemble import Cell

__all__ = [
    "PTX_NOT_CHECKED",
    "RACES_NOT_CHECKED",
    "GradeRow",
    "Graded",
    "format_table",
    "ptx_footnote",
    "races_footnote",
    "score_test",
]

PTX_NOT_CHECKED = (
    "PTX not checked: no NVVM on this machine (the PTX compiler could not run), so {what} got {their} points without "
    "the check that the kernel compiles for a GPU; install gpulab[grade] (numba-cuda[cu12] brings NVVM) and grade again"
)
"""The grade table's footnote (and the class table's last line) when some exercise's PTX check did not run."""


def _marked(exercises: int, submissions: int, mark: str) -> dict[str, str]:
    """A footnote's ``{what}`` and ``{their}``: "2 exercises marked * (in 2 submissions)", "their"."""
    what = f"{exercises} exercise{'s' if exercises != 1 else ''} marked {mark}"
    if submissions:
        what += f" (in {submissions} submission{'s' if submissions != 1 else ''})"
    return {"what": what, "their": "its" if exercises == 1 else "their"}


def ptx_footnote(exercises: int, submissions: int = 0) -> str:
    """:data:`PTX_NOT_CHECKED` for ``exercises`` marked exercises (of ``submissions`` notebooks, when given)."""
    return PTX_NOT_CHECKED.format(**_marked(exercises, submissions, "*"))


RACES_NOT_CHECKED = (
    "races not checked: the race check's run that logs every access (many times slower than a plain run) was "
    "stopped at its time limit or failed, so {what} got {their} points without the kernel being searched for races "
    "(unsynchronised accesses to shared memory or outputs, barriers some threads skip); the plain runs passed. "
    "Grade again with a larger --timeout (when the grader's limit stopped that run: the check gives it {most:g} s at "
    "most), or run the exercise's check in simulator mode and read its races line, which says why"
)
"""The grade table's footnote (and the class table's last line) when some exercise's race check gave no verdict."""


def races_footnote(exercises: int, submissions: int = 0) -> str:
    """:data:`RACES_NOT_CHECKED` for ``exercises`` exercises marked ** (of ``submissions`` notebooks, when given)."""
    from gpulab.exercises.run import EXTRA_RUN_S  # the most the logged run gets, whatever the timeout

    return RACES_NOT_CHECKED.format(**_marked(exercises, submissions, "**"), most=EXTRA_RUN_S)


@dataclass
class GradeRow:
    """One exercise's row. ``status``: "passed", "partial" (some of its points, not all), "failed" and the other
    statuses of a check's verdict ("not implemented", "over budget", "error", ...; 0 points), or the grader's own:
    "not run", "stopped", "tampered", "answer not found", "not graded" (no score: an empty cell in the CSV).
    ``verdict``: the status of the check whose message the row shows ("" when no check reported one), so a
    "partial" row still says whether the check found it over budget or wrong on some inputs. ``ptx_not_checked``:
    a check of the cell skipped its PTX step because the compiler (NVVM) could not run where it was graded.
    ``races_not_checked``: a check of the cell was due to search the kernel for races and gave no verdict (its logged
    run was stopped at its limit or failed); the points are the same."""

    grade_id: str
    points: float
    score: float
    status: str
    message: str
    hint: str = ""
    verdict: str = ""
    ptx_not_checked: bool = False
    races_not_checked: bool = False


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

    @property
    def races_not_checked(self) -> list[str]:
        """The exercises whose race check gave no verdict (its logged run was stopped at its limit or failed)."""
        return [r.grade_id for r in self.rows if r.races_not_checked]

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
            "races_not_checked": self.races_not_checked,
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
    ``ptx_not_checked`` when one of its checks could not run the PTX compiler, ``races_not_checked`` when one of its
    race checks gave no verdict (its points are the same)."""
    row = _scored(cell, rec, why_not_run)
    results = (rec or {}).get("results") or []
    row.ptx_not_checked = any(isinstance(r, dict) and r.get("ptx_not_checked") is True for r in results)
    row.races_not_checked = any(isinstance(r, dict) and r.get("races_not_checked") is True for r in results)
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


def format_table(rows: list[GradeRow], title: str = "") -> str:
    """A plain-text score table."""
    w = max([len("exercise")] + [len(r.grade_id) for r in rows])
    lines = [title] if title else []
    lines.append(f"{'exercise':<{w}}  {'score':>9}  {'status':<16} message")
    for r in rows:
        msg = " / ".join(ln.strip() for ln in r.message.splitlines() if ln.strip())
        msg = msg if len(msg) <= 100 else msg[:97] + "..."
        status = r.status + (" *" if r.ptx_not_checked else "") + (" **" if r.races_not_checked else "")
        lines.append(f"{r.grade_id:<{w}}  {r.score:>4g}/{r.points:<4g}  {status:<16} {msg}")
    total, maximum = sum(r.score for r in rows), sum(r.points for r in rows)
    lines.append(f"{'total':<{w}}  {total:>4g}/{maximum:<4g}")
    unchecked = sum(r.ptx_not_checked for r in rows)
    if unchecked:
        lines.append(f"* {ptx_footnote(unchecked)}.")
    unsearched = sum(r.races_not_checked for r in rows)
    if unsearched:
        lines.append(f"** {races_footnote(unsearched)}.")
    return "\n".join(lines)
