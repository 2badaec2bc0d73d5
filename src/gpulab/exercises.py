"""The exercise harness: run a learner's CUDA kernel against a NumPy spec and explain what went wrong.

Modelled on GPU-Puzzles' ``lib.py``: the learner writes a kernel body, the harness launches it on
several seeded random inputs (sizes that are not multiples of the block size, size 1, empty,
non-square) and compares every output with a NumPy reference::

    from gpulab.exercises import check_kernel

    @cuda.jit
    def add_kernel(a, b, out):
        i = cuda.grid(1)
        if i < out.size:
            out[i] = a[i] + b[i]

    result = check_kernel(
        add_kernel,
        spec=lambda a, b: a + b,                     # NumPy reference: inputs -> expected output(s)
        inputs=lambda n, rng: (rng.random(n, dtype=np.float32), rng.random(n, dtype=np.float32)),
        sizes=[1, 7, 100, 300],                      # each size is passed to ``inputs`` with its own seed
        threads=[128, 32],                           # one thread per output element; block sizes to try
        points=2,
    )
    result          # a table in Jupyter; str(result) is the same as text
    assert result.passed, result

How a kernel is launched (exactly one of):

* ``threads=T`` (an int or tuple, or a list of them): one thread per element of the first output;
  the grid is ``ceil(shape[d] / T[d])`` along each dimension (dimension 0 is ``x``, as in
  ``i, j = cuda.grid(2)`` with ``out[i, j]``). A list means "any of these block shapes must work";
  the cases cycle through them.
* ``launch=fn``: ``fn(*args) -> (griddim, blockdim)`` is called with the kernel's arguments, for
  kernels whose grid is not one thread per element (grid-stride loops, one block per row, ...).
* ``host=fn``: ``fn(*args)`` launches the kernel(s) itself (a learner's host function).

The kernel's arguments are ``(*inputs, *outputs)`` unless ``args=fn(inputs, outputs) -> tuple`` says
otherwise. Outputs are allocated like the spec's result and filled with a sentinel (NaN, or the
smallest integer) so that elements the kernel never wrote are seen; ``out_init=0`` starts them at
zero instead (for ``cuda.atomic.add``). In gpu mode they sit at the front of a larger buffer whose tail
is checked afterwards, which catches writes beyond ``n`` that the GPU does not report.

What is checked, and the verdict a learner gets:

* the placeholder ``raise NotImplementedError`` -> "not implemented yet", 0 points, no crash;
* exceptions: the simulator reports the thread and block (``tid=[..] ctaid=[..]``); an ``IndexError``
  becomes "thread (x, y, z) of block (..) indexed past the end: missing bounds guard?";
* hangs: each launch runs in a worker thread with a deadline (``timeout`` seconds); in the simulator
  the stuck CUDA threads are stopped and the verdict says which;
* wrong values: the first wrong index, expected vs got, how many are wrong, the input (size, seed,
  shapes) and the launch, and a hint: output untouched, elements never written (grid too small,
  guard too strict), first/last element wrong or shifted (off-by-one), result equal to the spec
  transposed (swapped row/column), or one of the exercise's own ``mistakes={hint: wrong_spec}``;
* races, two ways. (1) In the simulator the largest case (and any failing one) is run once more
  with every shared-memory access and output write logged with its thread and *barrier epoch* (how
  many ``cuda.syncthreads()`` the thread has passed): two threads of a block touching one shared
  element between the same two barriers, one of them writing, is a race ("thread (0,0,0) wrote
  buf[0] and thread (31,0,0) read it with no cuda.syncthreads() in between"); so are two threads
  writing one output element without ``cuda.atomic``. This finds a missing barrier even when the
  values happen to come out right. (2) In both modes cases are re-run with another thread schedule
  (``sys.setswitchinterval`` in the simulator) and block shape; results that change are flagged.
  Benign races (several threads writing the same value) are reported too: write them once.
* ``budget=Budget(...)`` (simulator only, via :func:`gpulab.trace.trace`): global reads per element
  or per thread, writes per thread, coalescing (sectors per access vs the ideal) and shared memory
  per block;
* ``ptx="void(float32[:], ...)"``: the kernel's source (``inspect.getsource``, works for notebook
  cells) plus the globals it uses is compiled to PTX with NVVM in a child process (no GPU needed), which
  proves it is real CUDA and not Python the simulator happens to accept.

Scoring: all checks pass -> ``points``; correct but over budget or not compilable -> half; else 0.
"""

from __future__ import annotations

import ctypes
import html
import inspect
import json
import math
import os
import re
import sys
import textwrap
import threading
import types
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np

from . import runtime

__all__ = ["Budget", "Case", "CheckResult", "KernelTimeout", "Problem", "check_kernel", "kernel_source",
           "random_arrays", "rounding_bound"]

Size = Any  # an int or a shape tuple, passed to the ``inputs`` function
Dim = tuple[int, ...]

_TID_RE = re.compile(r"tid=\[(\d+), (\d+), (\d+)\] ctaid=\[(\d+), (\d+), (\d+)\]:?\s*(.*)", re.S)
# Thread schedules for re-runs in the simulator: how often Python may switch between CUDA threads
# (gpulab runs at 1 ms; 10 us interleaves the threads of a block much more finely).
_SCHEDULES = (1e-5,)
_GUARD = 64  # elements of guard zone after each output in gpu mode
_SHARED_RACE_HINT = ("A race: on a GPU the threads of a block run in any order, so the result can change from run "
                     "to run. Put cuda.syncthreads() between writing shared memory and reading it, and before "
                     "overwriting data other threads may still be reading.")
_WRITE_RACE_HINT = ("A race: on a GPU these writes happen in any order and updates get lost. Use cuda.atomic.add "
                    "for a value many threads update, or give each thread its own element (and reduce in shared "
                    "memory with cuda.syncthreads() between steps).")


class KernelTimeout(Exception):
    """Raised inside stuck simulator threads to stop a kernel that ran past its deadline."""


class _Hang(Exception):
    pass


@dataclass
class Budget:
    """Efficiency limits checked in the simulator with :func:`gpulab.trace.trace`.

    Every limit may be a number or a function of the case's size. ``size`` picks the input traced
    (default: the largest case). ``reads_per_element={"a": 4}``: no element of ``a`` is read from
    global memory more than 4 times. ``sectors={"a": 2.0}``: 32-byte sectors used per warp access of
    ``a`` (reads and writes) at most twice the ideal, i.e. coalesced. ``shared_bytes``: shared memory
    per block.
    """

    reads_per_element: dict[str, Any] = field(default_factory=dict)
    reads_per_thread: Any = None
    writes_per_thread: Any = None
    sectors: dict[str, Any] = field(default_factory=dict)
    shared_bytes: Any = None
    size: Size = None


