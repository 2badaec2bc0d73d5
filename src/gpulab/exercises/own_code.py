"""Is it the learner's own code? A submission that is, or calls, one of gpulab's reference implementations.

gpulab ships the kernels and functions the exercises ask for (:mod:`gpulab.kernels`, the lessons' answers, the
nn engine's ops, ...), and they are importable: ``matmul_kernel = gpulab.kernels.matmul.matmul_naive_kernel``, a
wrapper ``def softmax(x): return gpulab.kernels.reduce.softmax_rows(x)`` or a ``@cuda.jit`` kernel whose body
calls a gpulab device function would pass every check. :func:`reference_used` finds them before anything runs.

What is looked at: the submission's Python code (``py_func``: a simulator kernel's ``fn``, a GPU dispatcher's
``py_func``, a device function, a GPU ufunc's scalar function) and, recursively, what its code reaches by name:
globals and attribute chains (``gpulab.kernels.reduce.softmax_rows``, ``ops.im2col``), closure cells, default
arguments, nested functions, and the learner's own helpers, their classes' methods and theirs (with a cycle
guard). A function counts as a reference when its code was defined in one of :data:`REFERENCE_MODULES` (by its
``co_filename`` under the installed package) or is the exercise's own spec. Everything else of gpulab's
(``gpulab.to_host``, ``sizes``, ``kernels.blocks_for``, a lab's helpers such as ``chunk_bounds``, the simulator's
random numbers) is a helper learners may call, and is not looked into.

What an exercise hands the learner to build on is ``given`` (a Problem's ``given=``): lab 02's pipeline launches
gpulab's ``add_kernel``, lab 07's convolution calls gpulab's ``matmul``. Names a check binds itself (the stand-ins
of :func:`gpulab.source.rebound`) are the exercise's too.

Where it runs: every Problem check (:func:`gpulab.exercises.check.run_problem`: kernels, ``host=`` functions, lab
06's dict specs through their host wrapper, the capstone's ops) and lesson 02 / lab 02's pipelined host functions
(:func:`gpulab.lessons.pipelined.check_pipelined`). gpulab's own tests pass ``trusted=True`` to check its references
(see ``run_problem``: an argument of one call, never passed by the learners' ``lessons.check`` nor by a lab's test
cells, and a trusted verdict scores 0 in :func:`gpulab.grading.report`).

Not caught: reference source text copied into a cell, and names reached only at run time (``getattr`` with a
string, ``importlib``, a module kept in a local variable first).
"""

from __future__ import annotations

import dis
import inspect
import types
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..source import REBOUND_ATTR, py_func, scalar_function

__all__ = ["REFERENCE_MODULES", "Found", "is_reference_module", "module_of", "own_code_check", "reference_used"]

# The modules that implement what exercises ask for (a name and everything under it).
REFERENCE_MODULES = (
    "gpulab.kernels",
    "gpulab.lessons.answers",
    "gpulab.lessons.answers_05_10",
    "gpulab.lessons.answers_12",
    "gpulab.lessons.device_fns",
    "gpulab.lessons.pipelined",
    "gpulab.problems._stand_ins",
    "gpulab.nn",
    "gpulab.capstone_ops",
    "gpulab.capstone_specs",
    "gpulab.capstone_mistakes",  # its wrong answers are the specs with one change (col2im's gather, for one)
    "gpulab.transformer",
    "gpulab.energy",
    "gpulab.hardware",
    "gpulab.pricing",
    "gpulab.scaling",
    "gpulab.scaling_data_parallel",  # the ring all-reduce (lesson 10's ring_steps), re-exported by scaling
    "gpulab.systolic",
)
# Helpers inside those that learners are meant to use: launch arithmetic (``blocks_for``, ``ceil_div``).
HELPER_MODULES = ("gpulab.kernels._launch",)

_PACKAGE = Path(__file__).resolve().parents[1]  # the installed gpulab package
_LOADS = ("LOAD_GLOBAL", "LOAD_NAME", "LOAD_DEREF", "LOAD_CLASSDEREF")
_ATTRS = ("LOAD_ATTR", "LOAD_METHOD")


