"""How to run a block's CUDA threads in turn, in one Python thread: read from the kernel's code before it runs.

Numba's simulator gives each CUDA thread a Python thread; starting and switching them was most of its
cost per thread. :func:`plan` says whether a kernel can do without:

* a kernel whose threads never wait for each other (no ``cuda.syncthreads()``, no warp vote or
  shuffle, no grid sync, in any code it reaches) runs each thread to its end, one after another:
  that order is one of the schedules a GPU may pick;
* a kernel whose only waits are ``cuda.syncthreads()`` statements and warp calls ``cuda.NAME(...)`` in its
  own body or in the device functions it calls by name (transitively) is recompiled from its source as a
  generator that yields at each of them, and so is each of those device functions, its calls becoming
  ``yield from`` (:mod:`gpulab.simulator.in_turn_source`); every thread of the block is advanced to its next
  barrier before any goes past it, which is exactly what the barrier promises (and a thread that returned
  early does not hold the others back, as in Numba's simulator), and warp calls are answered by group;
* anything else keeps Numba's threads: ``syncthreads_count`` and other waits, a barrier in a closure or
  reached through a module attribute, a device function that waits and calls itself (recursion, directly
  or through others), is passed around or called with keywords, a kernel or device function whose source is
  not available or no longer matches its code.

The reading must never call a kernel that can wait "independent": its threads would pass a barrier
alone. So it is conservative. It reads the names in the kernel's code and in every function it can
reach (device functions, plain functions, closures, module attributes such as ``helpers.load_tile``);
any name that can wait (:data:`WAITS`), or anything it cannot follow (a class, ``functools.partial``, a
callable object), keeps the block on Numba's threads.
"""

from __future__ import annotations

import types
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..source import global_names
from .in_turn_source import CALL, WARP_CALLS, call_in_turn, generator_code, warp_yields

__all__ = ["WAITS", "independent_threads", "plan"]

# A name containing one of these can make a thread wait for others (syncthreads*, syncwarp, *_sync,
# grid.sync(), shfl_*, vote and match functions, cooperative groups).
WAITS = ("sync", "shfl", "ballot", "activemask", "lanemask", "this_grid", "match_a", "vote")
_WAIT_NAMES = {"cg"}  # numba.cuda.cg
# Libraries whose functions never call a CUDA barrier: not read.
_LIBRARIES = ("numpy", "numba", "math", "cmath", "operator", "builtins", "cupy", "random")
_IEEE_MATH = "gpulab.simulator.ieee_math"  # math's stand-in while a kernel runs (a library: calls no barrier)
# Values a kernel can read that call nothing.
_PLAIN = (int, float, complex, bool, str, bytes, type(None), np.ndarray, np.generic, np.dtype)
_NAMES: dict[types.CodeType, frozenset[str]] = {}
_GLOBALS: dict[types.CodeType, frozenset[str]] = {}  # code -> the global names it loads


def _library(obj: Any) -> bool:
    if isinstance(obj, types.ModuleType):
        name = obj.__name__
    else:
        name = getattr(obj, "__module__", None) or type(obj).__module__ or ""
    return name.split(".")[0] in _LIBRARIES or name == _IEEE_MATH


def _names(code: types.CodeType) -> frozenset[str]:
    """Every global, attribute and closure name used in ``code`` and the functions defined inside it."""
    found = _NAMES.get(code)
    if found is None:
        names: set[str] = set()
        todo = [code]
        while todo:
            c = todo.pop()
            names.update(c.co_names, c.co_freevars)
            todo.extend(k for k in c.co_consts if isinstance(k, types.CodeType))
        found = _NAMES[code] = frozenset(names)
    return found


def _follow(obj: Any, names: frozenset[str], seen: set[Any]) -> bool:
    """True when ``obj``, reached from a kernel, cannot make a thread wait (as far as can be read).

    Functions and device functions are read; containers and modules of the learner's are followed
    (a module through the names the code uses); plain values and library objects call nothing.
    Anything else (a class, ``functools.partial``, a namespace, a callable object) is not read: False.
    """
    fn = getattr(obj, "fn", None) if type(obj).__name__ == "FakeCUDAKernel" else obj
    fn = getattr(fn, "py_func", fn)  # a real numba dispatcher (a kernel traced in gpu mode)
    if isinstance(fn, types.FunctionType):
        return _library(fn) or _function(fn, seen)
    if isinstance(obj, _PLAIN) or isinstance(obj, types.BuiltinFunctionType):
        return True
    if isinstance(obj, (tuple, list, set, frozenset, dict)):
        items = obj.values() if isinstance(obj, dict) else obj
        return all(type(o) in _PLAIN or _follow(o, names, seen) for o in items)
    if isinstance(obj, types.ModuleType) and not _library(obj):
        if id(obj) in seen:
            return True
        seen.add(id(obj))
        return all(_follow(getattr(obj, n), names, seen) for n in names if hasattr(obj, n))
    return _library(obj)


def _waits(names: frozenset[str]) -> set[str]:
    return {n for n in names if n in _WAIT_NAMES or any(w in n for w in WAITS)}


