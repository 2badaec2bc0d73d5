"""What a check found: :class:`CheckResult` (text and HTML) made of :class:`Check` lines."""

from __future__ import annotations

import html
import json
import os
from dataclasses import dataclass, field

__all__ = ["Check", "CheckResult", "PTX_NOT_RUN", "RACES_NOT_CHECKED", "log_result"]

STATUSES = ("passed", "failed", "not implemented", "error", "timeout", "over budget", "setup error")


PTX_NOT_RUN = "not checked: the PTX compiler (NVVM, from numba-cuda[cu12]) could not run here"
"""How the PTX check's line starts when the compiler could not run on this machine (no NVVM): the check passes,
as it is no fault of the learner's, and :attr:`CheckResult.ptx_not_checked` tells a grader so."""

RACES_NOT_CHECKED = "not checked: unsynchronised accesses to shared memory or outputs, and barriers some threads skip"
"""How the races line starts when the race check was due (simulator mode, a kernel the check launches itself) but its
run that logs every access gave no verdict: stopped at its time limit, or failed (:mod:`.races`). The points stay
(the plain runs passed), and :attr:`CheckResult.races_not_checked` tells a grader so."""


@dataclass
class Check:
    """One line of a verdict."""

    name: str
    passed: bool
    message: str
    hint: str = ""


@dataclass
class CheckResult:
    """What :func:`check_kernel` found. ``bool(result)`` is ``result.passed``.

    ``status`` is one of "passed", "failed", "not implemented", "error" (the kernel raised),
    "timeout", "over budget" (correct, but a :class:`Budget` limit failed: half the points) or "setup error"
    (the exercise itself is wrong, not the learner's code). "failed" with half the points: correct, but the PTX
    check failed, the kernel is right only launched with x and y exchanged (``details["orientation"]``), or
    several threads write the same output element (:mod:`.writers`: the loop ignores an axis of the launch).
    """

    name: str
    status: str
    score: float
    max_score: float
    message: str
    hint: str = ""
    checks: list[Check] = field(default_factory=list)
    details: dict = field(default_factory=dict)
    printed: str = ""  # what the kernel printed during the check, summed up (gpulab.exercises.output)
    notes: list[str] = field(default_factory=list)
    """What the learner should know although the score does not change: the kernel changed one of its inputs
    (:meth:`.run.Runner._compare_inputs`), or it computes in float64 where its arrays are float32
    (:mod:`.precision`)."""

    @property
    def passed(self) -> bool:
        return self.status == "passed"

    def __bool__(self) -> bool:
        return self.passed

    @property
    def ptx_not_checked(self) -> bool:
        """Whether the check's PTX step did not run for want of the compiler (:data:`PTX_NOT_RUN`): its points were
        given without knowing that the kernel compiles for a GPU."""
        return any(c.name == "PTX" and c.message.startswith(PTX_NOT_RUN) for c in self.checks)

    @property
    def races_not_checked(self) -> bool:
        """Whether the race check was due to run and gave no verdict (:data:`RACES_NOT_CHECKED`: its logged run was
        stopped at its limit or failed): its points were given without the kernel being searched for races. False
        where the check is not meant to run (gpu mode, exercises without it), which says so in its own words."""
        return any(c.name == "races" and c.message.startswith(RACES_NOT_CHECKED) for c in self.checks)

    def to_dict(self) -> dict:
        return {
            "name": self.name,
            "status": self.status,
            "passed": self.passed,
            "score": self.score,
            "max_score": self.max_score,
            "message": self.message,
            "hint": self.hint,
            "notes": list(self.notes),
            "ptx_not_checked": self.ptx_not_checked,
            "races_not_checked": self.races_not_checked,
        }

    def __str__(self) -> str:
        mark = "PASS" if self.passed else "FAIL"
        lines = [f"[{mark}] {self.name}: {self.status} ({self.score:g}/{self.max_score:g} points)"]
        lines += ["  " + ln for ln in self.message.splitlines()]
        if self.hint:
            lines.append("  hint: " + self.hint)
        lines += ["  note: " + n for n in self.notes]
        lines += ["  " + ln for ln in self.printed.splitlines()]
        for c in self.checks:
            lines.append(f"  {'ok ' if c.passed else 'XX '} {c.name}: {c.message.splitlines()[0] if c.message else ''}")
        return "\n".join(lines)

    __repr__ = __str__

    def _repr_html_(self) -> str:
        colour = "#1a7f37" if self.passed else ("#9a6700" if self.status == "not implemented" else "#cf222e")
        rows = "".join(
            f"<tr><td>{'&#10004;' if c.passed else '&#10008;'}</td><td>{html.escape(c.name)}</td>"
            f"<td style='text-align:left'>{html.escape(c.message)}</td></tr>"
            for c in self.checks
        )
        hint = f"<p><b>Hint:</b> {html.escape(self.hint)}</p>" if self.hint else ""
        hint += "".join(f"<p><b>Note:</b> {html.escape(n)}</p>" for n in self.notes)
        if self.printed:
            hint += f"<pre style='white-space:pre-wrap;color:#57606a'>{html.escape(self.printed)}</pre>"
        return (
            f"<div style='border-left:4px solid {colour};padding:4px 10px'>"
            f"<p><b style='color:{colour}'>{html.escape(self.name)}: {html.escape(self.status)}</b> "
            f"({self.score:g}/{self.max_score:g} points)</p>"
            f"<pre style='white-space:pre-wrap'>{html.escape(self.message)}</pre>{hint}"
            + (f"<table>{rows}</table>" if rows else "")
            + "</div>"
        )


def log_result(res: CheckResult) -> None:
    """Append ``res`` to the grade log when ``python -m gpulab labs grade`` set ``GPULAB_GRADE_LOG``."""
    path = os.environ.get("GPULAB_GRADE_LOG")
    if not path:
        return
    try:
        with open(path, "a", encoding="utf-8") as fh:
            fh.write(json.dumps(res.to_dict()) + "\n")
    except OSError:
        pass
