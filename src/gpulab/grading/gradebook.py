"""A class at a time: grade a folder of submissions in parallel, write a gradebook and feedback.

``python -m gpulab labs grade submissions/`` finds every ``.ipynb`` below the folder (an nbgrader
``submitted/<student>/<assignment>/<lab>.ipynb`` tree works as is), grades them ``--workers`` at
a time with a progress bar, and writes into the output folder:

* ``gradebook.csv``: one row per submission: student, lab, notebook, ``submitted_at`` (nbgrader's
  ``timestamp.txt``, "" without one), total, maximum, then one column per exercise (its points earned), then
  ``ptx_not_checked`` (the exercises whose PTX check could not run: no NVVM where they were graded, so their points
  were given without it; "" when every PTX check ran), ``graded_at``, ``gpulab_version`` and ``gpulab_commit``
  (:mod:`.provenance`; columns and merging: :mod:`.book_files`);
* ``gradebook.json``: everything, including each exercise's status ("passed", "partial" for some of its
  points, "failed", "not implemented", "not graded", ...; see :class:`gpulab.grading.rows.GradeRow`), the
  check's own status (``verdict``), message and hint, whether its PTX check did not run (``ptx_not_checked``, per
  exercise and per submission), whether its race check gave no verdict (``races_not_checked``, likewise: its
  logged run was stopped at its limit or failed; in the JSON and the class table only, not a CSV column, so that
  gradebook.csv files written before keep their columns), and whether the notebook was ``not_graded`` (an earlier
  ``gradebook.csv``/``.json`` in the folder is renamed ``gradebook-<its time>.csv``, not overwritten, and scores
  changed by hand in it are named in the summary; with ``merge`` only the rows of the students and labs graded
  now are replaced, the rest kept as they were);
* ``feedback/<student>__<lab>.html``: what the student sees: each exercise's verdict and hint, the notes without
  the advice meant for the teacher (:mod:`.audience`) (with
  ``__<notebook>`` added when a student handed in several notebooks for one lab); an earlier
  ``feedback`` folder with pages in it is renamed ``feedback-<its time>``, not overwritten.

An exercise that was "not graded" (the grading process did not start, or the notebook could not be graded:
truncated JSON, no code in it, another lab's notebook) has an empty cell in the CSV, never 0; so has the total of
such a submission, and the class table says "not graded" with the reason in a note. In an nbgrader tree the student
is the folder above the assignment folder (``submitted/bob`` graded alone is still bob), and ``lab`` grades only the
notebooks of that lab (by their assignment folder, else their file name, else the lab its graded cells' ids name):
the others are ``skipped``; one that is that lab's by folder or name but none of whose answer cells is becomes "not
graded" (another lab's notebook), not skipped too.
"""

from __future__ import annotations

import html
import json
import os
import re
import traceback
from collections import Counter
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path

from gpulab.errors import UsageError

from . import PARTIAL_RULE

from .assemble import source_for
from .audience import for_student, for_teacher
from .book_files import aside_name, hand_changes, merged, read_book, write_csv
from .grader import check_device, grade_notebook, grading_device, ungraded
from .provenance import graded_at, gpulab_commit, gpulab_version, submitted_at
from .rows import GradeRow, Graded, ptx_footnote, races_footnote
from .sandbox import Limits, usable_cpus

__all__ = ["Gradebook", "check_out_folder", "feedback_name", "grade_folder", "keep_earlier", "write_feedback"]


