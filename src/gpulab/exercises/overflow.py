"""Which array and which index ran past its end, read off the learner's failing line and the frame it failed in
(the simulator runs a kernel as Python, so the frame's values are there): ``x[i + a, j + b]`` with ``j + b = 6``
where ``x`` has 6 columns. Whether that index is the thread's own (a name set from ``cuda.grid()``,
``cuda.threadIdx``, ``cuda.blockIdx``) or computed from it, and whether the failing line runs only for threads that
passed a guard (an ``if`` on the thread's index, a grid-stride loop, an early ``return``): a computed index past the
end in a guarded thread is a wrong formula, not a missing guard.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from types import CodeType, FrameType
from typing import Any

from .frames import _kind
from .static import parse_kernel

__all__ = ["Overflow", "overflow"]

_OOB_RE = re.compile(r"index (-?\d+) is out of bounds for axis (\d+) with size (\d+)")
_THREAD_ATTRS = frozenset({"grid", "threadIdx", "blockIdx", "gridsize"})
_SAFE = (ast.Expression, ast.BinOp, ast.UnaryOp, ast.Name, ast.Load, ast.Constant, ast.operator, ast.unaryop)


@dataclass(frozen=True)
class Overflow:
    """``array[subscript]`` ran past the end of ``array``: at ``axis`` (of ``ndim``) the index ``index`` is
    ``value`` where the size is ``size``. ``computed``: that index is not the thread's own (a bare name set from
    cuda.grid() and the like); ``guarded``: the failing line runs only for threads that passed a test on their
    index, or in a grid-stride loop (None when the kernel's source is not available)."""

    array: str
    subscript: str
    index: str
    value: int
    axis: int
    size: int
    ndim: int
    computed: bool
    guarded: bool | None
    outside: str = ""
    """A store of the kernel (``out[i, j] = ...``) whose index, with this thread's values, is past the end of its
    array (``"out[1, 0]"`` for ``out`` of shape (1, 1)): the thread has no element to compute, so its guard is too
    wide. "" when every store the thread could make is inside."""


def overflow(exc: BaseException, line: tuple[int, str] | None) -> Overflow | None:
    """The array and index of the learner's ``line`` that raised ``exc`` (NumPy's "index V is out of bounds for axis
    A with size S"), found by evaluating each subscript of that line with the failing frame's values; None when
    the line, the frame or a matching subscript is not found."""
    m = _OOB_RE.search(str(exc))
    if not m or not line or not line[1]:
        return None
    value, axis, size = int(m.group(1)), int(m.group(2)), int(m.group(3))
    frame = _learner_frame(exc, line[0])
    if frame is None:
        return None
    env = {**frame.f_globals, **frame.f_locals}
    fn = _function(frame.f_code)
    thread = _thread_names(fn) if fn is not None else set()
    for name, node, parts in _subscripts(line[1]):
        shape = getattr(env.get(name), "shape", None)
        if shape is None or axis >= len(shape) or axis >= len(parts) or int(shape[axis]) != size:
            continue
        if _value(parts[axis], env) != value:
            continue
        part = parts[axis]
        computed = not (isinstance(part, ast.Name) and part.id in thread)
        guarded = _guarded(fn, line[0] - frame.f_code.co_firstlineno + 1, thread) if fn is not None else None
        outside = _store_outside(fn, env) if fn is not None else ""
        return Overflow(
            name, ast.unparse(node), ast.unparse(part), value, axis, size, len(shape), computed, guarded, outside
        )
    return None


def _learner_frame(exc: BaseException, lineno: int) -> FrameType | None:
    """The innermost frame of the learner's code that stopped at ``lineno``."""
    found = None
    tb = exc.__traceback__
    while tb is not None:
        if _kind(tb.tb_frame.f_code.co_filename) == "yours" and tb.tb_lineno == lineno:
            found = tb.tb_frame
        tb = tb.tb_next
    return found


def _subscripts(text: str) -> list[tuple[str, ast.Subscript, list[ast.expr]]]:
    """(array name, subscript node, index per axis) of each ``name[...]`` on one source line (a statement, or the
    head of an ``if``/``elif``/``while``/``for``)."""
    text = text.strip()
    tree = None
    for candidate in (text, text + " pass", re.sub(r"^elif\b", "if", text) + " pass"):
        try:
            tree = ast.parse(candidate)
            break
        except SyntaxError:
            continue
    if tree is None:
        return []
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name):
            parts = list(node.slice.elts) if isinstance(node.slice, ast.Tuple) else [node.slice]
            found.append((node.value.id, node, parts))
    return found


