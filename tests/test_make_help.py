"""``make help`` lists every target a user may type (review s24-rD L2: it lacked clean, test-fast, setup and
setup-dev, and README.md uses ``make clean``), and README.md's ``make test`` line says that it lints first."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.skipif(shutil.which("make") is None or os.name != "posix", reason="needs make (POSIX)")
def test_make_help_lists_every_phony_target():
    phony = re.search(r"^\.PHONY:(.*)$", (REPO / "Makefile").read_text(), flags=re.M)
    assert phony, "Makefile: no .PHONY line"
    targets = set(phony.group(1).split()) - {"help"}
    shown = subprocess.run(["make", "-s", "-C", str(REPO), "help"], capture_output=True, text=True, check=True).stdout
    listed = {m.group(1) for m in re.finditer(r"^make (\S+)", shown, flags=re.M)}
    assert targets <= listed, f"make help does not list {sorted(targets - listed)}"


def test_readme_says_make_test_lints_first():
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    line = next(ln for ln in readme.splitlines() if ln.startswith("make test "))
    block = readme[readme.index(line) : readme.index("```", readme.index(line))]
    assert "lint (ruff, mypy)" in block and "min on 2 cores" in block, block
