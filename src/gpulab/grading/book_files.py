"""gradebook.csv and gradebook.json on disk: their columns, a grading merged into them, and scores changed by hand.

``gradebook.csv`` has one row per submission: ``student, lab, notebook, submitted_at, score, max_score``, then one
column per exercise (the points earned; "" when not graded, never 0), then ``ptx_not_checked, graded_at,
gpulab_version, gpulab_commit`` (:mod:`.provenance`). ``gradebook.json`` holds the same rows with every exercise's
status, message and hint. The JSON is the grader's record; the CSV is the teacher's to edit, so a score in the CSV
that differs from the JSON's was changed by hand (:func:`hand_changes`), and a new grading says so instead of
moving it aside unmentioned.

``labs grade ... --merge`` (:func:`merged`) replaces only the rows of the students and labs it graded, in both files,
and keeps every other row as it is, hand changes included; the files as they were before are copied aside
(``gradebook-<their time>.csv``) first.
"""

from __future__ import annotations

import csv
import json
import shutil
import time
from pathlib import Path
from typing import Any

from gpulab.errors import UsageError
from gpulab.paths import free_name

__all__ = ["HEAD", "TAIL", "aside_name", "columns", "hand_changes", "merged", "read_book", "write_csv"]

HEAD = ["student", "lab", "notebook", "submitted_at", "score", "max_score"]
TAIL = ["ptx_not_checked", "graded_at", "gpulab_version", "gpulab_commit"]


def columns(rows: list[dict[str, Any]]) -> list[str]:
    """HEAD, then every exercise column in the order the rows first name them, then TAIL."""
    fixed, exercises = set(HEAD) | set(TAIL), []
    for row in rows:
        exercises += [k for k in row if k not in fixed and k not in exercises]
    return [*HEAD, *exercises, *TAIL]


def write_csv(path: Path, rows: list[dict[str, Any]]) -> None:
    with open(path, "w", newline="", encoding="utf-8") as fh:
        w = csv.DictWriter(fh, fieldnames=columns(rows), restval="")
        w.writeheader()
        w.writerows(rows)


def aside_name(path: Path) -> Path:
    """``gradebook-<its time>.csv`` (``feedback-<its time>`` for a folder): a free name beside ``path`` for an
    earlier version of it, from its modification time."""
    stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(path.stat().st_mtime))
    stem, suffix = (path.name, "") if path.is_dir() else (path.stem, path.suffix)
    return free_name(path, f"{stem}-{stamp}", suffix)  # stem-STAMP, then stem-STAMP-1, -2 ...


def read_book(out: Path) -> tuple[list[dict[str, str]] | None, list[dict] | None]:
    """The rows of ``out``'s gradebook.csv and the entries of its gradebook.json (None for a file not there).
    Raises UsageError for one that is not a gradebook ``labs grade`` wrote (no student and lab columns, not a list)."""
    rows = entries = None
    path = out / "gradebook.csv"
    if path.exists():
        try:
            with open(path, newline="", encoding="utf-8") as fh:
                reader = csv.DictReader(fh)
                rows = list(reader)
                names = reader.fieldnames or []
        except (OSError, UnicodeDecodeError, csv.Error) as exc:
            raise UsageError(f"cannot read {path} ({exc}); merge by hand, or grade into another --out") from None
        if "student" not in names or "lab" not in names:
            raise UsageError(
                f"{path} has no student and lab columns, so it is not a gradebook labs grade wrote and --merge cannot "
                "tell whose rows to replace; grade into another --out and merge by hand"
            )
    path = out / "gradebook.json"
    if path.exists():
        try:
            entries = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, ValueError) as exc:
            raise UsageError(f"cannot read {path} ({exc}); merge by hand, or grade into another --out") from None
        if not isinstance(entries, list) or not all(isinstance(e, dict) and "student" in e for e in entries):
            raise UsageError(f"{path} is not a list of gradebook entries; grade into another --out and merge by hand")
    return rows, entries


def _number(text: Any) -> float | None:
    try:
        return float(text)
    except (TypeError, ValueError):
        return None


def _same(csv_value: str, graded: Any) -> bool:
    if str(csv_value).strip() == "" or graded == "":
        return str(csv_value).strip() == "" and graded == ""
    a, b = _number(csv_value), _number(graded)
    return a is not None and b is not None and abs(a - b) < 1e-9