def _value(node: ast.expr, env: dict[str, Any]) -> int | None:
    """An index expression's value (names, numbers and arithmetic only: nothing that could call code)."""
    if not all(isinstance(n, _SAFE) for n in ast.walk(node)):
        return None
    try:
        v = eval(compile(ast.Expression(node), "<index>", "eval"), {"__builtins__": {}}, env)  # noqa: S307
        return int(v) if float(v) == int(v) else None
    except Exception:  # noqa: BLE001 - a name not set, a float: no value to compare
        return None


def _function(code: CodeType) -> ast.FunctionDef | None:
    """The kernel's ``def`` as parsed from its source (line 1: the decorator's, as ``co_firstlineno``)."""
    parsed = parse_kernel(code)
    return parsed[2] if parsed is not None else None


def _mentions_thread(node: ast.AST, thread: set[str]) -> bool:
    return any(
        (isinstance(n, ast.Attribute) and n.attr in _THREAD_ATTRS) or (isinstance(n, ast.Name) and n.id in thread)
        for n in ast.walk(node)
    )


def _thread_names(fn: ast.FunctionDef) -> set[str]:
    """Names set from the thread's position: ``i = cuda.grid(1)``, ``j, i = cuda.grid(2)``, ``tx = cuda.threadIdx.x``,
    ``for i in range(cuda.grid(1), n, cuda.gridsize(1))`` (not names computed from those: ``oi = i // 2``)."""
    names: set[str] = set()
    for node in ast.walk(fn):
        targets, source = [], None
        if isinstance(node, ast.Assign):
            targets, source = node.targets, node.value
        elif isinstance(node, ast.For):
            targets, source = [node.target], node.iter
        if source is not None and _mentions_thread(source, set()):
            for t in targets:
                names |= {n.id for n in ast.walk(t) if isinstance(n, ast.Name)}
    return names


def _guarded(fn: ast.FunctionDef, lineno: int, thread: set[str]) -> bool:
    """Whether line ``lineno`` of ``fn``'s source runs only for threads that passed a test on their index: inside an
    ``if``/``while`` testing a thread name, or a loop over the thread's indices (a grid-stride loop), or after an
    ``if ...: return`` testing one."""

    def visit(body: list[ast.stmt]) -> bool | None:
        returned = False
        for stmt in body:
            start, end = stmt.lineno, getattr(stmt, "end_lineno", stmt.lineno) or stmt.lineno
            if start <= lineno <= end:
                if returned:
                    return True
                if isinstance(stmt, (ast.If, ast.While)) and _mentions_thread(stmt.test, thread):
                    if stmt.test.lineno <= lineno <= (stmt.test.end_lineno or stmt.test.lineno):
                        return False  # the line is the test itself
                    return True
                if isinstance(stmt, ast.For) and _mentions_thread(stmt.iter, thread):
                    return True
                for field in ("body", "orelse", "finalbody"):
                    inner = getattr(stmt, field, None)
                    if inner:
                        found = visit(inner)
                        if found is not None:
                            return found
                return False
            if (
                isinstance(stmt, ast.If)
                and _mentions_thread(stmt.test, thread)
                and any(isinstance(s, ast.Return) for s in stmt.body)
            ):
                returned = True
        return None

    return bool(visit(fn.body))


def _store_outside(fn: ast.FunctionDef, env: dict[str, Any]) -> str:
    """The first store of ``fn`` (``a[...] = ...``, ``a[...] += ...``) whose index, evaluated with the failing
    thread's values, is past the end of ``a``: ``"out[1, 0]"``; "" when none is (or none can be evaluated)."""
    for node in ast.walk(fn):
        targets = (
            node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AugAssign) else []
        )
        for t in targets:
            if not (isinstance(t, ast.Subscript) and isinstance(t.value, ast.Name)):
                continue
            shape = getattr(env.get(t.value.id), "shape", None)
            parts = list(t.slice.elts) if isinstance(t.slice, ast.Tuple) else [t.slice]
            if shape is None or len(parts) != len(shape):
                continue
            values = [_value(p, env) for p in parts]
            if None in values:
                continue
            if any(not -n <= v < n for v, n in zip(values, shape)):
                return f"{t.value.id}[{', '.join(str(v) for v in values)}]"
    return ""
