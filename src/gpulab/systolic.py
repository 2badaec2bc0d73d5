"""A cycle-level systolic array, the matrix unit of a TPU, small enough to watch (lesson 11).

An output-stationary array of R x C processing elements (PEs) computes C = A @ B for A (R x K) and
B (K x C). PE (i, j) owns one output c[i, j]. Rows of A enter from the left edge, row i delayed by i
clocks; columns of B enter from the top, column j delayed by j clocks. On every clock **every PE at
once** takes an ``a`` from its left neighbour (or the edge), a ``b`` from the neighbour above (or the
edge), adds ``a * b`` to its accumulator and latches both to pass them on at the next clock. A[i, s]
and B[s, j] meet in PE (i, j) at clock i + j + s, so the product takes R + C + K - 2 clocks.

The contrast with SIMT (lessons 01 and 03): there each thread loads both operands of every multiply
from memory; here each value is read from memory once, at the edge, and then travels from neighbour
to neighbour through registers. That is why a TPU needs so little memory bandwidth per FLOP.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any
from collections.abc import Callable

import numpy as np

from . import runtime
from .errors import UsageError

__all__ = [
    "SystolicRun",
    "check_step",
    "edge_inputs",
    "pe_step",
    "simt_reads",
    "systolic_matmul",
    "systolic_reads",
    "wavefront",
]

Step = Callable[[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray, np.ndarray]]


def pe_step(
    a_reg: np.ndarray, b_reg: np.ndarray, acc: np.ndarray, a_in: np.ndarray, b_in: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One clock of every PE: returns the new ``(a_reg, b_reg, acc)``, all R x C.

    ``a_reg[i, j]``, ``b_reg[i, j]``: what PE (i, j) latched last clock. ``a_in[i]`` enters row i at the left
    edge, ``b_in[j]`` enters column j at the top. Each PE takes ``a`` from its left neighbour and ``b`` from
    the one above, and accumulates their product.
    """
    a_new = np.empty_like(a_reg)
    a_new[:, 0] = a_in  # column 0 takes the edge input
    a_new[:, 1:] = a_reg[:, :-1]  # everyone else takes the left neighbour's latched a
    b_new = np.empty_like(b_reg)
    b_new[0, :] = b_in  # row 0 takes the edge input
    b_new[1:, :] = b_reg[:-1, :]  # everyone else takes the upper neighbour's latched b
    return a_new, b_new, acc + a_new * b_new


def edge_inputs(a: np.ndarray, b: np.ndarray, t: int) -> tuple[np.ndarray, np.ndarray]:
    """What enters the array at clock ``t``: ``a_in[i] = A[i, t - i]``, ``b_in[j] = B[t - j, j]`` (0 outside)."""
    r, k = a.shape
    c = b.shape[1]
    s_a = t - np.arange(r)
    s_b = t - np.arange(c)
    a_in = np.where((s_a >= 0) & (s_a < k), a[np.arange(r), np.clip(s_a, 0, k - 1)], 0).astype(a.dtype)
    b_in = np.where((s_b >= 0) & (s_b < k), b[np.clip(s_b, 0, k - 1), np.arange(c)], 0).astype(b.dtype)
    return a_in, b_in


def wavefront(r: int, c: int, k: int, t: int) -> np.ndarray:
    """R x C: which term s PE (i, j) multiplies at clock ``t`` (s = t - i - j), or -1 where it idles."""
    s = t - np.add.outer(np.arange(r), np.arange(c))
    return np.where((s >= 0) & (s < k), s, -1)


@dataclass
class SystolicRun:
    """The result of :func:`systolic_matmul`: the product, the clocks it took, and what happened each clock."""

    c: np.ndarray
    cycles: int
    busy: list[int] = field(default_factory=list)  # PEs doing a useful multiply-add, per clock
    frames: list[np.ndarray] = field(default_factory=list)  # accumulators after each clock (if kept)

    @property
    def utilization(self) -> float:
        """Useful multiply-adds / (PEs x clocks)."""
        pes = self.c.shape[0] * self.c.shape[1]
        return sum(self.busy) / (pes * self.cycles) if self.cycles else 0.0


