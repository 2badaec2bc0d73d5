"""A model of CuPy's ``ElementwiseKernel`` and ``ReductionKernel`` for lesson 06 and lab 06: :func:`run_elementwise`
and :func:`run_reduction` run a spec with CuPy on a GPU and with a small NumPy model of it in the simulator.

The model evaluates the C operation as NumPy expressions over whole arrays, in the declared types
(:mod:`gpulab.lessons.c_model` reads the C: literals, casts, local variables, several statements, compound
assignments, CUDA math functions), with several outputs and outputs passed in to be updated in place, as CuPy
allows. No ternaries, loops or ``if``: those need a GPU. float16 is computed in float32 and rounded where CuPy
stores it, as CuPy's float16 class does (see :mod:`gpulab.lessons.c_model`).
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np

from .. import runtime
from ..errors import UsageError
from .c_model import (
    bind,
    c_type_dtype,
    check_array_types,
    ctype_dtype,
    evaluate,
    is_array,
    params,
    python_code,
    store,
)

__all__ = ["ctype_dtype", "params", "run_elementwise", "run_reduction"]


_BLOCK = 256  # threads per block in the reduction model: every one starts at identity, as in CuPy's
_ASSIGN = re.compile(r"^\s*(\w+)\s*(?:[-+*/]?=)(?!=)")


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
        if name in raw and not is_array(value) and re.search(rf"\b{re.escape(name)}\s*\[", op):
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
    code = python_code(spec["operation"])
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
    env = bind(ins, list(args[: len(ins)]), types)
    if given:
        env.update(bind(outs, given, types))
    raw = _raw_names(spec["in_params"])
    shape = np.broadcast_shapes(*(np.shape(env[n]) for _, n in ins if n not in raw))
    env["i"] = np.arange(int(np.prod(shape)), dtype=np.int64).reshape(shape)  # CuPy's loop index (ptrdiff_t i)
    for line in code.splitlines():  # statement by statement: an output is stored in its type after each one
        evaluate(line, env, types, "operation", spec["operation"])
        for ctype, out in outs:
            if out in env and (len(ctype) > 1 or ctype in types):
                env[out] = store(env[out], ctype_dtype(ctype, types))
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
    env = bind(ins, list(args), types)
    out_type, out = outs[0]
    reduce_type = spec.get("reduce_type")
    rtype = c_type_dtype(reduce_type, types, "reduce_type") if reduce_type else ctype_dtype(out_type, types)
    evaluate("_v = " + python_code(spec["identity"]), env, types, "identity", spec["identity"])
    identity = store(env.pop("_v"), rtype)
    evaluate("_v = " + python_code(spec["map_expr"]), env, types, "map_expr", spec["map_expr"])
    shape = np.broadcast_shapes(*(np.shape(env[n]) for _, n in ins))
    values = store(np.broadcast_to(np.asarray(env.pop("_v")), shape), rtype).ravel()  # static_cast<reduce_type>
    reduce_code = "_v = " + python_code(spec["reduce_expr"])
    if values.size:  # each CUDA thread starts its partial result at identity: combined with every value here,
        start = {"a": np.full(values.shape, identity), "b": values}
        evaluate(reduce_code, start, types, "reduce_expr", spec["reduce_expr"])
        values = store(np.broadcast_to(start["_v"], values.shape), rtype).reshape(-1)
        # and a block's threads that get no element keep it (CuPy's blocks have 256 or 512 threads)
        values = np.append(values, np.full(-values.size % _BLOCK, identity, values.dtype))
    while values.size > 1:  # a tree: pairs (a, b) combined, the odd one out paired with the identity
        if values.size % 2:
            values = np.append(values, identity)
        pair = {"a": values[0::2], "b": values[1::2]}
        evaluate(reduce_code, pair, types, "reduce_expr", spec["reduce_expr"])
        values = store(pair["_v"], rtype).reshape(-1)
    total = values[0] if values.size else identity
    post: dict[str, Any] = {**env, "a": np.asarray(total)}
    evaluate(python_code(spec["post_map_expr"]), post, types, "post_map_expr", spec["post_map_expr"])
    if out not in post:
        raise UsageError(
            f"post_map_expr {spec['post_map_expr']!r} never assigns the output {out!r} (e.g. '{out} = a')."
        )
    return np.asarray(post[out]).astype(ctype_dtype(out_type, types))
