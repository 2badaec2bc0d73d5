"""The Makefile's choice of Python for a new .venv: Python 3.12 when one can make a venv, else ``python3``; an
existing .venv is kept. Run as ``make -n`` (prints the commands, runs none) with a PATH of stand-in Pythons."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.skipif(shutil.which("make") is None or os.name != "posix", reason="needs make (POSIX)")


def _fake(bin_dir: Path, name: str, script: str) -> Path:
    bin_dir.mkdir(parents=True, exist_ok=True)
    p = bin_dir / name
    p.write_text("#!/bin/sh\n" + script + "\n")
    p.chmod(0o755)
    return p


def _venv_command(tmp_path: Path, venv: Path) -> list[str]:
    """The lines ``make -n lab`` prints that make a venv, on a machine whose PATH is the stand-ins, then /usr/bin."""
    env = {"PATH": f"{tmp_path / 'bin'}:/usr/bin:/bin", "HOME": str(tmp_path / "home")}  # no ~/.pyenv, no $PYTHON
    out = subprocess.run(
        ["make", "-n", "-C", str(REPO), "lab", f"VENV={venv}"], env=env, capture_output=True, text=True, check=True
    ).stdout
    return [line for line in out.splitlines() if " -m venv " in line]


@pytest.mark.parametrize(
    "script, picks",
    [
        ('echo "pyenv: python3.12: command not found" >&2; exit 127', "python3"),  # a pyenv shim without 3.12
        ('case "$*" in *ensurepip*) exit 1;; esac; exit 0', "python3"),  # Debian's python3.12 without python3.12-venv
        ("exit 0", "python3.12"),  # a Python 3.12 that can make a venv
    ],
    ids=["failing-shim", "no-ensurepip", "working"],
)
def test_a_new_venv_is_made_with_python_3_12_only_when_it_can_make_one(tmp_path, script, picks):
    fake = _fake(tmp_path / "bin", "python3.12", script)
    venv = tmp_path / "venv"
    want = str(fake) if picks == "python3.12" else "python3"
    assert _venv_command(tmp_path, venv) == [f"{want} -m venv {venv}"]


def test_an_existing_venv_is_kept(tmp_path):
    _fake(tmp_path / "bin", "python3.12", "exit 0")
    venv = tmp_path / "venv"
    _fake(venv / "bin", "python", "exit 0")  # made earlier, with another Python
    assert _venv_command(tmp_path, venv) == []


def test_test_py313_skips_with_a_message_where_there_is_no_python_3_13(tmp_path):
    """CI calls it on every machine: without a Python 3.13 it says so and succeeds, making no venv."""
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path / "home")}  # no ~/.pyenv; python3.13 not on this PATH
    if shutil.which("python3.13", path=env["PATH"]):
        pytest.skip("this machine has a python3.13 in /usr/bin")
    venv = tmp_path / "py313"
    r = subprocess.run(
        ["make", "-s", "-C", str(REPO), "test-py313", f"PY313_VENV={venv}"], env=env, capture_output=True, text=True
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert "test-py313: no Python 3.13 (with venv) found: skipped" in r.stdout and not venv.exists()
