"""How to run a block's CUDA threads in turn, in one Python thread: read from the kernel's code before it runs.

Numba's simulator gives each CUDA thread a Python thread; starting and switching them was most of its
cost per thread. :func:`plan` says whether a kernel can do without:

* a kernel whose threads never wait for each other (no ``cuda.syncthreads()``, no warp vote or
  shuffle, no grid sync, in any code it reaches) runs each thread to its end, one after another:
  that order is one of the schedules a GPU may pick;
* a kernel whose only waits are ``cuda.syncthreads()`` statements in its own body is recompiled from
  its source as a generator that yields at each of them; every thread of the block is advanced to
  its next barrier before any goes past it, which is exactly what the barrier promises (and a thread
  that returned early does not hold the others back, as in Numba's simulator);
* anything else (a barrier in a device function, ``syncthreads_count``, a closure with a barrier, a
  kernel whose source is not available or no longer matches its code) keeps Numba's threads.

The reading must never call a kernel that can wait "independent": its threads would pass a barrier
alone. So it is conservative. It reads the names in the kernel's code and in every function it can
reach (device functions, plain functions, closures, module attributes such as ``helpers.load_tile``);
any name that can wait (:data:`WAITS`), or anything it cannot follow (a class, ``functools.partial``, a
callable object), keeps the block on Numba's threads.
"""

from __future__ import annotations

import ast
import dis
import inspect
import textwrap
import types
from typing import Any

__all__ = ["WAITS", "independent_threads", "plan"]

# A name containing one of these can make a thread wait for others (syncthreads*, syncwarp, *_sync,
# grid.sync(), shfl_*, vote and match functions, cooperative groups).
WAITS = ("sync", "shfl", "ballot", "activemask", "lanemask", "this_grid", "match_a", "vote")
_WAIT_NAMES = {"cg"}  # numba.cuda.cg
# Libraries whose functions never call a CUDA barrier: not read.
_LIBRARIES = ("numpy", "numba", "math", "cmath", "operator", "builtins", "cupy", "random", "functools")
_NAMES: dict[types.CodeType, frozenset[str]] = {}
_GENERATORS: dict[types.CodeType, Any] = {}  # kernel code -> its generator version, or None when there is none


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


def _waits(names: frozenset[str]) -> set[str]:
    return {n for n in names if n in _WAIT_NAMES or any(w in n for w in WAITS)}


def _function(fn: types.FunctionType, seen: set[types.CodeType], allowed: frozenset[str] = frozenset()) -> bool:
    """True when ``fn`` (and all it reaches) names nothing that can wait, apart from ``allowed`` in ``fn`` itself."""
    code = fn.__code__
    if code in seen:
        return True
    seen.add(code)
    names = _names(code)
    if _waits(names) - allowed:
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


def _is_barrier(node: ast.AST) -> bool:
    return (
        isinstance(node, ast.Expr)
        and isinstance(node.value, ast.Call)
        and not node.value.args
        and not node.value.keywords
        and isinstance(node.value.func, ast.Attribute)
        and node.value.func.attr == "syncthreads"
        and isinstance(node.value.func.value, ast.Name)
        and node.value.func.value.id == "cuda"
    )


class _Yield(ast.NodeTransformer):
    def visit_Expr(self, node: ast.Expr) -> Any:
        return ast.copy_location(ast.Expr(ast.Yield(None)), node) if _is_barrier(node) else node


def _shape(code: types.CodeType) -> list:
    """``code``'s instructions and arguments, the same for the same source whichever way it was compiled (a
    method call on a global compiles as LOAD_METHOD or LOAD_ATTR; jump offsets move with it)."""
    jumps = set(dis.hasjrel) | set(dis.hasjabs)
    out: list = []
    for ins in dis.get_instructions(code):
        arg = ins.argval
        if isinstance(arg, types.CodeType):
            arg = _shape(arg)
        elif ins.opcode in jumps:
            arg = None
        out.append(("LOAD_ATTR" if ins.opname == "LOAD_METHOD" else ins.opname, arg))
    return out


def _generator(fn: types.FunctionType) -> Any:
    """``fn`` recompiled from its source with each ``cuda.syncthreads()`` statement a ``yield``; None when
    that cannot be done faithfully (see the module docstring)."""
    code = fn.__code__
    if code.co_freevars or code.co_flags & (inspect.CO_GENERATOR | inspect.CO_COROUTINE):
        return None
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(fn)))
    except (OSError, TypeError, SyntaxError, IndentationError):
        return None
    if len(tree.body) != 1 or not isinstance(tree.body[0], ast.FunctionDef) or tree.body[0].name != fn.__name__:
        return None
    func = tree.body[0]
    inner = [n for n in ast.walk(func) if n is not func and isinstance(n, (ast.FunctionDef, ast.Lambda, ast.ClassDef))]
    n_barriers = sum(_is_barrier(n) for n in ast.walk(func))
    n_calls = sum(isinstance(n, ast.Attribute) and n.attr == "syncthreads" for n in ast.walk(func))
    if inner or n_barriers != n_calls or any(isinstance(n, (ast.Yield, ast.YieldFrom)) for n in ast.walk(func)):
        return None
    func.decorator_list = []
    ast.increment_lineno(tree, code.co_firstlineno - 1)
    same = compile(tree, code.co_filename, "exec")  # the source as it is now: is it still this code?
    original = next((c for c in same.co_consts if isinstance(c, types.CodeType) and c.co_name == fn.__name__), None)
    if original is None or _shape(original) != _shape(code):
        return None  # the file changed since the kernel was defined
    tree = ast.fix_missing_locations(_Yield().visit(tree))
    space: dict[str, Any] = {}
    exec(compile(tree, code.co_filename, "exec"), fn.__globals__, space)  # noqa: S102 - the kernel's own source
    gen = space[fn.__name__]
    gen.__defaults__, gen.__kwdefaults__ = fn.__defaults__, fn.__kwdefaults__
    return gen


def plan(fn: Any) -> tuple[Any, bool] | None:
    """``(function to call per CUDA thread, is it a generator)`` when a block of kernel ``fn`` can run its
    threads in turn, else None (Numba's threads). See the module docstring."""
    if not isinstance(fn, types.FunctionType):
        return None
    if _function(fn, set()):
        return fn, False
    if _waits(_names(fn.__code__)) != {"syncthreads"} or not _function(fn, set(), frozenset({"syncthreads"})):
        return None  # other waits, or a barrier somewhere the generator cannot reach
    code = fn.__code__
    if code not in _GENERATORS:
        _GENERATORS[code] = _generator(fn)
    gen = _GENERATORS[code]
    return (gen, True) if gen is not None else None
