"""The diagnoses that name one specific mistake (``SPECIFIC`` in :mod:`.diagnose`): the result is what a known
mistake makes of it (the exercise's own named mistakes, a unit slip, the spec transposed, an input read transposed,
the last partial tile of K dropped, two inputs exchanged, a constant factor on one side of a branch), or the values
themselves say where they came from (the simulator's filler of unset shared/local memory, inf/NaN from an overflow).

Each check: ``(got, exp, atol, case, judge, name, unwritten) -> hint``, or "" when it does not apply; its function's
name is the ``kind`` :func:`.diagnose.diagnose_kind` reports. The generic ones (output untouched, elements never
written, an edge, a shift) are in :mod:`.diagnose`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from .. import runtime
from ..simulator.memory import filler_hint
from .compare import close, same
from .problem import Case
from .raised import EXP_LIMIT, largest_input
from .units import unit_factor_hint

if TYPE_CHECKING:
    from .diagnose import Judge

_TILES = (2, 4, 8, 16, 32, 64)


def _index(idx: tuple[int, ...]) -> str:
    return ", ".join(str(v) for v in idx)


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
