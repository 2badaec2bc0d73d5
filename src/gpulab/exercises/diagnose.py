"""Naming the mistake behind a wrong result, in the kernel's own words.

:func:`diagnose_kind` runs the diagnoses in turn and takes the first that applies. Those that name one specific
mistake (what a known mistake would make of the result: the spec transposed, an input read transposed, the last
partial tile of K dropped, inf/NaN from an overflow, ...) are in :mod:`.specific`; this module holds the
:class:`Judge` they are given and the generic ones, which look at the kind of damage (output untouched, elements
never written, one element off at an edge, a shift by one). An exception raised by the learner's code (or by
gpulab's code it called) is explained in :mod:`.raised`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any
from collections.abc import Callable

import numpy as np

from .compare import close, same
from .problem import Case
from .specific import (
    _factor_by_sign,
    _index,
    _input_transposed,
    _inputs_swapped,
    _named_mistake,
    _non_finite,
    _partial_tile,
    _transposed,
    _unit_factor,
    _unset_memory,
)

__all__ = ["SPECIFIC", "Judge", "diagnose", "diagnose_kind"]


@dataclass
class Judge:
    """What a diagnosis needs to know about the exercise."""

    spec: Callable[..., Any]
    rtol: float
    in_names: list[str]
    mistakes: dict[str, Callable[..., Any]] = field(default_factory=dict)
    fan_in: dict[str, float] = field(default_factory=dict)
    """Each output's ratio of the largest input's size to its own, in the check's largest case: a reduction's (its
    whole input, or a block's worth per element) is large; a per-element exercise's is near 1 there, even when a
    small case has one output element (a 1 x 1 convolution, a 2 x 2 pool)."""

    def input_name(self, k: int, unnamed: str = "") -> str:
        """The name of input ``k`` (the kernel's parameter), else ``unnamed`` (default: "input k")."""
        return self.in_names[k] if k < len(self.in_names) else unnamed or f"input {k}"


def _scalar(x: Any) -> str:
    if isinstance(x, (np.floating, float)) and np.isfinite(x):
        return f"{float(x):.8g}"
    return repr(x.item()) if hasattr(x, "item") else repr(x)


# The kinds (function names) of :mod:`.specific`'s checks: a diagnosis by one of them names the mistake, so the
# explanation adds no guess after it ("correct on square inputs").
SPECIFIC = (
    "_named_mistake",
    "_unit_factor",
    "_unset_memory",
    "_transposed",
    "_input_transposed",
    "_partial_tile",
    "_non_finite",
    "_inputs_swapped",
    "_factor_by_sign",
)


def diagnose(
    got: np.ndarray, exp: np.ndarray, atol: Any, case: Case, judge: Judge, name: str, never_written: np.ndarray | None
) -> tuple[str, str]:
    """(message, hint) for an output ``name`` that differs from the spec. ``never_written`` marks the
    elements the kernel did not write (None when that cannot be known, e.g. with ``out_init``)."""
    msg, hint, _ = diagnose_kind(got, exp, atol, case, judge, name, never_written)
    return msg, hint


def diagnose_kind(
    got: np.ndarray, exp: np.ndarray, atol: Any, case: Case, judge: Judge, name: str, never_written: np.ndarray | None
) -> tuple[str, str, str]:
    """:func:`diagnose` and which check named the mistake ("" when none did; see ``SPECIFIC``)."""
    ok = close(got, exp, judge.rtol, atol)
    bad = np.argwhere(~ok)
    first = tuple(int(v) for v in bad[0]) if len(bad) else ()
    n_bad, total = int((~ok).sum()), int(exp.size)
    msg = (
        f"{name}[{_index(first) or '?'}]: expected {_scalar(exp[first])}, got {_scalar(got[first])} "
        f"({n_bad} of {total} elements wrong)"
    )
    unwritten = never_written if never_written is not None else np.zeros(got.shape, bool)
    for check in (
        _untouched,
        _named_mistake,
        _unit_factor,
        _unset_memory,
        _transposed,
        _input_transposed,
        _partial_tile,
        _non_finite,
        _never_written,
        _inputs_swapped,
        _factor_by_sign,
        _edges,
        _shifted,
    ):
        hint = check(got, exp, atol, case, judge, name, unwritten)
        if hint:
            return msg, hint, check.__name__
    return msg, "", ""


REDUCTION_FAN_IN = 16
"""How many input values per output element, at least, in a check's largest case, make an output a reduction's
(the course's blocks have 32 threads or more; a 2 x 2 pool has 4, a convolution's large case about 1)."""


# Each check: (got, exp, atol, case, judge, name, unwritten) -> a hint, or "" when it does not apply.


def _untouched(got: Any, exp: Any, atol: Any, case: Case, judge: Judge, name: str, unwritten: Any) -> str:
    if not (unwritten.size and unwritten.all()):
        return ""
    largest_input = max((x.size for x in case.inputs if isinstance(x, np.ndarray)), default=0)
    if exp.size == 1 and largest_input > 1:  # many inputs, one result: the final write never happened
        scanned = _scanned_input(case, judge)
        if scanned:  # a scan's block total: its last thread writes it, and a guard on the length keeps that one out
            return SCAN_TOTAL_HINT.format(name=name, x=scanned, n=largest_input)
        if judge.fan_in.get(name, math.inf) >= REDUCTION_FAN_IN:  # else a per-element output's small case
            return (
                f"nothing was written to {name}, whose one element sums up (or reduces) {largest_input:,} input "
                "values. A reduction's result is written once: by one thread after the tree (`if tx == 0:` after the "
                f"last `cuda.syncthreads()`), or by every thread with `cuda.atomic.add({name}, 0, v)`. Check that this "
                f"write is reached: not inside a guard on {name}'s size (`if i < {name}.size:` lets only thread 0 "
                f"through), not after a `return`. And {name} is not zeroed for you: accumulate in a local variable, "
                "then write it."
            )
    if exp.size == 1:
        first = (
            "Does thread (0, 0) of block (0, 0) compute element [0, 0] (`j, i = cuda.grid(2)`)?"
            if exp.ndim == 2
            else "Does thread 0 of block 0 compute index 0 (`cuda.grid(1)` is blockIdx.x * blockDim.x + threadIdx.x)?"
        )
        return (
            f"nothing was written to {name} for a single element. Does the kernel assign to {name} (a kernel "
            f"cannot return a result: write it into {name}, and do not `return` before that)? {first} Is the "
            "bounds guard too strict (`i < n - 1`?): thread 0 has work when n == 1."
        )
    return f"output untouched: did the kernel write to {name}?"


SCAN_TOTAL_HINT = (
    "nothing was written to {name}, which holds each block's total of the scan. After the scan's last "
    "cuda.syncthreads() that total is the block's last scanned value, held by the block's last thread: write it "
    "from that thread (`if tx == cuda.blockDim.x - 1: {name}[cuda.blockIdx.x] = ...`), outside the guard on the "
    "length. Here {n} values run in a block with more threads, so `if i < {x}.size:` (or a guard on the scan's "
    "output) keeps the last thread out; past the end it loaded 0.0, so its scanned value is still the block's "
    "total. Not after a `return` either."
)


def _scanned_input(case: Case, judge: Judge) -> str:
    """The name of the input whose running sum another expected output starts with (a scan that also writes each
    block's total), or ""."""
    for k, x in enumerate(case.inputs):
        if not (isinstance(x, np.ndarray) and x.ndim == 1 and x.size > 1 and np.issubdtype(x.dtype, np.floating)):
            continue
        head = min(x.size, 16)
        running = np.cumsum(x[:head], dtype=np.float64)
        for e in case.expected:
            if e.ndim == 1 and e.size == x.size and np.allclose(e[:head], running, rtol=1e-4, atol=1e-5):
                return judge.input_name(k)
    return ""


def _never_written(got: Any, exp: Any, atol: Any, case: Case, judge: Judge, name: str, unwritten: Any) -> str:
    if not unwritten.any():
        return ""
    n_un = int(unwritten.sum())
    flat = np.flatnonzero(unwritten.ravel())
    where = np.unravel_index(int(flat[0]), got.shape)
    where_s = tuple(int(v) for v in where) if got.ndim > 1 else int(where[0])
    if got.ndim == 1 and n_un == 1 and flat[0] == got.size - 1:
        return (
            "the last element was never written: off-by-one in the bounds guard "
            "(`i < n - 1` or `i <= n - 2`?) or in the number of blocks."
        )
    return (
        f"{n_un} elements of {name} were never written (first: {where_s}). Does the grid "
        "cover every element (blocks = ceil(n / threads))? Is the guard too strict? Does each thread "
        "compute its own index (no two threads the same)? With a fixed grid, loop with a grid stride: "
        "`for i in range(start, n, cuda.gridsize(1))`."
    )


def _edges(got: Any, exp: Any, atol: Any, case: Case, judge: Judge, name: str, unwritten: Any) -> str:
    flat_ok = close(got, exp, judge.rtol, atol).ravel()
    # with two elements, either one is at an edge: no evidence of an off-by-one (e.g. a step time for 1 and N GPUs);
    # nor in an output with hardly any interior (a 2x3 pool has none: any wrong element is at an edge, and the last
    # only by chance): at least two interior elements, right, make an edge that alone is wrong a pattern
    interior = int(np.prod([max(d - 2, 0) for d in exp.shape])) if exp.ndim else 0
    if flat_ok.size > 2 and interior >= 2 and int((~flat_ok).sum()) == 1 and (not flat_ok[0] or not flat_ok[-1]):
        which = "first" if not flat_ok[0] else "last"
        return f"only the {which} element is wrong: an off-by-one at the edge (a boundary case)."
    return ""


def _shifted(got: Any, exp: Any, atol: Any, case: Case, judge: Judge, name: str, unwritten: Any) -> str:
    g, e = got.ravel(), exp.ravel()
    atol_s = float(np.max(atol)) if np.ndim(atol) else atol
    if e.size > 2 and (same(g[1:], e[:-1], judge.rtol, atol_s) or same(g[:-1], e[1:], judge.rtol, atol_s)):
        return "the output is shifted by one element: an off-by-one in the index (i + 1 or i - 1?)."
    return ""
