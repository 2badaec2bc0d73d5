"""Colab badge / setup cell / metadata sync (``python -m gpulab notebooks``)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import nbformat
import pytest

from gpulab import _meta, nbtools

ROOT = Path(__file__).resolve().parents[1]
KERNELSPEC = {"name": "python3", "display_name": "Python 3", "language": "python"}


def _write_nb(
    path: Path,
    *,
    badge: str | None = None,
    setup: str | None = "old install",
    meta: dict | None = None,
    with_outputs: bool = True,
) -> nbformat.NotebookNode:
    path.parent.mkdir(parents=True, exist_ok=True)
    title = "# 03 · Memory coalescing"
    md = nbformat.v4.new_markdown_cell(title + ("\n" + badge if badge else "") + "\n\nIntro text.")
    cells = [md]
    if setup is not None:
        cells.append(nbformat.v4.new_code_cell(setup, metadata={"tags": ["colab-setup"]}))
    code = nbformat.v4.new_code_cell("import gpulab\nprint(gpulab.banner())", execution_count=3)
    if with_outputs:
        code.outputs = [nbformat.v4.new_output("stream", name="stdout", text="gpulab 0.1.0 · simulator\n")]
    cells += [code, nbformat.v4.new_markdown_cell("## Learning goals\n- one")]
    nb = nbformat.v4.new_notebook(cells=cells, metadata=meta or {"kernelspec": KERNELSPEC})
    nbformat.write(nb, path)
    return nb


def _run(tmp_path: Path, *args: str) -> int:
    return nbtools.main([*args, "--root", str(tmp_path)])


def test_badge_and_setup_are_built_from_meta():
    line = nbtools.badge_line("notebooks/03_coalescing.ipynb")
    assert line == (
        "[![Open In Colab](https://colab.research.google.com/assets/colab-badge.svg)]"
        f"(https://colab.research.google.com/github/{_meta.REPO}/blob/{_meta.BRANCH}/notebooks/03_coalescing.ipynb)"
    )
    src = nbtools.setup_source()
    assert 'if "google.colab" in sys.modules:' in src
    assert f'--no-deps "gpulab @ git+{_meta.REPO_URL}@{_meta.BRANCH}"' in src


def test_setup_cell_never_names_colab_protected_packages():
    """Only --no-deps touches gpulab; the second pip line must not mention numba-cuda, cupy, widgets, plotly."""
    second = [ln for ln in nbtools.setup_source().splitlines() if "pip install" in ln and "--no-deps" not in ln]
    assert len(second) == 1
    for pkg in nbtools.PROTECTED_ON_COLAB + ("cupy",):
        assert pkg not in second[0]
    assert "--upgrade" not in nbtools.setup_source() and " -U " not in nbtools.setup_source()


def test_setup_cell_covers_every_runtime_dependency():
    """Each dependency in pyproject.toml is either protected (Colab's own) or named in the setup cell."""
    tomllib = pytest.importorskip("tomllib")
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    names = {d.split(">")[0].split("=")[0].split("[")[0].split("<")[0].strip().lower() for d in deps}
    extras = {r.split(">")[0].lower() for r in nbtools.COLAB_EXTRA_REQUIREMENTS}
    missing = names - extras - set(nbtools.PROTECTED_ON_COLAB)
    assert not missing, f"pyproject dependencies not installed on Colab by the setup cell: {missing}"


def test_sync_adds_badge_setup_and_metadata_and_keeps_other_cells(tmp_path):
    path = tmp_path / "notebooks" / "03_coalescing.ipynb"
    before = _write_nb(path)
    assert _run(tmp_path, "check") == 1
    assert _run(tmp_path, "sync") == 0
    after = nbformat.read(path, as_version=4)
    assert nbtools.badge_line("notebooks/03_coalescing.ipynb") in after.cells[0].source.split("\n")
    assert after.cells[0].source.startswith("# 03 · Memory coalescing\n")
    assert after.cells[0].source.endswith("Intro text.")
    assert after.cells[1].source == nbtools.setup_source()
    assert after.cells[1].metadata.tags == ["colab-setup"]
    assert after.cells[2] == before.cells[2]  # outputs and execution count untouched
    assert after.cells[3] == before.cells[3]
    assert after.metadata.accelerator == "GPU"
    assert after.metadata.colab == {"gpuType": "T4", "provenance": []}
    assert after.metadata.kernelspec.name == "python3"
    nbformat.validate(after)
    assert _run(tmp_path, "check") == 0


def test_sync_is_idempotent_and_leaves_current_files_byte_identical(tmp_path):
    path = tmp_path / "labs" / "solutions" / "01_lab.ipynb"
    _write_nb(path)
    assert _run(tmp_path, "sync") == 0
    first = path.read_bytes()
    mtime = path.stat().st_mtime_ns
    assert _run(tmp_path, "sync") == 0
    assert path.read_bytes() == first
    assert path.stat().st_mtime_ns == mtime  # not rewritten at all


def test_sync_replaces_a_stale_badge_and_inserts_a_missing_setup_cell(tmp_path):
    path = tmp_path / "labs" / "student" / "02_lab.ipynb"
    stale = "[![Open In Colab](https://colab.research.google.com/assets/colab-badge.svg)](https://colab.research.google.com/github/someone/fork/blob/dev/x.ipynb)"
    _write_nb(path, badge=stale, setup=None)
    assert _run(tmp_path, "sync") == 0
    nb = nbformat.read(path, as_version=4)
    text = nb.cells[0].source
    assert "someone/fork" not in text and text.count("colab-badge.svg") == 1
    assert nbtools.colab_url("labs/student/02_lab.ipynb") in text
    assert [c.cell_type for c in nb.cells] == ["markdown", "code", "code", "markdown"]
    assert "colab-setup" in nb.cells[1].metadata.tags and nb.cells[1].outputs == []
    nbformat.validate(nb)


def test_sync_keeps_colab_metadata_it_does_not_own(tmp_path):
    path = tmp_path / "notebooks" / "00_why.ipynb"
    _write_nb(
        path,
        meta={"colab": {"name": "00_why.ipynb", "gpuType": "A100"}, "accelerator": "TPU", "kernelspec": KERNELSPEC},
    )
    assert _run(tmp_path, "sync") == 0
    meta = nbformat.read(path, as_version=4).metadata
    assert meta.colab == {"name": "00_why.ipynb", "gpuType": "T4", "provenance": []}
    assert meta.accelerator == "GPU"


def test_check_names_each_problem(tmp_path, capsys):
    path = tmp_path / "notebooks" / "05_x.ipynb"
    _write_nb(path, setup=None)
    assert _run(tmp_path, "check") == 1
    out = capsys.readouterr().out
    assert "notebooks/05_x.ipynb" in out
    assert "Colab badge" in out and "colab-setup" in out and "accelerator" in out
    assert "gpulab notebooks sync" in out


def test_sync_of_a_notebook_outside_the_root_is_refused(tmp_path, capsys):
    outside = tmp_path / "elsewhere" / "x.ipynb"
    _write_nb(outside)
    (tmp_path / "root").mkdir()
    assert nbtools.main(["sync", str(outside), "--root", str(tmp_path / "root")]) == 2
    assert "outside the repository" in capsys.readouterr().err


def test_command_is_registered():
    from gpulab.cli import COMMANDS

    assert COMMANDS["notebooks"].module == "gpulab.nbtools"


@pytest.mark.skipif(sys.platform == "win32", reason="paths")
def test_every_committed_notebook_is_colab_ready():
    notebooks = nbtools.find_notebooks(ROOT)
    if not notebooks:
        pytest.skip("no notebooks committed yet")
    stale = {}
    for path in notebooks:
        problems = nbtools.check_notebook(json.loads(path.read_text(encoding="utf-8")), path.relative_to(ROOT))
        if problems:
            stale[str(path.relative_to(ROOT))] = problems
    assert not stale, f"run `python -m gpulab notebooks sync`: {stale}"


# ------------------------------------------------------------------------- issue 15: bad paths


@pytest.mark.parametrize(
    "make, match",
    [
        (lambda d: (d / "notebooks" / "list.ipynb").write_text("[1, 2]"), "its JSON is list"),
        (lambda d: (d / "notebooks" / "x.ipynb").mkdir(), "is a folder, not a notebook"),
        (lambda d: None, "does not exist"),
        (lambda d: (d / "notebooks" / "bad.ipynb").write_text("{not json"), "not valid JSON"),
        (lambda d: (d / "notebooks" / "obj.ipynb").write_text('{"a": 1}'), "without a 'cells' list"),
    ],
)
def test_bad_paths_get_a_message_and_exit_2(tmp_path, capsys, make, match):
    (tmp_path / "notebooks").mkdir()
    (tmp_path / "pyproject.toml").write_text("")
    make(tmp_path)
    name = {
        "its JSON is list": "list",
        "is a folder, not a notebook": "x",
        "does not exist": "missing",
        "not valid JSON": "bad",
        "without a 'cells' list": "obj",
    }[match]
    code = nbtools.main(["check", str(tmp_path / "notebooks" / f"{name}.ipynb"), "--root", str(tmp_path)])
    err = capsys.readouterr().err
    assert code == 2 and match in err and "Traceback" not in err, err


def test_check_outside_the_repository_is_an_error_not_success(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert nbtools.main(["check"]) == 2
    assert "not the gpulab repository" in capsys.readouterr().err


def test_a_folder_argument_is_expanded(tmp_path, capsys):
    _write_nb(tmp_path / "notebooks" / "05_x.ipynb")
    assert nbtools.main(["sync", str(tmp_path / "notebooks"), "--root", str(tmp_path)]) == 0
    assert "synced notebooks/05_x.ipynb" in capsys.readouterr().out
