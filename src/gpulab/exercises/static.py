"""What a GPU refuses and the simulator runs anyway, found by reading the kernel's source (no compiler needed).

Python objects first: a list, dict or set, a comprehension or generator, an f-string, NumPy calls that build
arrays (``np.dot``, ``np.zeros``), and ``return value`` from a kernel all run in the simulator and do not
compile for a GPU (a kernel cannot allocate memory or return a value).

``cuda.shared.array`` and ``cuda.local.array`` need a shape known when the kernel is compiled: a number, or a
module-level constant such as ``TPB = 128``. The simulator builds the array at run time from any value, so
``cuda.shared.array(cuda.blockDim.x, float32)`` or ``cuda.local.array(w.shape[1], float32)`` passes every
check there and fails to compile on a GPU. A PTX compile would find it too, but costs seconds per kernel; this
check is an AST walk and runs for every kernel the harness checks.
"""

from __future__ import annotations

import ast
import inspect
from typing import Any

import numpy as np

from ..source import parsed_source, py_func
from .result import Check

__all__ = [
    "CUDA_UFUNCS",
    "array_shape_check",
    "numpy_ufunc_fix",
    "parse_kernel",
    "python_only",
    "runtime_shapes",
    "scalar_ufuncs_off_gpu",
    "static_check",
]

_ARRAYS = ("shared", "local")
_RUNTIME_ATTRS = {"blockDim", "gridDim", "threadIdx", "blockIdx", "shape", "size", "ndim", "gridsize", "grid"}


def _array_call(node: ast.Call) -> str | None:
    """``'shared'`` or ``'local'`` for ``cuda.shared.array(...)`` / ``shared.array(...)``, else None."""
    f = node.func
    if isinstance(f, ast.Attribute) and f.attr == "array":
        owner = f.value
        if isinstance(owner, ast.Attribute) and owner.attr in _ARRAYS:
            return owner.attr
        if isinstance(owner, ast.Name) and owner.id in _ARRAYS:
            return owner.id
    return None


def _shape_arg(node: ast.Call) -> ast.expr | None:
    for kw in node.keywords:
        if kw.arg == "shape":
            return kw.value
    return node.args[0] if node.args else None


class _Shapes:
    """Decides whether a shape expression is a compile-time constant, following simple local assignments."""

    def __init__(self, fn: Any, tree: ast.FunctionDef) -> None:
        self.params = {a.arg for a in tree.args.args + tree.args.kwonlyargs}
        self.globals = dict(getattr(fn, "__globals__", {}))
        try:
            self.globals.update(inspect.getclosurevars(fn).nonlocals)
        except (TypeError, ValueError):
            pass
        self.assigned: dict[str, list[ast.expr]] = {}
        for node in ast.walk(tree):
            if isinstance(node, ast.Assign):
                for target in node.targets:
                    if isinstance(target, ast.Name):
                        self.assigned.setdefault(target.id, []).append(node.value)

    def why_not_constant(self, expr: ast.expr, depth: int = 0) -> str | None:
        """A short reason when ``expr`` is certainly not known at compile time; None when it is (or may be)."""
        if depth > 8:
            return None
        if isinstance(expr, ast.Constant):
            return None
        if isinstance(expr, ast.Tuple):
            return next((r for e in expr.elts if (r := self.why_not_constant(e, depth + 1))), None)
        if isinstance(expr, ast.BinOp):
            reason = self.why_not_constant(expr.left, depth + 1) or self.why_not_constant(expr.right, depth + 1)
            if reason or _literal(expr):
                return reason  # (32 + 1) * 4 is folded by Python; TILE + 1 is not, and Numba does not work it out
            return (
                f"`{ast.unparse(expr)}` is arithmetic that Numba does not work out when it compiles the kernel "
                f"(give it a name at module level, e.g. `SIZE = {ast.unparse(expr)}`, and use that name, or write "
                "the number)"
            )
        if isinstance(expr, ast.UnaryOp):
            return self.why_not_constant(expr.operand, depth + 1)
        if isinstance(expr, ast.Name):
            if expr.id in self.params:
                return f"`{expr.id}` is an argument of the kernel, known only at launch"
            if expr.id in self.assigned:
                values = self.assigned[expr.id]
                return next((r for v in values if (r := self.why_not_constant(v, depth + 1))), None)
            if expr.id in self.globals:
                value = self.globals[expr.id]
                if isinstance(value, int) or (isinstance(value, tuple) and all(isinstance(v, int) for v in value)):
                    return None
                if isinstance(value, np.integer):
                    return (
                        f"`{expr.id}` is a NumPy {type(value).__name__}; write a plain Python int (`{expr.id} = 128`)"
                    )
                return f"`{expr.id}` is a {type(value).__name__}, not a whole number"
            return None
        if isinstance(expr, ast.Attribute):  # cuda.blockDim.x, x.shape, w.size: launch-time; config.TPB: constant
            node: ast.expr = expr
            while isinstance(node, ast.Attribute):
                if node.attr in _RUNTIME_ATTRS:
                    return f"`{ast.unparse(expr)}` is known only at launch"
                node = node.value
            return (
                self.why_not_constant(node, depth + 1)
                if isinstance(node, ast.Name) and node.id in self.params
                else None
            )
        if isinstance(expr, ast.Subscript):  # SHAPE[0] of a global tuple is a constant; x[0] or w.shape[1] is not
            return self.why_not_constant(expr.value, depth + 1)
        if isinstance(expr, ast.Call):
            return f"`{ast.unparse(expr)}` is computed when the kernel runs"
        return None