def hand_changes(rows: list[dict[str, str]] | None, entries: list[dict] | None) -> list[tuple[tuple[str, str], str]]:
    """Each score of gradebook.csv that differs from what the grader wrote in gradebook.json, and each row the
    grader did not write: ((student, lab), "bob lab01_threads lab01-add-check: 2 (the grader gave 1)"). Empty
    without both files."""
    if not rows or entries is None:
        return []
    graded: dict[tuple, list[dict]] = {}
    for e in entries:
        graded.setdefault((str(e.get("student")), str(e.get("lab")), str(e.get("notebook"))), []).append(e)
    found: list[tuple[tuple[str, str], str]] = []
    for row in rows:
        key = (row.get("student", ""), row.get("lab", ""), row.get("notebook", ""))
        if not graded.get(key):
            found.append(((key[0], key[1]), f"{key[0]} {key[1]}: a row the grader did not write"))
            continue
        e = graded[key].pop(0)
        scores = {"score": "" if e.get("not_graded") else e.get("score", "")}
        for x in e.get("exercises") or []:
            if isinstance(x, dict):
                scores[str(x.get("grade_id"))] = "" if x.get("status") == "not graded" else x.get("score", "")
        for column, value in scores.items():
            if column in row and not _same(row[column], value):
                gave = "nothing (not graded)" if value == "" else f"{value:g}" if isinstance(value, float) else value
                text = f"{key[0]} {key[1]} {column}: {row[column] or 'empty'} (the grader gave {gave})"
                found.append(((key[0], key[1]), text))
    return found


def _key(item: dict) -> tuple[str, str]:
    return str(item.get("student", "")), str(item.get("lab", ""))


def _replace(old: list[dict], new: list[dict]) -> list[dict]:
    """``old`` with the items of each (student, lab) that ``new`` has replaced by ``new``'s, where the first was."""
    keys = {_key(n) for n in new}
    out: list[dict] = []
    placed: set[tuple[str, str]] = set()
    for item in old:
        k = _key(item)
        if k not in keys:
            out.append(item)
        elif k not in placed:
            out += [n for n in new if _key(n) == k]
            placed.add(k)
    return out + [n for n in new if _key(n) not in placed]


def merged(
    out: Path, rows: list[dict], entries: list[dict], pages: set[tuple[str, str]]
) -> tuple[list[dict], list[dict], list[str]]:
    """``labs grade --merge``: the CSV rows and JSON entries of ``out``'s gradebook with those of the (student, lab)
    pairs just graded replaced by ``rows``/``entries``, and what to tell the teacher. Before anything changes, the
    existing files are copied aside and the feedback pages of ``pages`` (the pairs graded again) are moved to
    ``feedback-<time>/``, so nothing the teacher had is lost. Raises UsageError for files that are not gradebooks."""
    old_rows, old_entries = read_book(out)
    said: list[str] = []
    if old_rows is None and old_entries is None:
        return rows, entries, [f"--merge: {out} had no gradebook yet, so this one holds only what was graded now"]
    hand = hand_changes(old_rows, old_entries)
    again = {_key(r) for r in rows}
    replaced_hand = [text for k, text in hand if k in again]
    copies = []
    for name in ("gradebook.csv", "gradebook.json"):
        if (out / name).exists():
            copies.append(aside_name(out / name))
            shutil.copy2(out / name, copies[-1])
    moved = _move_pages(out / "feedback", pages)
    kept_rows = _replace(old_rows or [], rows)
    kept_entries = _replace(old_entries or [], entries)
    gone = sum(1 for r in old_rows or old_entries or [] if _key(r) in again)
    said.append(
        f"merged into {out}: {gone} earlier row(s) of {', '.join(sorted(' '.join(k) for k in again))} replaced, "
        f"{len(kept_rows) - len(rows)} row(s) of other students or labs kept as they were; the gradebook before the "
        f"merge was copied to {', '.join(p.name for p in copies)}"
        + (f", the replaced feedback page(s) moved to {moved.name}/" if moved else "")
    )
    if replaced_hand:
        said.append(
            "CHANGED BY HAND and now replaced by this grading (the values you set are in "
            f"{copies[0].name}; set them again if they still apply): " + "; ".join(replaced_hand)
        )
    if len(hand) > len(replaced_hand):
        said.append(f"{len(hand) - len(replaced_hand)} score(s) of other rows changed by hand are kept as you set them")
    return kept_rows, kept_entries, said


def _move_pages(folder: Path, pages: set[tuple[str, str]]) -> Path | None:
    """Move the feedback pages of the (student, lab) pairs into ``feedback-<time>/`` beside ``folder``."""
    if not folder.is_dir():
        return None
    prefixes = [f"{s}__{lab}" for s, lab in pages]
    mine = [
        p
        for p in folder.iterdir()
        if p.is_file() and any(p.name == f"{x}.html" or p.name.startswith(f"{x}__") for x in prefixes)
    ]
    if not mine:
        return None
    target = aside_name(folder)
    target.mkdir()
    for p in mine:
        p.rename(target / p.name)
    return target
