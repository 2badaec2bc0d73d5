"""A learner's device function called as plain Python, to name its mistake.

A kernel's wrong output says little about which line of a helper it calls is wrong. Calling the helper's Python
code (``py_func``, so in both modes) on a small matrix whose elements are all different and none 0, at indices
inside and around it, says what it returns there and which element it asked for: :func:`probe`. Lesson 01's
``at`` (:mod:`gpulab.lessons.device_fns`) and lab 01's ``at_clamped`` (:mod:`gpulab.problems.lab01_blur`) read
their verdicts from it; :func:`device_function` finds the helper a learner's kernel calls. The helper may call
device functions of its own (a ``clamp``): they refuse a call from the host in both modes, so the probe runs the
helper's Python code with theirs in their place (:func:`host_function`).
"""

from __future__ import annotations

import ast
import types
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..source import code_names, parsed_source, py_func, rebound
from .problem import Problem
from .result import CheckResult, log_result

__all__ = [
    "ERROR",
    "NONE",
    "OOB",
    "DeviceFnProblem",
    "Probe",
    "Read",
    "device_function",
    "host_function",
    "probe",
    "stores",
    "sample_matrix",
]

OOB, NONE, ERROR = "index error", "None", "error"  # what a call gave instead of a number


def sample_matrix(rows: int = 3, cols: int = 5) -> np.ndarray:
    """``1 .. rows * cols`` as float32: all different, none 0, and ``a[j, i]`` differs from ``a[i, j]``."""
    return np.arange(1, rows * cols + 1, dtype=np.float32).reshape(rows, cols)


class _Recording(np.ndarray):
    """An array that notes the index of every element read from it (before the read, so also a read that fails)."""

    reads: list[tuple]

    def __getitem__(self, key: Any) -> Any:
        self.reads.append(key if isinstance(key, tuple) else (key,))
        return np.asarray(self)[key]


@dataclass(frozen=True)
class Read:
    """One call: what it returned (a number, or OOB / NONE / ERROR) and the last index it read (None: no read)."""

    value: Any
    index: tuple | None

    def number(self) -> bool:
        return isinstance(self.value, (int, float, np.number))

    def equals(self, x: float) -> bool:
        return self.number() and bool(self.value == x)


@dataclass
class Probe:
    """The calls of one device function on ``a`` (its copy before the calls in ``before``)."""

    a: np.ndarray
    before: np.ndarray
    reads: dict[tuple[int, int], Read]
    stores: bool

    @property
    def wrote(self) -> bool:
        """It changed ``a`` or its code stores into an element of an array."""
        return self.stores or not np.array_equal(self.a, self.before)

    def at(self, points: Iterable[tuple[int, int]]) -> dict[tuple[int, int], Read]:
        return {p: self.reads[p] for p in points}


def _is_device_function(obj: Any) -> bool:
    """A ``@cuda.jit(device=True)`` function: the simulator's FakeCUDAKernel or numba-cuda's CUDADispatcher."""
    if getattr(obj, "_device", None) is True:
        return True
    options = getattr(obj, "targetoptions", None)
    return isinstance(options, dict) and bool(options.get("device"))


def host_function(fn: Any, _done: dict[int, Any] | None = None) -> Any:
    """``fn``'s Python code, with every device function it names (a global of its module or notebook) replaced by
    that function's own Python code, recursively (a helper's helpers too): a device function refuses a call from
    the host (numba-cuda raises, and so does the simulator), so its Python code is what the host can run."""
    f = py_func(fn)
    if not isinstance(f, types.FunctionType):
        return f
    done = {} if _done is None else _done
    if id(f) in done:  # already converted (or being converted: a recursive helper)
        return done[id(f)]
    helpers = {
        n: f.__globals__[n]
        for n in sorted(code_names(f.__code__))
        if n in f.__globals__ and _is_device_function(f.__globals__[n])
    }
    if not helpers:
        done[id(f)] = f
        return f
    host = rebound(f, {})  # its own globals, filled below: a recursive helper finds this one in `done` first
    done[id(f)] = host
    for n, helper in helpers.items():
        host.__globals__[n] = host_function(helper, done)
    return host


def probe(fn: Any, a: np.ndarray, points: Iterable[tuple[int, int]]) -> Probe:
    """Call ``fn(a, i, j)`` (its Python code, with the device functions it calls as Python: :func:`host_function`)
    at every ``(i, j)`` of ``points``."""
    f = host_function(fn)
    before = a.copy()
    rec = a.view(_Recording)
    reads: dict[tuple[int, int], Read] = {}
    for i, j in points:
        rec.reads = []
        try:
            v = f(rec, i, j)
            value: Any = NONE if v is None else v
        except IndexError:
            value = OOB
        except Exception:  # noqa: BLE001 - the learner's code: any other failure names no known mistake
            value = ERROR
        last = tuple(int(k) if isinstance(k, (int, np.integer)) else k for k in rec.reads[-1]) if rec.reads else None
        reads[(i, j)] = Read(value.item() if isinstance(value, np.ndarray) and value.ndim == 0 else value, last)
    return Probe(a, before, reads, stores(f))


def stores(fn: Any) -> bool:
    """Whether ``fn``'s code stores into an element of an array (``a[i, j] = ...``, ``a[i, j] += ...``)."""
    parsed = parsed_source(py_func(fn))
    if parsed is None:
        return False
    tree = parsed[0]
    targets = [t for n in ast.walk(tree) if isinstance(n, ast.Assign) for t in n.targets]
    targets += [n.target for n in ast.walk(tree) if isinstance(n, ast.AugAssign)]
    return any(isinstance(t, ast.Subscript) for t in targets)


def device_function(kernel: Any, name: str) -> Any | None:
    """The object a kernel's code calls ``name`` (a global of the module or notebook that defined it), or None."""
    fn = getattr(py_func(kernel), "__globals__", {}).get(name)
    return fn if fn is not None and callable(py_func(fn)) else None


@dataclass
class DeviceFnProblem(Problem):
    """A Problem whose kernel calls a device function the learner also writes, named ``device_fn`` (a global of
    the kernel's cell). ``check(kernel)`` runs the usual checks; if the device function still raises
    NotImplementedError the verdict is "not implemented" (no kernel run), and if the kernel fails, ``diagnose``
    (the device function -> a named hint, or None) is asked which typical mistake its helper makes."""

    device_fn: str = ""
    diagnose: Callable[[Any], str | None] | None = None

    def check(self, kernel: Any = None, *, scale: str | None = None, **overrides: Any) -> Any:
        from .check import is_placeholder

        fn = device_function(kernel, self.device_fn) if kernel is not None and self.device_fn else None
        if fn is not None and not is_placeholder(kernel) and is_placeholder(fn):
            res = CheckResult(
                str(getattr(py_func(kernel), "__name__", self.name)),
                "not implemented",
                0.0,
                float(overrides.get("points", self.points)),
                f"not implemented yet: {self.device_fn} still says `raise NotImplementedError`. Write it, run its "
                "cell, then run the kernel's cell and this check again.",
            )
            log_result(res)
            return res
        res = super().check(kernel, scale=scale, **overrides)
        if (
            fn is not None
            and self.diagnose is not None
            and res.status in ("failed", "error")
            and "own_code" not in res.details
        ):
            hint = self.diagnose(fn)
            if hint:
                res.hint = hint
        return res
