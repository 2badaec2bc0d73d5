"""The PTX check: the kernel's source, rebuilt as a module, compiled by NVVM in a child process (no
GPU needed). Proves it is real CUDA, not Python the simulator happens to accept.

A signature with a return type (``"float32(float32)"``, not ``"void(...)"``) is a device function's: a GPU
ufunc's scalar function is compiled that way (``cuda.compile_ptx(fn, sig, device=True)``, without its
``@vectorize`` decorator), as numba-cuda compiles it when the ufunc is made."""

from __future__ import annotations

import re
import subprocess
from typing import Any

from ..errors import one_line
from ..ptx import COURSE_CC, is_ptx
from ..source import NotADeviceFunction, NotOnAGpu, py_func, standalone_source
from .result import PTX_NOT_RUN, Check
from .static import numpy_ufunc_fix

__all__ = ["SHARED_HINT", "TARGET", "ptx_check", "resources_check", "signature_for", "target_words"]

# The check compiles for one fixed target on every machine, with or without a GPU: sm_75, the T4's architecture,
# the oldest GPU the course supports (Colab's; the README says so, and doctor says so for an older GPU). A verdict
# (and a lab's points) is then the same wherever it is checked; in gpu mode the launches before the PTX row already
# ran the kernel on the GPU in use.
TARGET = COURSE_CC

_TOO_MUCH_SHARED = re.compile(r"uses too much shared data \((0x[0-9a-f]+) bytes, (0x[0-9a-f]+) max\)")
SHARED_HINT = (
    "use smaller cuda.shared.array buffers: a block's shared arrays hold what the block works on at one time "
    "(a tile, one value per thread), never a whole input; compute their size from the block (TPB, TILE x TILE), "
    "not from the data."
)
_NEEDS = re.compile(r"needs ([\d,]+) registers, the register file of an SM holds ([\d,]+)")
REGISTERS_HINT = (
    "make the kernel keep fewer values alive at the same time: fewer locals that live across the loop, no copies "
    "of a loop body written out by hand, an index computed once and reused. Where you choose the launch yourself, "
    "smaller blocks (256 threads rather than 1024) fit too."
)


def target_words() -> str:
    """The PTX row's words for its target: sm_75, why that one, and in gpu mode which architecture this GPU is
    (``"sm_75 (a T4, the oldest GPU the course supports: the same target on every machine; this GPU is sm_90)"``).
    A GPU whose compute capability cannot be read is said to be so, with the error's first line."""
    from .. import runtime
    from ..ptx import _current_cc

    here = ""
    if runtime.is_gpu():
        try:
            cc = _current_cc()  # None in compile-only mode (the PTX compiler's own process)
            here = f"; this GPU is sm_{cc[0]}{cc[1]}" if cc else ""
        except Exception as exc:  # noqa: BLE001 - the row still stands: it names the target, and why this is unknown
            here = f"; this GPU's compute capability could not be read ({one_line(exc)})"
    return (
        f"sm_{TARGET[0]}{TARGET[1]} (a T4, the oldest GPU the course supports: the same target on every machine{here})"
    )


def resources_check(ptx: str, name: str, compiled: str, threads: int | None) -> Check:
    """What ``ptxas`` says of kernel ``name``'s PTX for :data:`TARGET` (sm_75): its static shared memory must fit a
    block, and its registers times ``threads`` (when known) the register file (:func:`gpulab.occupancy.blocks_per_sm`).
    ``compiled`` starts the message (it names the target). Not checked (passed, said so) without a working ptxas."""
    from ..occupancy import blocks_per_sm
    from ..ptxas import find_ptxas, ptxas_usage

    try:
        use = ptxas_usage(ptx, TARGET, name, ptxas=find_ptxas())
    except FileNotFoundError:
        return Check("PTX", True, f"{compiled}; registers and shared memory not checked (no ptxas installed here)")
    except (RuntimeError, OSError, ValueError, subprocess.SubprocessError) as exc:  # ValueError: ptxas said nothing
        big = _TOO_MUCH_SHARED.search(str(exc))
        if big is None:  # ptxas itself could not run or read this PTX: not the learner's doing
            return Check("PTX", True, f"{compiled}; ptxas could not check it ({str(exc).splitlines()[0][:160]})")
        used, most = int(big.group(1), 16), int(big.group(2), 16)
        return Check(
            "PTX",
            False,
            f"{compiled}, but its shared arrays take {used:,} bytes per block and a GPU allows at most {most:,} "
            f"({most // 1024} KiB) of static shared memory per block (ptxas): a GPU refuses to load it (the "
            "simulator has no such limit).",
            SHARED_HINT,
        )
    used = f"{use.registers} registers per thread and {use.shared_bytes:,} bytes of shared memory per block"
    if threads is None:
        return Check("PTX", True, f"{compiled}; {used} (ptxas)")
    try:
        blocks_per_sm(threads, use.registers, use.shared_bytes, TARGET)
    except ValueError as exc:  # static shared memory over the limit failed in ptxas above: the registers are left
        need = _NEEDS.search(str(exc))
        counted = f": {need.group(1)} registers as the hardware allocates them, of {need.group(2)}" if need else ""
        return Check(
            "PTX",
            False,
            f"{compiled}, but it uses {used} (ptxas), and the check launches blocks of {threads} threads: "
            f"{threads} threads x {use.registers} registers is more than an SM's register file gives one "
            f"block{counted}, so a GPU refuses the launch ('too many resources requested for launch'). The "
            "simulator has no such limit.",
            REGISTERS_HINT,
        )
    return Check("PTX", True, f"{compiled}; {used} (ptxas): blocks of {threads} threads fit")