@dataclass
class Gradebook:
    entries: list[tuple[str, Graded]]
    out: Path
    kept: list[Path] = field(default_factory=list)  # earlier gradebooks, renamed rather than overwritten
    skipped: list[Path] = field(default_factory=list)  # notebooks of other labs than the one asked for
    extras: list[dict[str, str]] = field(default_factory=list)  # per entry: submitted_at, graded_at, gpulab_...
    said: list[str] = field(default_factory=list)  # what the summary adds: a merge, scores changed by hand
    written: list[dict] = field(default_factory=list)  # what gradebook.json holds now (with --merge: all its rows)

    def payload(self) -> list[dict]:
        """What gradebook.json holds for these entries: each submission's student, scores, verdicts and notes, when it
        was handed in and graded, and by which gpulab."""
        extras = self.extras or [{} for _ in self.entries]
        return [{"student": s, **g.to_dict(), **x} for (s, g), x in zip(self.entries, extras)]

    def summary(self) -> str:
        """The class table: first how the notebooks ran (mode and sandbox, as a single notebook's title says), then
        a line per submission, then what was written and kept."""
        ran = sorted({f"mode: {g.mode}; sandbox: {g.sandbox}" for _, g in self.entries if g.mode})  # not: unread
        lines = [f"graded with {' | '.join(ran)}"] if ran else []
        lines.append(f"{'student':<24} {'lab':<22} score")
        for student, g in self.entries:
            line = f"{student:<24} {g.lab:<22} {_score_text(g)}"
            if g.ptx_not_checked:  # points given without the PTX check: the footnote below says why
                line += f"  PTX not checked *: {', '.join(g.ptx_not_checked)}"
            if g.races_not_checked:  # points given without the race search: the footnote below says why
                line += f"  races not checked **: {', '.join(g.races_not_checked)}"
            if g.notes:  # a timeout, a crash, edited test cells, several submissions: worth a look
                more = f" (+{len(g.notes) - 1} more in gradebook.json)" if len(g.notes) > 1 else ""
                line += f"  note: {_short(g.notes[0])}{more}"
            lines.append(line)
        lines.append(
            f"wrote {self.out / 'gradebook.csv'}, {self.out / 'gradebook.json'} and "
            f"{len(self.entries)} feedback page(s) in {self.out / 'feedback'}"
        )
        if self.kept:
            lines.append("the previous gradebook was kept as " + ", ".join(p.name for p in self.kept))
        lines += self.said
        if self.skipped:
            lines.append(f"skipped {len(self.skipped)} notebook(s) of other labs: " + ", ".join(map(str, self.skipped)))
        unchecked = [len(g.ptx_not_checked) for _, g in self.entries if g.ptx_not_checked]
        if unchecked:
            lines.append(f"* {ptx_footnote(sum(unchecked), len(unchecked))}.")
        unsearched = [len(g.races_not_checked) for _, g in self.entries if g.races_not_checked]
        if unsearched:
            lines.append(f"** {races_footnote(sum(unsearched), len(unsearched))}.")
        return "\n".join(lines)


def _short(text: str, width: int = 100) -> str:
    """``text`` on one line, cut at the last word boundary within ``width`` characters ("..." marks the cut)."""
    text = " ".join(text.split())
    if len(text) <= width:
        return text
    cut = text[: width - 3].rsplit(" ", 1)[0].rstrip(",;:(")
    return cut + "..."


def _score_text(g: Graded) -> str:
    """``score/max``, or "not graded" when no exercise was (a notebook that could not be read or run)."""
    if g.rows and all(r.status == "not graded" for r in g.rows):
        return "not graded"
    return f"{g.score:g}/{g.max_score:g}" + (" (some not graded)" if g.not_graded else "")


def keep_earlier(path: Path) -> Path:
    """Rename an earlier gradebook (maybe edited by hand, maybe another lab's) to a name with its time."""
    target = aside_name(path)
    path.rename(target)
    return target


def _lab_folder(name: str, labs: list[str]) -> str | None:
    """The lab an nbgrader assignment folder is named after ("lab01_threads" or "lab01"), else None."""
    for lab in labs:
        if name == lab or name == lab.split("_")[0]:
            return lab
    return None


def _student(path: Path, folder: Path, labs: Sequence[str] = ()) -> str:
    """The student a notebook is from: in an nbgrader tree (``<student>/<assignment>/<nb>.ipynb``) the folder
    above the assignment's, even when ``folder`` is that student's own or the assignment folder itself
    (``submitted/bob/lab01_threads``: bob, not lab01_threads); else the first folder below ``folder``."""
    lab = _lab_folder(path.parent.name, list(labs))
    if lab and (path.parent != folder or path.stem.startswith(lab)):  # in folder lab01_threads/, alice.ipynb is alice's
        return path.parent.parent.name
    rel = path.relative_to(folder)
    return rel.parts[0] if len(rel.parts) > 1 else rel.stem


