"""The PTX check: the kernel's source, rebuilt as a module, compiled by NVVM in a child process (no
GPU needed). Proves it is real CUDA, not Python the simulator happens to accept.

A signature with a return type (``"float32(float32)"``, not ``"void(...)"``) is a device function's: a GPU
ufunc's scalar function is compiled that way (``cuda.compile_ptx(fn, sig, device=True)``, without its
``@vectorize`` decorator), as numba-cuda compiles it when the ufunc is made."""

from __future__ import annotations

import re
from typing import Any

from ..source import NotADeviceFunction, py_func, standalone_source
from .result import Check
from .static import numpy_ufunc_fix

__all__ = ["ptx_check"]

_NO_UFUNC = re.compile(r"KeyError: <ufunc '(\w+)'>")
_NP_CLIP = re.compile(r"No implementation of function Function\(<function clip at")
CLIP_HINT = (
    "np.clip does not compile on numbers in a GPU kernel (numba-cuda's np.clip takes arrays; the simulator ran "
    "NumPy): clamp with min and max, e.g. `i = min(max(i, 0), a.shape[0] - 1)`."
)


def ptx_check(kernel: Any, signature: str) -> Check:
    """Compile ``kernel`` for sm_75 as ``signature`` (e.g. ``"void(float32[:], float32[:])"``, or
    ``"float32(float32)"`` for a device function)."""
    from ..ptx import compile_sources

    device = not signature.replace(" ", "").startswith("void(")
    what = "function" if device else "kernel"
    try:
        source = standalone_source(kernel, decorated=not device)
    except NotADeviceFunction as exc:
        return Check(
            "PTX",
            False,
            f"{exc}",
            f"decorate {exc.name} with @cuda.jit(device=True) (on the line above its `def`), run its cell, then "
            "the kernel's cell and this check again.",
        )
    except (OSError, TypeError, ValueError) as exc:
        return Check("PTX", False, f"could not collect the {what}'s source: {exc}")
    name = py_func(kernel).__name__
    item = {"source": source, "name": name, "signature": signature, "device": device}
    try:
        res = compile_sources({name: item}, cc=(7, 5))
    except Exception as exc:  # noqa: BLE001 - NVVM missing or the child failed: not the learner's fault
        return Check(
            "PTX",
            True,
            "not checked: the PTX compiler (NVVM, from numba-cuda[cu12]) could not "
            f"run here ({str(exc).splitlines()[0][:200]})",
        )
    err = res[name]
    if err == "ok":
        return Check("PTX", True, f"compiles to PTX for sm_75 as {signature}")
    missing = _NO_UFUNC.search(err)
    if missing is not None:
        return _no_gpu_ufunc(kernel, missing.group(1), err)
    if _NP_CLIP.search(err):
        return Check("PTX", False, f"NVVM rejected the {what} ({signature}): {err[:800]}", CLIP_HINT)
    return Check(
        "PTX",
        False,
        f"NVVM rejected the {what} ({signature}): {err[:800]}",
        "the simulator runs any Python, a GPU does not: no lists, dicts, strings, or objects "
        "inside a kernel; use arrays, numbers, math and cuda.* only.",
    )


def _no_gpu_ufunc(kernel: Any, ufunc_name: str, err: str) -> Check:
    """The verdict for a NumPy ufunc numba-cuda cannot compile on scalars, named as the source spells it."""
    from .static import scalar_ufuncs_off_gpu

    calls = scalar_ufuncs_off_gpu(kernel)
    call = next((c for _, c, u in calls if u == ufunc_name), f"np.{ufunc_name}")
    others = sorted({f"`{c}`" for _, c, _ in calls} - {f"`{call}`"})
    also = f" (nor do {', '.join(others)})" if others else ""
    named = {c: u for _, c, u in calls} or {call: ufunc_name}
    fixes = [f"for `{c}` write {numpy_ufunc_fix(u)}" for c, u in named.items()]
    return Check(
        "PTX",
        False,
        f"`{call}(...)` on a scalar does not compile for a GPU{also}: numba-cuda's CUDA target has no scalar "
        f"version of this NumPy ufunc, so on a GPU the @vectorize line itself fails "
        f"({err.splitlines()[0][:200]}). The simulator ran NumPy, so the values were right here.",
        "; ".join(fixes) + ": inside a GPU ufunc's function write scalar code with the math module (math.exp, "
        "math.log1p), abs, max and min, not NumPy.",
    )
