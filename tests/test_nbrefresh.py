"""``gpulab notebooks execute``: notebooks run again in place in simulator mode, written back only when every cell
ran, their language_info kept."""

import subprocess
import sys

import nbformat
import pytest

from gpulab import nbrefresh, nbtools
from gpulab.errors import UsageError


def _notebook(path, *sources, version="3.11.7"):
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(s) for s in sources]
    nb.metadata["language_info"] = {"name": "python", "version": version}
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, str(path))
    return path


def test_a_notebook_runs_in_simulator_mode_and_keeps_its_language_info(tmp_path, monkeypatch):
    monkeypatch.setenv("GPULAB_DEVICE", "gpu")  # this process's mode does not reach the kernel
    nb_path = _notebook(
        tmp_path / "a.ipynb",
        "import os, sys\nprint(os.environ['GPULAB_DEVICE'], sys.executable)",
        "import ipywidgets\nipywidgets.IntSlider(value=3)",
    )
    ok, why = nbrefresh.execute_in_place(nb_path, cell_timeout=120)
    assert ok and why == ""
    nb = nbformat.read(str(nb_path), as_version=4)
    assert nb.cells[0].outputs[0]["text"] == f"simulator {sys.executable}\n"
    assert nb.metadata["language_info"]["version"] == "3.11.7"  # as committed, not this Python's
    state = nb.metadata["widgets"]["application/vnd.jupyter.widget-state+json"]["state"]
    assert any(m["state"].get("value") == 3 for m in state.values())  # the widget's state is stored
    assert not list(tmp_path.glob(".*executing"))
    import os

    assert os.environ["GPULAB_DEVICE"] == "gpu"


def test_a_failing_notebook_is_left_as_it_was(tmp_path):
    nb_path = _notebook(tmp_path / "b.ipynb", "x = 1", "raise ValueError('wrong answer')", "print('never')")
    before = nb_path.read_bytes()
    ok, why = nbrefresh.execute_in_place(nb_path, cell_timeout=120)
    assert not ok and why.startswith("cell 1: ValueError: wrong answer"), why
    assert nb_path.read_bytes() == before


def test_a_cell_over_its_time_is_a_failure(tmp_path):
    nb_path = _notebook(tmp_path / "c.ipynb", "import time\ntime.sleep(30)")
    before = nb_path.read_bytes()
    ok, why = nbrefresh.execute_in_place(nb_path, cell_timeout=3)
    assert not ok and why.startswith("cell 0:") and "3 seconds" in why, why
    assert nb_path.read_bytes() == before


def test_the_command_reports_each_notebook_and_exits_1_when_one_failed(tmp_path, capsys):
    good = _notebook(tmp_path / "good.ipynb", "print(1 + 1)")
    bad = _notebook(tmp_path / "bad.ipynb", "1 / 0")
    parser = __import__("argparse").ArgumentParser()
    nbtools.configure(parser)
    ns = parser.parse_args(["execute", str(good), str(bad), "--root", str(tmp_path), "--cell-timeout", "120"])
    assert nbtools.run(ns) == 1
    out = capsys.readouterr().out
    assert "executed good.ipynb" in out and "FAILED bad.ipynb, left as it was: cell 0: ZeroDivisionError" in out
    assert "1 of 2 notebooks failed" in out
    with pytest.raises(UsageError, match="--cell-timeout 0"):
        nbtools.run(parser.parse_args(["execute", str(good), "--root", str(tmp_path), "--cell-timeout", "0"]))


def test_the_command_line_refuses_a_file_that_is_not_a_notebook(tmp_path):
    (tmp_path / "x.ipynb").write_text("not json")
    r = subprocess.run(
        [sys.executable, "-m", "gpulab", "notebooks", "execute", str(tmp_path / "x.ipynb"), "--root", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 2 and "x.ipynb" in r.stderr and "Traceback" not in r.stderr, r.stderr
