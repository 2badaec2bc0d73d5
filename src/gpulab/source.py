"""A kernel's Python function and source text, in one place.

:func:`py_func` unwraps a ``@cuda.jit`` kernel (gpu dispatcher or simulator kernel) to its Python
function; :func:`kernel_source` is its source text (what :func:`show_source` displays in lessons);
:func:`standalone_source` is a module that defines the kernel on its own (what the exercise
harness compiles to PTX); :func:`define` makes a function from source text whose source stays readable.
"""

from __future__ import annotations

import ast
import inspect
import itertools
import linecache
import sys
import textwrap
import types
from typing import Any
from collections.abc import Callable

import numpy as np

__all__ = [
    "NotADeviceFunction",
    "code_names",
    "define",
    "kernel_source",
    "parsed_source",
    "py_func",
    "rebound",
    "scalar_function",
    "show_source",
    "standalone_source",
]

_DEFINED = itertools.count(1)


def py_func(obj: Any) -> Any:
    """The plain Python function behind a CUDA kernel (gpu dispatcher or simulator kernel); any
    other object is returned unchanged."""
    for attr in ("py_func", "fn", "_func", "__wrapped__"):
        inner = getattr(obj, attr, None)
        if callable(inner) and inner is not obj:
            return py_func(inner)
    return obj


REBOUND_ATTR = "__gpulab_rebound__"  # the names a check bound in a rebound copy (its stand-ins, not the learner's)


def rebound(fn: types.FunctionType, names: dict[str, Any]) -> types.FunctionType:
    """``fn``'s code run with ``names`` bound in place of its own: a copy of its globals with ``names`` set (and a
    closure cell of the same name replaced), its defaults, keyword defaults, qualified name and module kept. The
    copy's globals are its own dict (``rebound(f, {}).__globals__[n] = ...`` binds ``n`` for it alone)."""
    cells = tuple(
        types.CellType(names[n]) if n in names else cell
        for n, cell in zip(fn.__code__.co_freevars, fn.__closure__ or ())
    )
    new = types.FunctionType(fn.__code__, {**fn.__globals__, **names}, fn.__name__, fn.__defaults__, cells or None)
    new.__kwdefaults__ = fn.__kwdefaults__
    new.__qualname__, new.__module__ = fn.__qualname__, fn.__module__
    setattr(new, REBOUND_ATTR, frozenset(names) | getattr(fn, REBOUND_ATTR, frozenset()))
    return new


def scalar_function(ufunc: Any) -> Any:
    """The scalar Python function a GPU ufunc (numba-cuda's ``CUDAUFuncDispatcher``) was made from; None for anything
    else (a plain function, a ufunc with no signature)."""
    functions = getattr(ufunc, "functions", None) if type(ufunc).__name__ == "CUDAUFuncDispatcher" else None
    if not functions:
        return None
    _, kernel = next(iter(functions.values()))  # numba-cuda's kernel around it calls it as __core__
    core = getattr(py_func(kernel), "__globals__", {}).get("__core__")
    return None if core is None else py_func(core)


def code_names(code: types.CodeType) -> set[str]:
    """Global and attribute names a function's code (and its nested code) refers to."""
    names = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= code_names(const)
    return names


def global_names(code: types.CodeType) -> set[str]:
    """The global names a function's code (and its nested code) loads: ``LOAD_GLOBAL`` / ``LOAD_NAME``, not the
    attribute names :func:`code_names` also holds (``cuda.grid`` is no use of a notebook's global ``grid``)."""
    import dis

    names = {ins.argval for ins in dis.get_instructions(code) if ins.opname in ("LOAD_GLOBAL", "LOAD_NAME")}
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= global_names(const)
    return {n for n in names if isinstance(n, str)}


def kernel_source(obj: Any) -> str:
    """The source text of a kernel, device function, launcher, class or module."""
    target = py_func(obj)
    try:
        return textwrap.dedent(inspect.getsource(target))
    except (TypeError, OSError) as exc:
        raise TypeError(
            f"show_source expects a gpulab kernel, function, class or module, but got "
            f"{type(obj).__name__!r} whose source Python cannot find ({exc}). Pass the kernel "
            "itself, e.g. show_source(gpulab.kernels.add_kernel)."
        ) from None


def parsed_source(fn: Any) -> tuple[ast.Module, int] | None:
    """``(the parsed module of fn's dedented source, fn's first line)``, or None when Python cannot read the source
    (no file, a builtin, a code object of a failing frame) or parse it."""
    try:
        lines, first = inspect.getsourcelines(fn)
        return ast.parse(textwrap.dedent("".join(lines))), first
    except (OSError, TypeError, SyntaxError):  # SyntaxError includes IndentationError
        return None


