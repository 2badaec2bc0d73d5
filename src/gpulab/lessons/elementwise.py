"""A model of CuPy's ``ElementwiseKernel`` for lesson 06: :func:`run_elementwise` runs a spec with CuPy on a
GPU and with a small NumPy model of it in the simulator."""

from __future__ import annotations

import re
from typing import Any

import numpy as np

from .. import runtime

__all__ = ["run_elementwise"]


_PARAM = re.compile(r"^\s*(?:raw\s+)?(\w+)\s+(\w+)\s*$")
_C_FLOAT = re.compile(r"(\d+\.\d*|\.\d+|\d+)[fF]\b")
# CUDA's math functions an operation may call, as NumPy ufuncs (float and double forms: expf and exp)
_C_MATH: dict[str, Any] = {
    name + suffix: ufunc
    for name, ufunc in {
        "exp": np.exp, "log": np.log, "sqrt": np.sqrt, "tanh": np.tanh, "sin": np.sin, "cos": np.cos,
        "pow": np.power, "fabs": np.abs, "fmax": np.fmax, "fmin": np.fmin,
    }.items()
    for suffix in ("", "f")
} | {"max": np.maximum, "min": np.minimum, "abs": np.abs}  # fmt: skip


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
    such as ``0.5f``, CUDA math functions such as ``expf``, ``pow`` and ``fmaxf``; no ternaries). Returns the
    output array."""
    missing = {"in_params", "out_params", "operation"} - set(spec)
    if missing:
        raise ValueError(f"the spec needs keys {sorted(missing)} (and optionally 'name'); it has {sorted(spec)}.")
    ins, outs = _params(spec["in_params"], "in_params"), _params(spec["out_params"], "out_params")
    if len(args) != len(ins):
        raise ValueError(
            f"in_params declares {len(ins)} inputs ({spec['in_params']}), but {len(args)} arguments were given."
        )
    name = spec.get("name", "kernel")
    if not re.fullmatch(r"[A-Za-z_]\w*", str(name)):
        raise ValueError(
            f"the kernel's name must be a C identifier (letters, digits and _, not starting with a digit), "
            f"got {name!r}; e.g. 'axpy'."
        )
    if runtime.is_gpu():
        import cupy

        kernel = cupy.ElementwiseKernel(spec["in_params"], spec["out_params"], spec["operation"], name)
        return kernel(*args)
    env: dict[str, Any] = {}
    for (ctype, name), value in zip(ins, args):
        env[name] = np.asarray(runtime.to_host(value), dtype=np.dtype(ctype))
    op = _C_FLOAT.sub(r"\1", spec["operation"]).replace(";", "\n")
    if re.search(r"[?:]", op):
        raise ValueError(
            "the NumPy model of ElementwiseKernel handles arithmetic only; this operation uses a "
            "ternary (?:), which needs a GPU to run."
        )
    try:
        exec(compile(op, "<ElementwiseKernel operation>", "exec"), {"__builtins__": {}, **_C_MATH}, env)  # noqa: S102
    except NameError as exc:
        known = ", ".join(sorted(_C_MATH))
        raise ValueError(
            f"the operation {spec['operation']!r} uses {exc.name or 'a name'!r}, which is neither a parameter "
            f"({', '.join(n for _, n in ins)}) nor a math function the NumPy model knows ({known}). "
            "Check its spelling, or declare it in in_params."
        ) from None
    if len(outs) != 1:
        raise ValueError(f"the NumPy model handles one output; out_params declares {len(outs)}.")
    ctype, name = outs[0]
    if name not in env:
        raise ValueError(f"the operation {spec['operation']!r} never assigns the output {name!r}.")
    return np.asarray(env[name], dtype=np.dtype(ctype))
