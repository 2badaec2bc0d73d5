"""Where an exception came from, read off its traceback: the learner's code (a kernel or a host function),
gpulab's own code (a launcher such as :mod:`gpulab.kernels.nn_ops`, called with the learner's kernel), or the
launch of the learner's kernel itself (its parameters do not match the arguments, so no line of it ran).

Each frame is the learner's unless its file is gpulab's, Numba's, another installed package's or the standard
library's. gpulab's simulator instrumentation (:mod:`gpulab.simulator`) stands in for the kernel's own reads and
writes, so an error raised there belongs to the kernel line that called it.
"""

from __future__ import annotations

import linecache
import os
import threading
from dataclasses import dataclass
from types import CodeType

__all__ = ["Origin", "origin", "source_line"]

_GPULAB = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # .../gpulab
_SIMULATOR = os.path.join(_GPULAB, "simulator") + os.sep
_HARNESS = os.path.join(_GPULAB, "exercises", "run.py")  # the check's own launch
_STDLIB = os.path.dirname(threading.__file__)


_INSTALLED = ("site-packages", "dist-packages")  # dist-packages: Debian's and Colab's installed packages
_CYTHON = (".pyx", ".pxd", ".pxi")  # CuPy's compiled modules name their source as a relative .pyx path


def _kind(filename: str) -> str:
    """ "yours", "gpulab" or "other" (Numba, installed packages, the standard library, gpulab's simulator)."""
    if filename.startswith(_SIMULATOR):
        return "other"
    if filename.startswith(_GPULAB + os.sep):
        return "gpulab"
    if (
        filename.startswith((_STDLIB, "<frozen"))
        or "numba" in filename
        or any(d in filename for d in _INSTALLED)
        or filename.endswith(_CYTHON)
    ):
        return "other"
    return "yours"


@dataclass(frozen=True)
class Origin:
    """Where an exception was raised.

    ``kind``: "yours" (raised in the learner's code), "gpulab" (raised in gpulab's own code), "launch"
    (gpulab's code launched the learner's kernel and the launch failed before the kernel's first line ran,
    e.g. a parameter too many) or "unknown". ``line``: (number, text) of the learner's line where it was
    raised ("yours"), or of the learner's call that led into gpulab's code (None when the learner's code is
    not on the stack, e.g. a check the capstone runs). ``where``: gpulab's frame that raised or launched,
    "gpulab/kernels/grid_stride.py, line 81, in launch_1d"; ``harness``: that frame is the check's own launch.
    """

    kind: str
    line: tuple[int, str] | None = None
    where: str = ""
    harness: bool = False


def _line(code: CodeType, lineno: int) -> tuple[int, str]:
    return lineno, linecache.getline(code.co_filename, lineno).strip()


def origin(exc: BaseException) -> Origin:
    """Where ``exc`` was raised (see :class:`Origin`)."""
    frames: list[tuple[CodeType, int]] = []
    tb = exc.__traceback__
    while tb is not None:
        frames.append((tb.tb_frame.f_code, tb.tb_lineno))
        tb = tb.tb_next
    kinds = [_kind(code.co_filename) for code, _ in frames]
    inner = max((k for k, kind in enumerate(kinds) if kind != "other"), default=None)
    if inner is None:
        return Origin("unknown")
    if kinds[inner] == "yours":
        return Origin("yours", _line(*frames[inner]))
    callers = [k for k in range(inner) if kinds[k] == "yours"]
    code, lineno = frames[inner]
    rel = os.path.relpath(code.co_filename, os.path.dirname(_GPULAB)).replace(os.sep, "/")
    where = f"{rel}, line {lineno}, in {code.co_name}"
    launched = any("numba" in frames[k][0].co_filename for k in range(inner + 1, len(frames)))
    if launched and type(exc).__module__.startswith("numba"):
        return Origin("yours")  # Numba could not compile the kernel (gpu mode): its code, at no line of the stack
    return Origin(
        "launch" if launched else "gpulab",
        _line(*frames[callers[-1]]) if callers else None,
        where,
        code.co_filename == _HARNESS,
    )


def source_line(exc: BaseException) -> tuple[int, str] | None:
    """(line number, text) of the learner's code where ``exc`` was raised: the innermost frame that is neither
    Numba's, gpulab's nor the standard library's, when the exception was raised there (None otherwise)."""
    found = origin(exc)
    return found.line if found.kind == "yours" else None
