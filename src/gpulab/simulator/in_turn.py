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

import numpy as np

from .warps import NAMES as WARP_NAMES

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
_WARP_YIELDS: dict[types.CodeType, bool] = {}  # kernel code -> whether its generator yields warp calls too
_GENERATORS: dict[types.CodeType, Any] = {}  # kernel code -> its generator's code, or None when there is none


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


def _function(fn: types.FunctionType, seen: set[Any], allowed: frozenset[str] = frozenset()) -> bool:
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
    found.extend(fn.__defaults__ or ())
    found.extend((fn.__kwdefaults__ or {}).values())
    return all(_follow(o, names, seen) for o in found)


def independent_threads(fn: Any) -> bool:
    """True when no thread of a launch of the kernel function ``fn`` can wait for another (see the module
    docstring). Read again at every launch: a notebook may redefine a device function the kernel calls."""
    return isinstance(fn, types.FunctionType) and _function(fn, set())


# Warp functions that wait for the lanes of their mask: a call ``cuda.NAME(args)`` in the kernel's own body becomes
# ``(yield ("NAME", args...))``, answered by :class:`gpulab.simulator.warps_in_turn.InTurn`. (``lanemask_lt`` waits
# for nobody: it stays a call.)
WARP_CALLS = frozenset(WARP_NAMES) - {"lanemask_lt"}
_ARGS = {"syncwarp": (1, 1), "activemask": (0, 0)}  # (fewest, most) positional arguments; shuffles 3, votes 2


def _is_warp_call(node: ast.AST) -> bool:
    """``cuda.NAME(args)`` for a warp function NAME, with positional arguments only, as many as it takes."""
    if not (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr in WARP_CALLS
        and isinstance(node.func.value, ast.Name)
        and node.func.value.id == "cuda"
        and not node.keywords
        and not any(isinstance(a, ast.Starred) for a in node.args)
    ):
        return False
    name = node.func.attr
    low, high = _ARGS.get(name, (3, 3) if name.startswith("shfl") else (2, 2))
    return low <= len(node.args) <= high or (name == "syncwarp" and not node.args)


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
        if _is_barrier(node):
            return ast.copy_location(ast.Expr(ast.Yield(None)), node)
        return self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> Any:
        node = self.generic_visit(node)  # type: ignore[assignment]
        if not _is_warp_call(node):
            return node
        name = node.func.attr  # type: ignore[attr-defined]
        args = node.args or ([ast.Constant(0xFFFFFFFF)] if name in ("syncwarp", "activemask") else [])
        op = ast.Tuple([ast.Constant(name), *args], ast.Load())
        return ast.copy_location(ast.Yield(op), node)


def _shape(code: types.CodeType) -> tuple[list, list]:
    """``code``'s instructions and arguments, and its lines, the same for the same source whichever way it was
    compiled (a method call on a global compiles as LOAD_METHOD or LOAD_ATTR; jump offsets move with it)."""
    jumps = set(dis.hasjrel) | set(dis.hasjabs)
    out: list = []
    for ins in dis.get_instructions(code):
        arg = ins.argval
        if isinstance(arg, types.CodeType):
            arg = _shape(arg)
        elif ins.opcode in jumps:
            arg = None
        out.append(("LOAD_ATTR" if ins.opname == "LOAD_METHOD" else ins.opname, arg))
    lines: list = []
    for _, _, line in code.co_lines():
        if line is not None and (not lines or lines[-1] != line):
            lines.append(line)
    return out, lines


def _generator_code(fn: types.FunctionType) -> types.CodeType | None:
    """The code of ``fn`` recompiled from its source with each ``cuda.syncthreads()`` statement a ``yield``;
    None when that cannot be done faithfully (see the module docstring)."""
    code = fn.__code__
    if code.co_freevars or code.co_flags & (inspect.CO_GENERATOR | inspect.CO_COROUTINE):
        return None
    try:
        lines, first = inspect.getsourcelines(fn)
        tree = ast.parse(textwrap.dedent("".join(lines)))
    except (OSError, TypeError, SyntaxError, IndentationError):
        return None
    if first != code.co_firstlineno or len(tree.body) != 1 or not isinstance(tree.body[0], ast.FunctionDef):
        return None  # the file moved under the kernel, or this is not one function
    func = tree.body[0]
    inner = [n for n in ast.walk(func) if n is not func and isinstance(n, (ast.FunctionDef, ast.Lambda, ast.ClassDef))]
    n_barriers = sum(_is_barrier(n) for n in ast.walk(func))
    n_calls = sum(isinstance(n, ast.Attribute) and n.attr == "syncthreads" for n in ast.walk(func))
    n_warp = sum(_is_warp_call(n) for n in ast.walk(func))
    _WARP_YIELDS[code] = n_warp > 0
    n_warp_names = sum(isinstance(n, ast.Attribute) and n.attr in WARP_CALLS for n in ast.walk(func))
    if inner or n_barriers != n_calls or n_warp != n_warp_names:
        return None  # a barrier or warp function used otherwise than as a plain call (passed around, keywords)
    if any(isinstance(n, (ast.Yield, ast.YieldFrom)) for n in ast.walk(func)):
        return None
    ast.increment_lineno(tree, code.co_firstlineno - 1)  # decorators stay: compiled, never run, they set the lines

    def function_code(module: types.CodeType) -> types.CodeType | None:
        return next((c for c in module.co_consts if isinstance(c, types.CodeType) and c.co_name == code.co_name), None)

    original = function_code(compile(tree, code.co_filename, "exec"))  # the source as it is now: still this code?
    if original is None or _shape(original) != _shape(code):
        return None  # the file changed since the kernel was defined
    return function_code(compile(ast.fix_missing_locations(_Yield().visit(tree)), code.co_filename, "exec"))


def plan(fn: Any) -> tuple[Any, bool] | None:
    """``(function to call per CUDA thread, is it a generator)`` when a block of kernel ``fn`` can run its
    threads in turn, else None (Numba's threads). See the module docstring. Anything unexpected while
    reading the kernel also means Numba's threads."""
    if not isinstance(fn, types.FunctionType):
        return None
    code = fn.__code__
    try:
        # the kernel's own: none, or only syncthreads statements and warp calls (read below)
        waits = frozenset(_waits(_names(code)))
        if waits - {"syncthreads", "lanemask_lt"} - WARP_CALLS or not _function(fn, set(), waits):
            return None  # other waits, or one somewhere the generator cannot reach
        if not waits - {"lanemask_lt"}:
            return fn, False
        if code not in _GENERATORS:
            _GENERATORS[code] = _generator_code(fn)
    except Exception:  # noqa: BLE001 - a module attribute that raises, an odd source file: Numba's threads
        return None
    gen_code = _GENERATORS[code]
    if gen_code is None:
        return None
    gen = types.FunctionType(gen_code, fn.__globals__, fn.__name__, fn.__defaults__)
    gen._gpulab_warp_yields = _WARP_YIELDS.get(code, True)  # type: ignore[attr-defined]  # read by blocks.in_turn
    gen.__kwdefaults__ = fn.__kwdefaults__
    return gen, True