def _function(
    fn: types.FunctionType, seen: set[Any], allowed: frozenset[str] = frozenset(), skip: frozenset[str] = frozenset()
) -> bool:
    """True when ``fn`` (and all it reaches) names nothing that can wait, apart from ``allowed`` in ``fn`` itself;
    the globals named in ``skip`` (device functions read on their own, :mod:`.in_turn_calls`) are not followed."""
    code = fn.__code__
    if code in seen:
        return True
    seen.add(code)
    names = _names(code)
    if _waits(names) - allowed:
        return False
    found = [fn.__globals__[n] for n in names if n in fn.__globals__ and n not in skip]
    for cell in fn.__closure__ or ():
        try:
            found.append(cell.cell_contents)
        except ValueError:  # an empty cell
            continue
    found.extend(fn.__defaults__ or ())
    found.extend((fn.__kwdefaults__ or {}).values())
    return all(_follow(o, names, seen) for o in found)


def independent_threads(fn: Any) -> bool:
    """True when no thread of a launch of the kernel function ``fn`` can wait for another (see the module
    docstring). Read again at every launch: a notebook may redefine a device function the kernel calls."""
    return isinstance(fn, types.FunctionType) and _function(fn, set())


class _Unreadable(Exception):
    """Some function the kernel reaches cannot run as a generator: the block keeps Numba's threads."""


@dataclass
class _Reading:
    """What :func:`_read` found, over the kernel and the device functions it calls (transitively)."""

    generators: dict[types.CodeType, types.CodeType] = field(default_factory=dict)  # code -> its generator's code
    devices: list[Any] = field(default_factory=list)  # the FakeCUDAKernels whose calls became ``yield from``
    done: dict[types.CodeType, bool] = field(default_factory=dict)  # code -> must it run as a generator
    reading: set[types.CodeType] = field(default_factory=set)  # on the way down: a device function met again recurses


def _waiting_device_functions(fn: types.FunctionType) -> dict[str, Any]:
    """Global name -> device function (``@cuda.jit(device=True)``) that ``fn`` names and that can wait, as far as
    :func:`_function` reads it. (A kernel called like a device function is left to Numba's threads.)"""
    code = fn.__code__
    names = _GLOBALS.get(code)
    if names is None:
        names = _GLOBALS[code] = frozenset(global_names(code))
    out = {}
    for n in names:
        obj: Any = fn.__globals__.get(n)
        dev = getattr(obj, "fn", None) if type(obj).__name__ == "FakeCUDAKernel" and obj._device else None
        if isinstance(dev, types.FunctionType) and not _library(dev) and not _function(dev, set()):
            out[n] = obj
    return out


def _read(fn: types.FunctionType, found: _Reading) -> bool:
    """True when ``fn`` must run as a generator (it waits, or calls a device function that does), False when it
    cannot wait; raises :class:`_Unreadable` when neither can be made sure of (module docstring)."""
    code = fn.__code__
    if code in found.done:
        return found.done[code]
    if code in found.reading:
        raise _Unreadable("a device function that waits calls itself (recursion)")
    found.reading.add(code)
    devices = _waiting_device_functions(fn)
    own = frozenset(_waits(_names(code)) - set(devices))  # a device function named `block_sync` is not a wait
    if own - {"syncthreads", "lanemask_lt"} - WARP_CALLS:
        raise _Unreadable("other waits")
    if not _function(fn, set(), own | frozenset(devices), frozenset(devices)):
        raise _Unreadable("a wait somewhere the generator cannot reach")
    for dev in devices.values():
        _read(dev.fn, found)  # True, or it raises
        found.devices.append(dev)
    needs = bool(devices or own - {"lanemask_lt"})
    if needs:
        gen_code = generator_code(fn, frozenset(devices))
        if gen_code is None:
            raise _Unreadable("no generator")
        found.generators[code] = gen_code
    found.reading.discard(code)
    found.done[code] = needs
    return needs


def _generator(fn: types.FunctionType, found: _Reading) -> Any:
    gen = types.FunctionType(found.generators[fn.__code__], fn.__globals__, fn.__name__, fn.__defaults__)
    gen.__kwdefaults__ = fn.__kwdefaults__
    return gen


def plan(fn: Any) -> tuple[Any, bool] | None:
    """``(function to call per CUDA thread, is it a generator)`` when a block of kernel ``fn`` can run its
    threads in turn, else None (Numba's threads). See the module docstring. Anything unexpected while
    reading the kernel also means Numba's threads.

    A generator carries what :func:`gpulab.simulator.blocks.in_turn` needs: ``_gpulab_warp_yields`` (whether any
    of its code yields warp calls) and ``_gpulab_swaps`` (device functions of other modules, whose ``cuda`` and
    ``math`` are swapped while the block runs). Each device function it calls in turn gets its generator for this
    launch (``_gpulab_gen``, called by :func:`gpulab.simulator.in_turn_source.call_in_turn`)."""
    if not isinstance(fn, types.FunctionType):
        return None
    found = _Reading()
    try:
        if not _read(fn, found):
            return fn, False
    except Exception:  # noqa: BLE001 - _Unreadable, a module attribute that raises, an odd source file: threads
        return None
    cls = type(found.devices[0]) if found.devices else None
    if cls is not None and not hasattr(cls, CALL):
        setattr(cls, CALL, call_in_turn)
    swaps: dict[int, Any] = {}
    for dev in found.devices:
        dev._gpulab_gen = _generator(dev.fn, found)
        if dev.fn.__globals__ is not fn.__globals__:
            swaps.setdefault(id(dev.fn.__globals__), dev.fn)
    gen = _generator(fn, found)
    gen._gpulab_warp_yields = any(warp_yields(c) for c in found.generators)  # read by blocks.in_turn
    gen._gpulab_swaps = list(swaps.values())
    return gen, True
