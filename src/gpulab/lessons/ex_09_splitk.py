"""Lesson 09's split-K exercise: the learner writes the body of a split-K matmul kernel (block (x, y, z) computes
tile (y, x) of C over slice z of K into ``partials[z]``), for conv1's weight gradient, (32 x 100,352) @ (100,352 x 9).
On an H200 (132 SMs, 2026-12-04) the kernels backend computed it with the register-tiled kernel (the whole 32 x 9 C
in ONE block): 10.9 ms a call in training, 63% of the summed per-op times of a step (make gpu-check's per-op
timing). Timed alone (the recording's ``gemm_shapes``, a diagnostic run: :func:`recorded_gemm_note`), lesson 04's
tiled kernel, whose C is 2 tiles of 16 x 16 (2 blocks), took 2.897 ms and cuBLAS 0.064 ms.

:func:`splitk_launch` is the given launcher (the learner's kernel, then the sum of the partials); :func:`blocks_of`
counts the blocks a launch starts, for the lesson's prediction and its simulator-mode measure. The reference is the
library's :func:`gpulab.kernels.splitk.matmul_splitk_kernel`. The hints read from the kernel's source (x taken as
the row, ``cuda.grid(3)`` unpacked into two names, ...) are in :mod:`.mistakes_09_splitk`.

Slice z covers the K tiles ``z * per`` to ``min(tiles, (z + 1) * per)`` with ``tiles = ceil(K / 16)`` and
``per = ceil(tiles / S)``: the last slices may be short or empty, and an empty slice writes zeros.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..exercises import Budget, Problem
from ..kernels._launch import ceil_div, count
from ..kernels.matmul import TILE
from ..kernels.splitk import matmul_splitk, matmul_splitk_kernel, splitk_grid
from .exercise import Exercise
from .mistakes_09_splitk import with_splitk_hints

__all__ = [
    "CONV1_WGRAD",
    "EXERCISES_LIST",
    "SIZES",
    "blocks_of",
    "recorded_gemm_note",
    "splitk_grid",
    "splitk_launch",
    "splitk_spec",
]

CONV1_WGRAD = (32, 100_352, 9)
"""(M, K, N) of conv1's weight gradient ``dout.T @ cols`` at batch 128: 32 filters, 128 x 28 x 28 positions, 3 x 3."""

# (M, K, N, S): sizes that are not multiples of the tile; K = 40 is 3 tiles in 8 slices (slices 3-7 are empty and
# must write zeros); K = 1; 5 tiles in 3 slices of 2, 2, 1 (a loop of two tiles: a missing second barrier races);
# one slice (the whole K); 4 tiles in 2 slices, S dividing the tiles (per = tiles // S + 1 is wrong only there).
SIZES = [(20, 70, 17, 3), (5, 40, 3, 8), (7, 1, 5, 4), (18, 33, 9, 1), (6, 64, 5, 2)]


def _bounds(K: int, slices: int, per: int | None = None, extra: int = 0, start: int = 0) -> list[tuple[int, int]]:
    """The tile range [t0, t1) of each slice (``per``, ``extra``, ``start``: the mistakes' other ranges), in elements
    of K."""
    tiles = ceil_div(K, TILE)
    per = ceil_div(tiles, slices) if per is None else per
    out = []
    for z in range(slices):
        t0, t1 = z * per + start, min(tiles, (z + 1) * per + extra)
        out.append((min(t0 * TILE, K), min(max(t1, t0) * TILE, K)))
    return out


def _partials(A: np.ndarray, B: np.ndarray, ranges: list[tuple[int, int]]) -> np.ndarray:
    a, b = A.astype(np.float64), B.astype(np.float64)
    return np.stack([a[:, k0:k1] @ b[k0:k1, :] for k0, k1 in ranges]).astype(np.float32)


def splitk_spec(A: np.ndarray, B: np.ndarray, slices: int) -> np.ndarray:
    """``partials[z] = A[:, k0:k1] @ B[k0:k1, :]`` over slice z's whole tiles of K (zeros for an empty slice)."""
    return _partials(A, B, _bounds(A.shape[1], slices))


def _inputs(size: tuple[int, int, int, int], rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, int]:
    M, K, N, S = size
    return rng.uniform(-1, 1, (M, K)).astype(np.float32), rng.uniform(-1, 1, (K, N)).astype(np.float32), S


def _launch(A: Any, B: Any, partials: Any) -> tuple[tuple[int, int, int], tuple[int, int]]:
    return splitk_grid(A.shape[0], B.shape[1], partials.shape[0]), (TILE, TILE)


