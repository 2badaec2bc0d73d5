"""A kernel or device function recompiled from its source as a generator, for blocks whose threads run in turn.

:func:`generator_code` (used by :func:`gpulab.simulator.in_turn.plan`) reads a function's source and compiles it
again with each wait a ``yield``, so that :func:`gpulab.simulator.blocks.in_turn` can run a block's CUDA threads
one after another in one Python thread and still meet every wait:

* a ``cuda.syncthreads()`` statement becomes ``yield`` (the thread stops at the barrier);
* a warp call ``cuda.NAME(args)`` becomes ``(yield ("NAME", args...))``, answered with its result by
  :class:`gpulab.simulator.warps_in_turn.InTurn`;
* a call ``dev(args)`` of a device function that waits (``calls``: names of the function's globals, each a
  ``@cuda.jit`` function the plan recompiles too) becomes ``(yield from dev._gpulab_in_turn(args))``: the
  device function's own generator runs inside the caller's, its waits reach the block as if written in the
  kernel, and its ``return`` value is the call's value (:func:`call_in_turn`, the method's code).

None when that cannot be done faithfully: a closure, no source, a source that no longer matches the code, a
barrier or warp function used otherwise than as a plain call (passed around, keywords), a device function's name
used otherwise than as a plain call (assigned, passed, called with keywords or ``*args``), an inner function, or a
``yield`` of its own.
"""

from __future__ import annotations

import ast
import bisect
import dis
import inspect
import types
from typing import Any

from ..source import parsed_source
from .warps import NAMES as WARP_NAMES

__all__ = ["CALL", "WARP_CALLS", "call_in_turn", "generator_code", "warp_yields"]

# Warp functions that wait for the lanes of their mask (``lanemask_lt`` waits for nobody: it stays a call).
WARP_CALLS = frozenset(WARP_NAMES) - {"lanemask_lt"}
_ARGS = {"syncwarp": (1, 1), "activemask": (0, 0)}  # (fewest, most) positional arguments; shuffles 3, votes 2
CALL = "_gpulab_in_turn"  # the method of numba-cuda's FakeCUDAKernel that a rewritten device function call calls
_WARP_YIELDS: dict[types.CodeType, bool] = {}  # code -> whether its generator yields warp calls of its own
_GENERATORS: dict[tuple[types.CodeType, frozenset[str]], Any] = {}  # (code, calls) -> generator code or None


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


def _is_call_of(node: ast.AST, calls: frozenset[str]) -> bool:
    """``dev(args)`` for a name ``dev`` in ``calls``, with positional arguments only (no ``*args``)."""
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id in calls
        and not node.keywords
        and not any(isinstance(a, ast.Starred) for a in node.args)
    )


class _Yield(ast.NodeTransformer):
    def __init__(self, calls: frozenset[str]) -> None:
        self.calls = calls

    def visit_Expr(self, node: ast.Expr) -> Any:
        if _is_barrier(node):
            return ast.copy_location(ast.Expr(ast.Yield(None)), node)
        return self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> Any:
        node = self.generic_visit(node)  # type: ignore[assignment]
        if _is_call_of(node, self.calls):
            method = ast.Attribute(node.func, CALL, ast.Load())
            return ast.copy_location(ast.YieldFrom(ast.Call(method, node.args, [])), node)
        if not _is_warp_call(node):
            return node
        name = node.func.attr  # type: ignore[attr-defined]
        args = node.args or ([ast.Constant(0xFFFFFFFF)] if name in ("syncwarp", "activemask") else [])
        op = ast.Tuple([ast.Constant(name), *args], ast.Load())
        return ast.copy_location(ast.Yield(op), node)


def _constant(value: Any) -> Any:
    """A constant with its type, so that ``1``, ``1.0`` and ``True`` (or ``0.0`` and ``-0.0``) differ."""
    if isinstance(value, (tuple, frozenset)):
        items = [_constant(v) for v in value]
        return type(value).__name__, items if isinstance(value, tuple) else sorted(map(repr, items))
    return type(value).__name__, repr(value) if isinstance(value, (float, complex)) else value


def _shape(code: types.CodeType) -> tuple[list, list]:
    """``code``'s instructions and arguments, and its lines, the same for the same source whichever way it was
    compiled (a method call on a global compiles as LOAD_METHOD or LOAD_ATTR). Python 3.13 compiles
    ``cuda.grid(1)`` on a module the file imports as an attribute load and a PUSH_NULL, but on a name it cannot see
    imported (the function's source compiled alone) as a method load: PUSH_NULL is left out, and EXTENDED_ARG (its
    value is in the next instruction's). A jump's target is the index of the instruction it lands on among those
    kept, so that ``(a or b) and c`` and ``a or (b and c)`` differ though their offsets move with a PUSH_NULL."""
    jumps = set(dis.hasjrel) | set(dis.hasjabs)
    kept = [ins for ins in dis.get_instructions(code) if ins.opname not in ("PUSH_NULL", "EXTENDED_ARG")]
    offsets = [ins.offset for ins in kept]
    out: list = []
    for ins in kept:
        arg = ins.argval
        if isinstance(arg, types.CodeType):
            arg = _shape(arg)
        elif ins.opcode in jumps:
            arg = bisect.bisect_left(offsets, arg)  # a target left out lands on the next instruction kept
        else:
            arg = _constant(arg)
        out.append(("LOAD_ATTR" if ins.opname == "LOAD_METHOD" else ins.opname, arg))
    lines: list = []
    for _, _, line in code.co_lines():
        if line is not None and (not lines or lines[-1] != line):
            lines.append(line)
    return out, lines


