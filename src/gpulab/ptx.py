"""The PTX tier: compile kernels with NVVM for real GPUs, without a GPU and without the simulator.

The simulator runs any Python, including code no GPU can run (lists, dicts, exceptions, object
arithmetic). Compiling to PTX with :func:`numba.cuda.compile_ptx` is the proof that a kernel is real
CUDA. Because a process that imported numba in simulator mode cannot compile, the work runs in a
child process started with ``GPULAB_DEVICE=gpu GPULAB_COMPILE_ONLY=1 NUMBA_ENABLE_CUDASIM=0``: one that stays up
for the next compile (:mod:`gpulab.ptx_child`; numba-cuda's start-up is paid once per session, not per check).
It needs the NVVM wheels that ``numba-cuda[cu12]`` installs; no driver is used.

A kernel that calls a ``@cuda.jit(device=True)`` function needs one more step: numba-cuda (0.22 to 0.30) compiles
a device function for ``get_current_device().compute_capability``, which asks the driver even inside
``cuda.compile_ptx`` (``CudaSupportError: CUDA driver library cannot be found`` without a GPU). The children
answer that question with the target being compiled (:data:`_TARGET_STUB`), so device functions compile for the
same target as their kernel, with or without a GPU; the sources child defines each kernel again for every target.
:func:`kernel_ptx` returns the PTX text itself, to read (lesson 01 shows that a device function is inlined).

:func:`resource_usage` goes one step further: NVIDIA's assembler ``ptxas -v`` turns that PTX into machine code for
the target and reports what a thread and a block use (registers, static shared memory, spills, stack): the
figures occupancy depends on (:mod:`gpulab.occupancy`). ``ptxas`` comes with ``numba-cuda[cu12]`` (the
``nvidia-cuda-nvcc-cu12`` wheel) or a CUDA toolkit (:func:`find_ptxas`). In gpu mode, for the GPU in use, the
figures numba-cuda reports for the loaded kernel (``get_regs_per_thread``) are used instead.
"""

from __future__ import annotations

import json
import os
import textwrap
from collections.abc import Iterable
from typing import Any, overload

from . import ptx_child
from .ptxas import ResourceUsage, find_ptxas, numba_resource_usage, ptxas_usage, variant_source

__all__ = [
    "COURSE_CC",
    "DEFAULT_CCS",
    "CompilerMissing",
    "ResourceUsage",
    "compile_library",
    "compile_source",
    "compile_sources",
    "find_ptxas",
    "is_ptx",
    "kernel_ptx",
    "kernels_ptx",
    "resource_usage",
    "resource_usages",
]

COURSE_CC: tuple[int, int] = (7, 5)
"""The course's compile target: sm_75, a T4 (Colab's), the oldest GPU the course supports."""

DEFAULT_CCS: tuple[tuple[int, int], ...] = (COURSE_CC, (9, 0))


# Run first in each child: device functions compile for TARGET[0], the target being compiled, not the driver's GPU.
_TARGET_STUB = """
import types as _types
import numba.cuda.dispatcher as _dispatcher
TARGET = [(7, 5)]
if hasattr(_dispatcher, "get_current_device"):
    _dispatcher.get_current_device = lambda: _types.SimpleNamespace(compute_capability=TARGET[0])
"""


class CompilerMissing(RuntimeError):
    """NVVM, the PTX compiler, cannot run on this machine: numba-cuda raised ``NvvmSupportError`` (0.22: libNVVM
    cannot be found; 0.30: libNVVM is not available) for gpulab's own probe kernel, compiled before any other."""


_NO_NVVM = "NvvmSupportError"  # the start of the child's answer when numba-cuda finds no NVVM (0.22 to 0.30)


def _child_env() -> dict[str, str]:
    env = dict(os.environ)
    env.update(GPULAB_DEVICE="gpu", GPULAB_COMPILE_ONLY="1", NUMBA_ENABLE_CUDASIM="0")
    return env


def prestart() -> None:
    """Start the compiler process for the next compile now, without waiting (:func:`gpulab.ptx_child.prestart`):
    a check calls it before running the learner's kernel, so that numba-cuda's start-up overlaps that run."""
    ptx_child.prestart(_child_env())


def _run_child(code: str, payload: dict, timeout: float) -> dict:
    proc = ptx_child.run(code, json.dumps(payload), _child_env(), timeout)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if proc.returncode != 0 or not lines:
        raise RuntimeError(
            "the PTX compiler process failed before reporting (is numba-cuda[cu12] installed? it "
            f"brings NVVM).\nstderr:\n{proc.stderr[-3000:]}"
        )
    return json.loads(lines[-1])


