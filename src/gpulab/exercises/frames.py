"""Where an exception came from, read off its traceback: the learner's code (a kernel or a host function),
gpulab's own code (a launcher such as :mod:`gpulab.kernels.nn_ops`, called with the learner's kernel), or the
launch of the learner's kernel itself (its parameters do not match the arguments, so no line of it ran).

Each frame is the learner's unless its file is gpulab's, Numba's, another installed package's or the standard
library's. gpulab's simulator instrumentation (:mod:`gpulab.simulator`) stands in for the kernel's own reads and
writes, so an error raised there belongs to the kernel line that called it; so does a kernel a check runs in place
of the learner's (``_STAND_INS``), to the learner's line that launched it.
"""

from __future__ import annotations

import itertools
import linecache
import os
import re
import threading
from dataclasses import dataclass
from types import CodeType

__all__ = ["Origin", "origin", "source_line"]

_GPULAB = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # .../gpulab
_SIMULATOR = os.path.join(_GPULAB, "simulator") + os.sep
_XOROSHIRO = os.path.join(_GPULAB, "xoroshiro.py")  # numba.cuda.random's draws in the simulator: numba's, in effect
# what a check runs in place of the learner's code or a GPU's objects (lab 08's step is graded with the lab's
# backward; the simulator's states view refuses .copy() as numba's device array does): an error raised there
# belongs to the learner's line that called it
_STAND_INS = (os.path.join(_GPULAB, "problems", "_stand_ins.py"),)
_HARNESS = os.path.join(_GPULAB, "exercises", "run.py")  # the check's own launch
_RUNTIME = os.path.join(_GPULAB, "runtime.py")  # gpulab's synchronize, to_host: called by the check too
_STDLIB = os.path.dirname(threading.__file__)


_INSTALLED = ("site-packages", "dist-packages")  # dist-packages: Debian's and Colab's installed packages
_CYTHON = (".pyx", ".pxd", ".pxi")  # CuPy's compiled modules name their source as a relative .pyx path


def _kind(filename: str) -> str:
    """ "yours", "gpulab" or "other" (Numba, installed packages, the standard library, gpulab's simulator)."""
    if filename.startswith(_SIMULATOR) or filename == _XOROSHIRO or filename in _STAND_INS:
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
    e.g. a parameter too many), "numba" (raised in Numba's or CuPy's code, ``package``, that gpulab's code called
    for something other than a launch: ``call`` is "transfer", "synchronisation" or "" when not known, ``callee``
    the name gpulab's line called, e.g. "to_device") or "unknown".
    ``line``: (number, text) of the learner's line where it was raised ("yours"), or of the learner's call that led
    into gpulab's code (None when the learner's code is not on the stack, e.g. a check the capstone runs).
    ``where``: gpulab's frame that raised, launched or called, "gpulab/kernels/grid_stride.py, line 81, in
    launch_1d"; ``harness``: that call is the check's own (its launch, or its wait for the learner's kernel).
    ``function``: the name of the learner's function that raised ("yours"; "" in a lambda or at a cell's top level).
    """

    kind: str
    line: tuple[int, str] | None = None
    where: str = ""
    harness: bool = False
    call: str = ""
    callee: str = ""
    package: str = ""
    function: str = ""


def _line(code: CodeType, lineno: int) -> tuple[int, str]:
    return lineno, linecache.getline(code.co_filename, lineno).strip()


# What gpulab's innermost frame was doing when the exception was raised in the code it called. A launch is
# recognised by the frame it called (Numba's dispatcher or the simulator's kernel); a transfer or a
# synchronisation by that frame's name, else by the name gpulab's line called (Numba's API functions are
# wrapped: an error raised while making the CUDA context current names only the wrapper).
# gpulab.simulator.streams wraps the simulator's launch (its `call` records the stream, then launches), and
# gpulab.simulator.device_calls wraps that (its `call` refuses a device function called on the host, then launches);
# gpulab.simulator.launches wraps the launch once a budget has traced a host's launch (its `call` launches)
_LAUNCH_FILES = (
    "/cuda/dispatcher.py",
    "/cuda/simulator/kernel.py",
    "/gpulab/simulator/streams.py",
    "/gpulab/simulator/device_calls.py",
    "/gpulab/simulator/launches.py",
)
_LAUNCH_NAMES = frozenset({"__call__", "__getitem__", "call", "forall", "configure"})
_TRANSFERS = frozenset(
    "to_device copy_to_host copy_to_device to_host asnumpy asarray get device_array device_array_like".split()
)
_SYNCS = frozenset({"synchronize"})


def _call_names(code: CodeType, lineno: int, lasti: int) -> list[str]:
    """The names called by gpulab's line (``x.copy_to_host()`` -> ["copy_to_host"]): the very call that was running
    where Python records its columns (3.11+), else every call on the line."""
    text = ""
    positions = getattr(code, "co_positions", None)
    if positions is not None and lasti >= 0:
        pos = next(itertools.islice(positions(), lasti // 2, None), None)
        if pos is not None and None not in pos and pos[0] == pos[1] == lineno:
            raw = linecache.getline(code.co_filename, lineno).encode()
            text = raw[pos[2] : pos[3]].decode(errors="replace")  # columns count UTF-8 bytes
    text = text or linecache.getline(code.co_filename, lineno)
    return re.findall(r"(\w+)\s*\(", text)


def _doing(frames: list[tuple[CodeType, int, int]], inner: int) -> tuple[str, str]:
    """("launch" | "transfer" | "synchronisation" | "", the name called) for the call gpulab's frame ``inner`` made."""
    callee = frames[inner + 1][0]
    path = callee.co_filename.replace(os.sep, "/")
    if path.endswith(_LAUNCH_FILES) and callee.co_name in _LAUNCH_NAMES:
        return "launch", ""
    names = [callee.co_name] if callee.co_name in _TRANSFERS | _SYNCS else _call_names(*frames[inner])
    known = {n: "transfer" if n in _TRANSFERS else "synchronisation" for n in names if n in _TRANSFERS | _SYNCS}
    if len(set(known.values())) != 1:
        return "", ""  # nothing known called, or a transfer and a synchronisation on one line: not guessed
    name = next(iter(known))
    return known[name], name


