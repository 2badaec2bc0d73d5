"""A learner's mistake made in a kernel's real source: :func:`edited` replaces pieces of the source text, asserting
each is there (so a test whose kernel changed fails naming the missing piece, instead of quietly testing the
unchanged kernel), and :func:`edited_kernel` defines the result as a notebook cell would (gpulab.source.define)."""

from __future__ import annotations

from typing import Any

from gpulab.source import define


def edited(src: str, *edits: tuple[str, str], count: int = -1) -> str:
    """``src`` with each ``(old, new)`` of ``edits`` applied in turn: ``count`` occurrences of ``old`` (default:
    every one) replaced by ``new``. Fails when an ``old`` is not in the source it is applied to."""
    for old, new in edits:
        assert old in src, f"the source no longer has {old!r}: update this edit"
        src = src.replace(old, new, count)
    return src


def edited_kernel(src: str, name: str, namespace: dict[str, Any], *edits: tuple[str, str], count: int = -1) -> Any:
    """The function ``name`` that ``edited(src, *edits, count=count)`` defines, run in a copy of ``namespace``."""
    return define(edited(src, *edits, count=count), name, dict(namespace))
