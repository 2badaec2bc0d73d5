"""nbgrader needs the ``alembic`` command on PATH: find it where pip put it and put that folder first.

nbgrader creates and upgrades ``gradebook.db`` by running ``alembic`` as a command (nbgrader/api.py), so
``.venv/bin/python -m nbgrader autograde ...`` failed with ``FileNotFoundError: 'alembic'`` unless the venv
was activated, and so did an nbgrader installed with ``pip install --user`` (its commands land in
``~/.local/bin``, often not on PATH). alembic is installed with nbgrader, into the scripts folder of the
installation scheme pip used; :func:`put_alembic_on_path` looks in this Python's folder, then the user
scheme's, and prepends the first that holds it. ``teachers/nbgrader_config.py`` calls it.
"""

from __future__ import annotations

import os
import sysconfig
from collections.abc import MutableMapping

__all__ = ["alembic_folders", "put_alembic_on_path"]


def alembic_folders() -> list[str]:
    """The folders where pip puts this Python's commands: its own scheme's scripts, then the user scheme's."""
    folders = [sysconfig.get_path("scripts")]
    try:
        folders.append(sysconfig.get_path("scripts", sysconfig.get_preferred_scheme("user")))
    except (KeyError, ValueError):  # a Python built without a user scheme
        pass
    return [f for i, f in enumerate(folders) if f and f not in folders[:i]]


def put_alembic_on_path(
    environ: MutableMapping[str, str] | None = None, folders: list[str] | None = None
) -> str | None:
    """Prepend to ``environ["PATH"]`` the first of ``folders`` (default :func:`alembic_folders`) that holds an
    ``alembic`` command, unless PATH already has it first; return that folder, or None when none holds one
    (then PATH is left as it was and nbgrader finds alembic on PATH or says it cannot)."""
    env = os.environ if environ is None else environ
    for folder in alembic_folders() if folders is None else folders:
        exe = os.path.join(folder, "alembic.exe" if os.name == "nt" else "alembic")
        if os.path.isfile(exe) and os.access(exe, os.X_OK):
            path = [p for p in env.get("PATH", "").split(os.pathsep) if p]
            if not path or path[0] != folder:
                env["PATH"] = os.pathsep.join([folder, *path])
            return folder
    return None
