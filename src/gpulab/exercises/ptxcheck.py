"""The PTX check: the kernel's source, rebuilt as a module, compiled by NVVM in a child process (no
GPU needed). Proves it is real CUDA, not Python the simulator happens to accept."""

from __future__ import annotations

from typing import Any

from ..source import py_func, standalone_source
from .result import Check

__all__ = ["ptx_check"]


def ptx_check(kernel: Any, signature: str) -> Check:
    """Compile ``kernel`` for sm_75 as ``signature`` (e.g. ``"void(float32[:], float32[:])"``)."""
    from ..ptx import compile_source

    try:
        source = standalone_source(kernel)
    except (OSError, TypeError, ValueError) as exc:
        return Check("PTX", False, f"could not collect the kernel's source: {exc}")
    name = py_func(kernel).__name__
    try:
        res = compile_source(source, name, signature, ccs=[(7, 5)])
    except Exception as exc:  # noqa: BLE001 - NVVM missing or the child failed: not the learner's fault
        return Check(
            "PTX",
            True,
            "not checked: the PTX compiler (NVVM, from numba-cuda[cu12]) could not "
            f"run here ({str(exc).splitlines()[0][:200]})",
        )
    if res.get("7.5") == "ok":
        return Check("PTX", True, f"compiles to PTX for sm_75 as {signature}")
    err = res.get("error") or res.get("7.5", "")
    return Check(
        "PTX",
        False,
        f"NVVM rejected the kernel ({signature}): {err[:800]}",
        "the simulator runs any Python, a GPU does not: no lists, dicts, strings, or objects "
        "inside a kernel; use arrays, numbers, math and cuda.* only.",
    )