def _from_cuda_random(name: str, value: Any) -> bool:
    """``value`` is ``numba.cuda.random``'s function ``name`` (in simulator mode, gpulab's stand-in installed there).
    Only the generator's own names (``xoroshiro128p_*``, ``create_/init_xoroshiro128p_states``): the module also
    imports ``float32``, ``cuda``, ... from numba, which keep their own import line."""
    import sys

    module = sys.modules.get("numba.cuda.random")
    return "xoroshiro128p" in name and module is not None and getattr(module, name, None) is value


class NotADeviceFunction(ValueError):
    """A kernel calls a plain Python function (no ``@cuda.jit(device=True)``): the simulator runs it as Python, a
    GPU cannot call it. ``name`` is the name the kernel calls it by."""

    def __init__(self, name: str) -> None:
        self.name = name
        super().__init__(
            f"the kernel calls {name!r}, a plain Python function (no @cuda.jit(device=True) above its def): the "
            "simulator ran it as Python, but a GPU kernel can call only device functions."
        )


class NotOnAGpu(ValueError):
    """A kernel uses a global list, dict, set or string: the simulator ran it as Python, no GPU compiles it."""

    def __init__(self, name: str, value: Any) -> None:
        self.name = name
        kind = type(value).__name__
        super().__init__(
            f"the kernel uses the global {name!r}, a {kind}: the simulator read it as Python, but a GPU kernel cannot "
            f"use a {kind}."
        )


def _literal(value: Any) -> str | None:
    """Python source that makes ``value`` again in a fresh module, for a number (a NumPy scalar keeps its type:
    ``numpy.float32(0.5)``) or a tuple of numbers; None for anything else."""
    if isinstance(value, (np.bool_, np.integer, np.floating)):
        item = value.item()
        inner = None if type(item) is type(value) else _literal(item)  # a longdouble stays one: no literal
        return None if inner is None else f"numpy.{type(value).__name__}({inner})"
    if type(value) is float:
        return repr(value) if np.isfinite(value) else f"float({str(value)!r})"  # inf and nan have no literal
    if type(value) in (bool, int):  # not an IntEnum member: its repr is not code
        return repr(value)
    if isinstance(value, type) and issubclass(value, (np.bool_, np.number)) and hasattr(np, value.__name__):
        return f"numpy.{value.__name__}"  # DT = np.float32
    if isinstance(value, np.ndarray) and value.dtype.kind in "biuf" and value.size <= 4096:
        return f"numpy.array({value.tolist()!r}, dtype=numpy.{value.dtype.name})"  # a table the kernel reads
    if type(value) is tuple:  # not a namedtuple: rebuilt as a plain tuple, CFG.n would not compile
        items = [_literal(v) for v in value]
        if any(i is None for i in items):
            return None
        return "(" + ", ".join(str(i) for i in items) + ("," if len(items) == 1 else "") + ")"
    return None


_IMPORTABLE = ("math", "cmath", "operator", "numba", "numba.types")


def _import_of(value: Any) -> tuple[str, str] | None:
    """``(module, name)`` when ``value`` is an attribute of one of :data:`_IMPORTABLE` (a function imported from
    math, a numba type under another name), so that ``from module import name`` makes it again; else None."""
    if isinstance(value, (bool, int, float, str, tuple)) or value is None:  # constants, equal but not the same
        return None
    for module in _IMPORTABLE:
        mod = sys.modules.get(module)  # loaded already if the value came from it; importing here would change
        if mod is None:  # numba's state (`import numba.types` rebinds numba.types: labs grade calls that tampering)
            continue
        for own in (getattr(value, "__name__", None), str(value)):  # exp; a numba type's own name, float32 (not f4)
            if isinstance(own, str) and own.isidentifier() and getattr(mod, own, None) is value:
                return module, own
        for attr in dir(mod):
            if not attr.startswith("_") and getattr(mod, attr, None) is value:
                return module, attr
    return None


def _closure_constants(f: Callable) -> list[str]:
    """``name = literal`` for each variable ``f`` takes from an enclosing function (a kernel made by a factory,
    ``make(scale)``); ValueError for one that is not a number or a tuple of numbers."""
    lines = []
    for name, cell in zip(f.__code__.co_freevars, f.__closure__ or ()):
        literal = _literal(cell.cell_contents)
        if literal is None:
            raise ValueError(
                f"the kernel uses {name!r} from the function that made it ({type(cell.cell_contents).__name__}), "
                "which the PTX check cannot rebuild outside this notebook"
            )
        lines.extend(_assignment(name, literal))
    return lines


