"""Errors meant for a person, and argparse types that check a value where it enters.

Every message says what is wrong, what was given and what to do. Library code raises these; only
the command line (``gpulab.__main__``) turns them into a message and exit code 2, without a
traceback unless ``--debug`` is given.
"""

from __future__ import annotations

import argparse
import math
import numbers
from collections.abc import Callable
from typing import Any

__all__ = [
    "FolderMissingError",
    "FolderNotWritableError",
    "GpulabError",
    "UsageError",
    "int_at_least",
    "one_line",
    "positive_float",
    "finite_float",
    "whole_number",
]


class GpulabError(Exception):
    """An error whose message is for the user: what is wrong, what was given, what to do."""


class UsageError(GpulabError, ValueError):
    """A bad argument or input, found before any long work started."""


def one_line(exc: BaseException, limit: int = 160) -> str:
    """``"Error: the message's first line"`` (cut to ``limit`` characters): how a reading that degrades instead of
    raising (a GPU attribute, free memory) says in its output why its figure is missing."""
    first = (str(exc).strip().splitlines() or [""])[0]
    return f"{type(exc).__name__}: {first[:limit]}" if first else type(exc).__name__


class FolderMissingError(UsageError, FileNotFoundError):
    """The folder of a file to write does not exist: a :class:`UsageError` for the command line, and a
    :class:`FileNotFoundError` for code that catches what ``open`` would raise."""


class FolderNotWritableError(UsageError, PermissionError):
    """The folder of a file to write cannot be written: a :class:`UsageError` and a :class:`PermissionError`."""


def whole_number(
    name: str, value: Any, *, low: int = 1, example: str = "", error: type[UsageError] = UsageError
) -> int:
    """``value`` as an int >= ``low``; a float (``stride=2.7``), bool or string is refused, not rounded (a whole
    float such as ``8.0`` is taken as 8). ``error`` is the class raised (a :class:`UsageError`)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        if not isinstance(value, bool) and isinstance(value, numbers.Real) and float(value).is_integer():
            return whole_number(name, int(float(value)), low=low, example=example, error=error)
        raise error(
            f"{name} must be a whole number >= {low}, but got {value!r} ({type(value).__name__}); "
            f"it is never rounded for you.{' ' + example if example else ''}"
        )
    if int(value) < low:
        raise error(f"{name} must be >= {low}, but got {int(value)}.{' ' + example if example else ''}")
    return int(value)


def int_at_least(low: int, what: str = "a whole number") -> Callable[[str], int]:
    """An argparse ``type=``: an integer >= ``low`` (``--epochs 0`` is refused, not ignored)."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {what} >= {low}, got {text!r}") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"expected {what} >= {low}, got {value}")
        return value

    parse.__name__ = f"int>={low}"
    return parse


def finite_float(text: str) -> float:
    """An argparse ``type=``: a finite number (not nan or inf)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"expected a finite number, got {text!r}")
    return value


def positive_float(text: str) -> float:
    """An argparse ``type=``: a finite number > 0 (``--lr -1``, ``--timeout 0`` are refused)."""
    value = finite_float(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected a number > 0, got {text!r}")
    return value
