"""nbgrader_config.py finds the `alembic` command nbgrader runs, in this Python's scripts folder or the user one."""

from __future__ import annotations

import os
import stat
import sysconfig

import pytest

from gpulab.grading.nbgrader_path import alembic_folders, put_alembic_on_path


def _command(folder, name="alembic"):
    folder.mkdir(parents=True, exist_ok=True)
    exe = folder / name
    exe.write_text("#!/bin/sh\n")
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    return str(folder)


def test_the_scheme_folder_then_the_user_folder():
    folders = alembic_folders()
    assert folders[0] == sysconfig.get_path("scripts")
    assert len(folders) == len(set(folders))
    user = sysconfig.get_path("scripts", sysconfig.get_preferred_scheme("user"))
    assert user in folders  # where `pip install --user` puts commands (~/.local/bin on Linux)


@pytest.mark.skipif(os.name == "nt", reason="POSIX executables")
def test_a_user_install_is_found_when_the_venv_has_no_alembic(tmp_path):
    venv, user = str(tmp_path / "venv-bin"), _command(tmp_path / "local-bin")
    env = {"PATH": "/usr/bin:/bin"}
    assert put_alembic_on_path(env, [venv, user]) == user
    assert env["PATH"] == f"{user}:/usr/bin:/bin"


@pytest.mark.skipif(os.name == "nt", reason="POSIX executables")
def test_the_first_folder_holding_alembic_wins_and_is_not_added_twice(tmp_path):
    venv, user = _command(tmp_path / "venv-bin"), _command(tmp_path / "local-bin")
    env = {"PATH": "/usr/bin"}
    assert put_alembic_on_path(env, [venv, user]) == venv
    assert put_alembic_on_path(env, [venv, user]) == venv
    assert env["PATH"] == f"{venv}:/usr/bin"


@pytest.mark.skipif(os.name == "nt", reason="POSIX executables")
def test_no_alembic_anywhere_leaves_path_alone(tmp_path):
    plain = tmp_path / "bin"
    _command(plain, "not-alembic")
    (tmp_path / "dir-named-alembic" / "alembic").mkdir(parents=True)  # a folder, not a command
    env = {"PATH": "/usr/bin"}
    assert put_alembic_on_path(env, [str(plain), str(tmp_path / "dir-named-alembic")]) is None
    assert env == {"PATH": "/usr/bin"}


def test_this_environment_finds_the_alembic_installed_with_nbgrader():
    pytest.importorskip("nbgrader")
    env = {"PATH": ""}
    folder = put_alembic_on_path(env)
    assert folder is not None and os.path.isfile(os.path.join(folder, "alembic"))
    assert env["PATH"] == folder
