"""A model of CuPy's ``ElementwiseKernel`` and ``ReductionKernel`` for lesson 06 and lab 06: :func:`run_elementwise`
and :func:`run_reduction` run a spec with CuPy on a GPU and with a small NumPy model of it in the simulator.

The model evaluates the C operation as NumPy expressions over whole arrays, in the declared types: C float
literals (``0.5f``, ``1e-8f``), casts (``(float)g``), local variables (``float t = g * g;``), several
``;``-separated statements, compound assignments
(``m += ...``), CUDA math functions (``sqrtf``, ``expf``, ``fmaxf``, ...), several outputs, and outputs passed in
to be updated in place, as CuPy allows. No ternaries, loops or ``if``: those need a GPU.

float16 as CuPy has it: its ``float16`` is a C++ class with a conversion to ``float`` and no arithmetic of its own,
so ``g * g`` on float16 values is computed in float32; only a value *stored* as float16 (an output, a cast, a
``reduce_type`` of float16) is rounded to it, and overflows past 65504. The model computes with float16 values
held in float32 and rounds them where CuPy stores them.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np

from .. import runtime
from ..errors import UsageError

__all__ = ["ctype_dtype", "params", "run_elementwise", "run_reduction"]


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
_BLOCK = 256  # threads per block in the reduction model: every one starts at identity, as in CuPy's
_DECLARE = re.compile(r"^(?:const\s+)?(float|double|int|bool|float16|half|[A-Z])\s+(\w+)\s*=(?!=)\s*(.+)$", re.S)
_ASSIGN = re.compile(r"^\s*(\w+)\s*(?:[-+*/]?=)(?!=)")
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


def _python(op: str) -> str:
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


def _store(value: Any, dtype: np.dtype) -> np.ndarray:
    """``value`` stored as ``dtype`` (rounded, overflowing to inf for float16), held for computing: float16 values
    take part in arithmetic as float32, as CuPy's float16 class converts to float."""
    out = np.asarray(value).astype(dtype)
    return out.astype(np.float32) if out.dtype == np.float16 else out


def _evaluate(code: str, env: dict[str, Any], types: dict[str, np.dtype], what: str, text: str) -> None:
    def cast(ctype: str, value: Any) -> Any:
        return _store(value, c_type_dtype(ctype, types, f"the cast ({ctype}) in the {what}"))

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


def _bind(declared: list[tuple[str, str]], values: list[Any], types: dict[str, np.dtype]) -> dict[str, Any]:
    """Parameter name -> host value in its declared dtype (float16 held as float32, see :func:`_store`); a type
    placeholder (``T``) not yet bound (by :func:`check_array_types`, from the arrays) takes the first value's."""
    env: dict[str, Any] = {}
    for (ctype, name), value in zip(declared, values):
        host = np.asarray(runtime.to_host(value))
        if len(ctype) == 1:
            types.setdefault(ctype, host.dtype)
        env[name] = _store(host, ctype_dtype(ctype, types))
    return env


def _is_array(value: Any) -> bool:
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
        if not _is_array(value):
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


def _check_name(spec: dict[str, str], default: str) -> str:
    name = str(spec.get("name", default))
    if not re.fullmatch(r"[A-Za-z_]\w*", name):
        raise UsageError(
            f"the kernel's name must be a C identifier (letters, digits and _, not starting with a digit), "
            f"got {name!r}; e.g. 'axpy'."
        )
    return name


def run_elementwise(spec: dict[str, str], *args: Any) -> Any:
    """Run ``cupy.ElementwiseKernel(**spec)(*args)`` on a GPU; in simulator mode evaluate the same spec with
    NumPy (see the module's docstring for what the model reads). ``args`` are the inputs, optionally followed by
    every output (updated in place, and readable in the operation, as in CuPy). Returns the output array, or a
    tuple of them for several outputs."""
    missing = {"in_params", "out_params", "operation"} - set(spec)
    if missing:
        raise UsageError(f"the spec needs keys {sorted(missing)} (and optionally 'name'); it has {sorted(spec)}.")
    ins, outs = params(spec["in_params"], "in_params"), params(spec["out_params"], "out_params")
    if len(args) not in (len(ins), len(ins) + len(outs)):
        raise UsageError(
            f"in_params declares {len(ins)} inputs ({spec['in_params']}) and out_params {len(outs)} outputs, but "
            f"{len(args)} arguments were given (the inputs, optionally followed by every output)."
        )
    name = _check_name(spec, "kernel")
    if runtime.is_gpu():
        import cupy

        kernel = cupy.ElementwiseKernel(spec["in_params"], spec["out_params"], spec["operation"], name)
        return kernel(*args)
    with np.errstate(all="ignore"):  # float16 overflow to inf, 0/0: silently, as on a GPU
        return _elementwise_model(spec, ins, outs, args)