_LIBRARY_CHILD = textwrap.dedent(
    """
    import json, sys
    payload = json.load(sys.stdin)
    from numba import cuda
    import gpulab
    {stub}
    from gpulab import kernels
    from gpulab.source import py_func
    out = {}
    for name, kernel, sig in kernels.all_ptx_signatures():
        fn = py_func(kernel)
        out[name] = {}
        for cc in payload["ccs"]:
            TARGET[0] = tuple(cc)
            try:
                ptx, _ = cuda.compile_ptx(fn, sig, cc=tuple(cc))
                out[name][f"{cc[0]}.{cc[1]}"] = "ok" if ".entry" in ptx else "no .entry in PTX"
            except Exception as exc:
                out[name][f"{cc[0]}.{cc[1]}"] = f"{type(exc).__name__}: {exc}"[:2000]
    print(json.dumps(out))
    """
).replace("{stub}\n", _TARGET_STUB.lstrip("\n"))


def compile_library(ccs: Iterable[tuple[int, int]] = DEFAULT_CCS, timeout: float = 900) -> dict[str, dict[str, str]]:
    """Compile every kernel in :mod:`gpulab.kernels` for each compute capability.

    Returns ``{kernel name: {"7.5": "ok" or the compiler's error, ...}}``.
    """
    return _run_child(_LIBRARY_CHILD, {"ccs": [list(c) for c in ccs]}, timeout)


_SOURCES_CHILD = (
    """
import json, sys
payload = json.load(sys.stdin)
from numba import cuda
from gpulab.source import py_func
"""
    + _TARGET_STUB
    + """
out = {}
probed = getattr(sys, "_gpulab_nvvm_ok", frozenset())  # targets the probe compiled for in this process
for key, item in payload["items"].items():
    out[key] = {}
    for cc in payload["ccs"]:
        TARGET[0] = tuple(cc)
        if key == PROBE and tuple(cc) in probed:
            out[key]["%d.%d" % tuple(cc)] = "ok"
            continue
        ns = {}  # defined again for each target: its device functions then compile for that target
        try:
            exec(compile(item["source"], "<your " + key + " kernel>", "exec"), ns)
            fn = py_func(ns[item["name"]])
        except Exception as exc:
            out[key] = {"error": (type(exc).__name__ + ": " + str(exc))[:2000]}
            break
        try:
            ptx, _ = cuda.compile_ptx(fn, item["signature"], cc=tuple(cc), device=bool(item.get("device")))
            out[key]["%d.%d" % tuple(cc)] = ptx if payload.get("text") and key != PROBE else "ok"
            if key == PROBE:
                sys._gpulab_nvvm_ok = probed = probed | {tuple(cc)}
        except Exception as exc:
            out[key]["%d.%d" % tuple(cc)] = (type(exc).__name__ + ": " + str(exc))[:2000]
    if key == PROBE and set(out[key].values()) != {"ok"}:
        break  # the compiler itself does not work: no learner's code runs
print(json.dumps(out))
"""
).replace("PROBE", repr("<nvvm probe>"))

# Compiled before any learner's code in the same child (first in its request): whether NVVM itself works. Only its
# NvvmSupportError means "no compiler here"; a learner's kernel that raises one (a decorator can raise any class in
# the child) fails its own check.
_PROBE_KEY = "<nvvm probe>"  # not a name: no learner's kernel or op has it
_PROBE_ITEM = {
    "source": "from numba import cuda\n\n\n@cuda.jit\ndef gpulab_probe(x):\n    i = cuda.grid(1)\n"
    "    if i < x.size:\n        x[i] = 2 * x[i]\n",
    "name": "gpulab_probe",
    "signature": "void(float32[:])",
}


def compile_source(
    source: str,
    name: str,
    signature: str,
    ccs: Iterable[tuple[int, int]] = DEFAULT_CCS,
    timeout: float = 300,
) -> dict[str, str]:
    """Compile the kernel ``name`` defined in ``source`` (a module's text, including its imports
    and any constants it uses) for each compute capability. Returns ``{"7.5": "ok" or error}``, or
    ``{"error": ...}`` if the source itself fails to run."""
    items = {name: {"source": source, "name": name, "signature": signature}}
    payload = {"items": items, "ccs": [list(c) for c in ccs]}
    return _run_child(_SOURCES_CHILD, payload, timeout)[name]


@overload
def compile_sources(
    items: dict[str, dict[str, Any]],
    cc: tuple[int, int] = COURSE_CC,
    timeout: float = 300,
    *,
    ccs: None = None,
    text: bool = False,
) -> dict[str, str]: ...


@overload
def compile_sources(
    items: dict[str, dict[str, Any]], *, timeout: float = 300, ccs: Iterable[tuple[int, int]], text: bool = False
) -> dict[tuple[int, int], dict[str, str]]: ...


