"""Helpers shared by the lab problem modules: launch shapes and the list of every problem."""

from __future__ import annotations

import numbers
from typing import Any
from collections.abc import Callable

import numpy as np

from ..exercises import Problem
from ..kernels._launch import LaunchError, blocks_for, check_launch, count, threads_2d

__all__ = ["LABS", "all_problems", "grid_2d", "launch_2d", "launch_1d", "pad_to_blocks"]

LABS = ("lab01", "lab02", "lab03", "lab04", "lab05", "lab06", "lab07", "lab08", "lab10", "lab12")


def grid_2d(rows: int, cols: int, block: tuple[int, int]) -> tuple[tuple[int, int], tuple[int, int]]:
    """``(griddim, blockdim)`` for one thread per element of a ``rows x cols`` array: x along the
    columns (the contiguous axis), y along the rows: ``(ceil(cols / bx), ceil(rows / by))``."""
    bx, by = block
    return (blocks_for(cols, bx), blocks_for(rows, by)), (bx, by)


def launch_2d(block: tuple[int, int], arg: int = -1) -> Callable[..., tuple[Any, Any]]:
    """A ``launch=`` function: one thread per element of the kernel's argument number ``arg``
    (default: the last, the output), x along its columns. ``block`` is a pair of whole numbers, e.g. ``(32, 4)``."""
    block = threads_2d(block)
    check_launch(1, block)
    arg = _arg_index(arg)

    def launch(*args: Any) -> tuple[Any, Any]:
        a = args[arg]
        return grid_2d(a.shape[0], a.shape[1], block)

    launch.__name__ = f"launch_2d_{block[0]}x{block[1]}"
    launch.one_thread_per_element_of = arg  # type: ignore[attr-defined]  # the harness's "inside" test reads it
    return launch


def launch_1d(tpb: int, arg: int = -1) -> Callable[..., tuple[Any, Any]]:
    """A ``launch=`` function: ``ceil(size / tpb)`` blocks of ``tpb`` threads over argument ``arg``."""
    tpb = count("threads per block (tpb)", tpb, example="e.g. problems.launch_1d(32).")
    check_launch(1, tpb)
    arg = _arg_index(arg)

    def launch(*args: Any) -> tuple[Any, Any]:
        return blocks_for(args[arg].size, tpb), tpb

    launch.__name__ = f"launch_1d_{tpb}"
    launch.one_thread_per_element_of = arg  # type: ignore[attr-defined]
    return launch


def _arg_index(arg: Any) -> int:
    """``arg=`` of a launch function: which of the kernel's arguments (0 the first, -1 the last) it covers."""
    if isinstance(arg, bool) or not isinstance(arg, numbers.Integral):
        raise LaunchError(
            f"arg= is the position of the kernel argument the launch covers (0 the first, -1 the last, the "
            f"output); got {arg!r}."
        )
    return int(arg)


def pad_to_blocks(x: np.ndarray, per_block: int, fill: float = 0, dtype: Any = None) -> np.ndarray:
    """``x`` as rows of ``per_block`` elements, one row per block (at least one), the last row padded with
    ``fill``: what a kernel sees when each block of ``per_block`` threads loads ``fill`` past the end."""
    blocks = blocks_for(x.size, per_block)
    padded = np.full(blocks * per_block, fill, dtype=dtype or x.dtype)
    padded[: x.size] = x.ravel()
    return padded.reshape(blocks, per_block)


def all_problems() -> dict[str, Problem]:
    """Every lab problem by ``"labNN.NAME"``."""
    import importlib

    out: dict[str, Problem] = {}
    for lab in LABS:
        mod = importlib.import_module(f"{__package__}.{lab}")
        for name in mod.__all__:
            value = getattr(mod, name)
            if isinstance(value, Problem):
                out[f"{lab}.{name}"] = value
    return out