def _raw_names(text: str) -> set[str]:
    """The parameters of ``text`` declared ``raw`` (``"raw float32 x, float32 y"`` -> ``{"x"}``)."""
    return {m.group(1) for part in text.split(",") if (m := re.match(r"^\s*raw\s+\w+\s+(\w+)\s*$", part))}


def _indexed_elements(spec: dict[str, str], ins: list, outs: list, args: tuple) -> None:
    """Refuse, as CuPy's compiler would, an operation that indexes a parameter that is not ``raw`` (CuPy binds it to
    one element, ``const float &x = _raw_x[_ind.get()]``) or a raw one given a scalar: C cannot index a number."""
    op = spec["operation"]
    raw = _raw_names(spec["in_params"]) | _raw_names(spec["out_params"])
    for (_, name), value in zip(ins, args):
        if name in raw and not _is_array(value) and re.search(rf"\b{re.escape(name)}\s*\[", op):
            raise UsageError(
                f"the operation {op!r} indexes {name!r}, declared raw but given a scalar: CuPy passes a scalar as a "
                f"number, which C cannot index. Write {name} without [...] (a scalar needs no raw: declare it like an "
                "element, e.g. 'float32 a')."
            )
    indexed = [n for _, n in [*ins, *outs] if n not in raw and re.search(rf"\b{re.escape(n)}\s*\[", op)]
    if not indexed:
        return
    names = ", ".join(repr(n) for n in indexed)
    pattern = rf"\b({'|'.join(re.escape(n) for n in indexed)})\s*\[\s*i\s*\]"
    plain = re.sub(pattern, r"\1", op)
    fix = f"Write it on elements: {plain!r}." if not re.search(r"\[", plain) else "Write it on elements (x, not x[i])."
    raise UsageError(
        f"the operation {op!r} indexes {names}, but in an ElementwiseKernel a parameter that is not raw already is "
        f"one element: CuPy runs the operation once per element, with each such name standing for that element "
        f"(a number, which C cannot index, so this does not compile). {fix} The index i is defined too (the "
        "element's number), for parameters declared raw (`raw float32 x`, then `x[i]`)."
    )


def _elementwise_model(spec: dict[str, str], ins: list, outs: list, args: tuple) -> Any:
    _indexed_elements(spec, ins, outs, args)
    code = _python(spec["operation"])
    outputs = {n for _, n in outs}
    for line in code.splitlines():
        m = _ASSIGN.match(line)
        if m and m.group(1) in {n for _, n in ins} and m.group(1) not in outputs:
            raise UsageError(
                f"the operation assigns {m.group(1)!r}, an input: CuPy declares in_params const, so this does "
                f"not compile. Declare {m.group(1)!r} in out_params to write it (and pass the array as an output)."
            )
    given = list(args[len(ins) :])
    types = check_array_types(ins, list(args[: len(ins)]), outs if given else [], given)  # T from arrays only
    env = _bind(ins, list(args[: len(ins)]), types)
    if given:
        env.update(_bind(outs, given, types))
    raw = _raw_names(spec["in_params"])
    shape = np.broadcast_shapes(*(np.shape(env[n]) for _, n in ins if n not in raw))
    env["i"] = np.arange(int(np.prod(shape)), dtype=np.int64).reshape(shape)  # CuPy's loop index (ptrdiff_t i)
    for line in code.splitlines():  # statement by statement: an output is stored in its type after each one
        _evaluate(line, env, types, "operation", spec["operation"])
        for ctype, out in outs:
            if out in env and (len(ctype) > 1 or ctype in types):
                env[out] = _store(env[out], ctype_dtype(ctype, types))
    results = []
    for k, (ctype, out) in enumerate(outs):
        if out not in env:
            raise UsageError(f"the operation {spec['operation']!r} never assigns the output {out!r}.")
        value = np.broadcast_to(np.asarray(env[out]), shape).astype(ctype_dtype(ctype, types))
        if given:
            given[k][...] = value  # simulator mode: NumPy arrays, updated in place as CuPy would
            results.append(given[k])
        else:
            results.append(value)
    return results[0] if len(results) == 1 else tuple(results)