def compile_sources(
    items: dict[str, dict[str, Any]],
    cc: tuple[int, int] | None = None,
    timeout: float = 300,
    *,
    ccs: Iterable[tuple[int, int]] | None = None,
    text: bool = False,
) -> dict[str, str] | dict[tuple[int, int], dict[str, str]]:
    """Compile several kernels in one child process (NVVM's start-up is paid once): ``items`` maps a key to
    ``{"source": module text, "name": kernel name, "signature": ...}`` (and ``"device": True`` for a device
    function, such as the scalar function of a GPU ufunc). Returns key -> ``"ok"`` or the error for one target
    ``cc`` (default sm_75); with ``ccs=[(7, 5), (9, 0)]`` every target in the same process, and
    cc -> {key -> ``"ok"`` or the error}. With ``text`` the PTX itself instead of ``"ok"`` (:func:`is_ptx` tells
    it from an error). Raises when the compiler itself cannot run, as a built-in probe kernel compiled first in the
    same child shows: :class:`CompilerMissing` when numba-cuda finds no NVVM (its ``NvvmSupportError``),
    ``RuntimeError`` when the probe failed otherwise. An item's own error, whatever its words, is that item's."""
    if ccs is not None and cc is not None:
        raise TypeError("compile_sources takes cc= (one target) or ccs= (several), not both")
    targets = [tuple(c) for c in ccs] if ccs is not None else [cc or COURSE_CC]
    res = _compiled(items, [list(c) for c in targets], text, timeout)
    by_cc = {(t[0], t[1]): {key: r.get("error") or r[f"{t[0]}.{t[1]}"] for key, r in res.items()} for t in targets}
    return by_cc if ccs is not None else by_cc[(targets[0][0], targets[0][1])]


def _compiled(items: dict[str, dict[str, Any]], ccs: list[list[int]], text: bool, timeout: float) -> dict[str, dict]:
    """The child's answer for ``items``, after the probe (:data:`_PROBE_ITEM`), compiled first in the same child,
    showed that NVVM works: :class:`CompilerMissing` when the probe met no NVVM, ``RuntimeError`` when it failed
    otherwise. A child that crashes or runs past ``timeout`` after a good probe is the failure of the item that
    did it (each item is then compiled alone to find it): its answer is the crash, not "not checked"."""
    import subprocess

    try:
        res = _run_child(
            _SOURCES_CHILD, {"items": {_PROBE_KEY: _PROBE_ITEM, **items}, "ccs": ccs, "text": text}, timeout
        )
    except (RuntimeError, subprocess.TimeoutExpired) as exc:
        probe_alone = {"items": {_PROBE_KEY: _PROBE_ITEM}, "ccs": ccs}  # no learner's code: a crash is not theirs
        res = {_PROBE_KEY: _run_child(_SOURCES_CHILD, probe_alone, timeout)[_PROBE_KEY]}
        first = f"it ran past {timeout:g} s" if isinstance(exc, subprocess.TimeoutExpired) else "it exited"
        for key, item in items.items():  # alone, each crashes (or not) by itself
            alone = _compiled({key: item}, ccs, text, timeout)[key] if len(items) > 1 else None
            res[key] = alone or {"error": f"the PTX compiler's process stopped while compiling it: {first}"}
    probe = res.pop(_PROBE_KEY, {})
    answers = [probe.get(f"{c[0]}.{c[1]}") or probe.get("error") or "no answer" for c in ccs]
    bad = [a for a in answers if a != "ok"]
    if any(a.startswith(_NO_NVVM) for a in bad):  # no kernel was compiled: not an error of any of them
        raise CompilerMissing(next(a for a in bad if a.startswith(_NO_NVVM)).splitlines()[0][:300])
    if bad:
        raise RuntimeError(f"the PTX compiler could not compile gpulab's own test kernel: {bad[0][:500]}")
    return res


def is_ptx(answer: str) -> bool:
    """Whether an answer of :func:`compile_sources` (``text=True``) is PTX (NVVM's begins with its ``//``
    banner), not a compiler error (``"NvvmError: ..."``)."""
    return answer.startswith("//") and ".version" in answer


def kernel_ptx(kernel: object, signature: str, cc: tuple[int, int] = COURSE_CC, timeout: float = 300) -> str:
    """The PTX that NVVM makes of ``kernel`` (a ``@cuda.jit`` kernel, with the device functions it calls) as
    ``signature`` for target ``cc``: text to read, e.g. to see that a device function left no ``call`` behind.
    Needs no GPU. Raises ``RuntimeError`` with the compiler's error when the kernel does not compile."""
    from .source import py_func

    return kernels_ptx([(kernel, signature)], cc, timeout)[py_func(kernel).__name__]


