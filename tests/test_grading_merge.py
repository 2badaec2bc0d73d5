"""A teacher's gradebook over a term (review s24-rD M1, M2, M3, L4, L6): grading one student again with --merge keeps
every other row, page and hand-changed score; scores changed by hand are named, never moved aside unmentioned; rows
record nbgrader's submission time and the gpulab that graded; advice for the teacher stays off the student's page."""

from __future__ import annotations

import csv
import json
import shutil
import subprocess
from pathlib import Path

import pytest

from gpulab import labs
from gpulab.grading import gradebook
from gpulab.grading.assemble import assemble
from gpulab.grading.rows import Graded, GradeRow

ROOT = Path(__file__).resolve().parents[1]
SOLUTIONS = ROOT / "labs" / "solutions"
STUDENT = ROOT / "labs" / "student" / "lab01_threads.ipynb"
LAB = "lab01_threads"


@pytest.fixture
def scores(monkeypatch):
    """A fake grader: each student's add-check score from this dict (the sandbox is tested elsewhere)."""
    given = {"alice": 2.0, "bob": 0.0, "carol": 1.0}

    def grade(sub, src, limits):
        who = Path(sub).parent.parent.name
        row = GradeRow(f"{LAB.split('_')[0]}-add-check", 2, given[who], "passed" if given[who] == 2 else "failed", "m")
        return Graded(str(sub), src.stem, "simulator", "t", [row, GradeRow("lab01-map-check", 2, 2, "passed", "")], [])

    monkeypatch.setattr(gradebook, "grade_notebook", grade)
    return given


def _class(tmp_path: Path) -> Path:
    subs = tmp_path / "submitted"
    for who in ("alice", "bob", "carol"):
        (subs / who / LAB).mkdir(parents=True)
        shutil.copy(STUDENT, subs / who / LAB / f"{LAB}.ipynb")
    (subs / "bob" / LAB / "timestamp.txt").write_text("2026-12-04 13:26:08.123456 UTC\n")
    return subs


def _rows(out: Path) -> dict[str, dict[str, str]]:
    with open(out / "gradebook.csv", newline="") as fh:
        return {r["student"]: r for r in csv.DictReader(fh)}


def _set(out: Path, values: dict[str, float], column: str) -> None:
    """Change scores in gradebook.csv, as a teacher does in a spreadsheet."""
    with open(out / "gradebook.csv", newline="") as fh:
        rows = list(csv.reader(fh))
    for r in rows[1:]:
        if r[0] in values:
            r[rows[0].index(column)] = f"{values[r[0]]:g}"
    with open(out / "gradebook.csv", "w", newline="") as fh:
        csv.writer(fh).writerows(rows)


def _grade(*args: str) -> int:
    return labs.main(["grade", *args, "--root", str(ROOT), "--workers", "1"])


def test_grading_one_student_again_with_merge_keeps_the_rest(tmp_path, scores, capsys):
    subs, out = _class(tmp_path), tmp_path / "graded"
    assert _grade(str(subs), "--out", str(out)) == 0
    rows = _rows(out)
    assert rows["bob"]["submitted_at"] == "2026-12-04 13:26:08.123456 UTC" and rows["alice"]["submitted_at"] == ""
    # the teacher changes alice's and bob's scores by hand and annotates carol's page
    _set(out, {"alice": 1.5, "bob": 1.5}, "lab01-add-check")
    (out / "feedback" / f"carol__{LAB}.html").write_text("<p>carol: see me</p>")
    (out / "feedback" / f"bob__{LAB}.html").write_text("<p>bob's old page, annotated</p>")
    capsys.readouterr()

    scores["bob"] = 2.0  # bob's notebook graded again (say, after a fix to the grader)
    everything = tmp_path / "all.json"
    assert _grade(str(subs / "bob" / LAB), "--out", str(out), "--merge", "--json", str(everything)) == 0
    printed = capsys.readouterr().out
    assert json.loads(everything.read_text()) == json.loads((out / "gradebook.json").read_text())  # all 3 rows
    rows = _rows(out)
    assert sorted(rows) == ["alice", "bob", "carol"], rows
    assert rows["bob"]["lab01-add-check"] == "2.0" and rows["bob"]["score"] == "4.0", rows["bob"]
    assert rows["alice"]["lab01-add-check"] == "1.5", rows["alice"]  # a hand change elsewhere is kept
    assert rows["carol"]["lab01-add-check"] == "1.0"
    book = {e["student"]: e for e in json.loads((out / "gradebook.json").read_text())}
    assert sorted(book) == ["alice", "bob", "carol"] and book["bob"]["score"] == 4.0
    assert book["bob"]["submitted_at"] == "2026-12-04 13:26:08.123456 UTC"
    assert (out / "feedback" / f"carol__{LAB}.html").read_text() == "<p>carol: see me</p>"
    assert "4 / 4" in (out / "feedback" / f"bob__{LAB}.html").read_text()
    (aside,) = [p for p in out.iterdir() if p.name.startswith("feedback-")]
    assert (aside / f"bob__{LAB}.html").read_text() == "<p>bob's old page, annotated</p>"
    copies = sorted(p.name for p in out.glob("gradebook-*"))
    assert [Path(c).suffix for c in copies] == [".csv", ".json"], copies
    assert "1.5" in (out / copies[0]).read_text()  # the gradebook before the merge, hand changes and all
    assert f"merged into {out}: 1 earlier row(s) of bob {LAB} replaced, 2 row(s) of other students" in printed
    assert f"CHANGED BY HAND and now replaced by this grading (the values you set are in {copies[0]}" in printed
    assert f"bob {LAB} lab01-add-check: 1.5 (the grader gave 0)" in printed, printed
    assert "1 score(s) of other rows changed by hand are kept as you set them" in printed


