"""Lesson 06 (CuPy and interop): reference answers, and :func:`run_elementwise`, which runs an
``ElementwiseKernel`` spec with CuPy on a GPU and with a small NumPy model of it in the simulator."""

from __future__ import annotations

import re
from typing import Any

import numpy as np
from numba import cuda

from .. import runtime

__all__ = ["axpy_elementwise_spec", "leaky_relu_kernel", "squared_diff_kernel"]


@cuda.jit
def squared_diff_kernel(x, y, out):
    i = cuda.grid(1)
    if i < out.size:
        d = x[i] - y[i]  # one read of x and y, one write of out: 12 bytes per element
        out[i] = d * d


@cuda.jit
def leaky_relu_kernel(x, out):
    i = cuda.grid(1)
    if i < out.size:
        v = x[i]
        out[i] = v if v > 0 else 0.01 * v


def axpy_elementwise_spec() -> dict[str, str]:
    return {
        "in_params": "float32 a, float32 x, float32 y",  # a scalar is declared like an array element
        "out_params": "float32 z",
        "operation": "z = a * x + y",
        "name": "axpy",
    }


_PARAM = re.compile(r"^\s*(?:raw\s+)?(\w+)\s+(\w+)\s*$")
_C_FLOAT = re.compile(r"(\d+\.\d*|\.\d+|\d+)[fF]\b")


def _params(text: str, what: str) -> list[tuple[str, str]]:
    out = []
    for part in text.split(","):
        m = _PARAM.match(part)
        if not m:
            raise ValueError(f"{what} {text!r}: each parameter is 'type name', e.g. 'float32 x'; got {part.strip()!r}.")
        out.append((m.group(1), m.group(2)))
    return out


def run_elementwise(spec: dict[str, str], *args: Any) -> Any:
    """Run ``cupy.ElementwiseKernel(**spec)(*args)`` on a GPU; in simulator mode evaluate the same spec
    with NumPy (a model for simple arithmetic operations: ``+ - * /``, parentheses, C float literals
    such as ``0.5f``; no ternaries or function calls). Returns the output array."""
    missing = {"in_params", "out_params", "operation"} - set(spec)
    if missing:
        raise ValueError(f"the spec needs keys {sorted(missing)} (and optionally 'name'); it has {sorted(spec)}.")
    ins, outs = _params(spec["in_params"], "in_params"), _params(spec["out_params"], "out_params")
    if len(args) != len(ins):
        raise ValueError(f"in_params declares {len(ins)} inputs ({spec['in_params']}), but {len(args)} arguments were given.")
    if runtime.is_gpu():
        import cupy

        kernel = cupy.ElementwiseKernel(spec["in_params"], spec["out_params"], spec["operation"], spec.get("name", "kernel"))
        return kernel(*args)
    env: dict[str, Any] = {}
    for (ctype, name), value in zip(ins, args):
        env[name] = np.asarray(runtime.to_host(value), dtype=np.dtype(ctype))
    op = _C_FLOAT.sub(r"\1", spec["operation"]).replace(";", "\n")
    if re.search(r"[?:]", op):
        raise ValueError("the NumPy model of ElementwiseKernel handles arithmetic only; this operation uses a "
                         "ternary (?:), which needs a GPU to run.")
    exec(compile(op, "<ElementwiseKernel operation>", "exec"), {"__builtins__": {}}, env)  # noqa: S102
    if len(outs) != 1:
        raise ValueError(f"the NumPy model handles one output; out_params declares {len(outs)}.")
    ctype, name = outs[0]
    if name not in env:
        raise ValueError(f"the operation {spec['operation']!r} never assigns the output {name!r}.")
    return np.asarray(env[name], dtype=np.dtype(ctype))