def module_of(code: types.CodeType) -> str | None:
    """``gpulab.kernels.matmul`` for code defined in gpulab's ``kernels/matmul.py``; None for code defined
    elsewhere (a notebook cell, a learner's file)."""
    try:
        rel = Path(code.co_filename).resolve().relative_to(_PACKAGE)
    except (ValueError, OSError):
        return None
    parts = list(rel.with_suffix("").parts)
    if parts and parts[-1] == "__init__":
        parts.pop()
    return ".".join(["gpulab", *parts])


def _under(module: str, prefixes: Iterable[str]) -> bool:
    return any(module == p or module.startswith(p + ".") for p in prefixes)


def is_reference_module(module: str | None) -> bool:
    """Whether ``module`` (a dotted name) holds reference implementations (:data:`REFERENCE_MODULES`)."""
    return module is not None and _under(module, REFERENCE_MODULES) and not _under(module, HELPER_MODULES)


@dataclass
class Found:
    """A reference implementation the submission is or reaches: its dotted name, and the learner's functions
    through which it is reached (empty: the submission is that reference)."""

    reference: str
    via: list[str] = field(default_factory=list)
    spec: bool = False


def _function(obj: Any) -> Any:
    """The plain Python function behind ``obj`` (a kernel, device function, GPU ufunc, bound method, static or
    class method), or ``obj`` unchanged."""
    if isinstance(obj, (staticmethod, classmethod, types.MethodType)):
        obj = obj.__func__
    scalar = scalar_function(obj)
    return py_func(scalar if scalar is not None else obj)


def _chains(code: types.CodeType) -> Iterator[list[str]]:
    """Each name the code loads with the attributes read from it straight after: ``gpulab.kernels.matmul`` is
    ``["gpulab", "kernels", "matmul"]``; nested code (inner functions, lambdas, comprehensions) too."""
    chain: list[str] = []
    for ins in dis.get_instructions(code):
        if ins.opname == "EXTENDED_ARG":
            continue
        if ins.opname in _ATTRS and chain and isinstance(ins.argval, str):
            chain.append(ins.argval)
            continue
        if chain:
            yield chain
            chain = []
        if ins.opname in _LOADS and isinstance(ins.argval, str):
            chain = [ins.argval]
    if chain:
        yield chain
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            yield from _chains(const)


def _attr(obj: Any, name: str) -> Any:
    """``obj.name`` without running any code of ``obj``'s (no property, no ``__getattr__``); None if absent."""
    try:
        return inspect.getattr_static(obj, name)
    except AttributeError:
        return None


class _Walk:
    def __init__(self, given: Iterable[Any], spec: Any) -> None:
        self.given = {c for c in (_code(g) for g in given) if c is not None}
        self.spec = _code(spec)
        self.seen: set[int] = set()

    def visit(self, obj: Any, via: list[str], root: bool = False) -> Found | None:
        if isinstance(obj, type):
            return self.visit_class(obj, via)
        fn = _function(obj)
        code = getattr(fn, "__code__", None)
        if not isinstance(code, types.CodeType) or code in self.given:
            return None
        name = getattr(fn, "__qualname__", None) or getattr(fn, "__name__", "function")
        module = module_of(code)
        if code is self.spec:
            return Found(f"{module}.{name}" if module else str(name), via, spec=True)
        wrapper = root and module is not None and bool(getattr(fn, "__closure__", None))  # made by the check
        if is_reference_module(module) and not wrapper:
            return Found(f"{module}.{name}", via)
        if id(fn) in self.seen:
            return None
        self.seen.add(id(fn))
        if module is not None:  # gpulab's helper; at the root, the exercise's wrapper(s) around the learner's code
            return self.contents(fn, via, names=False) if root else None
        return self.contents(fn, via + [str(getattr(fn, "__name__", name))], names=True)

    def visit_class(self, cls: type, via: list[str]) -> Found | None:
        if id(cls) in self.seen or module_of_class(cls) is not None:
            return None  # gpulab's classes (nn.ReLU, ...) and the builtins are not the learner's code
        self.seen.add(id(cls))
        for value in vars(cls).values():
            if (found := self.visit(value, via)) is not None:
                return found
        return None

    def contents(self, fn: Any, via: list[str], names: bool) -> Found | None:
        """What ``fn`` holds (closure cells, defaults) and, for the learner's code, what its code names."""
        cells = dict(zip(fn.__code__.co_freevars, (c.cell_contents for c in _filled(fn.__closure__))))
        held = list(cells.values()) + list(fn.__defaults__ or ()) + list((fn.__kwdefaults__ or {}).values())
        for value in held:  # a wrapper's (names=False) are the code it wraps: wrappers of its own, or the learner's
            if (found := self.visit(value, via, root=not names)) is not None:
                return found
        if not names:
            return None
        skip: frozenset[str] = getattr(fn, REBOUND_ATTR, frozenset())  # the exercise's stand-ins, bound by the check
        scope = {**fn.__globals__, **cells}
        for chain in _chains(fn.__code__):
            if chain[0] in skip or chain[0] not in scope:
                continue
            obj = scope[chain[0]]
            for attr in chain[1:] + [None]:
                if not isinstance(obj, types.ModuleType) and (found := self.visit(obj, via)) is not None:
                    return found
                if attr is None or (obj := _attr(obj, attr)) is None:
                    break
        return None


