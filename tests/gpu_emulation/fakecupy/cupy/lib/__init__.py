"""Emulated ``cupy.lib`` (tests only): only ``stride_tricks`` is emulated."""

from cupy.lib import stride_tricks  # noqa: F401
