"""``gpulab bench kernels|lessons|cnn``: measured throughput, never asserted in tests.

Each suite is a module here with ``configure(parser)`` / ``run(ns)`` (see :mod:`gpulab.cli`, which
holds the one command tree); ``main(argv)`` is kept for callers that pass a list.
"""

from __future__ import annotations

import sys

__all__ = ["failure", "main"]


def failure(exc: BaseException) -> str:
    """How a benchmark's report names a case or section that raised: ``"Error: message"`` (the message cut to
    500 characters), the same in ``bench kernels`` and ``bench lessons``."""
    return f"{type(exc).__name__}: {str(exc).strip()[:500]}"


def main(argv: list[str] | None = None) -> int:
    """``gpulab bench SUITE ...`` for callers that pass a list."""
    from ..cli import main as cli_main

    return cli_main(["bench", *(sys.argv[1:] if argv is None else argv)])