def systolic_matmul(a: Any, b: Any, step: Step = pe_step, *, keep_frames: bool = False) -> SystolicRun:
    """C = A @ B on an R x C array clocked ``R + C + K - 2`` times with ``step`` (default :func:`pe_step`)."""
    a = np.asarray(runtime.to_host(a), dtype=np.float32)
    b = np.asarray(runtime.to_host(b), dtype=np.float32)
    if a.ndim != 2 or b.ndim != 2 or a.shape[1] != b.shape[0] or 0 in a.shape + b.shape:
        raise UsageError(
            f"systolic_matmul needs A (R x K) and B (K x C) with K matching and no empty axis, got "
            f"{a.shape} and {b.shape}."
        )
    r, k = a.shape
    c = b.shape[1]
    a_reg = np.zeros((r, c), np.float32)
    b_reg = np.zeros((r, c), np.float32)
    acc = np.zeros((r, c), np.float32)
    cycles = r + c + k - 2
    run = SystolicRun(acc, cycles)
    for t in range(cycles):
        a_in, b_in = edge_inputs(a, b, t)
        a_reg, b_reg, acc = (np.asarray(x, dtype=np.float32) for x in step(a_reg, b_reg, acc, a_in, b_in))
        if acc.shape != (r, c):
            raise UsageError(f"the step returned an accumulator of shape {acc.shape}; it must stay {(r, c)}.")
        run.busy.append(int((wavefront(r, c, k, t) >= 0).sum()))
        if keep_frames:
            run.frames.append(acc.copy())
    run.c = acc
    return run


def systolic_reads(r: int, c: int, k: int) -> int:
    """Values read from memory by the array: each of A's and B's values once, at the edge."""
    return r * k + k * c


def simt_reads(r: int, c: int, k: int) -> int:
    """Values read from global memory by lesson 03's naive kernel: two per multiply-add."""
    return 2 * r * c * k


def _step_spec(a_reg: np.ndarray, b_reg: np.ndarray, acc: np.ndarray, a_in: np.ndarray, b_in: np.ndarray) -> tuple:
    return pe_step(a_reg, b_reg, acc, a_in, b_in)


def _step_inputs(shape: tuple[int, int], rng: np.random.Generator) -> tuple[np.ndarray, ...]:
    r, c = shape
    f = lambda *s: np.asarray(rng.uniform(-1, 1, size=s), dtype=np.float32)  # noqa: E731
    return f(r, c), f(r, c), f(r, c), f(r), f(c)