def module_of_class(cls: type) -> str | None:
    """Where a class is defined: its module's name when that is gpulab's or Python's own, else None."""
    mod = getattr(cls, "__module__", "") or ""
    return mod if mod.split(".")[0] in ("gpulab", "builtins", "numpy", "numba", "cupy") else None


def _filled(cells: tuple | None) -> Iterator[Any]:
    for c in cells or ():
        try:
            c.cell_contents  # noqa: B018 - an empty cell (a name assigned later) raises
        except ValueError:
            continue
        yield c


def _code(obj: Any) -> types.CodeType | None:
    code = getattr(_function(obj), "__code__", None) if obj is not None else None
    return code if isinstance(code, types.CodeType) else None


def reference_used(submission: Any, *, given: Iterable[Any] = (), spec: Any = None) -> Found | None:
    """The first reference implementation ``submission`` is or reaches (see the module's docstring), or None."""
    return _Walk(given, spec).visit(submission, [], root=True)


def own_code_check(
    name: str,
    submissions: Iterable[Any],
    *,
    given: Iterable[Any] = (),
    spec: Any = None,
    expected: str | None = None,
) -> tuple[str, str] | None:
    """``(message, hint)`` refusing the submission ``name`` when one of ``submissions`` (the kernel, the exercise's
    host function around the learner's code) is or calls a reference implementation; None when it is its own.
    ``expected``: the name the exercise asks for (see :func:`message`), where the check knows it."""
    walk = _Walk(given, spec)
    for sub in submissions:
        found = walk.visit(sub, [], root=True)
        if found is not None:
            return message(name, found, expected)
    return None


def message(name: str, found: Found, expected: str | None = None) -> tuple[str, str]:
    """The verdict's message and hint for ``found``: what was found, why it earns nothing, what to do. With
    ``expected`` (the name the exercise asks for) it says "the <expected> you handed in": the learner may have
    bound gpulab's function to that name, and ``name`` (its own ``__name__``, then) is not one they wrote."""
    what = "the reference this check compares against" if found.spec else "gpulab's own reference implementation"
    subject = f"the {expected} you handed in" if expected else f"your {name}"
    if not found.via:
        said = f"{subject} is {found.reference}, {what}"
    else:
        through = f" (through {' -> '.join(found.via)})" if len(found.via) > 1 else ""
        said = f"{subject} calls {found.reference}{through}, {what}"
    return (
        f"{said}. This check grades code you wrote, so it gives no points for gpulab's; nothing was run.",
        f"write {expected or name} yourself, without calling {found.reference}. You may read gpulab's version "
        "(gpulab.show_source) after you finish yours.",
    )