def kernels_ptx(
    kernels: Iterable[tuple[object, str]], cc: tuple[int, int] = COURSE_CC, timeout: float = 300
) -> dict[str, str]:
    """:func:`kernel_ptx` for several ``(kernel, signature)`` pairs in one compiler process (NVVM starts once):
    kernel name -> PTX text. Raises ``RuntimeError`` with the compiler's error for the first that fails."""
    from .source import py_func, standalone_source

    pairs = {py_func(k).__name__: (k, sig) for k, sig in kernels}
    items = {name: {"source": standalone_source(k), "name": name, "signature": sig} for name, (k, sig) in pairs.items()}
    res = _run_child(_SOURCES_CHILD, {"items": items, "ccs": [list(cc)], "text": True}, timeout)
    out = {}
    for name, (_, signature) in pairs.items():
        text = res[name].get("error") or res[name][f"{cc[0]}.{cc[1]}"]
        if ".entry" not in text:
            raise RuntimeError(f"{name} does not compile to PTX for sm_{cc[0]}{cc[1]} as {signature}: {text}")
        out[name] = text
    return out


def resource_usages(
    items: dict[str, tuple[Any, ...]],
    ccs: Iterable[tuple[int, int]] = DEFAULT_CCS,
    *,
    timeout: float = 300,
    prefer_numba: bool = True,
) -> dict[str, dict[tuple[int, int], ResourceUsage]]:
    """What each kernel uses per thread and per block on each target: ``items`` maps a key to ``(kernel,
    signature)`` or ``(kernel, signature, {"TILE": 8})`` (module constants set for that version of the kernel).
    All kernels compile to PTX in one child process; ``ptxas -v`` then assembles each for its target (about
    0.1 s each). In gpu mode, for the GPU in use (``prefer_numba``), numba-cuda's own figures for the loaded kernel
    are used. Returns key -> {cc -> :class:`ResourceUsage`}. Needs no GPU; raises ``RuntimeError`` when a kernel
    does not compile and ``FileNotFoundError`` when no ptxas is found."""
    from .source import py_func

    targets = [(int(c[0]), int(c[1])) for c in ccs]
    here = _current_cc() if prefer_numba else None
    out: dict[str, dict[tuple[int, int], ResourceUsage]] = {key: {} for key in items}
    payload: dict[str, dict[str, Any]] = {}
    for key, (kernel, signature, *rest) in items.items():
        constants = rest[0] if rest else None
        for cc in targets:
            if cc == here:
                out[key][cc] = numba_resource_usage(kernel, signature, constants)
        if any(cc != here for cc in targets):
            name = py_func(kernel).__name__
            payload[key] = {"source": variant_source(kernel, constants), "name": name, "signature": signature}
    if not payload:
        return out
    ptxas = find_ptxas()
    rest_ccs = [list(cc) for cc in targets if cc != here]
    res = _run_child(_SOURCES_CHILD, {"items": payload, "ccs": rest_ccs, "text": True}, timeout)
    for key, by_cc in res.items():
        for cc_list in rest_ccs:
            cc = (cc_list[0], cc_list[1])
            text = by_cc.get("error") or by_cc[f"{cc[0]}.{cc[1]}"]
            if ".entry" not in text:
                raise RuntimeError(f"{key} does not compile to PTX for sm_{cc[0]}{cc[1]}: {text}")
            out[key][cc] = ptxas_usage(text, cc, payload[key]["name"], ptxas=ptxas)
    return out


def resource_usage(
    kernel: Any,
    signature: str,
    cc: tuple[int, int] = COURSE_CC,
    *,
    constants: dict[str, Any] | None = None,
    timeout: float = 300,
    prefer_numba: bool = True,
) -> ResourceUsage:
    """Registers per thread, static shared memory per block, spills and stack of ``kernel`` compiled as
    ``signature`` for target ``cc``, from ``ptxas -v`` (no GPU needed); in gpu mode, for the GPU in use, from
    numba-cuda (``get_regs_per_thread``, ``get_shared_mem_per_block``). ``constants`` sets module constants of
    the kernel's source for this compile, e.g. ``{"TILE": 8}``. See :func:`resource_usages` for several at once."""
    items: dict[str, tuple[Any, ...]] = {"kernel": (kernel, signature, constants)}
    return resource_usages(items, [cc], timeout=timeout, prefer_numba=prefer_numba)["kernel"][(cc[0], cc[1])]


def _current_cc() -> tuple[int, int] | None:
    """The compute capability of the GPU in use, in gpu mode; None in simulator (or compile-only) mode."""
    from . import runtime

    if not runtime.is_gpu() or os.environ.get("GPULAB_COMPILE_ONLY") == "1":
        return None
    from numba import cuda

    cc = cuda.get_current_device().compute_capability
    return (int(cc[0]), int(cc[1]))