def _in_place(a_reg: np.ndarray, a_in: np.ndarray, b_in: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(a_reg, b_reg) of a step that overwrites its registers in order (left to right, top to bottom): each PE
    reads its neighbour's new value, so the edge inputs fill whole rows and columns in one clock."""
    r, c = a_reg.shape
    return np.repeat(a_in.reshape(r, 1), c, axis=1), np.repeat(b_in.reshape(1, c), r, axis=0)


def _backwards(a_reg: np.ndarray, b_reg: np.ndarray, a_in: np.ndarray, b_in: np.ndarray) -> list[np.ndarray]:
    """a_reg and b_reg of a step that shifts the wrong way (np.roll by -1): a enters at the right edge and moves
    left, b enters at the bottom and moves up. A list: whichever of the two goes wrong first."""
    a_new, b_new = np.roll(a_reg, -1, axis=1), np.roll(b_reg, -1, axis=0)
    a_new[:, -1], b_new[-1, :] = a_in, b_in
    return [a_new, b_new]


def _swapped_a(a_reg: np.ndarray, a_in: np.ndarray) -> np.ndarray:
    """a_reg of a step that sends a down the columns (and b along the rows)."""
    a_new = np.empty_like(a_reg)
    a_new[0, :], a_new[1:, :] = a_in, a_reg[:-1, :]
    return a_new


def _probe_step(step: Step) -> str:
    """Which mistake ``step`` makes on a 3 x 3 probe (on copies: it may write into its arguments): "in place",
    "swapped", or "" (neither, or it fails)."""
    a_reg, b_reg, acc, a_in, b_in = _step_inputs((3, 3), np.random.default_rng(11))
    try:
        got = step(a_reg.copy(), b_reg.copy(), acc.copy(), a_in.copy(), b_in.copy())
        a_got, b_got = (np.asarray(x, dtype=np.float32) for x in got[:2])
    except Exception:  # noqa: BLE001 - the learner's step: a failure here names no mistake
        return ""
    a_new, b_new, _ = pe_step(a_reg, b_reg, acc, a_in, b_in)
    a_ip, b_ip = _in_place(a_reg, a_in, b_in)
    if (a_got.shape == a_ip.shape and np.allclose(a_got, a_ip)) or (
        np.allclose(a_got, a_new) and b_got.shape == b_ip.shape and np.allclose(b_got, b_ip)
    ):
        return "in place"
    return "swapped" if a_got.shape == a_new.shape and np.allclose(a_got, _swapped_a(a_reg, a_in)) else ""


# The square case first: a step that sends a down and b right fails there with its named mistake, where on a single
# row it crashes (a_in's R values do not fit a row of C PEs); then 1 x 1, a single row, a single column, non-square.
SIZES = [(3, 3), (1, 1), (1, 5), (4, 1), (4, 6)]


def check_step(
    step: Step, *, points: float = 1, sizes: list[tuple[int, int]] | None = None, trusted: bool = False
) -> Any:
    """Check a learner's one-clock ``step`` (same contract as :func:`pe_step`) with :mod:`gpulab.exercises`.

    Sizes include 1 x 1, a single row, a single column and non-square arrays. ``trusted``: ``step`` is
    gpulab's own :func:`pe_step` (see :func:`gpulab.exercises.check.run_problem`).
    """
    from .exercises import check_kernel

    def run_step(a_reg, b_reg, acc, a_in, b_in, a_out, b_out, acc_out):  # noqa: ANN001
        host = [np.asarray(runtime.to_host(x)) for x in (a_reg, b_reg, acc, a_in, b_in)]
        got = step(*host)
        got = tuple(got) if isinstance(got, list) else got  # [a_reg, b_reg, acc] is the same three arrays
        if not isinstance(got, tuple) or len(got) != 3:
            raise UsageError(
                f"{getattr(step, '__name__', 'step')} must return (a_reg, b_reg, acc), got {type(got).__name__}"
            )
        for out, value in zip((a_out, b_out, acc_out), got):
            out[...] = runtime.array_module(out).asarray(np.asarray(value, dtype=np.float32))

    run_step.__name__ = getattr(step, "__name__", "step")
    old_acc = lambda a_reg, b_reg, acc, a_in, b_in: acc + a_reg * b_reg  # noqa: E731  (mistakes give the first wrong output)
    seen: list[str] = []  # what the step does on a square probe, found once: "in place", "swapped" or ""

    def probed(kind: str) -> None:
        """Raises (the named mistake does not apply) unless ``step`` makes mistake ``kind`` on a 3 x 3 probe: on a
        single row, registers updated in place and a and b swapped give the same a_reg."""
        if not seen:
            seen.append(_probe_step(step))
        if seen[0] != kind:
            raise ValueError(f"not {kind}")

    def in_place(a_reg, b_reg, acc, a_in, b_in):  # noqa: ANN001  (a_reg or b_reg, whichever goes wrong first)
        probed("in place")
        return list(_in_place(a_reg, a_in, b_in))

    def swapped(a_reg, b_reg, acc, a_in, b_in):  # noqa: ANN001  (a_reg, the first output that goes wrong)
        probed("swapped")
        return _swapped_a(a_reg, a_in)

    def backwards(a_reg, b_reg, acc, a_in, b_in):  # noqa: ANN001  (a_reg or b_reg, whichever goes wrong first)
        return _backwards(a_reg, b_reg, a_in, b_in)

    return check_kernel(
        step,
        _step_spec,
        inputs=_step_inputs,
        host=run_step,
        name=run_step.__name__,
        sizes=sizes or SIZES,
        out_names=["a_reg", "b_reg", "acc"],
        rtol=1e-6,
        atol=1e-6,
        points=points,
        trusted=trusted,
        race_check=False,  # a plain NumPy function: no threads whose schedule could matter
        mistakes={
            "the accumulator used last clock's latched a and b: multiply the values that arrive this clock "
            "(from the left neighbour / the edge and from above).": old_acc,
            "a travels down and b right here: a enters at the left edge (column 0) and moves right along "
            "its row; b enters at the top (row 0) and moves down its column.": swapped,
            "a_in reached every column of its row in one clock (and b_in every row of its column): either the edge "
            "input was copied into the whole row (or column) instead of entering at the edge, or the registers were "
            "updated in place, so PE (i, j) read a neighbour's value that was already overwritten this clock. Every "
            "PE except the edge ones takes its neighbour's value latched last clock: build new arrays from the old "
            "ones (each shifted by one slice of the old registers, the edge input in the first column or row) and "
            "return those.": in_place,
            "the values move the wrong way: a enters at the right edge and moves left (b at the bottom, moving up). "
            "a enters at the left edge, column 0, and each PE takes the a of its left neighbour (column j - 1); b "
            "enters at the top, row 0, and each PE takes the b of the one above (row i - 1).": backwards,
        },
    )