def _own_lab(path: Path, solutions: Path, labs: list[str]) -> str | None:
    """The lab a notebook says it is (its nbgrader assignment folder, else its file name), or None."""
    lab = _lab_folder(path.parent.name, labs)
    if lab:
        return lab
    try:
        return source_for(path, solutions).stem
    except UsageError:
        return None


def _keep_feedback(folder: Path) -> Path | None:
    """Rename an earlier feedback folder that has pages in it to ``feedback-<its time>``."""
    if not folder.is_dir() or not any(folder.iterdir()):
        return None
    return keep_earlier(folder)


def _base_for_file(path: Path, labs: Sequence[str]) -> Path:
    """For one notebook graded with ``--merge``: the folder its student is named from, as when its class is graded
    (``submitted/bob/lab01_threads/lab01_threads.ipynb`` and ``submissions/bob/lab01_threads.ipynb``: bob;
    ``lab01/alice.ipynb``: alice)."""
    if _lab_folder(path.parent.name, list(labs)) or _lab_folder(path.stem.split(" ")[0], list(labs)):
        return path.parent.parent
    return path.parent


def write_feedback(graded: Graded, path: Path, student: str = "") -> None:
    """One HTML page: the total, then each exercise's score, verdict and hint, then the notes. Advice meant for the
    teacher (:mod:`gpulab.grading.audience`) is left out: the gradebook keeps it."""
    colour = {"passed": "#1a7f37", "not implemented": "#9a6700", "partial": "#9a6700", "not graded": "#57606a"}

    def row(r: GradeRow) -> str:
        earned = "&ndash;" if r.status == "not graded" else f"{r.score:g}"  # no score, not a 0
        hint = f"<br><i>Hint:</i> {html.escape(for_student(r.hint))}" if for_student(r.hint) else ""
        if r.status == "partial":  # the rule behind a part score
            hint += f"<br><i>{html.escape(PARTIAL_RULE)}</i>"
        return (
            f"<tr><td>{html.escape(r.grade_id)}</td><td>{earned} / {r.points:g}</td>"
            f"<td style='color:{colour.get(r.status, '#cf222e')}'><b>{html.escape(r.status)}</b></td>"
            f"<td>{html.escape(for_student(r.message)).replace(chr(10), '<br>')}{hint}</td></tr>"
        )

    rows = "".join(row(r) for r in graded.rows)
    notes = "".join(f"<li>{html.escape(n)}</li>" for n in map(for_student, graded.notes) if n)
    who = f"{html.escape(student)} &middot; " if student else ""
    page = (
        "<!doctype html><meta charset='utf-8'><title>Feedback: " + html.escape(graded.lab) + "</title>"
        "<style>body{font-family:sans-serif;max-width:60em;margin:2em auto}td,th{padding:4px 8px;"
        "border-bottom:1px solid #ddd;text-align:left;vertical-align:top}</style>"
        f"<h1>{who}{html.escape(graded.lab)}: {html.escape(_score_text(graded).replace('/', ' / '))}</h1>"
        + (f"<p>Graded in {html.escape(graded.mode)} mode.</p>" if graded.mode else "")  # "": nothing ran
        + "<table><tr><th>exercise</th><th>points</th><th>verdict</th><th>what the check found</th></tr>"
        f"{rows}</table>" + (f"<h2>Notes</h2><ul>{notes}</ul>" if notes else "")
    )
    path.write_text(page, encoding="utf-8")


def check_out_folder(out: Path) -> None:
    """Refuse, before any grading, an ``--out`` that is a file, lies below a file, or would be (or is) a folder that
    cannot be written (a missing one is made later): the one check behind ``labs grade --out`` and
    :func:`grade_folder`."""
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise UsageError(
            f"--out {out} is a file; --out takes a folder for the gradebook and the feedback pages (a missing one "
            f"is made): give another path, e.g. --out {out.with_name(out.stem + '-graded')}"
        )
    here = next(p for p in (out, *out.parents) if p.exists())  # out itself, or the folder it will be made in
    if not here.is_dir():
        raise UsageError(f"--out {out} is below {here}, a file, not a folder; choose another path for --out")
    if not os.access(here, os.W_OK):
        raise UsageError(f"cannot write to {here}; choose a writable place for --out")


