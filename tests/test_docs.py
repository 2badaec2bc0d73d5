"""The documents agree with the code where a teacher acts on them: labs/README.md's table of graded cells and its
list of the cells without hidden tests (against the solution notebooks), and the `grade` extra that
teachers/README.md installs (it must bring what grading needs, and nbgrader as the student image pins it)."""

from __future__ import annotations

import fnmatch
import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LABS_README = ROOT / "labs" / "README.md"
# one graded cell in a row of the table: "challenge `rotate`: what it asks (2)"
ENTRY = re.compile(r"(?P<challenge>challenge )?`(?P<name>[a-z0-9-]+)`: .+ \((?P<points>\d+)\)")


def _graded_cells(notebook: Path) -> list[dict]:
    """Each graded cell of a solution notebook, in order: name, points, challenge (under a "## Challenge" heading),
    hidden (has a hidden-tests region)."""
    cells, heading = [], ""
    for cell in json.loads(notebook.read_text(encoding="utf-8"))["cells"]:
        source = "".join(cell["source"])
        if cell["cell_type"] == "markdown":
            heading = next((ln for ln in reversed(source.splitlines()) if ln.startswith("## ")), heading)
            continue
        meta = cell.get("metadata", {}).get("nbgrader", {})
        if meta.get("grade"):
            grade_id = meta["grade_id"]
            name = re.fullmatch(r"lab\d\d-(.+)-check", grade_id)
            assert name, f"{notebook.name}: grade_id {grade_id!r} is not labNN-NAME-check"
            cells.append(
                {
                    "name": name.group(1),
                    "grade_id": grade_id,
                    "points": meta["points"],
                    "challenge": heading.startswith("## Challenge"),
                    "hidden": "### BEGIN HIDDEN TESTS" in source,
                }
            )
    return cells


def _table() -> dict[str, tuple[str, str]]:
    """labs/README.md's table: lab -> (graded cells column, total column)."""
    rows = {}
    for line in LABS_README.read_text(encoding="utf-8").splitlines():
        m = re.fullmatch(r"\| `(lab\d\d_\w+)` \|(.*)\|", line)
        if m:
            cols = [c.strip() for c in m.group(2).split(" | ")]
            assert len(cols) == 3, f"labs/README.md: the row of {m.group(1)} has {len(cols) + 1} columns, not 4: {line}"
            rows[m.group(1)] = (cols[1], cols[2])
    return rows


def _entries(column: str) -> list[re.Match]:
    parts = re.split(r"; (?=(?:challenge )?`[a-z0-9-]+`: )", column)
    found = [ENTRY.fullmatch(p) for p in parts]
    bad = [p for p, m in zip(parts, found) if m is None]
    assert not bad, f'labs/README.md: not of the form "[challenge ]`name`: what it asks (points)": {bad}'
    return [m for m in found if m is not None]


SOLUTIONS = sorted((ROOT / "labs" / "solutions").glob("lab*.ipynb"))


def test_the_table_has_a_row_per_lab():
    assert SOLUTIONS
    assert sorted(_table()) == [p.stem for p in SOLUTIONS]


@pytest.mark.parametrize("solution", SOLUTIONS, ids=lambda p: p.stem)
def test_the_tables_graded_cells_are_the_notebooks(solution):
    """Names, order, points, which are challenges, and the total: a renamed or added exercise fails here until its
    row says what the lab now asks."""
    column, total = _table()[solution.stem]
    said = [(m["name"], int(m["points"]), bool(m["challenge"])) for m in _entries(column)]
    cells = _graded_cells(solution)
    real = [(c["name"], c["points"], c["challenge"]) for c in cells]
    assert said == real, f"labs/README.md's row of {solution.stem} says {said}; the notebook has {real}"
    assert int(total) == sum(c["points"] for c in cells)


