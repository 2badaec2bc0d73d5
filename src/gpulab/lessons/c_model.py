"""CuPy's C operation text as NumPy, for the models in :mod:`gpulab.lessons.elementwise`: parameter lists
(``"float32 x, T y"``), C type names, and statements evaluated over whole arrays in the declared types.

What it reads: C float literals (``0.5f``, ``1e-8f``), casts (``(float)g``), local variables
(``float t = g * g;``), several ``;``-separated statements, compound assignments (``m += ...``) and CUDA math
functions (``sqrtf``, ``expf``, ``fmaxf``, ...). No ternaries, loops or ``if``: those need a GPU.

float16 as CuPy has it: its ``float16`` is a C++ class with a conversion to ``float`` and no arithmetic of its own,
so ``g * g`` on float16 values is computed in float32; only a value *stored* as float16 (an output, a cast, a
``reduce_type`` of float16) is rounded to it, and overflows past 65504. The model computes with float16 values
held in float32 and rounds them where CuPy stores them (:func:`store`).
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np

from .. import runtime
from ..errors import UsageError

__all__ = [
    "bind",
    "c_type_dtype",
    "check_array_types",
    "ctype_dtype",
    "evaluate",
    "is_array",
    "params",
    "python_code",
    "store",
]


_PARAM = re.compile(r"^\s*(?:raw\s+)?(\w+)\s+(\w+)\s*$")
_C_FLOAT = re.compile(r"(?<![\w.])((?:\d+\.\d*|\.\d+|\d+)(?:[eE][+-]?\d+)?)[fF]\b")
# C type names (casts, reduce_type) -> NumPy's; float16 is CuPy's half-precision class. NumPy names are not C.
_C_TYPES = {
    "float": "float32",
    "double": "float64",
    "float16": "float16",
    "half": "float16",
    "int": "int32",
    "bool": "bool",
}
_NOT_C = {"float32": "float", "float64": "double", "int32": "int"}
_CAST = re.compile(r"\(\s*(float|double|int|bool|float16|half|float32|float64|int32|[A-Z])\s*\)\s*")
_DECLARE = re.compile(r"^(?:const\s+)?(float|double|int|bool|float16|half|[A-Z])\s+(\w+)\s*=(?!=)\s*(.+)$", re.S)
# CUDA's math functions an operation may call, as NumPy ufuncs (float and double forms: expf and exp)
_C_MATH: dict[str, Any] = {
    name + suffix: ufunc
    for name, ufunc in {
        "exp": np.exp, "log": np.log, "sqrt": np.sqrt, "tanh": np.tanh, "sin": np.sin, "cos": np.cos,
        "pow": np.power, "fabs": np.abs, "fmax": np.fmax, "fmin": np.fmin, "rsqrt": lambda x: 1 / np.sqrt(x),
        "log1p": np.log1p, "expm1": np.expm1, "floor": np.floor, "ceil": np.ceil,
    }.items()
    for suffix in ("", "f")
} | {"max": np.maximum, "min": np.minimum, "abs": np.abs, "isinf": np.isinf, "isnan": np.isnan,
     "isfinite": np.isfinite, "INFINITY": np.inf, "NAN": np.nan}  # fmt: skip


def params(text: str, what: str) -> list[tuple[str, str]]:
    """``"float32 x, T y"`` -> ``[("float32", "x"), ("T", "y")]``; a clear error for anything else. Types are
    NumPy names or one-letter placeholders, as CuPy requires (it refuses ``float``: "Wrong type")."""
    out = []
    for part in text.split(","):
        m = _PARAM.match(part)
        if not m:
            raise UsageError(f"{what} {text!r}: each parameter is 'type name', e.g. 'float32 x'; got {part.strip()!r}.")
        ctype = m.group(1)
        if len(ctype) != 1:
            try:
                ok = np.dtype(ctype).name == ctype
            except TypeError:
                ok = False
            if not ok:
                raise UsageError(
                    f"{what} declares {part.strip()!r}: parameters take NumPy type names (float32, float64, float16, "
                    f"int32) or a one-letter placeholder (T); CuPy refuses {ctype!r} (C names such as float belong "
                    "in casts and reduce_type)."
                )
        out.append((ctype, m.group(2)))
    return out


def c_type_dtype(ctype: str, types: dict[str, np.dtype], what: str) -> np.dtype:
    """The NumPy dtype of a C type name (a cast's, or ``reduce_type``, which CuPy pastes into the CUDA code):
    ``float``, ``double``, ``int``, ``float16``, or a placeholder bound by the parameters."""
    if ctype in types:
        return types[ctype]
    if ctype in _C_TYPES:
        return np.dtype(_C_TYPES[ctype])
    better = f": write {_NOT_C[ctype]!r}" if ctype in _NOT_C else ""
    raise UsageError(
        f"{what} uses the type {ctype!r}, which is not a C type CUDA knows{better}. Casts and reduce_type are "
        "pasted into the kernel's C code: float (float32), double (float64), int (int32), float16 or half "
        "(CuPy's and CUDA's half), or a placeholder such as T that the parameters bind."
    )


def ctype_dtype(ctype: str, types: dict[str, np.dtype] | None = None) -> np.dtype:
    """The NumPy dtype of a parameter's type: a NumPy name (``float32``) or a placeholder (``T``) bound in
    ``types``."""
    if types is not None and ctype in types:
        return types[ctype]
    try:
        return np.dtype(ctype)
    except TypeError:
        raise UsageError(
            f"unknown type {ctype!r}: use a NumPy type name such as float32, float16 or int32 (or a one-letter "
            "type placeholder such as T, bound by the arguments)."
        ) from None


def _operand_end(op: str, start: int) -> int:
    """Where the operand of a C cast that starts at ``start`` ends: a parenthesised group, or a name or number
    with its call or index brackets."""
    i, depth = start, 0
    if i < len(op) and op[i] == "(":
        for j in range(i, len(op)):
            depth += {"(": 1, ")": -1}.get(op[j], 0)
            if depth == 0:
                return j + 1
        raise UsageError(f"unbalanced parentheses in {op!r}")
    m = re.match(r"[\w.]+", op[i:])
    if not m:
        raise UsageError(f"a cast must be followed by a value: {op[max(0, i - 12) : i + 12]!r}")
    i += m.end()
    while i < len(op) and op[i] in "([":
        close = {"(": ")", "[": "]"}[op[i]]
        depth = 0
        for j in range(i, len(op)):
            depth += 1 if op[j] == op[i] else -1 if op[j] == close else 0
            if depth == 0:
                i = j + 1
                break
        else:
            raise UsageError(f"unbalanced brackets in {op!r}")
    return i


def python_code(op: str) -> str:
    """C statements as Python: literals, casts (``(float)x`` -> ``_cast('float', x)``), ``;`` -> newlines."""
    op = re.sub(r"/\*.*?\*/", " ", op, flags=re.S)
    op = re.sub(r"//[^\n]*", " ", op)
    if re.search(r"[?:]", op):
        raise UsageError(
            "the NumPy model of ElementwiseKernel handles arithmetic only; this operation uses a "
            "ternary (?:), which needs a GPU to run."
        )
    op = _C_FLOAT.sub(r"\1", op)
    while (m := _CAST.search(op)) is not None:
        end = _operand_end(op, m.end())
        op = f"{op[: m.start()]}_cast({m.group(1)!r}, {op[m.end() : end]}){op[end:]}"
    lines = [_declaration(s.strip()) for s in op.replace("\n", " ").split(";")]
    return "\n".join(s for s in lines if s)


def _declaration(statement: str) -> str:
    """A local variable's declaration, ``float t = x * x`` (or ``const T t = ...``), as an assignment of the value
    stored in its type: ``t = _cast('float', (x * x))``."""
    m = _DECLARE.match(statement)
    return f"{m.group(2)} = _cast({m.group(1)!r}, ({m.group(3)}))" if m else statement


def store(value: Any, dtype: np.dtype) -> np.ndarray:
    """``value`` stored as ``dtype`` (rounded, overflowing to inf for float16), held for computing: float16 values
    take part in arithmetic as float32, as CuPy's float16 class converts to float."""
    out = np.asarray(value).astype(dtype)
    return out.astype(np.float32) if out.dtype == np.float16 else out


def evaluate(code: str, env: dict[str, Any], types: dict[str, np.dtype], what: str, text: str) -> None:
    def cast(ctype: str, value: Any) -> Any:
        return store(value, c_type_dtype(ctype, types, f"the cast ({ctype}) in the {what}"))

    names = ", ".join(k for k in env if not k.startswith("_") and k != "i")
    try:
        exec(compile(code, f"<{what}>", "exec"), {"__builtins__": {}, **_C_MATH, "_cast": cast}, env)  # noqa: S102
    except NameError as exc:
        known = ", ".join(sorted(k for k in _C_MATH if k.islower()))
        index = " (an ElementwiseKernel's operation also has i, the element's index)" if "i" in env else ""
        raise UsageError(
            f"the {what} {text!r} uses {exc.name or 'a name'!r}, which is neither a parameter ({names}){index} nor "
            f"a math function the NumPy model knows ({known}). Check its spelling, or declare it in in_params."
        ) from None
    except SyntaxError as exc:
        raise UsageError(f"the {what} {text!r} is not C the NumPy model can read ({exc.msg}).") from None


def bind(declared: list[tuple[str, str]], values: list[Any], types: dict[str, np.dtype]) -> dict[str, Any]:
    """Parameter name -> host value in its declared dtype (float16 held as float32, see :func:`store`); a type
    placeholder (``T``) not yet bound (by :func:`check_array_types`, from the arrays) takes the first value's."""
    env: dict[str, Any] = {}
    for (ctype, name), value in zip(declared, values):
        host = np.asarray(runtime.to_host(value))
        if len(ctype) == 1:
            types.setdefault(ctype, host.dtype)
        env[name] = store(host, ctype_dtype(ctype, types))
    return env


def is_array(value: Any) -> bool:
    """Whether CuPy takes ``value`` as an array argument (its dtype must match), not a scalar (converted)."""
    return hasattr(value, "dtype") and hasattr(value, "shape") and not np.isscalar(value)


def check_array_types(
    ins: list[tuple[str, str]], in_args: list[Any], outs: list[tuple[str, str]], out_args: list[Any]
) -> dict[str, np.dtype]:
    """Refuse, as CuPy does, an array argument whose dtype is not its parameter's declared type, and two arrays of
    different dtypes for one placeholder (``T``). CuPy converts Python and NumPy scalars to the declared type but
    never an array: its ``_decide_params_type_core`` raises ``TypeError('Type is mismatched. ...')``, outputs first
    and then inputs. The model checks the same in simulator mode, where it could convert silently. Returns the
    placeholders the arrays bind (CuPy's ``type_dict``: a scalar binds none, it takes the bound type)."""
    bound: dict[str, tuple[str, np.dtype]] = {}
    for (ctype, name), value in [*zip(outs, out_args), *zip(ins, in_args)]:
        if not is_array(value):
            continue
        got = np.dtype(value.dtype)
        if len(ctype) > 1:
            want = np.dtype(ctype)
            if got != want:
                fix = (
                    f"Allocate the output with dtype {want.name!r}"
                    if (ctype, name) in outs
                    else f"Convert the array first (`{name}.astype({want.name!r})`, a copy)"
                )
                article = "an" if got.name[0] in "aeiou" else "a"
                raise TypeError(
                    f"Type is mismatched. {name} {got} {want} (CuPy's words): the argument for `{ctype} {name}` is "
                    f"{article} {got} array. CuPy converts scalars to a parameter's declared type but refuses an array "
                    f"of another dtype, on a GPU as here. {fix}, or declare the parameter with a type placeholder "
                    f"(`T {name}`) to take any dtype."
                )
        elif ctype in bound and bound[ctype][1] != got:
            first, dtype = bound[ctype]
            raise TypeError(
                f"Type is mismatched. {name} {got} {dtype} {ctype} (CuPy's words): `{ctype} {first}` and `{ctype} "
                f"{name}` share the placeholder {ctype}, so their arrays must have one dtype, but {first} is {dtype} "
                f"and {name} is {got}. Convert one of them (`.astype(...)`), or give the second its own placeholder."
            )
        else:
            bound.setdefault(ctype, (name, got))
    return {ctype: dtype for ctype, (_, dtype) in bound.items()}
