"""``gpulab COMMAND ...`` / ``python -m gpulab COMMAND ...``: see :mod:`gpulab.cli` (the one argparse tree)."""

from __future__ import annotations

import sys

from .cli import COMMANDS, main

__all__ = ["COMMANDS", "main"]

if __name__ == "__main__":
    sys.exit(main())
