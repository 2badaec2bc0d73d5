"""Explaining an exception raised outside the learner's lines: in gpulab's own code called with the learner's kernel,
in the launch of that kernel (its parameters do not match the arguments, the GPU refuses the block's resources),
or in Numba's (CuPy's) code that gpulab's code called for a transfer or a synchronisation (a device fault shows up
there). The message says which, names gpulab's function, and the learner's line that led there when it is on the
stack (:class:`.frames.Origin`). An exception raised in the learner's own code is explained in :mod:`.raised`.
"""

from __future__ import annotations

import re
from typing import Any

from ..errors import GpulabError
from .misuse import wrong_callable
from .problem import Case

__all__ = [
    "ARGS_HINT",
    "ARGS_RE",
    "DEVICE_FAULT_HINT",
    "DEVICE_FAULT_RE",
    "GPULAB_RAISED_HINT",
    "LAUNCHER_ARGS_HINT",
    "LAUNCH_HINT",
    "NOT_A_KERNEL_HINT",
    "RESOURCES_HINT",
    "TRANSFER_HINT",
    "not_in_your_code",
]


def not_in_your_code(
    exc: BaseException, found: Any, text: str, kernel: str, case: Case, launch: str
) -> tuple[str, str, str]:
    """(status, message, hint) for an exception raised in gpulab's code (``found.kind == "gpulab"``), by the
    launch of the learner's kernel from gpulab's code (``"launch"``) or in Numba's (CuPy's) code that gpulab's code
    called for something else, a transfer or a synchronisation (``"numba"``): the message says so, names gpulab's
    function, and which line of the learner's code led there (when it is on the stack)."""
    yours = f"your kernel {kernel}" if kernel else "your kernel"
    led = f"; your line that led there: line {found.line[0]}: `{found.line[1]}`" if found.line else ""
    tail = f"\ninput: {case.describe()}\nlaunch: {launch}"
    if found.kind == "numba":
        return _in_numba(exc, found, text, yours, led, tail)
    if found.kind == "launch":
        who = "the check" if found.harness else f"gpulab's launcher ({found.where})"
        msg = f"{type(exc).__name__} when {who} launched {yours}, before any line of it ran{led}: {text}{tail}"
        if _RESOURCES_RE.search(text):
            return "error", msg, RESOURCES_HINT
        if not ARGS_RE.search(text):
            return "error", msg, LAUNCH_HINT
        return "error", msg, ARGS_HINT if found.harness else LAUNCHER_ARGS_HINT
    msg = (
        f"{type(exc).__name__} raised in gpulab's code ({found.where}), not in a line of yours: gpulab's "
        f"function was called with {yours}{led}: {text}{tail}"
    )
    if (verdict := wrong_callable(exc, found.harness, text, kernel, tail)) is not None:
        return verdict  # the check called what it was given, which is not what the check takes
    if isinstance(exc, GpulabError) and getattr(exc, "is_verdict", False):
        return "failed", text, ""  # a check's own verdict on the learner's kernel (the capstone's): shown as it is
    if isinstance(exc, GpulabError):  # gpulab's own check on what it was given: its message says what to do
        return "error", f"gpulab's code ({found.where}) refused {yours}{led}: {text}{tail}", ""
    if isinstance(exc, TypeError) and "'function' object is not subscriptable" in text and found.harness:
        name = kernel or "your function"  # the check's own launch: nothing of gpulab's failed
        msg = (
            f"{name} is a plain Python function, not a kernel: the check launched it as {name}[blocks, threads](...), "
            f"and only a @cuda.jit kernel can be launched that way (TypeError: {text}){led}{tail}"
        )
        return "error", msg, NOT_A_KERNEL_HINT
    if isinstance(exc, TypeError) and "'function' object is not subscriptable" in text:
        return "error", msg, NOT_A_KERNEL_HINT
    return "error", msg, GPULAB_RAISED_HINT


