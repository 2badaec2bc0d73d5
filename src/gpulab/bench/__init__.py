"""``gpulab bench kernels|lessons|cnn``: measured throughput, never asserted in tests.

Each suite is a module here with ``configure(parser)`` / ``run(ns)`` (see :mod:`gpulab.cli`, which
holds the one command tree); ``main(argv)`` is kept for callers that pass a list.
"""

from __future__ import annotations

import sys
from pathlib import Path

from ..errors import UsageError

__all__ = ["check_writable", "failure", "main"]


def failure(exc: BaseException) -> str:
    """How a benchmark's report names a case or section that raised: ``"Error: message"`` (the message cut to
    500 characters), the same in ``bench kernels`` and ``bench lessons``."""
    return f"{type(exc).__name__}: {str(exc).strip()[:500]}"


def check_writable(path: Path) -> None:
    """Make sure an output file can be written (creating its folder), before any measuring starts, so
    that a bad path is refused at once instead of after the work."""
    import os

    path = Path(path)
    folder = path.parent if str(path.parent) else Path(".")
    if path.is_dir():
        raise UsageError(f"{path} is a folder; give a file name, e.g. {path / 'report.json'}.")
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(
            f"cannot create the folder {folder} for {path} ({exc.strerror or exc}). Choose a writable location."
        ) from exc

    if not os.access(folder, os.W_OK) or (path.exists() and not os.access(path, os.W_OK)):
        raise UsageError(f"{path} cannot be written (no permission). Choose a writable location.")


def main(argv: list[str] | None = None) -> int:
    """``gpulab bench SUITE ...`` for callers that pass a list."""
    from ..cli import main as cli_main

    return cli_main(["bench", *(sys.argv[1:] if argv is None else argv)])
