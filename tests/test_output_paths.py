"""Every command that writes a results file treats its path alike (:func:`gpulab.nn.io.prepare_output_file`).

``bench kernels --json/--html``, ``bench lessons --json``, ``bench cnn --json`` and ``train --json/--save``: a
missing folder is created (as ``mkdir -p``) and the file written there; a path that is a folder, or under a file, or
in a folder that cannot be written, or an existing file that cannot be written is refused before any work, with
the option, what was given and what to do, as one message and exit status 2 (never a traceback).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

from gpulab import train_cli
from gpulab.bench import cnn
from gpulab.bench import kernels as bk
from gpulab.bench import lessons
from gpulab.cli import main
from gpulab.errors import UsageError
from gpulab.nn import io as nn_io

TRAIN = [
    *("train --dataset digits --digits-size 8 --channels 2,3 --hidden 8 --limit 64 --test-limit 32".split()),
    *("--epochs 1 --batch-size 32 --backend numpy --workers 1".split()),
]
CNN = "bench cnn --backend numpy --rounds 1 --steps 1 --warmup 0 --batch-size 8 --channels 2,3 --hidden 8".split()
# (command line before the output option, the option, a file name, the work that must not start for a bad path)
COMMANDS = [
    ("bench kernels --sizes 32 --kernels copy".split(), "--json", "kernels.json", (bk, "measure")),
    ("bench kernels --sizes 32 --kernels copy".split(), "--html", "kernels.html", (bk, "measure")),
    ("bench lessons --only conv".split(), "--json", "lessons.json", (lessons, "measure")),
    (CNN, "--json", "cnn.json", (cnn, "measure_gpulab")),
    (TRAIN, "--json", "history.json", (train_cli, "fit")),
    (TRAIN, "--save", "model.npz", (train_cli, "fit")),
]
IDS = [f"{' '.join(c[0][:2] if c[0][0] == 'bench' else c[0][:1])} {c[1]}" for c in COMMANDS]


def _fake_lesson_rows(monkeypatch):
    """bench lessons' sections take minutes; its output path is what is tested here."""

    def measure(only=None, log=print, *, on_section=None, failed=None):
        rows = [{"label": "direct", "seconds": 0.001, "gflops": 1.0}]
        if on_section is not None:
            on_section("conv", rows)
        return {"conv": rows}

    monkeypatch.setattr(lessons, "measure", measure)


@pytest.mark.parametrize(("argv", "flag", "name", "work"), COMMANDS, ids=IDS)
def test_a_missing_folder_is_created_and_the_file_written_there(argv, flag, name, work, tmp_path, monkeypatch):
    if argv[0] == "train":
        pytest.importorskip("sklearn")  # the digits data set
    if argv[:2] == ["bench", "lessons"]:
        _fake_lesson_rows(monkeypatch)
    out = tmp_path / "new" / "deeper" / name
    assert main([*argv, flag, str(out)], prog="gpulab") == 0
    assert out.is_file()
    if out.suffix == ".json":
        assert isinstance(json.loads(out.read_text()), dict)
    elif out.suffix == ".npz":
        with np.load(out) as f:
            assert str(f["optimizer.type"]) == "Adam"
    else:
        assert "<table" in out.read_text(encoding="utf-8")


def _bad_path(kind: str, tmp_path: Path, name: str, monkeypatch) -> tuple[Path, str]:
    """A path of ``kind`` and the words the refusal must say."""
    if kind == "folder":
        (tmp_path / "d").mkdir()
        return tmp_path / "d", "is a folder, not a file; give a file name, e.g."
    if kind == "under a file":
        (tmp_path / "f.txt").write_text("a file")
        return tmp_path / "f.txt" / "sub" / name, "is a file, not a folder"
    real = os.access  # as root every path is writable: os.access says what a user without permission is told
    if kind == "folder not writable":
        (tmp_path / "ro").mkdir()
        monkeypatch.setattr(
            nn_io.os, "access", lambda p, m, **k: False if Path(p) == tmp_path / "ro" else real(p, m, **k)
        )
        return tmp_path / "ro" / name, "is not writable (given"
    (tmp_path / name).write_text("old")
    monkeypatch.setattr(nn_io.os, "access", lambda p, m, **k: False if Path(p) == tmp_path / name else real(p, m, **k))
    return tmp_path / name, "exists and is not writable"


@pytest.mark.parametrize("kind", ["folder", "under a file", "folder not writable", "file not writable"])
@pytest.mark.parametrize(("argv", "flag", "name", "work"), COMMANDS, ids=IDS)
def test_a_bad_path_is_refused_before_any_work(argv, flag, name, work, kind, tmp_path, monkeypatch, capsys):
    module, function = work
    monkeypatch.setattr(module, function, lambda *a, **k: pytest.fail("the work started"))
    path, said = _bad_path(kind, tmp_path, name, monkeypatch)
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    assert main([*argv, flag, str(path)], prog="gpulab") == 2
    err = capsys.readouterr().err
    assert err.count("error:") == 1 and "Traceback" not in err, err
    assert f"{flag}: " in err and said in err and "choose another path" in err, err
    assert str(path) in err or repr(str(path)) in err, err
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == before  # no folder made, no file


def test_the_file_given_is_named_when_its_folder_cannot_be_created(tmp_path, monkeypatch):
    """mkdir's own failure (no permission, a read-only file system): what was given, and why."""

    def refuse(self, *a, **k):
        raise PermissionError(13, "Permission denied", str(self))

    monkeypatch.setattr(Path, "mkdir", refuse)
    with pytest.raises(UsageError) as e:
        nn_io.prepare_output_file(tmp_path / "new" / "r.json", "--json")
    msg = str(e.value)
    assert msg.startswith("--json: cannot create the folder") and "r.json" in msg and "Permission denied" in msg