def parse_kernel(kernel: Any) -> tuple[Any, int, ast.FunctionDef] | None:
    """(the Python function, its first line, its parsed ``def``), or None when its source cannot be read (also for
    a code object, such as a failing frame's)."""
    fn = py_func(kernel)
    parsed = parsed_source(fn)
    if parsed is None:
        return None
    tree, first = parsed
    defs = [n for n in tree.body if isinstance(n, ast.FunctionDef)]
    return (fn, first, defs[0]) if defs else None


def runtime_shapes(kernel: Any) -> list[tuple[int, str, str, str]]:
    """``(line, 'shared' | 'local', shape text, reason)`` for each array whose shape is not a compile-time
    constant. Empty when the source cannot be read (nothing to say)."""
    parsed = parse_kernel(kernel)
    if parsed is None:
        return []
    fn, first, tree = parsed
    shapes = _Shapes(fn, tree)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and (kind := _array_call(node)) is not None:
            shape = _shape_arg(node)
            if shape is not None and (reason := shapes.why_not_constant(shape)) is not None:
                found.append((first + node.lineno - 1, kind, ast.unparse(shape), reason))
    return found


def array_shape_check(kernel: Any) -> Check | None:
    """A failed :class:`Check` naming the first ``cuda.shared.array`` / ``cuda.local.array`` whose shape a GPU
    cannot compile, or None when every shape is a constant."""
    found = runtime_shapes(kernel)
    if not found:
        return None
    line, kind, shape, reason = found[0]
    return Check(
        f"{kind} array size",
        False,
        f"`cuda.{kind}.array({shape}, ...)` (line {line}): {reason}. The simulator accepts it; a GPU does not "
        "compile it, because the size of a shared or local array must be known when the kernel is compiled.",
        (
            "use a number or a module-level constant: write `TPB = 128` outside the kernel, "
            "`cuda.shared.array(TPB, float32)` inside it, and launch with TPB threads per block."
            if kind == "shared"
            else "use a number or a module-level constant for the largest size you need: write `K = 3` outside "
            "the kernel and `cuda.local.array(K, float32)` inside it (each thread gets its own K values)."
        ),
    )


_NP_ALLOCATING = {
    "array", "zeros", "ones", "empty", "full", "arange", "linspace", "zeros_like", "ones_like", "empty_like",
    "full_like", "copy", "dot", "matmul", "sum", "mean", "prod", "max", "min", "argmax", "argmin", "sort",
    "concatenate", "stack", "where", "outer", "einsum", "transpose", "reshape",
}  # fmt: skip
_BUILTIN_OBJECTS = {"list", "dict", "set", "sorted", "sum", "str"}
_FIX_OBJECT = "keep to numbers, arrays passed in, cuda.local.array / cuda.shared.array, math and cuda.*"