def test_the_cells_without_hidden_tests_are_the_ones_named():
    text = LABS_README.read_text(encoding="utf-8")
    bullet = re.search(r"- \*\*Hidden tests\.\*\*(.*?)\n- ", text, re.S)
    assert bullet, "labs/README.md: no **Hidden tests.** bullet"
    named = re.findall(r"`(lab\d\d-[a-z0-9*-]+-check)`", bullet.group(1))
    without = {c["grade_id"] for p in SOLUTIONS for c in _graded_cells(p) if not c["hidden"]}
    covered = {g for g in without if any(fnmatch.fnmatchcase(g, pat) for pat in named)}
    assert covered == without, f"cells without hidden tests that the bullet does not name: {sorted(without - covered)}"
    every = {c["grade_id"] for p in SOLUTIONS for c in _graded_cells(p)}
    wrong = {g for g in every - without if any(fnmatch.fnmatchcase(g, pat) for pat in named)}
    assert not wrong, f"the bullet names cells that have hidden tests: {sorted(wrong)}"
    count = re.search(r"Every graded cell but (\w+) ", bullet.group(1))
    words = {"one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8, "nine": 9}
    assert count and words.get(count.group(1)) == len(without), (count and count.group(1), len(without))


def _requirements(extra: list[str]) -> dict[str, str]:
    out = {}
    for req in extra:
        m = re.match(r"([A-Za-z0-9_.-]+)(\[[^\]]*\])?\s*(.*)", req)
        assert m, req
        out[m.group(1).lower()] = (m.group(2) or "") + m.group(3)
    return out


def test_the_grade_extra_brings_what_grading_needs():
    """Lab 09's training cell needs scikit-learn (the data extra) and the PTX checks NVVM (numba-cuda[cu12], in the
    lab extra): without them a grader gives 0 for a right lab 09 and full marks to a kernel no GPU accepts."""
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["optional-dependencies"]
    grade = _requirements(extras["grade"])
    assert "gpulab" in grade, extras["grade"]
    brought = set(re.findall(r"[\w-]+", grade["gpulab"].split("]")[0]))
    assert {"lab", "data"} <= brought, grade["gpulab"]
    lab = _requirements(extras["lab"])
    assert "[cu12]" in lab["numba-cuda"] and "scikit-learn" in _requirements(extras["data"])


def test_nbgrader_is_pinned_as_in_the_image():
    tomllib = pytest.importorskip("tomllib")
    yaml = pytest.importorskip("yaml")
    from packaging.specifiers import SpecifierSet

    extras = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["optional-dependencies"]
    env = yaml.safe_load((ROOT / "binder" / "environment.yml").read_text(encoding="utf-8"))
    image = next(d for d in env["dependencies"] if isinstance(d, str) and d.startswith("nbgrader"))
    pin = SpecifierSet(image.removeprefix("nbgrader").strip())
    for name in ("grade", "test"):
        assert SpecifierSet(_requirements(extras[name])["nbgrader"]) == pin, (name, extras[name], image)


TEACHERS = ROOT / "teachers"


def _block_after(marker: str, lang: str) -> str:
    text = (TEACHERS / "README.md").read_text(encoding="utf-8")
    at = text.find(marker)
    assert at >= 0, f"teachers/README.md: no {marker}"
    found = re.search(rf"```{lang}\n(.*?)```", text[at:], re.S)
    assert found, f"teachers/README.md: no ```{lang} block after {marker}"
    return "\n".join(line.removeprefix("   ") for line in found.group(1).splitlines())  # inside a numbered list


def test_the_exchange_volume_manifest_is_the_one_the_hub_mounts():
    """teachers/README.md step 2 creates the claim teachers/jupyterhub-config.yaml mounts in every server (no claim:
    every server Pending) and gives its root to uid 1000, the user every server runs as."""
    yaml = pytest.importorskip("yaml")
    docs = list(yaml.safe_load_all(_block_after("<!-- exchange-volume -->", "yaml")))
    kinds = {d["kind"]: d for d in docs}
    hub = yaml.safe_load((TEACHERS / "jupyterhub-config.yaml").read_text(encoding="utf-8"))
    claims = {v["persistentVolumeClaim"]["claimName"] for v in hub["singleuser"]["storage"]["extraVolumes"]}
    pvc = kinds["PersistentVolumeClaim"]
    assert pvc["metadata"]["name"] in claims and pvc["spec"]["accessModes"] == ["ReadWriteMany"]
    pod = kinds["Pod"]["spec"]
    assert {v["persistentVolumeClaim"]["claimName"] for v in pod["volumes"]} == {pvc["metadata"]["name"]}
    (box,) = pod["containers"]
    assert "chown 1000 " in box["command"][-1] and box["securityContext"]["runAsUser"] == 0


def test_the_helm_commands_agree_with_the_hub_config():
    readme = (TEACHERS / "README.md").read_text(encoding="utf-8")
    header = (TEACHERS / "jupyterhub-config.yaml").read_text(encoding="utf-8").split("\nhub:")[0]
    for text in (readme, header):
        assert "helm repo add jupyterhub https://hub.jupyter.org/helm-chart/" in text
        install = re.search(r"helm upgrade --install gpulab jupyterhub/jupyterhub (.*?)--values", text, re.S)
        assert install and "--version 4.x" in install.group(1) and "--namespace gpulab" in install.group(1)