def run_reduction(spec: dict[str, str], *args: Any) -> Any:
    """Run ``cupy.ReductionKernel`` over every element (``axis=None``) on a GPU; in simulator mode a NumPy model:
    ``map_expr`` per element (cast to ``reduce_type``), ``reduce_expr`` combining ``a`` and ``b`` pairwise in a tree
    (each value first combined with ``identity``, padded with it to whole blocks of threads, as CuPy's threads
    start from it: a wrong identity shows), then ``post_map_expr`` on the result ``a``. Returns a 0-d array."""
    needed = {"in_params", "out_params", "map_expr", "reduce_expr", "post_map_expr", "identity"}
    missing = needed - set(spec)
    if missing:
        raise UsageError(
            f"the spec needs keys {sorted(missing)} (and optionally 'reduce_type' and 'name'); it has {sorted(spec)}."
        )
    ins, outs = params(spec["in_params"], "in_params"), params(spec["out_params"], "out_params")
    if len(outs) != 1:
        raise UsageError(f"out_params declares {len(outs)} outputs ({spec['out_params']}); a reduction has one.")
    if len(args) != len(ins):
        raise UsageError(f"in_params declares {len(ins)} inputs ({spec['in_params']}), but {len(args)} were given.")
    name = _check_name(spec, "reduce_kernel")
    for key in ("map_expr", "reduce_expr", "post_map_expr", "identity"):  # CuPy pastes each inside ( )
        if ";" in spec[key] or (key != "post_map_expr" and re.match(r"^\s*\w+\s*[-+*/]?=(?!=)", spec[key])):
            what = "an assignment to the output, e.g. 'y = sqrt(a)'" if key == "post_map_expr" else "e.g. 'x * x'"
            raise UsageError(
                f"{key} is one C expression (CuPy puts it inside parentheses), no ';'"
                f"{'' if key == 'post_map_expr' else ' and no assignment'}: {what}; got {spec[key]!r}."
            )
    placeholders = {t for t, _ in ins + outs if len(t) == 1}
    if spec.get("reduce_type") and spec["reduce_type"] not in placeholders:
        c_type_dtype(spec["reduce_type"], {}, "reduce_type")  # a C type NVRTC knows, checked in both modes
    if runtime.is_gpu():
        import cupy

        kernel = cupy.ReductionKernel(
            spec["in_params"],
            spec["out_params"],
            spec["map_expr"],
            spec["reduce_expr"],
            spec["post_map_expr"],
            spec["identity"],
            name,
            reduce_type=spec.get("reduce_type") or None,  # "" or absent: the output's type
        )
        return kernel(*args)
    with np.errstate(all="ignore"):  # float16 overflow to inf, 0/0: silently, as on a GPU
        return _reduction_model(spec, ins, outs, args)


def _reduction_model(spec: dict[str, str], ins: list, outs: list, args: tuple) -> Any:
    types = check_array_types(ins, list(args), [], [])  # T from arrays only
    env = _bind(ins, list(args), types)
    out_type, out = outs[0]
    reduce_type = spec.get("reduce_type")
    rtype = c_type_dtype(reduce_type, types, "reduce_type") if reduce_type else ctype_dtype(out_type, types)
    _evaluate("_v = " + _python(spec["identity"]), env, types, "identity", spec["identity"])
    identity = _store(env.pop("_v"), rtype)
    _evaluate("_v = " + _python(spec["map_expr"]), env, types, "map_expr", spec["map_expr"])
    shape = np.broadcast_shapes(*(np.shape(env[n]) for _, n in ins))
    values = _store(np.broadcast_to(np.asarray(env.pop("_v")), shape), rtype).ravel()  # static_cast<reduce_type>
    reduce_code = "_v = " + _python(spec["reduce_expr"])
    if values.size:  # each CUDA thread starts its partial result at identity: combined with every value here,
        start = {"a": np.full(values.shape, identity), "b": values}
        _evaluate(reduce_code, start, types, "reduce_expr", spec["reduce_expr"])
        values = _store(np.broadcast_to(start["_v"], values.shape), rtype).reshape(-1)
        # and a block's threads that get no element keep it (CuPy's blocks have 256 or 512 threads)
        values = np.append(values, np.full(-values.size % _BLOCK, identity, values.dtype))
    while values.size > 1:  # a tree: pairs (a, b) combined, the odd one out paired with the identity
        if values.size % 2:
            values = np.append(values, identity)
        pair = {"a": values[0::2], "b": values[1::2]}
        _evaluate(reduce_code, pair, types, "reduce_expr", spec["reduce_expr"])
        values = _store(pair["_v"], rtype).reshape(-1)
    total = values[0] if values.size else identity
    post: dict[str, Any] = {**env, "a": np.asarray(total)}
    _evaluate(_python(spec["post_map_expr"]), post, types, "post_map_expr", spec["post_map_expr"])
    if out not in post:
        raise UsageError(
            f"post_map_expr {spec['post_map_expr']!r} never assigns the output {out!r} (e.g. '{out} = a')."
        )
    return np.asarray(post[out]).astype(ctype_dtype(out_type, types))