def test_merge_takes_one_notebook_and_needs_out(tmp_path, scores, capsys):
    subs, out = _class(tmp_path), tmp_path / "graded"
    assert _grade(str(subs), "--out", str(out)) == 0
    notebook = subs / "carol" / LAB / f"{LAB}.ipynb"
    assert _grade(str(notebook), "--merge") == 2
    assert "--merge needs --out" in capsys.readouterr().err
    scores["carol"] = 2.0
    assert _grade(str(notebook), "--out", str(out), "--merge") == 0
    rows = _rows(out)
    assert sorted(rows) == ["alice", "bob", "carol"] and rows["carol"]["score"] == "4.0", rows
    # a gradebook --merge cannot read is refused before any grading
    (out / "gradebook.csv").write_text("my own notes\n")
    assert _grade(str(notebook), "--out", str(out), "--merge") == 2
    assert "has no student and lab columns" in capsys.readouterr().err


def test_a_new_grading_names_the_scores_changed_by_hand(tmp_path, scores, capsys):
    """Without --merge the earlier gradebook is renamed (as before), and the summary now names each hand change."""
    subs, out = _class(tmp_path), tmp_path / "graded"
    assert _grade(str(subs), "--out", str(out)) == 0
    _set(out, {"carol": 5}, "score")
    capsys.readouterr()
    assert _grade(str(subs), "--out", str(out)) == 0
    printed = capsys.readouterr().out
    (kept,) = [p.name for p in out.glob("gradebook-*.csv")]
    assert f"CHANGED BY HAND in the earlier gradebook.csv and not in this one: carol {LAB} score: 5" in printed
    assert f"The earlier file is kept as {kept}" in printed and "--merge" in printed


def test_rows_record_which_gpulab_graded(tmp_path, scores):
    from gpulab.grading import provenance

    subs, out = _class(tmp_path), tmp_path / "graded"
    gradebook.grade_folder(subs, SOLUTIONS, out, progress=False)
    rows = _rows(out)
    header = next(csv.reader(open(out / "gradebook.csv")))
    assert header[:6] == ["student", "lab", "notebook", "submitted_at", "score", "max_score"], header
    assert header[-4:] == ["ptx_not_checked", "graded_at", "gpulab_version", "gpulab_commit"], header
    from gpulab import __version__

    assert {r["gpulab_version"] for r in rows.values()} == {__version__}
    assert {r["gpulab_commit"] for r in rows.values()} == {provenance.gpulab_commit()}
    assert all(r["graded_at"][:2] == "20" for r in rows.values())


def test_the_commit_is_the_checkouts_or_unknown(tmp_path, monkeypatch):
    from gpulab.grading import provenance

    package = ROOT / "src" / "gpulab"
    if subprocess.run(["git", "-C", str(package), "rev-parse", "HEAD"], capture_output=True).returncode == 0:
        sha = subprocess.run(["git", "-C", str(package), "rev-parse", "--short=12", "HEAD"], capture_output=True)
        assert provenance.gpulab_commit(str(package)).startswith(sha.stdout.decode().strip())
    copy = tmp_path / "gpulab"  # a copy (an installed wheel): not a checkout
    copy.mkdir()
    (copy / "__init__.py").write_text("")
    assert provenance.gpulab_commit(str(copy)) == "unknown"
    monkeypatch.setenv("PATH", str(tmp_path))  # no git at all
    assert provenance.gpulab_commit(str(package) + "/") == "unknown"
    assert provenance.submitted_at(tmp_path / "nowhere" / "x.ipynb") == ""