def _package(frames: list[tuple[CodeType, int, int]], start: int) -> str:
    for code, _, _ in frames[start:]:
        if "numba" in code.co_filename:
            return "numba"
        if "cupy" in code.co_filename:
            return "CuPy"
    return ""


def origin(exc: BaseException) -> Origin:
    """Where ``exc`` was raised (see :class:`Origin`)."""
    frames: list[tuple[CodeType, int, int]] = []
    tb = exc.__traceback__
    while tb is not None:
        frames.append((tb.tb_frame.f_code, tb.tb_lineno, tb.tb_lasti))
        tb = tb.tb_next
    kinds = [_kind(code.co_filename) for code, _, _ in frames]
    inner = max((k for k, kind in enumerate(kinds) if kind != "other"), default=None)
    if inner is None:
        return Origin("unknown")
    if kinds[inner] == "yours":
        name = frames[inner][0].co_name
        return Origin("yours", _line(*frames[inner][:2]), function="" if name.startswith("<") else name)
    callers = [k for k in range(inner) if kinds[k] == "yours"]
    code, lineno, _ = frames[inner]
    rel = os.path.relpath(code.co_filename, os.path.dirname(_GPULAB)).replace(os.sep, "/")
    where = f"{rel}, line {lineno}, in {code.co_name}"
    led = _line(*frames[callers[-1]][:2]) if callers else None
    package = _package(frames, inner + 1)
    if not package:
        return Origin("gpulab", led, where, code.co_filename == _HARNESS)
    doing, callee = _doing(frames, inner)
    if doing == "launch" and type(exc).__module__.startswith("numba"):
        return Origin("yours")  # Numba could not compile the kernel (gpu mode): its code, at no line of the stack
    if doing == "launch":
        return Origin("launch", led, where, code.co_filename == _HARNESS)
    k = inner
    while k > 0 and frames[k][0].co_filename == _RUNTIME:  # runtime.synchronize() called by the check itself
        k -= 1
    return Origin("numba", led, where, frames[k][0].co_filename == _HARNESS, doing, callee, package)


def source_line(exc: BaseException) -> tuple[int, str] | None:
    """(line number, text) of the learner's code where ``exc`` was raised: the innermost frame that is neither
    Numba's, gpulab's nor the standard library's, when the exception was raised there (None otherwise)."""
    found = origin(exc)
    return found.line if found.kind == "yours" else None
