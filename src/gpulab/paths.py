"""Free names beside a file: where a command that must never overwrite something puts its earlier version.

``gpulab course --backup`` moves an edited lesson aside (:func:`gpulab.course.copy_course`) and ``labs grade``
moves an earlier gradebook or feedback folder aside (:func:`gpulab.grading.book_files.aside_name`); each names the
new file from a stamp and, when that name is taken, numbers it (:func:`free_name`).
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["free_name"]


def free_name(beside: Path, base: str, suffix: str = "", first: int = 1) -> Path:
    """The first of ``base + suffix``, ``base-<first> + suffix``, ``base-<first + 1> + suffix``, ... in ``beside``'s
    folder that does not exist (so nothing already there is replaced)."""
    target = beside.with_name(f"{base}{suffix}")
    k = first
    while target.exists():
        target = beside.with_name(f"{base}-{k}{suffix}")
        k += 1
    return target