@dataclass
class Case:
    """One input the kernel was run on."""

    size: Size
    seed: int
    inputs: tuple
    expected: tuple
    # Per-output allowed absolute error when the check uses ``reduction=`` (else None: rtol/atol).
    atol: tuple | None = None

    def describe(self) -> str:
        shapes = ", ".join(_describe_arg(x) for x in self.inputs)
        return f"size={self.size!r}, seed={self.seed} (inputs: {shapes})"


@dataclass
class Check:
    """One line of a verdict."""

    name: str
    passed: bool
    message: str
    hint: str = ""


@dataclass
class CheckResult:
    """What :func:`check_kernel` found. ``bool(result)`` is ``result.passed``."""

    name: str
    status: str  # "passed", "failed", "not implemented", "error", "timeout", "over budget"
    score: float
    max_score: float
    message: str
    hint: str = ""
    checks: list[Check] = field(default_factory=list)
    details: dict = field(default_factory=dict)

    @property
    def passed(self) -> bool:
        return self.status == "passed"

    def __bool__(self) -> bool:
        return self.passed

    def to_dict(self) -> dict:
        return {
            "name": self.name, "status": self.status, "passed": self.passed, "score": self.score,
            "max_score": self.max_score, "message": self.message, "hint": self.hint,
        }

    def __str__(self) -> str:
        mark = "PASS" if self.passed else "FAIL"
        lines = [f"[{mark}] {self.name}: {self.status} ({_fmt_points(self.score)}/{_fmt_points(self.max_score)} points)"]
        lines += ["  " + ln for ln in self.message.splitlines()]
        if self.hint:
            lines.append("  hint: " + self.hint)
        for c in self.checks:
            lines.append(f"  {'ok ' if c.passed else 'XX '} {c.name}: {c.message.splitlines()[0] if c.message else ''}")
        return "\n".join(lines)

    __repr__ = __str__

    def _repr_html_(self) -> str:
        colour = "#1a7f37" if self.passed else ("#9a6700" if self.status == "not implemented" else "#cf222e")
        rows = "".join(
            f"<tr><td>{'&#10004;' if c.passed else '&#10008;'}</td><td>{html.escape(c.name)}</td>"
            f"<td style='text-align:left'>{html.escape(c.message)}</td></tr>"
            for c in self.checks
        )
        hint = f"<p><b>Hint:</b> {html.escape(self.hint)}</p>" if self.hint else ""
        return (
            f"<div style='border-left:4px solid {colour};padding:4px 10px'>"
            f"<p><b style='color:{colour}'>{html.escape(self.name)}: {html.escape(self.status)}</b> "
            f"({_fmt_points(self.score)}/{_fmt_points(self.max_score)} points)</p>"
            f"<pre style='white-space:pre-wrap'>{html.escape(self.message)}</pre>{hint}"
            + (f"<table>{rows}</table>" if rows else "")
            + "</div>"
        )


def _fmt_points(x: float) -> str:
    return f"{x:g}"


def _describe_arg(x: Any) -> str:
    if isinstance(x, np.generic):
        return repr(x.item())
    if hasattr(x, "shape") and hasattr(x, "dtype"):
        return f"{np.dtype(x.dtype).name}{tuple(x.shape)}"
    return repr(x)


def random_arrays(rng: np.random.Generator, *shapes: Any, dtype: Any = np.float32, low: float = -1.0,
                  high: float = 1.0) -> tuple[np.ndarray, ...]:
    """Uniform random arrays of the given shapes (helper for ``inputs=`` functions)."""
    return tuple((rng.uniform(low, high, size=s)).astype(dtype) for s in shapes)


# --------------------------------------------------------------------------------------------------
# Kernel source (for the PTX check and for not-implemented detection)


def _py_func(kernel: Any) -> Callable:
    fn = getattr(kernel, "py_func", None) or getattr(kernel, "fn", None) or kernel
    return fn


def _code_names(code: types.CodeType) -> set[str]:
    names = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= _code_names(const)
    return names


def _is_placeholder(fn: Any) -> bool:
    code = getattr(_py_func(fn), "__code__", None)
    return code is not None and "NotImplementedError" in _code_names(code)


def kernel_source(kernel: Any) -> str:
    """A self-contained module that defines ``kernel``: its source (from the notebook cell or file)
    preceded by the imports, constants and device functions it uses from its globals."""
    fn = _py_func(kernel)
    header: list[str] = []
    bodies: list[str] = []
    seen: set[str] = set()

    def visit(f: Callable) -> None:
        src = textwrap.dedent(inspect.getsource(f))
        for name in sorted(_code_names(f.__code__)):
            if name in seen or name == "cuda" or name not in f.__globals__:
                continue
            seen.add(name)
            value = f.__globals__[name]
            if isinstance(value, types.ModuleType):
                header.append(f"import {value.__name__} as {name}" if value.__name__ != name else f"import {name}")
            elif isinstance(value, (bool, int, float, np.integer, np.floating)):
                header.append(f"{name} = {value!r}")
            elif hasattr(value, "py_func") or type(value).__name__ in ("FakeCUDAKernel", "CUDADispatcher"):
                visit(_py_func(value))
            else:
                import numba

                if getattr(numba, name, None) is value:
                    header.append(f"from numba import {name}")
                elif isinstance(value, type) and issubclass(value, BaseException):
                    continue  # builtins-like exception names are resolved by Python itself
                else:
                    raise ValueError(
                        f"the kernel uses the global {name!r} ({type(value).__name__}), which the PTX "
                        "check cannot rebuild outside this notebook. Use module-level int/float "
                        "constants, `math`, `numba` types or `@cuda.jit(device=True)` functions."
                    )
        bodies.append(src)

    visit(fn)
    lines = ["from numba import cuda"] + sorted(set(header), key=lambda s: (not s.startswith(("import", "from")), s))
    return "\n".join(lines) + "\n\n\n" + "\n\n".join(bodies)


# --------------------------------------------------------------------------------------------------
# Running a launch with a deadline


def _stop_simulator_threads() -> list[str]:
    """Raise KernelTimeout inside every running simulator thread; returns which ones."""
    stopped = []
    for th in threading.enumerate():
        if type(th).__name__ == "BlockThread" and th.is_alive() and th.ident is not None:
            ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(th.ident), ctypes.py_object(KernelTimeout))
            stopped.append(f"thread {tuple(th.threadIdx)} of block {tuple(th.blockIdx)}")
    return stopped