def grade_folder(
    folder: Path,
    solutions: Path,
    out: Path,
    lab: str | None = None,
    workers: int | None = None,
    limits: Limits | None = None,
    progress: bool = True,
    merge: bool = False,
) -> Gradebook:
    """Grade every notebook below ``folder`` (or the one notebook ``folder`` names); write the gradebook and feedback
    into ``out``. ``merge``: replace only the rows and pages of the students and labs graded now in ``out``'s
    gradebook and keep the rest (:func:`gpulab.grading.book_files.merged`); else an earlier gradebook is renamed."""
    folder, out = Path(folder), Path(out)
    labs = sorted(p.stem for p in Path(solutions).glob("*.ipynb"))
    if folder.is_file():  # one notebook, to merge into a class's gradebook
        subs, base = [folder], _base_for_file(folder, labs)
    else:
        subs = sorted(p for p in folder.rglob("*.ipynb") if ".ipynb_checkpoints" not in p.parts and p.is_file())
        base = folder
    if not subs:
        raise UsageError(f"no .ipynb files in {folder}; give the folder that holds the submissions")
    check_out_folder(out)
    if out.resolve() == base.resolve() or base.resolve() in out.resolve().parents:
        raise UsageError(f"--out {out} is inside the submissions folder {base}; choose another folder")
    old_rows, old_entries = read_book(out) if merge else (None, None)  # one --merge cannot read: refused now
    if merge and (old_rows is None) != (old_entries is None):
        have, lack = ("gradebook.csv", "gradebook.json") if old_entries is None else ("gradebook.json", "gradebook.csv")
        raise UsageError(
            f"{out} has {have} but no {lack}: --merge needs both (it keeps the other rows of each, and compares "
            f"them to find scores changed by hand). Put {lack} back, or grade the whole class again without --merge."
        )
    skipped: list[Path] = []
    if lab is not None:  # only that lab's notebooks: a tree may hold several labs
        wanted = source_for(Path(lab), solutions, lab).stem
        skipped = [p for p in subs if _own_lab(p, solutions, labs) not in (None, wanted)]
        subs = [p for p in subs if p not in skipped]
        if not subs:
            raise UsageError(f"none of the notebooks in {folder} is {wanted} (by folder or file name); check --lab")
    pairs = [(p, source_for(p, solutions, lab)) for p in subs]  # every lab known before any work
    check_device(grading_device())  # once, before any work: gpu mode without a driver grades nothing
    out.mkdir(parents=True, exist_ok=True)
    limits = limits or Limits()

    def one(pair: tuple[Path, Path]) -> Graded:
        sub, src = pair
        try:
            graded = grade_notebook(sub, src, limits)
            if sub.name != src.name:  # nbgrader's autograde would skip it: worth telling the student
                graded.notes.append(f"graded as {src.stem} although the file is named {sub.name!r}")
            return graded
        except UsageError as exc:  # not a notebook, truncated, nothing in it to grade: the reason, never a 0
            return ungraded(sub, src, str(exc))
        except Exception as exc:  # one broken submission must not stop the class
            why = f"{type(exc).__name__}: {exc}; " + traceback.format_exc(limit=2)[-300:]
            return ungraded(
                sub,
                src,
                for_teacher(
                    "the grader failed on this notebook (a fault of the grader's, not of the work)",
                    f"{why}; grade it again, and report the fault if it repeats",
                ),
            )

    results: dict[Path, Graded] = {}
    bar = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=len(pairs), desc="grading", unit="notebook")
    with ThreadPoolExecutor(max_workers=max(1, workers or usable_cpus())) as pool:
        futures = {pool.submit(one, pair): pair[0] for pair in pairs}
        for fut in as_completed(futures):
            results[futures[fut]] = fut.result()
            if bar is not None:
                bar.update(1)
    if bar is not None:
        bar.close()

    entries = [(_student(p, base, labs), results[p]) for p in subs]
    pairs_seen = Counter((student, g.lab) for student, g in entries)
    for student, g in entries:
        if pairs_seen[(student, g.lab)] > 1:
            g.notes.append(
                for_teacher(
                    f"{student} has {pairs_seen[(student, g.lab)]} submissions for {g.lab}: each is graded and gets "
                    "its own feedback page",
                    "each has its own row in the gradebook; keep the one that counts",
                )
            )
    now, version, commit = graded_at(), gpulab_version(), gpulab_commit()
    extras = [
        {"submitted_at": submitted_at(p), "graded_at": now, "gpulab_version": version, "gpulab_commit": commit}
        for p in subs
    ]
    book = Gradebook(entries, out, [], skipped, extras)
    rows = [_csv_row(student, g, x) for (student, g), x in zip(entries, extras)]
    payload = book.payload()
    if merge:
        rows, payload, book.said = merged(out, rows, payload, {(s, g.lab) for s, g in entries})
        known = {r.get("student") for r in old_rows or []}
        if folder.is_file() and old_rows and entries[0][0] not in known:  # a new name: perhaps not the one meant
            book.said.append(
                f"{folder} was filed as a NEW student {entries[0][0]!r} (named from {base}), who had no row in the "
                f"gradebook. If that is not the student, put the notebook in a folder named after the student "
                f"(<student>/{folder.name}) and grade again with --merge, then delete the row for {entries[0][0]!r}."
            )
    else:
        book.said = _hand_changes_left_behind(out)
        book.kept = [keep_earlier(out / name) for name in ("gradebook.csv", "gradebook.json") if (out / name).exists()]
        book.kept += [p for p in [_keep_feedback(out / "feedback")] if p is not None]
        if book.said:
            book.said[0] = book.said[0].replace("{kept}", book.kept[0].name)
    (out / "feedback").mkdir(exist_ok=True)
    write_csv(out / "gradebook.csv", rows)
    (out / "gradebook.json").write_text(json.dumps(payload, indent=2) + "\n", encoding="utf-8")
    book.written = payload
    for (student, g), path in zip(entries, subs):
        write_feedback(
            g, out / "feedback" / feedback_name(student, g.lab, path, pairs_seen[(student, g.lab)] > 1), student
        )
    return book