def _own_nodes(tree: ast.FunctionDef) -> list[ast.AST]:
    """The nodes of the kernel's body, not its decorator (``@cuda.jit(["void(...)"])`` is fine) nor the bodies of
    functions defined inside it (their ``return value`` is theirs)."""
    nodes: list[ast.AST] = []
    stack: list[ast.AST] = list(tree.body)
    while stack:
        node = stack.pop()
        nodes.append(node)
        stack.extend(
            c
            for c in ast.iter_child_nodes(node)
            if not isinstance(c, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
        )
    return nodes


def _literal(expr: ast.expr) -> bool:
    """Numbers and arithmetic on numbers only: Python computes them when it compiles the function."""
    if isinstance(expr, ast.BinOp):
        return _literal(expr.left) and _literal(expr.right)
    if isinstance(expr, ast.UnaryOp):
        return _literal(expr.operand)
    return isinstance(expr, ast.Constant)


def _is_none(expr: ast.expr) -> bool:
    return isinstance(expr, ast.Constant) and expr.value is None


def python_only(kernel: Any) -> list[tuple[int, str, str]]:
    """``(line, what, what to do)`` for each construct of the kernel's own body that a GPU cannot compile."""
    parsed = parse_kernel(kernel)
    if parsed is None:
        return []
    _, first, tree = parsed
    found: list[tuple[int, str, str]] = []

    def add(node: ast.AST, what: str, fix: str) -> None:
        found.append((first + getattr(node, "lineno", 1) - 1, what, fix))

    for node in _own_nodes(tree):
        if isinstance(node, ast.List) and isinstance(node.ctx, ast.Store):  # [a, b] = ... unpacks, builds nothing
            continue
        if isinstance(node, (ast.List, ast.Dict, ast.Set)):
            kind = type(node).__name__.lower()
            add(
                node,
                f"a Python {kind} (`{ast.unparse(node)[:40]}`)",
                f"use cuda.local.array(N, float32); {_FIX_OBJECT}",
            )
        elif isinstance(node, (ast.ListComp, ast.DictComp, ast.SetComp, ast.GeneratorExp)):
            add(node, f"a comprehension or generator (`{ast.unparse(node)[:40]}`)", f"write a for loop; {_FIX_OBJECT}")
        elif isinstance(node, ast.JoinedStr):
            add(node, "an f-string", "print plain values instead: print('i =', i)")
        elif isinstance(node, ast.Return) and node.value is not None and not _is_none(node.value):
            add(
                node,
                f"`return {ast.unparse(node.value)[:40]}`",
                "a kernel returns nothing: write the result into an output array",
            )
        elif isinstance(node, ast.Call):
            f = node.func
            if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and f.value.id in ("np", "numpy"):
                if f.attr in _NP_ALLOCATING:
                    add(node, f"`np.{f.attr}(...)`", f"compute it element by element with a loop; {_FIX_OBJECT}")
            elif isinstance(f, ast.Name) and f.id in _BUILTIN_OBJECTS:
                add(node, f"`{f.id}(...)`", f"write a for loop over range(...); {_FIX_OBJECT}")
    return sorted(found, key=lambda f: f[0])


def static_check(kernel: Any) -> Check | None:
    """A failed :class:`Check` for the first thing in the kernel's source a GPU cannot compile (Python objects,
    then array shapes known only at launch), or None."""
    objects = python_only(kernel)
    if objects:
        line, what, fix = objects[0]
        more = f" (and {len(objects) - 1} more)" if len(objects) > 1 else ""
        return Check(
            "GPU compile",
            False,
            f"line {line} uses {what}{more}: the simulator runs it, a GPU kernel cannot (it cannot create Python "
            "objects, allocate memory or return a value).",
            fix + ".",
        )
    return array_shape_check(kernel)


# The NumPy ufuncs numba-cuda's CUDA target can call on scalars in device code (numba_cuda/numba/cuda/ufuncs.py,
# ``ufunc_db``, numba-cuda 0.22 to 0.30): any other, ``np.exp(x)`` or ``np.abs(x)`` on a float, fails to compile
# with ``KeyError: <ufunc 'exp'>``. Python's operators, ``abs``, ``min``, ``max`` and the ``math`` module compile.
CUDA_UFUNCS = frozenset(
    "sin cos tan arcsin arccos arctan arctan2 hypot sinh cosh tanh arcsinh arccosh arctanh deg2rad radians rad2deg "
    "degrees greater greater_equal less less_equal not_equal equal logical_and logical_or logical_xor logical_not "
    "maximum minimum fmax fmin bitwise_and bitwise_or bitwise_xor invert left_shift right_shift log log2 log10 "
    "isnan conjugate divide".split()
)
_UFUNC_FIXES = {  # ufunc.__name__ -> what to write instead in device code
    "absolute": "abs(x)",
    "fabs": "abs(x)",
    "exp": "math.exp(x)",
    "exp2": "2.0 ** x",
    "expm1": "math.expm1(x)",
    "log1p": "math.log1p(x)",
    "sqrt": "math.sqrt(x)",
    "power": "x ** y",
    "float_power": "x ** y",
    "square": "x * x",
    "negative": "-x",
    "add": "a + b",
    "subtract": "a - b",
    "multiply": "a * b",
    "floor": "math.floor(x)",
    "ceil": "math.ceil(x)",
    "trunc": "math.trunc(x)",
    "isinf": "math.isinf(x)",
    "isfinite": "math.isfinite(x)",
    "copysign": "math.copysign(x, y)",
    "logaddexp": "max(a, b) + math.log1p(math.exp(-abs(a - b)))",
}


def numpy_ufunc_fix(ufunc_name: str) -> str:
    """What to write in device code in place of the NumPy ufunc ``ufunc_name`` (its ``__name__``: ``absolute``
    for ``np.abs``)."""
    return _UFUNC_FIXES.get(ufunc_name, f"math.{ufunc_name}(x) if the math module has it, or Python's operators")


def scalar_ufuncs_off_gpu(fn: Any) -> list[tuple[int, str, str]]:
    """``(line, "np.abs", "absolute")``: each call in ``fn``'s own body of a NumPy ufunc that numba-cuda cannot
    compile on scalars (not in :data:`CUDA_UFUNCS`), as written, with the ufunc's name (see :func:`numpy_ufunc_fix`)."""
    parsed = parse_kernel(fn)
    if parsed is None:
        return []
    _, first, tree = parsed
    found = []
    for node in _own_nodes(tree):
        if not isinstance(node, ast.Call):
            continue
        f = node.func
        if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and f.value.id in ("np", "numpy"):
            ufunc = getattr(np, f.attr, None)
            if isinstance(ufunc, np.ufunc) and ufunc.__name__ not in CUDA_UFUNCS:
                found.append((first + node.lineno - 1, f"{f.value.id}.{f.attr}", str(ufunc.__name__)))
    return sorted(found)
