"""The capstone's PTX check (lab 09): would a GPU compile the learner's kernels?

The simulator runs any Python inside a kernel (lists, strings, NumPy calls); a GPU does not. In simulator mode
:meth:`gpulab.capstone.Capstone.check_ptx` compiles every registered kernel for a real GPU, with its op's signature
(the library kernel's, :data:`gpulab.kernels.nn_kernels.PTX_SIGNATURES`), to PTX for sm_75 with NVVM in one child
process (:func:`gpulab.ptx.compile_sources`, a few seconds). :func:`ptx_errors` says which kernels a GPU would
refuse and why (the lines of NVVM's error that say what is wrong, or what the kernel's source shows:
:func:`gpulab.exercises.static.static_check`); :func:`refused` is the message that names them.
"""

from __future__ import annotations

from typing import Any

from .capstone_signatures import COURSE_KERNELS

__all__ = ["ptx_errors", "refused"]


def ptx_errors(kernels: dict[str, Any]) -> dict[str, str] | str:
    """op -> why a GPU would refuse its kernel, for each of ``kernels`` (op -> kernel) that does not compile to PTX;
    why PTX was not checked, when the compiler cannot run here (NVVM not installed)."""
    errors = _nvvm_errors(kernels)
    if isinstance(errors, str):
        return errors
    from .exercises.static import static_check

    for op in errors:  # what the source shows (a shape `TILE + 1`, a list) says more than NVVM's typing error
        if (found := static_check(kernels[op])) is not None:
            errors[op] = f"{found.message} {found.hint}".strip()
    return errors


def refused(errors: dict[str, str]) -> str:
    """The verdict for the ops whose kernels a GPU would refuse (``errors``: :func:`ptx_errors`)."""
    lines = "\n".join(f"- {op}: {err}" for op, err in errors.items())
    return (
        f"{', '.join(errors)}: the simulator ran {'this kernel' if len(errors) == 1 else 'these kernels'}, "
        "but a GPU would refuse it (NVVM could not compile it to "
        f"PTX):\n{lines}\nInside a kernel use arrays, numbers, math and cuda.* only: a GPU has no Python "
        "lists, dicts, strings or objects (`t = [x[i], 0.0]` does not compile: use separate variables, or "
        "cuda.local.array for a fixed-size array). Fix the kernel and re-run its check cell."
    )


def _nvvm_errors(kernels: dict[str, Any]) -> dict[str, str] | str:
    """op -> NVVM's error for each kernel that does not compile to PTX with its op's signature (the library
    kernel's, :data:`gpulab.kernels.nn_kernels.PTX_SIGNATURES`); why, when the compiler cannot run here (its probe
    kernel failed: :func:`gpulab.ptx.compile_sources`)."""
    from . import ptx
    from .kernels import nn_kernels
    from .source import NotADeviceFunction, NotOnAGpu, py_func, standalone_source

    library = COURSE_KERNELS
    signatures = {py_func(k).__name__: sig for k, sig in nn_kernels.PTX_SIGNATURES}
    items = {}
    for op, kern in kernels.items():
        try:
            source = standalone_source(kern)
        except (NotADeviceFunction, NotOnAGpu) as exc:  # a GPU refuses it: the simulator ran Python
            return {op: str(exc)}
        except (OSError, TypeError, ValueError, RecursionError) as exc:  # the check's limit, not the learner's
            print(f"PTX not checked for {op}: its kernel's source could not be rebuilt for the compiler ({exc}).")
            continue
        items[op] = {
            "source": source,
            "name": py_func(kern).__name__,
            "signature": signatures[library[op]],
        }
    if not items:
        return {}
    try:
        res = ptx.compile_sources(items)  # one process for all: about 4 s of CPU
    except Exception as exc:  # noqa: BLE001 - NVVM missing (the probe says so before any learner's code ran)
        return (str(exc).splitlines() or [type(exc).__name__])[0][:200]
    return {op: _gist(err) for op, err in res.items() if err != "ok"}


def _gist(err: str) -> str:
    """The lines of a Numba error that say what is wrong (not its pipeline's step names, nor its boilerplate)."""
    keep = [
        ln.strip()
        for ln in err.splitlines()
        if ln.strip()
        and not ln.startswith(("TypingError: Failed in", "During:", "File ", "Failed in"))
        and "pipeline" not in ln
    ]
    gist = " ".join(keep[:3])[:400] or err[:400]
    if "NRT required" in err:  # Numba's runtime: what allocates memory (lists, new arrays) inside the kernel
        gist += " (the kernel creates a list, array or other object: a GPU kernel cannot allocate memory)"
    return gist
