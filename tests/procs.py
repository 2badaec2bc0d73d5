"""Live processes, seen through /proc (Linux): the gpu-check and nbexec tests check that nothing they start
outlives them."""

from __future__ import annotations

from pathlib import Path


def alive(pid: int) -> bool:
    """``pid`` is running (it exists and is not a zombie)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ")[1][0] != "Z"
    except (OSError, IndexError):
        return False


def live_with(marker: str) -> dict[int, str]:
    """``{pid: command line}`` of the live processes whose command line or environment holds ``marker``."""
    found = {}
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            cmdline, environ = (proc / "cmdline").read_bytes(), (proc / "environ").read_bytes()
        except OSError:
            continue
        if marker.encode() in cmdline + environ and alive(int(proc.name)):
            found[int(proc.name)] = cmdline.replace(b"\0", b" ").decode(errors="replace")
    return found
