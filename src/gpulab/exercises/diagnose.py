"""Naming the mistake behind a wrong result, in the kernel's own words.

Each diagnosis compares what the kernel produced with what a known mistake would produce (the spec
transposed, an input read transposed, the last partial tile of K dropped, ...) or looks at the kind
of damage (elements never written, inf/NaN, one element off at an edge, a shift by one). An exception
raised by the learner's code (or by gpulab's code it called) is explained in :mod:`.raised`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any
from collections.abc import Callable

import numpy as np

from .. import runtime
from ..simulator.memory import filler_hint
from .compare import close, same
from .problem import Case
from .raised import EXP_LIMIT, exception_verdict, largest_input, thread_inside
from .units import unit_factor_hint

__all__ = ["SPECIFIC", "Judge", "diagnose", "diagnose_kind", "exception_verdict", "thread_inside"]

_TILES = (2, 4, 8, 16, 32, 64)


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


def _index(idx: tuple[int, ...]) -> str:
    return ", ".join(str(v) for v in idx)


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


def _named_mistake(got: Any, exp: Any, atol: Any, case: Case, judge: Judge, name: str, unwritten: Any) -> str:
    for hint, wrong in judge.mistakes.items():
        try:
            made = wrong(*case.inputs)
        except Exception:  # noqa: BLE001 - a mistake spec that does not apply to this input
            continue
        for alt in made if isinstance(made, list) else [made]:  # a list: the outputs the mistake can give, any one
            alt = np.asarray(alt)
            if alt.shape == got.shape and same(got, alt.astype(got.dtype), judge.rtol, atol):
                return hint
    return ""


def _unit_factor(got: Any, exp: Any, atol: Any, case: Case, judge: Judge, name: str, unwritten: Any) -> str:
    return "" if unwritten.any() else unit_factor_hint(got, exp, judge.rtol, atol, name)  # kWh as Wh, ...


def _unset_memory(got: Any, exp: Any, atol: Any, case: Case, judge: Judge, name: str, unwritten: Any) -> str:
    if not runtime.is_simulator():  # only the simulator fills new shared/local arrays: on a GPU a match is chance
        return ""
    return filler_hint(got, exp, name, judge.rtol, atol)  # shared/local memory read before it was set


def _transposed(got: Any, exp: Any, atol: Any, case: Case, judge: Judge, name: str, unwritten: Any) -> str:
    if exp.ndim != 2 or min(exp.shape) < 2:
        return ""
    atol_t = atol.T if np.ndim(atol) else atol
    if exp.shape[0] == exp.shape[1] and same(got, exp.T, judge.rtol, atol_t):
        return (
            f"the result equals the expected one transposed: row and column are swapped. With "
            f"`j, i = cuda.grid(2)`, i is the row ({name}.shape[0]) and j the column ({name}.shape[1])."
        )
    atol_f = atol_t.reshape(exp.shape[::-1]) if np.ndim(atol) else atol
    if exp.shape[0] != exp.shape[1] and same(got.reshape(exp.shape[::-1]), exp.T, judge.rtol, atol_f):
        return (
            f"{name} holds the expected result transposed, laid out as a {exp.shape[1]}x{exp.shape[0]} "
            f"array: row and column are swapped where {name} is written (write {name}[i, j] with i the row, "
            f"< {name}.shape[0], and j the column, < {name}.shape[1])."
        )
    return ""


def _input_transposed(got: Any, exp: Any, atol: Any, case: Case, judge: Judge, name: str, unwritten: Any) -> str:
    for k, x in enumerate(case.inputs):
        if not (isinstance(x, np.ndarray) and x.ndim == 2 and x.shape[0] == x.shape[1] > 1):
            continue
        ins = list(case.inputs)
        ins[k] = np.ascontiguousarray(x.T)
        try:
            alt = judge.spec(*ins)
            alt = np.asarray(alt[0] if isinstance(alt, tuple) else alt)
        except Exception:  # noqa: BLE001
            continue
        if alt.shape == got.shape and same(got, alt.astype(got.dtype), judge.rtol, atol):
            arg = judge.input_name(k)
            r, c = ("r", "c") if arg.lower() in ("j", "k") else ("j", "k")  # no index named like the array (k[j, k])
            return (
                f"the result is what you get with {arg} transposed: {arg}'s two indices are swapped where "
                f"it is read (e.g. {arg}[{r}, {c}] for {arg}[{c}, {r}]). On non-square inputs this reads the wrong "
                "elements or past the end."
            )
    return ""


def _partial_tile(got: Any, exp: Any, atol: Any, case: Case, judge: Judge, name: str, unwritten: Any) -> str:
    ins = case.inputs
    if len(ins) < 2 or not all(isinstance(x, np.ndarray) and x.ndim == 2 for x in ins[:2]):
        return ""
    a, b = ins[0], ins[1]
    k = a.shape[1]
    if b.shape[0] != k:
        return ""
    tiles = (
        "the last partial tile of K is dropped (`range(K // TILE)`?). Loop over ceil(K / TILE) tiles, "
        "`(K + TILE - 1) // TILE`, and load 0.0 into the tile where the index k + tx (or k + ty) is >= K."
    )
    # k - 1 first: a plain loop that stops one short (`range(K - 1)`), then what dropping a partial tile leaves
    candidates = [k - 1] + [k // tile * tile for tile in sorted(_TILES, reverse=True) if not (k < tile // 2)]
    for kept in dict.fromkeys(c for c in candidates if 0 <= c < k):
        a2, b2 = a.copy(), b.copy()
        a2[:, kept:] = 0
        b2[kept:, :] = 0
        try:
            alt = judge.spec(a2, b2, *ins[2:])
            alt = np.asarray(alt[0] if isinstance(alt, tuple) else alt)
        except Exception:  # noqa: BLE001
            return ""
        if alt.shape == got.shape and same(got, alt.astype(got.dtype), judge.rtol, atol):
            what = f"sums only the first {kept} of K = {k} terms" if kept else f"sums none of the K = {k} terms"
            if kept == k - 1:
                return (
                    f"the result {what}: the loop over k stops one short (`range(K - 1)`? it must run K times, "
                    f"`range(A.shape[1])`), or, in a tiled kernel, {tiles}"
                )
            return f"the result {what}{' (K is smaller than a tile)' if not kept else ''}: {tiles}"
    return ""


def _non_finite(got: Any, exp: Any, atol: Any, case: Case, judge: Judge, name: str, unwritten: Any) -> str:
    if not np.issubdtype(exp.dtype, np.inexact):
        return ""
    computed = ~np.isfinite(got) & np.isfinite(exp) & ~unwritten
    if not computed.any():
        return ""
    big = largest_input(case)
    first = tuple(int(v) for v in np.argwhere(computed)[0])
    what = "inf" if np.isinf(got[first]) else "nan"
    masked = any(
        isinstance(x, np.ndarray) and np.issubdtype(x.dtype, np.floating) and bool(np.isneginf(x).any())
        for x in case.inputs
    )
    if what == "nan" and masked:  # -inf in the input (a mask): -inf - (-inf) is the likelier source of the nan
        return (
            f"{name}[{_index(first)}] is nan where a finite value is expected, and the input holds -inf (masked "
            "entries): -inf - (-inf) is nan. That happens in exp(m_old - m_new) or exp(x - m) while a running "
            "maximum is still -inf (a row that starts with masked entries). Skip the update until the maximum is "
            "finite (`if new_max != -math.inf:`): a masked entry adds nothing to the sum (exp(-inf) = 0)."
        )
    if big > EXP_LIMIT:
        return (
            f"{name}[{_index(first)}] is {what} where a finite value is expected, and the inputs reach "
            f"|x| = {big:g}. If your code takes exp: exp(x) overflows float32 above x = 88.7 (inf, then inf/inf = "
            "nan). For softmax subtract the row's maximum before exp: softmax(x) = exp(x - max(x)) / "
            "sum(exp(x - max(x))). Otherwise look for a product or a sum past float32's range (3.4e38; float16 ends "
            "at 65504), a division by zero or inf - inf."
        )
    return (
        f"{name}[{_index(first)}] is {what} where a finite value is expected: an overflow, a division by "
        "zero, inf - inf (e.g. exp(m_old - m_new) while a running maximum is still -inf: skip the update "
        "until it is finite), or a value read before it was written: in the simulator cuda.shared.array and "
        "cuda.local.array start as nan (on a GPU, as whatever was in memory), so set every element you read "
        "(e.g. `acc[t] = 0.0` before a loop, 0.0 into a tile where it hangs over the edge)."
    )


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


def _inputs_swapped(got: Any, exp: Any, atol: Any, case: Case, judge: Judge, name: str, unwritten: Any) -> str:
    """The result is the spec's with two same-shaped inputs exchanged (saxpy's ``alpha * y + x``)."""
    if unwritten.any():
        return ""
    arrays = [k for k, x in enumerate(case.inputs) if isinstance(x, np.ndarray) and x.size]
    for n, k1 in enumerate(arrays):
        for k2 in arrays[n + 1 :]:
            a, b = case.inputs[k1], case.inputs[k2]
            if a.shape != b.shape or a.dtype != b.dtype:
                continue
            ins = list(case.inputs)
            ins[k1], ins[k2] = b, a
            try:
                alt = judge.spec(*ins)
                alt = np.asarray(alt[0] if isinstance(alt, tuple) else alt)
            except Exception:  # noqa: BLE001
                continue
            if alt.shape != got.shape or same(alt.astype(got.dtype), exp, judge.rtol, atol):
                continue  # a spec symmetric in the two: exchanging them explains nothing
            if same(got, alt.astype(got.dtype), judge.rtol, atol):
                n1, n2 = judge.input_name(k1), judge.input_name(k2)
                return (
                    f"{name} is what you get with {n1} and {n2} exchanged: each is read where the other belongs. "
                    f"Check the formula against the exercise's, and that the kernel's parameters come in the order "
                    f"the check passes them ({', '.join(judge.in_names)}, then the output)."
                )
    return ""


def _factor_by_sign(got: Any, exp: Any, atol: Any, case: Case, judge: Judge, name: str, unwritten: Any) -> str:
    """An elementwise result off by one constant factor where the input is > 0, or where it is <= 0 (a branch on
    the input's sign with the wrong formula, or the two branches swapped)."""
    arrays = [x for x in case.inputs if isinstance(x, np.ndarray)]
    if unwritten.any() or len(arrays) != 1 or arrays[0].shape != exp.shape:
        return ""
    x = arrays[0]
    if not np.issubdtype(x.dtype, np.floating) or not np.issubdtype(exp.dtype, np.floating):
        return ""
    k = next(i for i, v in enumerate(case.inputs) if v is x)
    arg = judge.input_name(k, "the input")
    ok = close(got, exp, judge.rtol, atol)
    said, factors = [], []
    for part, where in ((x > 0, "> 0"), (x <= 0, "<= 0")):
        n = int(part.sum())
        if not n:
            continue
        count = f"{n} element{'s' if n > 1 else ''}"
        if ok[part].all():
            said.append(f"where {arg} {where} ({count}) it is right")
            continue
        sel = part & (np.abs(exp) > 1e-6)
        if n < 2 or int(sel.sum()) != n:  # one element: any wrong value is "a factor"; a zero expected: none to tell
            return ""
        ratio = got[sel].astype(np.float64) / exp[sel].astype(np.float64)
        f = float(np.median(ratio))
        if not np.isfinite(f) or abs(f) < 1e-6 or not np.allclose(ratio, f, rtol=1e-3) or abs(f - 1.0) < 1e-3:
            return ""  # a factor of 0 is "nothing computed", not a formula off by a factor
        factors.append(f)
        said.append(f"where {arg} {where} ({count}) it is {f:.4g} times the expected value")
    if not factors:
        return ""
    if len(factors) == 2 and abs(factors[0] / factors[1] - 1.0) < 1e-3:
        return (
            f"{name} is {factors[0]:.4g} times the expected value everywhere: a constant factor in the formula is off."
        )
    swapped = len(factors) == 2 and abs(factors[0] * factors[1] - 1.0) < 1e-2
    return (
        f"{name} is off by a constant factor: {'; '.join(said)}. Check the formula of each branch of your condition "
        f"on {arg}" + (": the two branches look swapped (each side got the other's formula)." if swapped else ".")
    )