def _run_with_deadline(fn: Callable[[], Any], timeout: float) -> Any:
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["value"] = fn()
        except BaseException as exc:  # noqa: BLE001 - handed back to the caller
            box["error"] = exc

    worker = threading.Thread(target=target, name="gpulab-check", daemon=True)
    worker.start()
    worker.join(timeout)
    if worker.is_alive():
        stuck: list[str] = []
        if runtime.is_simulator():
            for _ in range(50):  # a thread may be between bytecodes that ignore the request: retry
                stopped = _stop_simulator_threads()
                stuck = stuck or stopped
                worker.join(0.1)
                if not worker.is_alive():
                    break
        raise _Hang(stuck)
    if "error" in box:
        raise box["error"]
    return box.get("value")


# --------------------------------------------------------------------------------------------------
# Verdicts


def _grid_for(shape: Dim, threads: Dim) -> tuple[Dim, Dim]:
    t = tuple(threads)
    shape = tuple(shape) or (1,)
    if len(t) > len(shape):
        shape = shape + (1,) * (len(t) - len(shape))
    g = tuple(max(1, -(-int(shape[d]) // int(t[d]))) for d in range(len(t)))
    return g, t


def _as_dim(x: Any) -> Dim:
    return tuple(int(v) for v in x) if isinstance(x, (tuple, list)) else (int(x),)


def _sentinel(dtype: np.dtype) -> Any:
    if np.issubdtype(dtype, np.floating) or np.issubdtype(dtype, np.complexfloating):
        return np.nan
    if np.issubdtype(dtype, np.integer):
        return np.iinfo(dtype).min
    return 0


def _unwritten(got: np.ndarray, sentinel: Any) -> np.ndarray:
    if isinstance(sentinel, float) and math.isnan(sentinel):
        return np.isnan(got)
    return got == sentinel


def _close(got: np.ndarray, exp: np.ndarray, rtol: float, atol: float) -> np.ndarray:
    if np.issubdtype(exp.dtype, np.floating):
        return np.isclose(got, exp, rtol=rtol, atol=atol)
    return got == exp


def _same(a: np.ndarray, b: np.ndarray, rtol: float, atol: float) -> bool:
    return a.shape == b.shape and bool(np.all(_close(a, b, rtol, atol) | (_nan(a) & _nan(b))))


def _nan(a: np.ndarray) -> np.ndarray:
    return np.isnan(a) if np.issubdtype(a.dtype, np.floating) else np.zeros(a.shape, bool)


def _scalar(x: Any) -> str:
    return repr(x.item()) if hasattr(x, "item") else repr(x)


def _exception_check(exc: BaseException, launch: str, case: Case) -> tuple[str, str, str]:
    """(status, message, hint) for an exception raised by the learner's code."""
    text = str(exc)
    m = _TID_RE.match(text)
    where = ""
    if m:
        tid, cta, text = m.group(1, 2, 3), m.group(4, 5, 6), m.group(7)
        where = f"thread ({', '.join(tid)}) of block ({', '.join(cta)})"
    if isinstance(exc, NotImplementedError):
        return ("not implemented", "not implemented yet: replace `raise NotImplementedError` with your code.", "")
    if isinstance(exc, IndexError):
        msg = (f"{where or 'a thread'} indexed past the end of an array: {text}\n"
               f"input: {case.describe()}\nlaunch: {launch}")
        hint = ("missing bounds guard? The grid has more threads than elements when n is not a multiple "
                "of the block size; guard with `if i < out.shape[0]:` (and `j < out.shape[1]` in 2-D), "
                "and check that i/j index the right dimensions.")
        return "failed", msg, hint
    if isinstance(exc, KernelTimeout):
        return "timeout", f"stopped: {where} ran past the deadline", ""
    msg = f"{type(exc).__name__} in {where or 'your code'}: {text}\ninput: {case.describe()}\nlaunch: {launch}"
    hint = ""
    if isinstance(exc, (TypeError, AttributeError)):
        hint = ("the simulator ran your code as Python and it failed; check argument order and that the "
                "kernel only uses CUDA features (cuda.grid, cuda.threadIdx, arrays, math).")
    return "error", msg, hint


def _diagnose(got: np.ndarray, exp: np.ndarray, sentinel: Any, out_init: Any, case: Case, rtol: float,
              atol: float, mistakes: dict[str, Callable], out_name: str) -> tuple[str, str]:
    """(message, hint) for an output that differs from the spec."""
    ok = _close(got, exp, rtol, atol)
    bad = np.argwhere(~ok)
    first = tuple(int(v) for v in bad[0]) if len(bad) else ()
    idx = ", ".join(str(v) for v in first) if first else "?"
    n_bad, total = int((~ok).sum()), int(exp.size)
    msg = (f"{out_name}[{idx}]: expected {_scalar(exp[first])}, got {_scalar(got[first])} "
           f"({n_bad} of {total} elements wrong)")
    unwritten = _unwritten(got, sentinel) if out_init is None else np.zeros(got.shape, bool)
    if out_init is None and unwritten.all() or (out_init is not None and np.all(got == out_init) and not np.all(exp == out_init)):
        if exp.size == 1:
            return msg, (f"nothing was written to {out_name} for a single element: did the kernel write to "
                         f"{out_name}? If it does, the bounds guard is too strict (`i < n - 1`?): thread 0 "
                         "has work when n == 1.")
        return msg, f"output untouched: did the kernel write to {out_name}?"
    for hint, wrong in mistakes.items():
        try:
            alt = np.asarray(wrong(*case.inputs))
        except Exception:  # noqa: BLE001 - a mistake spec that does not apply to this input
            continue
        if alt.shape == got.shape and _same(got, alt.astype(got.dtype), rtol, atol):
            return msg, hint
    atol_t = atol.T if np.ndim(atol) else atol
    if exp.ndim == 2 and exp.shape[0] == exp.shape[1] and exp.shape[0] > 1 and _same(got, exp.T, rtol, atol_t):
        return msg, ("the result equals the expected one transposed: row and column are swapped. With "
                     "`i, j = cuda.grid(2)`, i is the row (out.shape[0]) and j the column.")
    if unwritten.any():
        n_un = int(unwritten.sum())
        flat = np.flatnonzero(unwritten.ravel())
        where = np.unravel_index(int(flat[0]), got.shape)
        where_s = tuple(int(v) for v in where) if got.ndim > 1 else int(where[0])
        if got.ndim == 1 and n_un == 1 and flat[0] == got.size - 1:
            return msg, ("the last element was never written: off-by-one in the bounds guard "
                         "(`i < n - 1` or `i <= n - 2`?) or in the number of blocks.")
        return msg, (f"{n_un} elements of {out_name} were never written (first: {where_s}). Does the grid "
                     "cover every element (blocks = ceil(n / threads))? Is the guard too strict? With a "
                     "fixed grid, loop with a grid stride: `for i in range(start, n, cuda.gridsize(1))`.")
    flat_ok = ok.ravel()
    if total > 1 and n_bad == 1 and (not flat_ok[0] or not flat_ok[-1]):
        which = "first" if not flat_ok[0] else "last"
        return msg, f"only the {which} element is wrong: an off-by-one at the edge (a boundary case)."
    g, e = got.ravel(), exp.ravel()
    atol_s = float(np.max(atol)) if np.ndim(atol) else atol
    if total > 2 and (_same(g[1:], e[:-1], rtol, atol_s) or _same(g[:-1], e[1:], rtol, atol_s)):
        return msg, "the output is shifted by one element: an off-by-one in the index (i + 1 or i - 1?)."
    return msg, ""


# --------------------------------------------------------------------------------------------------
# The harness


def _to_host(a: Any) -> np.ndarray:
    return np.asarray(runtime.to_host(a))


def check_kernel(
    kernel: Any,
    spec: Callable[..., Any],
    *,
    inputs: Callable[[Size, np.random.Generator], tuple],
    sizes: Sequence[Size],
    threads: Any = None,
    launch: Callable[..., tuple[Any, Any]] | None = None,
    host: Callable[..., Any] | None = None,
    args: Callable[[tuple, tuple], tuple] | None = None,
    name: str | None = None,
    points: float = 1,
    seed: int = 0,
    rtol: float = 1e-5,
    atol: float = 1e-6,
    reduction: int | Callable[..., int] | None = None,
    out_init: Any = None,
    out_names: Sequence[str] | None = None,
    mistakes: dict[str, Callable[..., Any]] | None = None,
    budget: Budget | None = None,
    ptx: str | None = None,
    race_check: bool = True,
    timeout: float = 30.0,
) -> CheckResult:
    """Run ``kernel`` on ``inputs(size, rng)`` for every size and compare with ``spec(*inputs)``.

    See the module docstring for the launch options, the checks and the scoring. Never raises for a
    learner's mistake: the verdict is in the returned :class:`CheckResult`.

    ``reduction=n`` (or ``fn(*inputs) -> n``): each output element is a float32 sum of ``n`` terms
    (a dot product of length n, a convolution window, a batch sum). The expected values are then
    computed in float64 and the allowed error is :func:`rounding_bound`, the proven bound for a
    sum of n products in float32, instead of a constant tolerance a correct kernel can miss at
    large n. The spec must be a sum of products of its inputs (matmul, convolution, their
    gradients, optionally followed by ReLU).
    """
    fn_name = name or getattr(_py_func(kernel), "__name__", None) or getattr(host, "__name__", "kernel")
    mistakes = dict(mistakes or {})
    n_modes = sum(x is not None for x in (threads, launch, host))
    if n_modes != 1:
        raise ValueError(
            f"check_kernel({fn_name}) needs exactly one of threads=, launch= or host= (got {n_modes}): "
            "threads=256 for one thread per output element, launch=lambda *args: (blocks, threads) for "
            "another grid, host=fn for a host function that launches the kernel itself."
        )
    if not sizes:
        raise ValueError(f"check_kernel({fn_name}) needs at least one input size in sizes=[...].")
    thread_options: list[Dim] = []
    if threads is not None:
        thread_options = [_as_dim(t) for t in threads] if isinstance(threads, list) else [_as_dim(threads)]

    def fail(status: str, message: str, hint: str = "", checks: list[Check] | None = None,
             score: float = 0.0, details: dict | None = None) -> CheckResult:
        res = CheckResult(fn_name, status, score, float(points), message, hint, checks or [], details or {})
        _log_result(res)
        return res

    if _is_placeholder(kernel) or (host is not None and _is_placeholder(host)):
        return fail("not implemented", "not implemented yet: replace `raise NotImplementedError` with your code.")

    # Build the cases (the spec is NumPy; it must not fail).
    cases: list[Case] = []
    for k, size in enumerate(sizes):
        rng = np.random.default_rng(seed + k)
        ins = inputs(size, rng)
        ins = tuple(ins) if isinstance(ins, (tuple, list)) else (ins,)
        exp = spec(*ins)
        exp = tuple(np.asarray(e) for e in exp) if isinstance(exp, tuple) else (np.asarray(exp),)
        tol = None
        if reduction is not None:
            n_terms = int(reduction(*ins) if callable(reduction) else reduction)
            exp, tol = _float64_reference(spec, ins, exp, n_terms, atol)
        cases.append(Case(size, seed + k, ins, exp, tol))
    names = list(out_names or (["out"] if len(cases[0].expected) == 1 else [f"out{k}" for k in range(len(cases[0].expected))]))

    def run_case(case: Case, option: int, interval: float | None) -> tuple[tuple[np.ndarray, ...], str]:
        """Launch once; returns (host outputs, launch description)."""
        xp = runtime.xp()
        # a fresh copy per run: a kernel that writes into its inputs must not change the next run's data
        dev_in = tuple(runtime.to_device(np.array(x)) if isinstance(x, np.ndarray) else x for x in case.inputs)
        bufs, outs, sentinels = [], [], []
        for e in case.expected:
            fill = _sentinel(e.dtype) if out_init is None else out_init
            extra = _GUARD if runtime.is_gpu() else 0
            buf = xp.full(e.size + extra, fill, dtype=e.dtype)
            bufs.append(buf)
            outs.append(buf[: e.size].reshape(e.shape))
            sentinels.append(fill)
        call = tuple(args(dev_in, tuple(outs))) if args else dev_in + tuple(outs)
        if host is not None:
            desc = f"host function {getattr(host, '__name__', 'host')}(...)"
            go = lambda: host(*call)  # noqa: E731
        else:
            if threads is not None:
                griddim, blockdim = _grid_for(case.expected[0].shape, thread_options[option % len(thread_options)])
            else:
                griddim, blockdim = launch(*call)  # type: ignore[misc]
            from .kernels._launch import check_launch

            check_launch(griddim, blockdim)
            desc = f"{fn_name}[{griddim}, {blockdim}]"
            go = lambda: kernel[griddim, blockdim](*call)  # noqa: E731
        old = sys.getswitchinterval()
        try:
            if interval is not None and runtime.is_simulator():
                sys.setswitchinterval(interval)
            if runtime.is_simulator():
                with _shared_arrays():
                    _run_with_deadline(go, timeout)
            else:
                _run_with_deadline(lambda: (go(), runtime.synchronize()), timeout)
        except _Hang:
            raise
        except Exception as exc:
            exc.gpulab_launch = desc  # type: ignore[attr-defined]
            raise
        finally:
            sys.setswitchinterval(old)
        got = []
        for buf, e, fill, name_ in zip(bufs, case.expected, sentinels, names):
            h = _to_host(buf)
            tail = h[e.size:]
            if tail.size and not np.all(_unwritten(tail, fill) if out_init is None else tail == fill):
                raise _OutOfBounds(name_, desc)
            got.append(h[: e.size].reshape(e.shape))
        return tuple(got), desc

    checks: list[Check] = []
    largest = max(range(len(cases)), key=lambda k: sum(np.size(x) for x in cases[k].inputs))
    for k, case in enumerate(cases):
        try:
            got, desc = run_case(case, k, None)
        except _Hang as hang:
            stuck = hang.args[0]
            plural = "s" if len(stuck) != 1 else ""
            who = f" ({len(stuck)} CUDA thread{plural} still running, e.g. {stuck[0]})" if stuck else ""
            msg = (f"the kernel did not finish within {timeout:g} s{who}.\ninput: {case.describe()}")
            hint = ("an infinite loop? Check that every loop variable advances (a grid-stride loop adds "
                    "cuda.gridsize(1); a tree reduction halves the stride) and that the loop ends for every thread.")
            if runtime.is_gpu():
                hint += " On the GPU a stuck kernel cannot be stopped: restart the Jupyter kernel."
            return fail("timeout", msg, hint, checks)
        except _OutOfBounds as oob:
            return fail("failed", f"the kernel wrote past the end of {oob.args[0]} (input: {case.describe()}, "
                        f"launch: {oob.args[1]}).", "missing bounds guard: threads with i >= n must not write.", checks)
        except Exception as exc:  # noqa: BLE001 - the learner's code failed: explain, don't crash
            desc = getattr(exc, "gpulab_launch", "")
            status, msg, hint = _exception_check(exc, desc, case)
            return fail(status, msg, hint, checks)
        for o, (got_k, exp_k, name_) in enumerate(zip(got, case.expected, names)):
            tol_k = case.atol[o] if case.atol is not None else atol
            if _same(got_k, exp_k, rtol, tol_k):
                continue
            msg, hint = _diagnose(got_k, exp_k, _sentinel(exp_k.dtype) if out_init is None else None,
                                  out_init, case, rtol, tol_k, mistakes, name_)
            if case.atol is not None:
                msg += (f"\n(allowed error: the float32 rounding bound for sums of "
                        f"{_reduction_len(reduction, case):,} terms, up to {float(np.max(tol_k)):.3g} here)")
            # A race explains wrong values best: look for one directly, then try a second schedule.
            conflict = ""
            if race_check and host is None and runtime.is_simulator():
                try:
                    conflict = _race_report(kernel, case, (thread_options, launch, args, out_init), names)
                except Exception:  # noqa: BLE001 - the first verdict stands
                    conflict = ""
            if conflict:
                hint = f"{conflict}. " + (_SHARED_RACE_HINT if conflict.startswith("shared") else _WRITE_RACE_HINT)
            elif race_check and case.expected[0].size > 1:
                try:
                    again, _ = run_case(case, k, _SCHEDULES[0])
                    if not all(_same(a, b, rtol, atol) for a, b in zip(again, got)):
                        hint = ("the result changes from run to run (a race): a thread reads shared memory "
                                "before the others wrote it (missing cuda.syncthreads()?) or several threads "
                                "update one element without cuda.atomic.add.") + (" " + hint if hint else "")
                except Exception:  # noqa: BLE001 - the first verdict stands
                    pass
            return fail("failed", f"{msg}\ninput: {case.describe()}\nlaunch: {desc}", hint, checks)
        checks.append(Check(f"size {case.size!r}", True, f"correct ({desc})"))

    # Re-run the largest case with another schedule (and block shape) to catch intermittent races.
    if race_check and cases:
        case = cases[largest]
        for j, interval in enumerate(_SCHEDULES):
            try:
                again, desc = run_case(case, largest + 1 + j, interval)
            except Exception as exc:  # noqa: BLE001
                status, msg, hint = _exception_check(exc, getattr(exc, "gpulab_launch", ""), case)
                return fail(status, "on a re-run with another thread schedule: " + msg, hint, checks)
            wrong = [n for o, (a, e, n) in enumerate(zip(again, case.expected, names))
                     if not _same(a, e, rtol, case.atol[o] if case.atol is not None else atol)]
            if wrong:
                msg = (f"correct once, but wrong when re-run with another thread schedule ({desc}): "
                       f"{wrong[0]} changed.\ninput: {case.describe()}")
                hint = ("a race: some thread reads data another thread has not written yet (missing "
                        "cuda.syncthreads() between writing and reading shared memory?) or several threads "
                        "update one element without cuda.atomic.add.")
                return fail("failed", msg, hint, checks)
        if host is None and runtime.is_simulator():
            try:
                conflict = _race_report(kernel, case, (thread_options, launch, args, out_init), names)
            except Exception:  # noqa: BLE001 - the watched run failed where the plain ones passed: no verdict
                conflict = ""
            if conflict:
                return fail("failed", f"{conflict}\ninput: {case.describe()}",
                            _SHARED_RACE_HINT if conflict.startswith("shared") else _WRITE_RACE_HINT, checks)
        checks.append(Check("races", True, "same result with different thread schedules"
                            + (" and block shapes" if len(thread_options) > 1 else "")
                            + (", no unsynchronised accesses to shared memory or outputs" if host is None and runtime.is_simulator() else "")))

    penalties: list[Check] = []
    if budget is not None and host is None and runtime.is_simulator():
        penalties += _budget_checks(kernel, budget, cases, largest, (thread_options, launch, args, out_init))
    elif budget is not None:
        checks.append(Check("budget", True, "not checked: access counts come from the simulator "
                            "(run with GPULAB_DEVICE=simulator to check them)"))
    if ptx is not None:
        penalties.append(_ptx_check(kernel, ptx))
    checks += penalties
    failed = [c for c in penalties if not c.passed]
    if failed:
        c = failed[0]
        status = "over budget" if c.name.startswith("budget") else "failed"
        return fail(status, f"correct on all {len(cases)} input{'s' if len(cases) != 1 else ''}, but {c.name}: {c.message}", c.hint, checks,
                    score=float(points) / 2)
    tol_note = (" Tolerance: the float32 rounding bound for sums of n terms, expected values in float64."
                if reduction is not None else "")
    res = CheckResult(fn_name, "passed", float(points), float(points),
                      f"correct on all {len(cases)} input{'s' if len(cases) != 1 else ''} ({', '.join(repr(c.size) for c in cases)})."
                      + tol_note, "", checks)
    _log_result(res)
    return res


class _OutOfBounds(Exception):
    pass


def rounding_bound(n: int, dtype: Any = np.float32) -> float:
    """gamma_n = n*u / (1 - n*u): |fl(sum of n products) - exact| <= gamma_n * sum |products|.

    ``u`` is the unit roundoff of ``dtype`` (2**-24 for float32). The bound holds for any order of
    summation and with or without fused multiply-add, so it covers a GPU thread's loop, a tree
    reduction and cuBLAS alike (Higham, *Accuracy and Stability of Numerical Algorithms*, 3.1).
    """
    u = float(np.finfo(dtype).eps) / 2
    nu = max(int(n), 1) * u
    if nu >= 1:
        raise ValueError(f"rounding_bound: n={n} is too long for {np.dtype(dtype).name} (n*u >= 1)")
    return nu / (1 - nu)


def _float64_reference(spec: Callable, ins: tuple, exp: tuple, n_terms: int, atol: float) -> tuple[tuple, tuple]:
    """Expected outputs computed in float64 (rounded once to the output dtype) and per-element bounds."""
    def f64(x: Any, absolute: bool) -> Any:
        if isinstance(x, np.ndarray) and np.issubdtype(x.dtype, np.floating):
            x = x.astype(np.float64)
            return np.abs(x) if absolute else x
        return x

    exact = spec(*(f64(x, False) for x in ins))
    scale = spec(*(f64(x, True) for x in ins))
    exact = exact if isinstance(exact, tuple) else (exact,)
    scale = scale if isinstance(scale, tuple) else (scale,)
    out_exp, out_tol = [], []
    for e, x64, s64 in zip(exp, exact, scale):
        x64, s64 = np.asarray(x64, np.float64), np.abs(np.asarray(s64, np.float64))
        if not np.issubdtype(e.dtype, np.floating) or x64.shape != e.shape:
            out_exp.append(e)
            out_tol.append(atol)
            continue
        # n terms summed in the output precision, then one more rounding to store the result.
        out_exp.append(x64.astype(e.dtype))
        out_tol.append(atol + rounding_bound(n_terms + 1, e.dtype) * s64)
    return tuple(out_exp), tuple(out_tol)


def _reduction_len(reduction: Any, case: Case) -> int:
    return int(reduction(*case.inputs) if callable(reduction) else reduction)


@dataclass
class Problem:
    """One exercise: what the kernel must compute, on which inputs, launched how, judged how.

    The fields are :func:`check_kernel`'s keywords; ``gpu_sizes`` are the sizes used in gpu mode
    (default: ``sizes``). ``problem.check(kernel)`` runs the checks at the sizes of the current mode;
    ``problem.check(kernel, scale="gpu")`` uses ``gpu_sizes`` in either mode (the emulated gpu-size
    tests). Keyword overrides replace fields for one run, e.g. ``host=emulated`` to check a NumPy
    emulation of the kernel in place of the kernel.
    """

    name: str
    spec: Callable[..., Any]
    inputs: Callable[[Size, np.random.Generator], tuple]
    sizes: Sequence[Size]
    gpu_sizes: Sequence[Size] | None = None
    threads: Any = None
    launch: Callable[..., tuple[Any, Any]] | None = None
    host: Callable[..., Any] | None = None
    args: Callable[[tuple, tuple], tuple] | None = None
    points: float = 1
    seed: int = 0
    rtol: float = 1e-5
    atol: float = 1e-6
    reduction: int | Callable[..., int] | None = None
    out_init: Any = None
    out_names: Sequence[str] | None = None
    mistakes: dict[str, Callable[..., Any]] | None = None
    budget: Budget | None = None
    ptx: str | None = None
    race_check: bool = True
    timeout: float = 30.0

    def sizes_for(self, scale: str | None = None) -> Sequence[Size]:
        """The sizes for ``scale`` ("gpu" or "simulator"; default: the current mode)."""
        scale = scale or runtime.mode()
        if scale not in ("gpu", "simulator"):
            raise ValueError(f"Problem {self.name}: scale must be 'gpu' or 'simulator', got {scale!r}")
        return list(self.gpu_sizes or self.sizes) if scale == "gpu" else list(self.sizes)

    def check(self, kernel: Any = None, *, scale: str | None = None, **overrides: Any) -> CheckResult:
        """Run the checks on ``kernel`` (see :func:`check_kernel`)."""
        kw = {f: getattr(self, f) for f in ("threads", "launch", "host", "args", "points", "seed", "rtol",
                                             "atol", "reduction", "out_init", "out_names", "mistakes",
                                             "budget", "ptx", "race_check", "timeout")}
        if any(k in overrides for k in ("threads", "launch", "host")):
            kw.update(threads=None, launch=None, host=None)
        unknown = set(overrides) - set(kw) - {"sizes", "name"}
        if unknown:
            raise TypeError(f"Problem.check: unknown option(s) {sorted(unknown)}; valid: {sorted(kw)}")
        kw.update(overrides)
        kw.setdefault("sizes", self.sizes_for(scale))
        kw.setdefault("name", None if kernel is not None else self.name)
        return check_kernel(kernel if kernel is not None else kw["host"], self.spec, inputs=self.inputs, **kw)


def _launch_config(case: Case, run_args: tuple, call: tuple) -> tuple[Any, Any]:
    thread_options, launch, _, _ = run_args
    if thread_options:
        return _grid_for(case.expected[0].shape, thread_options[0])
    return launch(*call)


def _host_call(case: Case, run_args: tuple) -> tuple[tuple, tuple]:
    _, _, args, out_init = run_args
    outs = tuple(np.full(e.shape, _sentinel(e.dtype) if out_init is None else out_init, dtype=e.dtype)
                 for e in case.expected)
    ins = tuple(np.array(x) if isinstance(x, np.ndarray) else x for x in case.inputs)
    call = tuple(args(ins, outs)) if args else ins + outs
    return outs, call


def _flat_indices(idx: Any, shape: tuple[int, ...]) -> list[int]:
    """Flat (C-order) element numbers that ``array[idx]`` touches."""
    try:
        if isinstance(idx, tuple) and len(idx) == len(shape) and all(isinstance(i, (int, np.integer)) for i in idx):
            return [int(np.ravel_multi_index(tuple(int(i) % n for i, n in zip(idx, shape)), shape))]
        if isinstance(idx, (int, np.integer)) and len(shape) == 1:
            return [int(idx) % shape[0]]
        return np.arange(int(np.prod(shape))).reshape(shape)[idx].ravel().tolist()
    except (ValueError, IndexError, ZeroDivisionError, TypeError):
        return []


def _thread_state() -> tuple | None:
    """(block, thread, barrier epoch, inside an atomic) of the current simulator thread, or None."""
    th = threading.current_thread()
    block = getattr(th, "blockIdx", None)
    if block is None:
        return None
    t = th.threadIdx
    return ((block.x, block.y, block.z), (t.x, t.y, t.z), getattr(th, "_gpulab_epoch", 0),
            getattr(th, "_gpulab_atomic", False))


class _Watch(np.ndarray):
    """An array that logs element accesses made from simulator threads:
    ``(kind, flat index, block, thread, barrier epoch, atomic)``."""

    _log: list | None = None
    _reads: bool = False

    def __array_finalize__(self, obj: Any) -> None:
        self._log = getattr(obj, "_log", None)
        self._reads = getattr(obj, "_reads", False)

    def _record(self, kind: str, idx: Any) -> None:
        if self._log is None:
            return
        state = _thread_state()
        if state is not None:
            for f in _flat_indices(idx, self.shape):
                self._log.append((kind, f) + state)

    def __getitem__(self, idx: Any) -> Any:
        out = np.ndarray.__getitem__(self, idx)
        if self._reads:
            self._record("r", idx)
        return out.view(np.ndarray) if isinstance(out, _Watch) else out

    def __setitem__(self, idx: Any, value: Any) -> None:
        self._record("w", idx)
        np.ndarray.__setitem__(self, idx, value)


class _watch_simulator:
    """While active: mark simulator threads inside ``cuda.atomic.*`` and count each thread's barriers
    (its *epoch*)."""

    _ATOMICS = ("add", "sub", "and_", "or_", "xor", "inc", "dec", "exch", "max", "min", "nanmax", "nanmin",
                "compare_and_swap", "cas")

    def __enter__(self) -> None:
        from numba.cuda.simulator import kernel as sim_kernel
        from numba.cuda.simulator import kernelapi

        self._saved: list[tuple[Any, str, Any]] = []

        def wrap_atomic(orig: Callable) -> Callable:
            def atomic(*a: Any, **k: Any) -> Any:
                th = threading.current_thread()
                th._gpulab_atomic = True
                try:
                    return orig(*a, **k)
                finally:
                    th._gpulab_atomic = False
            return atomic

        for name in self._ATOMICS:
            orig = getattr(kernelapi.FakeCUDAAtomic, name, None)
            if orig is not None:
                self._saved.append((kernelapi.FakeCUDAAtomic, name, orig))
                setattr(kernelapi.FakeCUDAAtomic, name, wrap_atomic(orig))
        orig_sync = sim_kernel.BlockThread.syncthreads

        def syncthreads(th: Any) -> Any:
            th._gpulab_epoch = getattr(th, "_gpulab_epoch", 0) + 1
            return orig_sync(th)

        self._saved.append((sim_kernel.BlockThread, "syncthreads", orig_sync))
        sim_kernel.BlockThread.syncthreads = syncthreads


    def __exit__(self, *exc: Any) -> None:
        for owner, name, orig in reversed(self._saved):
            setattr(owner, name, orig)


def _first_conflict(log: list, same_block_only: bool, writes_only: bool) -> tuple | None:
    """Two accesses to one element by different threads, at least one a non-atomic write, with no
    barrier between them: same block and same epoch (or, for global memory, different blocks)."""
    by_elem: dict[tuple, list] = {}
    for kind, flat, block, thread, epoch, atomic in log:
        if writes_only and kind != "w":
            continue
        scope = (flat, block) if same_block_only else (flat,)
        by_elem.setdefault(scope, []).append((kind, block, thread, epoch, atomic, flat))
    for accesses in by_elem.values():
        writes = [a for a in accesses if a[0] == "w" and not a[4]]
        for w in writes:
            for o in accesses:
                if o[2] == w[2] and o[1] == w[1]:
                    continue  # same thread
                if o[0] == "w" and o[4] and w[4]:
                    continue  # both atomic
                if o[1] != w[1] or o[3] == w[3]:
                    return w, o
    return None


def _race_report(kernel: Any, case: Case, run_args: tuple, names: list[str]) -> str:
    """Run once in the simulator watching shared memory and the outputs; describe the first race:
    two threads touching one element, one of them writing (not atomically), with no cuda.syncthreads()
    between them. Returns '' when there is none."""
    from numba.cuda.simulator.cudadrv.devicearray import FakeCUDAArray

    outs, call = _host_call(case, run_args)
    griddim, blockdim = _launch_config(case, run_args, call)
    out_logs: dict[int, list] = {}
    out_ids = {id(o): k for k, o in enumerate(outs)}
    watched = []
    for arg in call:
        if isinstance(arg, np.ndarray) and id(arg) in out_ids and arg.ndim > 0:
            view = arg.view(_Watch)
            view._log = out_logs.setdefault(out_ids[id(arg)], [])
            watched.append(FakeCUDAArray(view))
        else:
            watched.append(arg)
    shared: dict = {}
    with _watch_simulator(), _shared_arrays(watch=shared):
        _run_with_deadline(lambda: kernel[griddim, blockdim](*watched), 60.0)
    launch = f"launch [{griddim}, {blockdim}]"
    verbs = {"r": "read", "w": "wrote"}
    for label, log, shape in shared.values():
        hit = _first_conflict(log, same_block_only=True, writes_only=False)
        if hit:
            w, o = hit
            elem = ", ".join(str(int(v)) for v in np.unravel_index(w[5], shape))
            return (f"shared memory race in block {w[1]}: thread {w[2]} wrote {label}[{elem}] and thread {o[2]} "
                    f"{verbs[o[0]]} it with no cuda.syncthreads() in between ({launch})")
    for k, log in out_logs.items():
        hit = _first_conflict(log, same_block_only=False, writes_only=True)
        if hit:
            w, o = hit
            idx = ", ".join(str(int(v)) for v in np.unravel_index(w[5], case.expected[k].shape))
            return (f"thread {w[2]} of block {w[1]} and thread {o[2]} of block {o[1]} both wrote "
                    f"{names[k]}[{idx}] without cuda.atomic and without a cuda.syncthreads() between them ({launch})")
    return ""


def _limit(value: Any, size: Size) -> float:
    return float(value(size) if callable(value) else value)


def _budget_checks(kernel: Any, budget: Budget, cases: list[Case], largest: int, run_args: tuple) -> list[Check]:
    from .trace import trace

    case = next((c for c in cases if c.size == budget.size), cases[largest]) if budget.size is not None else cases[largest]
    _, call = _host_call(case, run_args)
    griddim, blockdim = _launch_config(case, run_args, call)
    fn = _py_func(kernel)
    arg_names = list(inspect.signature(fn).parameters)
    shared: dict[int, int] = {}
    with _shared_arrays(nbytes=shared):
        log = trace(kernel, griddim, blockdim, *call, names=arg_names)
    checks = []
    where = f"traced at size {case.size!r}, launch [{griddim}, {blockdim}]"
    for arr, lim in budget.reads_per_element.items():
        limit = _limit(lim, case.size)
        worst = int(log.per_element(arr, "r").max()) if log.shapes.get(arr) and np.prod(log.shapes[arr]) else 0
        checks.append(Check(f"budget: reads of {arr}", worst <= limit,
                            f"each element of {arr} read from global memory at most {worst} times (limit {limit:g}; {where})",
                            "" if worst <= limit else f"stage {arr} in shared memory so that a block loads each "
                            "element once and its threads reuse it."))
    for kind, lim, label in (("r", budget.reads_per_thread, "reads"), ("w", budget.writes_per_thread, "writes")):
        if lim is None:
            continue
        limit = _limit(lim, case.size)
        worst = log.max_per_thread(kind)
        checks.append(Check(f"budget: global {label} per thread", worst <= limit,
                            f"at most {worst} global {label} by one thread (limit {limit:g}; {where})",
                            "" if worst <= limit else f"keep values in registers (local variables) instead of "
                            f"repeating global-memory {label}."))
    for arr, lim in budget.sectors.items():
        limit = _limit(lim, case.size)
        itemsize = log.itemsize[arr]
        ratios = []
        for kind in ("r", "w"):
            n = sum(1 for a in log.accesses if a.array == arr and a.kind == kind)
            if n:
                ideal = max(1.0, n * itemsize / 32)
                ratios.append(log.transactions(arr, kind) / ideal)
        worst_r = max(ratios, default=0.0)
        checks.append(Check(f"budget: coalescing of {arr}", worst_r <= limit,
                            f"{worst_r:.1f}x the ideal number of 32-byte sectors (limit {limit:g}x; {where})",
                            "" if worst_r <= limit else "neighbouring threads (threadIdx.x) should touch neighbouring "
                            "elements: in a C-order 2-D array that is the column index, so use "
                            "`j = cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x` for the column."))
    if budget.shared_bytes is not None:
        limit = _limit(budget.shared_bytes, case.size)
        used = sum(shared.values())
        checks.append(Check("budget: shared memory", used <= limit,
                            f"{used} bytes of shared memory per block (limit {limit:g})",
                            "" if used <= limit else "allocate only the tiles you need: TILE*TILE per input."))
    return checks


class _shared_arrays:
    """Stand in for the simulator's ``cuda.shared.array`` while active. Same meaning (one array per
    source line per launch, shared by the block, allocated under gpulab's lock: see
    :func:`gpulab.runtime.simulator_shared_array`) that optionally records each allocation's bytes
    (``nbytes``) or hands out arrays that log their accesses (``watch``: ``{(file, line): (variable
    name, log)}``)."""

    def __init__(self, nbytes: dict | None = None, watch: dict | None = None) -> None:
        self.nbytes, self.watch = nbytes, watch

    def __enter__(self) -> "_shared_arrays":
        import linecache

        from numba.cuda.simulator import kernelapi

        self._cls = kernelapi.FakeCUDAShared
        self._orig = self._cls.array
        orig, nbytes, watch = self._orig, self.nbytes, self.watch

        def array(shared: Any, shape: Any, dtype: Any, alignment: Any = None) -> np.ndarray:
            if shape == 0 or alignment is not None:
                return orig(shared, shape, dtype, alignment)
            caller = sys._getframe(1)
            key = (caller.f_code.co_filename, caller.f_lineno)

            def on_new(res: np.ndarray) -> np.ndarray:
                if watch is not None:
                    line = linecache.getline(key[0], key[1]).strip()
                    label = line.split("=")[0].strip() if "=" in line else f"shared array (line {key[1]})"
                    res = res.view(_Watch)
                    res._log, res._reads = [], True
                    watch[key] = (label, res._log, res.shape)
                if nbytes is not None:
                    nbytes[id(res)] = res.nbytes
                return res

            return runtime.simulator_shared_array(shared, key, shape, dtype, on_new)

        self._cls.array = array
        return self

    def __exit__(self, *exc: Any) -> None:
        self._cls.array = self._orig


def _ptx_check(kernel: Any, signature: str) -> Check:
    from .ptx import compile_source

    try:
        source = kernel_source(kernel)
    except (OSError, TypeError, ValueError) as exc:
        return Check("PTX", False, f"could not collect the kernel's source: {exc}")
    name = _py_func(kernel).__name__
    try:
        res = compile_source(source, name, signature, ccs=[(7, 5)])
    except Exception as exc:  # noqa: BLE001 - NVVM missing or the child failed: not the learner's fault
        return Check("PTX", True, "not checked: the PTX compiler (NVVM, from numba-cuda[cu12]) could not "
                     f"run here ({str(exc).splitlines()[0][:200]})")
    if res.get("7.5") == "ok":
        return Check("PTX", True, f"compiles to PTX for sm_75 as {signature}")
    err = res.get("error") or res.get("7.5", "")
    return Check("PTX", False, f"NVVM rejected the kernel ({signature}): {err[:800]}",
                 "the simulator runs any Python, a GPU does not: no lists, dicts, strings, or objects "
                 "inside a kernel; use arrays, numbers, math and cuda.* only.")


# --------------------------------------------------------------------------------------------------
# Grading support: `python -m gpulab labs grade` sets GPULAB_GRADE_LOG to collect every result.


def _log_result(res: CheckResult) -> None:
    path = os.environ.get("GPULAB_GRADE_LOG")
    if not path:
        return
    try:
        with open(path, "a", encoding="utf-8") as fh:
            fh.write(json.dumps(res.to_dict()) + "\n")
    except OSError:
        pass