def _calls_only(func: ast.FunctionDef, calls: frozenset[str]) -> bool:
    """Every use of a name in ``calls`` is a plain call of it (so each becomes a ``yield from``)."""
    called = {id(n.func) for n in ast.walk(func) if isinstance(n, ast.Call) and _is_call_of(n, calls)}
    for n in ast.walk(func):
        if isinstance(n, ast.Name) and n.id in calls and id(n) not in called:
            return False  # assigned, passed as a value, called with keywords or *args
        if isinstance(n, ast.arg) and n.arg in calls or isinstance(n, ast.Attribute) and n.attr in calls:
            return False  # a parameter of that name, or an attribute that the reading took for the global
        if isinstance(n, (ast.Global, ast.Nonlocal)) and calls & set(n.names):
            return False
    return True


def generator_code(fn: types.FunctionType, calls: frozenset[str] = frozenset()) -> types.CodeType | None:
    """The code of ``fn`` recompiled from its source with its waits yields and its calls of the device functions
    ``calls`` ``yield from`` (module docstring); None when that cannot be done faithfully. Cached by code."""
    key = (fn.__code__, calls)
    if key not in _GENERATORS:
        _GENERATORS[key] = _generator_code(fn, calls)
    return _GENERATORS[key]


def warp_yields(code: types.CodeType) -> bool:
    """Whether the generator :func:`generator_code` made of ``code`` yields warp calls of its own (True if unknown)."""
    return _WARP_YIELDS.get(code, True)


def _generator_code(fn: types.FunctionType, calls: frozenset[str]) -> types.CodeType | None:
    code = fn.__code__
    if code.co_freevars or code.co_flags & (inspect.CO_GENERATOR | inspect.CO_COROUTINE):
        return None
    parsed = parsed_source(fn)
    if parsed is None:
        return None
    tree, first = parsed
    if first != code.co_firstlineno or len(tree.body) != 1 or not isinstance(tree.body[0], ast.FunctionDef):
        return None  # the file moved under the kernel, or this is not one function
    func = tree.body[0]
    inner = [n for n in ast.walk(func) if n is not func and isinstance(n, (ast.FunctionDef, ast.Lambda, ast.ClassDef))]
    n_barriers = sum(_is_barrier(n) for n in ast.walk(func))
    n_calls = sum(isinstance(n, ast.Attribute) and n.attr == "syncthreads" for n in ast.walk(func))
    n_warp = sum(_is_warp_call(n) for n in ast.walk(func))
    _WARP_YIELDS[code] = n_warp > 0
    n_warp_names = sum(isinstance(n, ast.Attribute) and n.attr in WARP_CALLS for n in ast.walk(func))
    if inner or n_barriers != n_calls or n_warp != n_warp_names or not _calls_only(func, calls):
        return None  # a barrier, warp function or device function used otherwise than as a plain call
    if any(isinstance(n, (ast.Yield, ast.YieldFrom)) for n in ast.walk(func)):
        return None
    ast.increment_lineno(tree, code.co_firstlineno - 1)  # decorators stay: compiled, never run, they set the lines

    def function_code(module: types.CodeType) -> types.CodeType | None:
        return next((c for c in module.co_consts if isinstance(c, types.CodeType) and c.co_name == code.co_name), None)

    original = function_code(compile(tree, code.co_filename, "exec"))  # the source as it is now: still this code?
    if original is None or _shape(original) != _shape(code):
        return None  # the file changed since the kernel was defined
    return function_code(compile(ast.fix_missing_locations(_Yield(calls).visit(tree)), code.co_filename, "exec"))


def call_in_turn(self: Any, *args: Any) -> Any:
    """``dev._gpulab_in_turn(*args)`` (a method of numba-cuda's ``FakeCUDAKernel``): the generator of the device
    function ``dev`` that :func:`gpulab.simulator.in_turn.plan` made for this launch, run inside its caller's
    (``yield from``); its value is ``dev``'s return value. The ``cuda`` and ``math`` of ``dev``'s module are the
    simulator's while the block runs (:func:`gpulab.simulator.blocks.in_turn`), as numba-cuda's call sets them."""
    gen = self.__dict__.get("_gpulab_gen")
    if gen is None:  # not read by this launch's plan (cannot happen through gpulab's rewriting): a plain call
        return self(*args)
    return (yield from gen(*args))