def test_advice_for_the_teacher_stays_off_the_students_page(tmp_path):
    """review s24-rD M2: "have the student paste it into the current student version" reached the student."""
    import nbformat

    from gpulab.grading.audience import FOR_TEACHER, for_student, for_teacher

    nb = nbformat.read(str(STUDENT), as_version=4)
    for c in nb.cells:  # an older release: its answer cell has another grade_id and cell id
        meta = c.metadata.get("nbgrader", {})
        if meta.get("grade_id") == "lab01-affine":
            meta["grade_id"], c["id"] = "lab01-affine-old", "older-release-cell"
    note = next(n for n in assemble(SOLUTIONS / f"{LAB}.ipynb", nb).notes if "lab01-affine-old" in n)
    assert f"{FOR_TEACHER}have the student paste it into the current student version" in note, note
    student_part = for_student(note)
    assert "Their code was not graded" in student_part and "paste" not in student_part
    rows = [GradeRow("lab01-add-check", 2, 0, "not graded", for_teacher("not graded: truncated", "ask again"))]
    graded = Graded("x.ipynb", LAB, "simulator", "t", rows, [note, for_teacher("", "the process started late")])
    page = tmp_path / "page.html"
    gradebook.write_feedback(graded, page, "eve")
    html = page.read_text()
    assert "Their code was not graded" in html and "not graded: truncated" in html
    assert not any(t in html for t in ("For the teacher", "paste", "started late", "ask again")), html
    assert html.count("<li>") == 1  # the note that is all advice is left out


def test_the_class_table_cuts_notes_at_a_word(tmp_path):
    note = "your edit of the lab's own cell 5 (counting from 1, text cells included) was not run: the grader runs " * 2
    graded = Graded("x.ipynb", LAB, "simulator", "t", [GradeRow("a", 1, 1, "passed", "")], [note, "more"])
    line = next(ln for ln in gradebook.Gradebook([("ivan", graded)], tmp_path).summary().splitlines() if "ivan" in ln)
    shown = line.split("note: ", 1)[1].split(" (+1 more")[0]
    assert shown.endswith("...") and note.startswith(shown[:-3]) and note[len(shown) - 3] == " ", shown


def test_a_root_without_labs_is_refused_with_what_root_is(tmp_path, capsys):
    (tmp_path / "course" / "source").mkdir(parents=True)
    assert labs.main(["grade", str(STUDENT), "--root", str(tmp_path / "course")]) == 2
    err = capsys.readouterr().err
    assert "--root takes a clone of the gpulab repository" in err and "pass --lab with one of: \n" not in err


def test_one_notebook_filed_under_a_name_the_gradebook_lacks_is_said(tmp_path, scores, capsys):
    """Review: `course/lab01/alice.ipynb` merged alone is named from its folders ("course"), while grading its class
    names it alice. A name the gradebook has no row for is said, with how to file it right; a known one is not."""
    subs, out = _class(tmp_path), tmp_path / "graded"
    assert _grade(str(subs), "--out", str(out)) == 0
    capsys.readouterr()
    assert _grade(str(subs / "carol" / LAB / f"{LAB}.ipynb"), "--out", str(out), "--merge") == 0
    assert "NEW student" not in capsys.readouterr().out
    loose = tmp_path / "course" / "lab01" / "alice.ipynb"
    loose.parent.mkdir(parents=True)
    shutil.copy(STUDENT, loose)
    scores["course"] = 2.0
    assert _grade(str(loose), "--out", str(out), "--merge") == 0
    said = capsys.readouterr().out
    assert "was filed as a NEW student 'course'" in said and "<student>/alice.ipynb" in said, said


@pytest.mark.parametrize("lost", ["gradebook.json", "gradebook.csv"])
def test_merge_refuses_a_gradebook_with_one_of_its_two_files(tmp_path, scores, capsys, lost):
    """Review: with gradebook.json gone, a merge could not see scores changed by hand and wrote a JSON of one row;
    with the CSV gone, a CSV of one row. Refused before grading, with what to do; nothing is written."""
    subs, out = _class(tmp_path), tmp_path / "graded"
    assert _grade(str(subs), "--out", str(out)) == 0
    (out / lost).unlink()
    before = sorted(p.name for p in out.iterdir())
    assert _grade(str(subs / "bob" / LAB / f"{LAB}.ipynb"), "--out", str(out), "--merge") == 2
    err = capsys.readouterr().err
    assert f"but no {lost}: --merge needs both" in err and "without --merge" in err, err
    assert sorted(p.name for p in out.iterdir()) == before
