"""Can a kernel's threads wait for one another? Read from its code, before it runs.

A block whose threads never wait for each other (no ``cuda.syncthreads()``, no warp vote or shuffle,
no grid sync) gives every result it can give when its threads run one after another, each to its
end: that order is one of the schedules a GPU may pick. :func:`gpulab.simulator.blocks.run_block`
then runs the block's CUDA threads in one Python thread instead of one Python thread each, which
costs about 1/20 of the CPU (thread start-up and switching were most of the simulator's cost per
thread).

The answer must never be "independent" for a kernel that can wait: its threads would pass a barrier
alone. So the check is conservative. It reads the names in the kernel's code and in every function
it can reach (device functions, plain functions, closures, module attributes such as
``helpers.load_tile``); any name that can wait (:data:`WAITS`), or anything it cannot follow (a
class, ``functools.partial``, a callable object), keeps the block on Numba's threads.
"""

from __future__ import annotations

import types
from typing import Any

__all__ = ["WAITS", "independent_threads"]

# A name containing one of these can make a thread wait for others (syncthreads*, syncwarp, *_sync,
# grid.sync(), shfl_*, vote and match functions, cooperative groups).
WAITS = ("sync", "shfl", "ballot", "activemask", "lanemask", "this_grid", "match_a", "vote")
_WAIT_NAMES = {"cg"}  # numba.cuda.cg
# Libraries whose functions never call a CUDA barrier: not read.
_LIBRARIES = ("numpy", "numba", "math", "cmath", "operator", "builtins", "cupy", "random", "functools")
_NAMES: dict[types.CodeType, frozenset[str]] = {}


def _library(obj: Any) -> bool:
    if isinstance(obj, types.ModuleType):
        name = obj.__name__
    else:
        name = getattr(obj, "__module__", None) or type(obj).__module__ or ""
    return name.split(".")[0] in _LIBRARIES


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


def _follow(obj: Any, seen: set[types.CodeType]) -> bool:
    """True when calling ``obj`` from a kernel cannot make a thread wait (as far as can be read)."""
    fn = getattr(obj, "fn", None) if type(obj).__name__ == "FakeCUDAKernel" else obj
    fn = getattr(fn, "py_func", fn)  # a real numba dispatcher (a kernel traced in gpu mode)
    if isinstance(fn, types.FunctionType):
        return _library(fn) or _function(fn, seen)
    if isinstance(obj, (tuple, list)):
        return all(_follow(o, seen) for o in obj if callable(o) or isinstance(o, (tuple, list)))
    if isinstance(obj, dict):
        return all(_follow(o, seen) for o in obj.values() if callable(o) or isinstance(o, (tuple, list)))
    if not callable(obj) or isinstance(obj, (types.BuiltinFunctionType, types.ModuleType)):
        return True
    return _library(obj)  # a class or callable object of the learner's: not followed, so not independent


def _function(fn: types.FunctionType, seen: set[types.CodeType]) -> bool:
    code = fn.__code__
    if code in seen:
        return True
    seen.add(code)
    names = _names(code)
    if names & _WAIT_NAMES or any(w in n for n in names for w in WAITS):
        return False
    found = [fn.__globals__[n] for n in names if n in fn.__globals__]
    for cell in fn.__closure__ or ():
        try:
            found.append(cell.cell_contents)
        except ValueError:  # an empty cell
            continue
    for mod in [o for o in found if isinstance(o, types.ModuleType) and not _library(o)]:
        found.extend(getattr(mod, n) for n in names if hasattr(mod, n))
    return all(_follow(o, seen) for o in found)


def independent_threads(fn: Any) -> bool:
    """True when no thread of a launch of the kernel function ``fn`` can wait for another (see the module
    docstring). Read again at every launch: a notebook may redefine a device function the kernel calls."""
    return isinstance(fn, types.FunctionType) and _function(fn, set())