def _csv_row(student: str, g: Graded, extra: dict[str, str]) -> dict:
    """One row of gradebook.csv (:data:`gpulab.grading.book_files.HEAD`, the exercises, then ``TAIL``)."""
    unscored = g.not_graded or not g.rows  # no score to show: an empty cell, never a 0
    row: dict = {"student": student, "lab": g.lab, "notebook": g.notebook, "submitted_at": extra["submitted_at"]}
    row.update(score="" if unscored else g.score, max_score=g.max_score)
    row.update({r.grade_id: "" if r.status == "not graded" else r.score for r in g.rows})
    row["ptx_not_checked"] = " ".join(g.ptx_not_checked)
    row.update({k: v for k, v in extra.items() if k != "submitted_at"})
    return row


def _hand_changes_left_behind(out: Path) -> list[str]:
    """Scores changed by hand in ``out``'s gradebook.csv, which a new grading (no --merge) replaces: a warning naming
    them and where they are kept (``{kept}``, filled in once the file is renamed), or nothing."""
    try:
        hand = [text for _, text in hand_changes(*read_book(out))]
    except UsageError:  # not a gradebook labs grade wrote (renamed aside all the same)
        return []
    if not hand:
        return []
    shown = "; ".join(hand[:10]) + (f"; and {len(hand) - 10} more" if len(hand) > 10 else "")
    return [
        f"CHANGED BY HAND in the earlier gradebook.csv and not in this one: {shown}. The earlier file is kept as "
        "{kept}: set these again if they still apply. To grade some students again and keep every other row as it "
        "is, grade them with --merge"
    ]


def feedback_name(student: str, lab: str, path: Path, duplicate: bool = False) -> str:
    """``<student>__<lab>.html``; with the notebook's name too when the student has several for the lab,
    so that no page overwrites another."""
    if not duplicate:
        return f"{student}__{lab}.html"
    stem = re.sub(r"[^A-Za-z0-9._-]+", "_", Path(path).stem).strip("_") or "notebook"
    return f"{student}__{lab}__{stem}.html"
