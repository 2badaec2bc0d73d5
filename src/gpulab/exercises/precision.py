"""A float32 kernel that computes in float64: a note on the verdict, not a penalty.

Numba types a float literal as float64, and float64 wins over float32 in arithmetic: ``acc = 0.0`` then
``acc += A[i, k] * x[k]`` keeps ``acc`` (and every product added to it) in float64, although every array is
float32. The answer is right (more so, if anything), but on most GPUs float64 arithmetic is far slower than float32.

Found in the kernel's source, an AST walk that costs well under a millisecond and needs no compiler (so it runs for
every kernel, with or without ``ptx=``): a local set to a float literal (``acc = 0.0``, or ``0.0`` negated) and
updated in place inside a loop (``acc += ...``, ``acc *= ...``), in a kernel whose arrays include float32 and no
float64. That pattern is float64 in Numba whatever is added (float64 op float32 is float64). A local that is also set
to something else is left alone. Not found: other float64 arithmetic (``acc = 0`` then ``acc += A[i, k]``,
``y = x * 0.5``).

Why not the PTX that ``ptx=`` compiles anyway: counting float64 instructions there also counts library code
(numba-cuda's ``xoroshiro128p_uniform_float32`` converts through float64: ``mul.f64`` in a loop of lab 08's shipped
dropout kernel), misses an accumulator whose loop NVVM unrolled (lab 01's 3 x 3 blur), and exists only for the
exercises with ``ptx=`` (not lesson 03's matvec).
"""

from __future__ import annotations

import ast
from typing import Any

import numpy as np

from .static import parse_kernel

__all__ = ["FLOAT64_NOTE", "float32_arrays", "float64_literal_accumulators"]

# the rates are third-party figures (per-SM unit counts: Turing 2 FP64 units per 64 FP32 lanes, Ada 2 per 128), not
# checked against an NVIDIA data sheet: the note says so
FLOAT64_NOTE = (
    "your kernel computes in float64 in a loop although its arrays are float32{where}: in Numba a float literal is "
    "a float64 (acc = 0.0 is a float64, and float64 + float32 is float64). The result is right, but GPUs such as "
    "the T4 and L4 run float64 arithmetic many times slower than float32 (about 1/32 and 1/64 of its rate, by "
    "third-party architecture figures). Start it as float32(0.0) (from numba import float32) or np.float32(0)."
)


def float32_arrays(arrays: Any) -> bool:
    """Some of ``arrays`` are float32 and none is float64 (integer and bool arrays may be there too)."""
    kinds = {np.dtype(a.dtype) for a in arrays if isinstance(a, np.ndarray)}
    return np.dtype(np.float32) in kinds and np.dtype(np.float64) not in kinds


def _float_literal(node: ast.expr) -> bool:
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        node = node.operand
    return isinstance(node, ast.Constant) and type(node.value) is float


def float64_literal_accumulators(kernel: Any) -> list[str]:
    """Locals of ``kernel`` set to a float literal and updated in place in a loop (``acc = 0.0`` ... ``for``
    ... ``acc +=``): float64 in Numba. [] when the source cannot be read."""
    parsed = parse_kernel(kernel)
    if parsed is None:
        return []
    fn = parsed[2]
    literal: set[str] = set()
    other: set[str] = set()  # also set to something else: its type is not the literal's alone (left alone)
    updated: list[str] = []  # updated in place inside a loop
    looped = {id(n) for loop in ast.walk(fn) if isinstance(loop, (ast.For, ast.While)) for n in ast.walk(loop)}
    for node in ast.walk(fn):
        if isinstance(node, ast.Assign):
            for t in node.targets:
                if isinstance(t, ast.Name):
                    (literal if _float_literal(node.value) else other).add(t.id)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            other.add(node.target.id)
        elif isinstance(node, ast.AugAssign) and isinstance(node.target, ast.Name) and id(node) in looped:
            updated.append(node.target.id)
    return list(dict.fromkeys(n for n in updated if n in literal and n not in other))