def _assignment(name: str, literal: str) -> list[str]:
    """``name = literal`` for a module's header, after ``import numpy`` where the literal needs it."""
    return (["import numpy"] if "numpy." in literal else []) + [f"{name} = {literal}"]


def standalone_source(kernel: Any, *, decorated: bool = True) -> str:
    """A self-contained module that defines ``kernel``: its source (from the notebook cell or file)
    preceded by the imports, constants and device functions it uses from its globals. ``decorated=False``
    leaves out ``kernel``'s own decorators (a GPU ufunc's scalar function, compiled as a device function)."""
    header: list[str] = []
    bodies: list[str] = []
    seen: set[str] = set()

    def visit(f: Callable, bare: bool = False) -> None:
        src = textwrap.dedent(inspect.getsource(f))
        header.extend(_closure_constants(f))
        if bare:  # from the `def` line on: ast gives the def's own line, after its decorators
            defs = [n for n in ast.parse(src).body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
            if defs:
                src = "".join(src.splitlines(keepends=True)[defs[0].lineno - 1 :])
        for name in sorted(global_names(f.__code__)):
            if name in seen or name == "cuda" or name not in f.__globals__:
                continue
            seen.add(name)
            value = f.__globals__[name]
            if isinstance(value, types.ModuleType):
                header.append(f"import {value.__name__} as {name}" if value.__name__ != name else f"import {name}")
            elif (literal := _literal(value)) is not None:  # a number or a tuple of numbers: TPB, SHAPE = (16, 16)
                header.extend(_assignment(name, literal))
            elif _from_cuda_random(name, value):  # xoroshiro128p_uniform_float32, ...: numba-cuda's own
                header.append(f"from numba.cuda.random import {name}")
            elif hasattr(value, "py_func") or type(value).__name__ in ("FakeCUDAKernel", "CUDADispatcher"):
                visit(py_func(value))
                if py_func(value).__name__ != name:  # known by another name here (`at = my_at`): that name too
                    bodies.append(f"{name} = {py_func(value).__name__}")
            elif (imported := _import_of(value)) is not None:  # from math import exp; from numba import float32
                module, attr = imported
                header.append(f"from {module} import {attr}" + (f" as {name}" if attr != name else ""))
            elif isinstance(value, type) and issubclass(value, BaseException):
                continue  # builtins-like exception names are resolved by Python itself
            elif isinstance(value, types.FunctionType):
                raise NotADeviceFunction(name)
            elif type(value) in (list, dict, set, str, bytes):
                raise NotOnAGpu(name, value)
            else:
                raise ValueError(
                    f"the kernel uses the global {name!r} ({type(value).__name__}), which the PTX "
                    "check cannot rebuild outside this notebook. Use module-level int/float "
                    "constants (or tuples of them), `math`, `numba` types or `@cuda.jit(device=True)` functions."
                )
        bodies.append(src)

    visit(py_func(kernel), bare=not decorated)
    lines = ["from numba import cuda"] + sorted(set(header), key=lambda s: (not s.startswith(("import", "from")), s))
    return "\n".join(lines) + "\n\n\n" + "\n\n".join(bodies)


def show_source(obj: Any, *, display: bool = True) -> str:
    """Display ``obj``'s source as a highlighted code block (in Jupyter) and return it."""
    src = kernel_source(obj)
    if display:
        try:
            from IPython import get_ipython
            from IPython.display import Markdown
            from IPython.display import display as ipy_display
        except ImportError:  # plain Python: print it
            print(src)
        else:
            if get_ipython() is not None:
                ipy_display(Markdown(f"```python\n{src}```"))
            else:
                print(src)
    return src


def define(src: str, name: str, namespace: dict[str, Any]) -> Any:
    """Run ``src``, the source of a function called ``name``, in ``namespace`` and return the function.

    Unlike a plain ``exec``, the source is kept where :mod:`inspect` finds it (as IPython keeps a cell's), so
    the function reads like one written in a file: :func:`show_source` shows it, and the simulator can run a
    kernel made from it with its threads in turn (:mod:`gpulab.simulator.in_turn` reads the source), which is
    about 50 times cheaper than a Python thread per CUDA thread.
    """
    from .errors import UsageError

    filename = f"<gpulab.source.define {next(_DEFINED)}>"
    linecache.cache[filename] = (len(src), None, src.splitlines(keepends=True), filename)  # None: never evicted
    exec(compile(src, filename, "exec"), namespace)  # noqa: S102 - the caller's own source, like a cell
    fn = namespace.get(name)
    if not callable(fn):
        raise UsageError(f"define: the source defines no function called {name!r}; check the name after `def`.")
    return fn