_NO_UFUNC = re.compile(r"KeyError: <ufunc '(\w+)'>")
_NP_CLIP = re.compile(r"No implementation of function Function\(<function clip at")
CLIP_HINT = (
    "np.clip does not compile on numbers in a GPU kernel (numba-cuda's np.clip takes arrays; the simulator ran "
    "NumPy): clamp with the builtins min and max instead, max with the lower bound and then min with the upper: "
    "`min(max(v, lo), hi)`."
)


def signature_for(args: tuple) -> str | None:
    """The signature a launch with ``args`` compiles for (``"void(float32[:, :], float64)"``), from numba's types
    of the values: arrays of numbers or bools with any layout, numbers and bools as numba types them (a Python float
    is a float64, as on a GPU). None when an argument is of another kind (a record array, a tuple): name it by
    hand (``ptx="..."``)."""
    from numba import typeof, types

    parts = []
    for a in args:
        try:
            t = typeof(a)
        except ValueError:
            return None
        if isinstance(t, types.Array) and isinstance(t.dtype, (types.Number, types.Boolean)):
            parts.append(f"{t.dtype}[{', '.join([':'] * t.ndim)}]" if t.ndim else "")
        elif isinstance(t, (types.Number, types.Boolean)):
            parts.append(str(t))
        else:
            return None
    return None if "" in parts else f"void({', '.join(parts)})"


def ptx_check(kernel: Any, signature: str, threads: int | None = None) -> Check:
    """Compile ``kernel`` for :data:`TARGET` (sm_75 on every machine, as the row says: :func:`target_words`) as
    ``signature`` (e.g. ``"void(float32[:], float32[:])"``, or ``"float32(float32)"`` for a device function). A
    kernel's PTX is then assembled by ``ptxas`` (when one is installed): its static shared memory must fit a block
    (48 KiB on every GPU) and, with ``threads`` (the most threads per block the check launched it with), its
    registers the register file. The simulator has neither
    limit; a GPU refuses such a kernel at its first launch."""
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
    except NotOnAGpu as exc:
        return Check(
            "PTX",
            False,
            f"{exc}",
            f"put the values in a tuple ({exc.name} = (1.0, 2.0, 3.0)) or pass them to the kernel as an array: a "
            "kernel reads numbers, tuples of numbers and arrays.",
        )
    except (OSError, TypeError, ValueError, RecursionError) as exc:  # not the learner's doing: say so, no penalty
        return Check("PTX", True, f"not checked: the {what}'s source could not be rebuilt for the compiler ({exc})")
    name = py_func(kernel).__name__
    item = {"source": source, "name": name, "signature": signature, "device": device}
    try:
        res = compile_sources({name: item}, cc=TARGET, text=True)
    except Exception as exc:  # noqa: BLE001 - NVVM missing (ptx.CompilerMissing) or the child failed: not the learner's
        return Check("PTX", True, f"{PTX_NOT_RUN} ({(str(exc).splitlines() or [type(exc).__name__])[0][:200]})")
    err = res[name]
    if is_ptx(err):
        compiled = f"compiles to PTX as {signature} for {target_words()}"
        return Check("PTX", True, compiled) if device else resources_check(err, name, compiled, threads)
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