def _in_numba(exc: BaseException, found: Any, text: str, yours: str, led: str, tail: str) -> tuple[str, str, str]:
    name = type(exc).__name__
    pkg = "Numba's" if found.package == "numba" else f"{found.package}'s"
    fault = bool(DEVICE_FAULT_RE.search(text))
    if found.harness and found.call == "synchronisation":
        msg = f"{name} when the check waited for {yours} to finish (a synchronisation after its launch): {text}{tail}"
    elif found.call:
        msg = (
            f"{name} raised in {pkg} code during a {found.call} ({found.callee}) by gpulab's code ({found.where}), "
            f"not in a line of yours nor in the launch of {yours}{led}: {text}{tail}"
        )
    else:
        msg = (
            f"{name} raised in {pkg} code called from gpulab's code at {found.where}, not in a line of yours"
            f"{led}: {text}{tail}"
        )
    if fault:
        return "error", msg, DEVICE_FAULT_HINT
    if _RESOURCES_RE.search(text):
        return "error", msg, RESOURCES_HINT
    return "error", msg, TRANSFER_HINT if found.call == "transfer" else GPULAB_RAISED_HINT


DEVICE_FAULT_RE = re.compile(r"ILLEGAL_ADDRESS|illegal (memory access|address)|LAUNCH_FAILED|unspecified launch", re.I)
DEVICE_FAULT_HINT = (
    "on a GPU a kernel's fault while it runs is reported later, at the next synchronisation or transfer: an illegal "
    "address means a thread read or wrote outside an array (a missing bounds guard, an index over the wrong "
    "dimension). The process's CUDA context is now broken: fix the kernel, then restart the notebook's kernel."
)
# A launch a GPU refuses for what the block asks of an SM (numba-cuda: "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES" from
# cuLaunchKernel; the linker's ptxas: "uses too much shared data" when the kernel is loaded). The simulator has
# neither limit; the PTX check (ptxas) names both before a GPU does.
_RESOURCES_RE = re.compile(r"OUT_OF_RESOURCES|too many resources requested|too much shared data", re.I)
RESOURCES_HINT = (
    "the GPU refused the launch because a block asks for more than an SM can give one block: registers per thread "
    "x threads per block over the register file (65,536 registers), or shared arrays over 48 KiB per block. "
    "Launch smaller blocks (256 threads rather than 1024) or use smaller cuda.shared.array buffers; the check's "
    "PTX line (ptxas) gives your kernel's registers and shared memory. The CUDA context is still usable."
)
TRANSFER_HINT = (
    "copying an array between the host and the GPU failed: check what your code passes (NumPy or device arrays, "
    "their shapes and dtypes; an object array or a Python list cannot be copied). If all of that is right, the "
    "fault is gpulab's: report it with this message."
)
ARGS_RE = re.compile(r"positional arguments? but \d+ (was|were) given|missing \d+ required")
ARGS_HINT = (
    "the kernel's parameters do not match what the check passes: the inputs, in the order shown on the "
    "`input:` line, then the output array(s), e.g. add_kernel(a, b, out). Sizes come from the arrays "
    "(out.size, A.shape[1]), not from extra parameters."
)
LAUNCHER_ARGS_HINT = (
    "your kernel's parameters do not match the arguments gpulab's launcher passes to it (those of the course's "
    "kernel for this exercise, in the same order; the exercise's text gives them). The error is not in "
    "gpulab's code: change your kernel's `def` line to take those parameters, rerun that cell, then the check."
)
LAUNCH_HINT = (
    "the launch of your kernel failed before its code ran: check that it is a @cuda.jit kernel and that its "
    "parameters match the arguments it is given (their number and order)."
)
GPULAB_RAISED_HINT = (
    "gpulab's function failed on what it was given: check that your kernel is a @cuda.jit kernel with the "
    "parameters the exercise gives, and the order, shapes and dtypes of what your code passes. If all of that "
    "is right, the fault is gpulab's: report it with this message."
)

NOT_A_KERNEL_HINT = (
    "this is a plain Python function, not a kernel: put `@cuda.jit` on the line above `def`, rerun that cell, "
    "then rerun the check. Only a kernel can be launched as kernel[blocks, threads](...)."
)
