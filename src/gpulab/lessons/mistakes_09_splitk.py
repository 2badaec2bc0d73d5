"""Lesson 09's split-K exercise (:mod:`.ex_09_splitk`): the hints that come from reading the learner's kernel, not
from its output. :func:`with_splitk_hints` runs the Problem and, on a failed verdict, names what the source shows:

* ``j, i, z = cuda.grid(3)`` and ``cuda.grid(2)`` unpacked into the wrong number of names;
* x taken as the row (``i, j = cuda.grid(2)`` with ``partials[z, i, j]``), against the course's convention: x is the
  fastest index and maps to the last, contiguous axis (``j, i = cuda.grid(2)``); or that unpack written, but ``j``
  used as the row;
* ``partials`` indexed in another order than (slice, row, column);
* a load that reads past the end of K (the harness's general hint speaks of convolutions and pooling);
* ``cuda.syncthreads`` without ``()``, which names the function and waits for nothing.

The named mistakes that a wrong result matches (a slice one tile short, every slice the whole of K, ...) are in
:mod:`.ex_09_splitk`.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable
from typing import Any

from ..exercises import CheckResult, Problem
from ..exercises.static import parse_kernel

__all__ = ["GRID_UNPACK_HINT", "NO_PARENS_HINT", "with_splitk_hints"]

GRID_UNPACK_HINT = (
    "`cuda.grid(n)` gives n numbers: `cuda.grid(3)` gives x, y and z (x the fastest), `cuda.grid(2)` x and y, in a "
    "3-D launch too. Unpack as many names as it gives: `j, i = cuda.grid(2)` and `z = cuda.blockIdx.z` (the slice "
    "of K), or `j, i, z = cuda.grid(3)` (with blocks of 16 x 16 x 1, z is blockIdx.z)."
)

ROW_FROM_X_HINT = (
    "your kernel takes the row of C from x: `{unpack}` puts x, the first value, in {x}, and the kernel uses {x} as "
    "the row (`{A}[{x}, ...]`, `{store}`). In this course x, the fastest-varying thread index, gives the column: the "
    "last, contiguous axis, so that neighbouring threads touch neighbouring elements (the launch's grid = "
    "(ceil(N / 16), ceil(M / 16), S) puts x along the columns). Write `j, i = cuda.grid(2)` (j the column, i the "
    "row), keep tx along the columns (`sA[ty, tx] = A[i, k0 + tx]`, `sB[ty, tx] = B[k0 + ty, j]`) and store "
    "`{p}[z, i, j]`."
)

ROW_FROM_J_HINT = (
    "you unpack `{unpack}` as the course does ({x} from x, the fastest-varying thread index: the column; {y} from "
    "y: the row), but then use {x} as the row (`{A}[{x}, ...]`, `{store}`), so neighbouring threads touch elements "
    "a row apart. Keep the unpack and swap the roles in the indices: rows with {y}, columns with {x} "
    "(`sA[ty, tx] = {A}[{y}, k0 + tx]`, `sB[ty, tx] = {B}[k0 + ty, {x}]`), and store `{p}[{z}, {y}, {x}]`."
)

AXES_HINT = (
    "{p} is (S, M, N): the slice first, then the row and the column of C. Your kernel writes `{store}`; write "
    "`{p}[{z}, {row}, {col}]`, guarded by `if {row} < {p}.shape[1] and {col} < {p}.shape[2]:`."
)

PAST_K_HINT = (
    "`{expr}` read past the end of K ({name}.shape[{axis}] is K = {size}, the index was {index}): the last tile of K "
    "is partial when K is not a multiple of 16, and a slice must stop at the last tile. Loop `for t in range(z * per, "
    "min(tiles, (z + 1) * per)):` and load a zero where the column of K is past the end: "
    "`if i < A.shape[0] and k0 + tx < K:` for A, `if k0 + ty < K and j < B.shape[1]:` for B, else `= float32(0.0)`."
)

NO_PARENS_HINT = (
    "`cuda.syncthreads` without `()` (line {line}) only names the function: it waits for nothing, so that barrier "
    "is missing. Write `cuda.syncthreads()`."
)

_PAST_END = re.compile(
    r"indexed past the end of (\w+) at line \d+: `(.+?)`: index (-?\d+) is out of bounds for axis (\d+) with size (\d+)"
)


def with_splitk_hints(problem: Problem) -> Callable[..., CheckResult]:
    """A checker that runs ``problem`` and, on a verdict that failed, puts the hint that the kernel's source gives
    (see the module's docstring) in place of the harness's, or before it (a barrier without ``()``)."""

    def checker(kernel: Any, *, trusted: bool = False) -> CheckResult:
        res = problem.check(kernel, trusted=trusted)
        if res.passed:
            return res
        hint = source_hint(kernel, res.message)
        if "write `j, i = cuda.grid(2)`" in res.hint:  # the orientation check has said it, unless they wrote that
            if hint.startswith(ROW_FROM_J_HINT[:40]):
                res.hint = hint
            return res
        if hint:
            res.hint = hint
        line = syncthreads_without_call(kernel)
        if line:
            res.hint = NO_PARENS_HINT.format(line=line) + (" " + res.hint if res.hint else "")
        return res

    return checker


def source_hint(kernel: Any, message: str) -> str:
    """The hint the kernel's source (and the verdict's ``message``) gives for a failed split-K kernel, or ""."""
    if "values to unpack" in message and "cuda.grid(" in message:
        return GRID_UNPACK_HINT
    parsed = parse_kernel(kernel)
    if parsed is None:
        return ""
    _, _, tree = parsed
    params = [a.arg for a in tree.args.args]
    if len(params) != 3:
        return ""
    A, B, p = params
    names = _thread_names(tree)
    store = _index_names(tree, p, ast.Store)
    if names is not None and store is not None:
        (x, y, z), unpack = names
        if sorted(store) == sorted((x, y, z)) and store != (z, y, x):
            text = f"{p}[{', '.join(store)}]"
            a_row = (_index_names(tree, A, ast.Load, partial=True) or ("",))[0]
            if store == (z, x, y) and a_row == x and (x, y) == ("j", "i"):  # the course's unpack, j used as the row
                return ROW_FROM_J_HINT.format(unpack=unpack, A=A, B=B, x=x, y=y, z=z, store=text, p=p)
            if store == (z, x, y) and a_row == x:  # x is the row throughout: the unpack is the one swapped
                return ROW_FROM_X_HINT.format(unpack=unpack, A=A, x=x, store=text, p=p)
            return AXES_HINT.format(p=p, store=text, z=z, row=y, col=x)
    m = _PAST_END.search(message)
    if m and (m.group(1), int(m.group(4))) in ((A, 1), (B, 0)):
        name, expr, index, axis, size = m.groups()
        return PAST_K_HINT.format(expr=expr, name=name, axis=axis, size=size, index=index)
    return ""


def _cuda_attr(node: ast.AST, *path: str) -> bool:
    """``node`` is ``cuda.<path[0]>.<path[1]>...``."""
    for name in reversed(path):
        if not (isinstance(node, ast.Attribute) and node.attr == name):
            return False
        node = node.value
    return isinstance(node, ast.Name) and node.id == "cuda"


def _thread_names(tree: ast.FunctionDef) -> tuple[tuple[str, str, str], str] | None:
    """The names the kernel gives x and y (``a, b = cuda.grid(2)``, or the first two of ``cuda.grid(3)``) and the
    slice (``z = cuda.blockIdx.z``, or the third of ``cuda.grid(3)``), with the unpacking line; or None when it names
    them otherwise."""
    x = y = z = None
    unpack = ""
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Assign) and len(node.targets) == 1):
            continue
        target, value = node.targets[0], node.value
        if isinstance(value, ast.Call) and _cuda_attr(value.func, "grid") and isinstance(target, ast.Tuple):
            got = [t.id for t in target.elts if isinstance(t, ast.Name)]
            if len(got) == len(target.elts) >= 2:
                x, y, unpack = got[0], got[1], ast.unparse(node)
                z = got[2] if len(got) == 3 else z
        elif isinstance(target, ast.Name) and _cuda_attr(value, "blockIdx", "z"):
            z = target.id
    return ((x, y, z), unpack) if x and y and z else None


def _index_names(tree: ast.FunctionDef, array: str, ctx: type, partial: bool = False) -> tuple[str, ...] | None:
    """The names indexing the kernel's first ``array[a, b, ...]`` in context ``ctx`` (``ast.Store``: a write,
    ``ast.Load``: a read), plain names only (``partial``: those before the first other expression), or None."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Subscript) and isinstance(node.ctx, ctx) and isinstance(node.value, ast.Name):
            if node.value.id == array and isinstance(node.slice, ast.Tuple):
                names: list[str] = []
                for e in node.slice.elts:
                    if not isinstance(e, ast.Name):
                        if partial:
                            break
                        return None
                    names.append(e.id)
                return tuple(names) if names else None
    return None


def syncthreads_without_call(kernel: Any) -> int:
    """The first line where the kernel names ``cuda.syncthreads`` without calling it (comments aside), or 0."""
    parsed = parse_kernel(kernel)
    if parsed is None:
        return 0
    _, first, tree = parsed
    called = {id(n.func) for n in ast.walk(tree) if isinstance(n, ast.Call)}
    for node in ast.walk(tree):
        if _cuda_attr(node, "syncthreads") and id(node) not in called:
            return first + getattr(node, "lineno", 1) - 1
    return 0