def blocks_of(grid: Any) -> int:
    """The blocks a launch of ``grid`` (an int or a tuple of up to 3) starts: the product of its dimensions."""
    dims = (grid,) if isinstance(grid, int) else tuple(grid)
    return int(np.prod([int(d) for d in dims]))


def _fill_empty(A: np.ndarray, B: np.ndarray, slices: int) -> list[np.ndarray]:
    """An empty slice left as the harness filled it (NaN on the first run, the most negative float32 on the second)."""
    right = splitk_spec(A, B, slices)
    empty = [k0 == k1 for k0, k1 in _bounds(A.shape[1], slices)]
    if not any(empty):
        raise ValueError("no empty slice: this mistake gives the right result")
    outs = []
    for fill in (np.nan, np.finfo(np.float32).min):
        out = right.copy()
        out[empty] = fill
        outs.append(out)
    return outs


def _floor_per(A: np.ndarray, B: np.ndarray, slices: int) -> np.ndarray:
    tiles = ceil_div(A.shape[1], TILE)
    if tiles % slices == 0:
        raise ValueError("S divides the tiles: floor and ceiling agree")
    return _partials(A, B, _bounds(A.shape[1], slices, per=tiles // slices))


def _overlap(A: np.ndarray, B: np.ndarray, slices: int) -> np.ndarray:
    if slices == 1:
        raise ValueError("one slice: nothing to overlap")
    return _partials(A, B, _bounds(A.shape[1], slices, extra=1))


def _end_short(A: np.ndarray, B: np.ndarray, slices: int) -> np.ndarray:
    return _partials(A, B, _bounds(A.shape[1], slices, extra=-1))


def _start_late(A: np.ndarray, B: np.ndarray, slices: int) -> np.ndarray:
    return _partials(A, B, _bounds(A.shape[1], slices, start=1))


def _other_cuts(A: np.ndarray, B: np.ndarray, slices: int) -> list[np.ndarray]:
    """Other cuts of K whose partials add up to A @ B: slices of ceil(K / S) elements, per = tiles // S with the rest
    in the last slice, per = tiles // S + 1, every S-th tile."""
    K = A.shape[1]
    tiles, chunk, floor = ceil_div(K, TILE), ceil_div(K, slices), ceil_div(K, TILE) // slices
    by_elements = [(min(z * chunk, K), min((z + 1) * chunk, K)) for z in range(slices)]
    rest_last = [(z * floor * TILE, (z + 1) * floor * TILE) for z in range(slices - 1)]
    rest_last.append((min((slices - 1) * floor * TILE, K), K))
    a, b = A.astype(np.float64), B.astype(np.float64)
    every_sth = np.zeros((slices, A.shape[0], B.shape[1]))
    for t in range(tiles):
        every_sth[t % slices] += a[:, t * TILE : (t + 1) * TILE] @ b[t * TILE : (t + 1) * TILE, :]
    return [
        _partials(A, B, by_elements),
        _partials(A, B, rest_last),
        _partials(A, B, _bounds(K, slices, per=floor + 1)),
        every_sth.astype(np.float32),
    ]


def _whole_k(A: np.ndarray, B: np.ndarray, slices: int) -> np.ndarray:
    if slices == 1:
        raise ValueError("one slice: the whole K is right")
    return np.stack([_partials(A, B, [(0, A.shape[1])])[0]] * slices)


MISTAKES = {
    "an empty slice left partials[z] unwritten: when K has fewer tiles than the slices need (here some slices get "
    "no tile), the loop over the slice's tiles runs zero times, but partials is not zeroed for you. Write "
    "partials[z, i, j] = acc after the loop, outside it, whether or not it ran (acc starts at 0.0).": _fill_empty,
    "every slice summed the whole of K, so the launcher's sum counts each product S times. Block z adds up only "
    "its own tiles: `for t in range(z * per, min(tiles, (z + 1) * per)):` with z = cuda.blockIdx.z.": _whole_k,
    "the last tiles of K are missing: the slices got too few tiles each. Either per = tiles // S rounds down, so S "
    "slices of per tiles stop short of the end (and with fewer tiles than slices, per is 0): round up, per = "
    "(tiles + S - 1) // S, and stop the last slices at min(tiles, (z + 1) * per). Or S is not the number of "
    "slices: partials is (S, M, N), so S = partials.shape[0].": _floor_per,
    "neighbouring slices share a tile: slice z runs one tile too far, into slice z + 1's first one, so that tile "
    "is counted twice. range(t0, t1) already stops before t1 = (z + 1) * per: no + 1.": _overlap,
    "each slice stops one tile short, so its last tile is never added: range(t0, t1) already leaves t1 out, and "
    "slice z's last tile is (z + 1) * per - 1 without a - 1 of yours. Loop `for t in range(z * per, min(tiles, "
    "(z + 1) * per)):`.": _end_short,
    "each slice skips its first tile: slice z starts at tile z * per (slice 0 at tile 0), not one later. Loop `for t "
    "in range(z * per, min(tiles, (z + 1) * per)):`.": _start_late,
    "your slices add up to A @ B (the launcher's sum of the partials is right), but partials[z] is not slice z as "
    "the exercise cuts K, and the check compares each partials[z]: whole 16-wide tiles, per = (tiles + S - 1) // S "
    "of them a slice (tiles = ceil(K / 16), S = partials.shape[0]), slice z from tile z * per up to min(tiles, "
    "(z + 1) * per), the last slices short or empty. Not ceil(K / S) elements a slice, not per = tiles // S + 1 or "
    "the rest in the last slice, not every S-th tile.": _other_cuts,
}


def _problem() -> Problem:
    return Problem(
        "matmul_splitk_kernel",
        splitk_spec,
        _inputs,
        sizes=SIZES,
        args=lambda ins, outs: (ins[0], ins[1], outs[0]),  # the kernel gets (A, B, partials); S is partials.shape[0]
        launch=_launch,  # a 3-D grid: (C's column tiles, C's row tiles, S)
        ptx="auto",
        reduction=lambda A, B, S: A.shape[1],
        out_names=["partials"],
        # through shared tiles, as lesson 04's tiled kernel: each element of A loaded once per block column, of B
        # once per block row (a slice reads its own part of K only)
        budget=Budget(
            reads_per_element={"A": lambda s: ceil_div(s[2], TILE), "B": lambda s: ceil_div(s[0], TILE)},
            size=SIZES[0],
        ),
        mistakes=MISTAKES,
    )


def splitk_launch(kernel: Any, a: Any, b: Any, slices: int) -> Any:
    """``a @ b`` with ``kernel`` (a split-K kernel ``(A, B, partials)``) on the grid of :func:`splitk_grid` in
    16 x 16 blocks, then the partials summed over z (one thread per element of C, in a fixed order: the same result
    on every run). NumPy arrays in the simulator, CuPy arrays on a GPU. The lesson's given launcher."""
    slices = count("slices", slices, example="Use 262 for conv1's weight gradient on an H200, or 1 for no split.")
    return matmul_splitk(a, b, slices, kernel=kernel)


_KERNEL_NAMES = {
    "regtiled": "the register-tiled kernel",
    "tiled": "lesson 04's tiled kernel",
    "splitk": "split-K",
    "cupy": "CuPy's a @ b (cuBLAS)",
}


def recorded_gemm_note(shape: tuple[int, int, int] = CONV1_WGRAD, directory: Any = None) -> str:
    """The recorded times of the (M, K, N) product ``shape`` alone, kernel by kernel, read from the newest recording
    with section ``gemm_shapes`` (:mod:`gpulab.bench.gemm_shapes`), labelled with its device, date and source."""
    from .. import results

    M, K, N = shape
    rec = results.latest("gemm_shapes", directory=directory)
    rows = [r for r in rec.sections["gemm_shapes"] if (r["M"], r["K"], r["N"]) == (M, K, N)] if rec else []
    if rec is None or not rows:
        return (
            f"No recording of ({M}, {K}, {N}) in section gemm_shapes yet: `python -m gpulab bench lessons --only "
            "gemm_shapes --record` on a GPU makes one."
        )
    parts = []
    for r in rows:
        launch = [f"{r['blocks']:,} block{'s' if r['blocks'] != 1 else ''}"] if "blocks" in r else []
        launch += [f"{r['slices']} slices"] if "slices" in r else []
        where = f" ({', '.join(launch)})" if launch else ""
        parts.append(f"{_KERNEL_NAMES.get(r['kernel'], r['kernel'])} {r['seconds'] * 1e3:.3f} ms{where}")
    return f"({M} x {K:,}) @ ({K:,} x {N}) alone, {rec.label}, not this run: " + ", ".join(parts) + "."


_PROBLEM = _problem()
EXERCISES_LIST: list[Exercise] = [
    Exercise("09", "matmul_splitk", _PROBLEM, matmul_splitk_kernel, checker=with_splitk_hints(_PROBLEM))
]
