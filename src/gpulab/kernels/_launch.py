"""Launch-configuration helpers shared by every host launcher: checks with messages a learner can act on."""

from __future__ import annotations

from typing import Any, Sequence

__all__ = ["LaunchError", "MAX_THREADS_PER_BLOCK", "blocks_for", "check_launch", "check_array"]

MAX_THREADS_PER_BLOCK = 1024


class LaunchError(ValueError):
    """A launch configuration or an argument that no GPU would accept."""


def _as_tuple(v: int | Sequence[int]) -> tuple[int, ...]:
    return tuple(int(x) for x in v) if isinstance(v, (tuple, list)) else (int(v),)


def check_launch(blocks: int | Sequence[int], threads: int | Sequence[int]) -> None:
    """Reject a launch that CUDA would refuse: 0 threads, or more than 1024 threads in one block."""
    t, b = _as_tuple(threads), _as_tuple(blocks)
    total = 1
    for n in t:
        total *= n
    if min(t) <= 0 or total <= 0:
        raise LaunchError(
            f"threads per block must be at least 1 in every dimension, but the launch asked for "
            f"{t}. A block with no threads does no work; try 128 or 256 threads per block "
            "(a multiple of the 32-thread warp)."
        )
    if total > MAX_THREADS_PER_BLOCK:
        raise LaunchError(
            f"a block can hold at most {MAX_THREADS_PER_BLOCK} threads, but {t} is {total} threads. "
            "Use fewer threads per block (e.g. 256, or (16, 16) in 2-D) and more blocks: "
            "blocks = ceil(n / threads_per_block)."
        )
    if min(b) <= 0:
        raise LaunchError(
            f"the grid must have at least 1 block in every dimension, but got {b}. For n elements "
            "use blocks = ceil(n / threads_per_block), and skip the launch when n == 0."
        )


def blocks_for(n: int, threads: int) -> int:
    """Blocks needed so that ``blocks * threads >= n`` (at least 1)."""
    return max(1, -(-int(n) // int(threads)))


def check_array(name: str, a: Any, *, ndim: int | None = None, dtype: Any = None) -> None:
    """Check an argument's dimensionality and dtype, explaining what was expected."""
    if not hasattr(a, "shape") or not hasattr(a, "dtype"):
        raise TypeError(
            f"{name} must be an array (NumPy, CuPy or a Numba device array), but got "
            f"{type(a).__name__}. Convert it with numpy.asarray({name}) first."
        )
    if ndim is not None and len(a.shape) != ndim:
        raise LaunchError(f"{name} must be {ndim}-D, but has shape {tuple(a.shape)} ({len(a.shape)}-D).")
    if dtype is not None:
        import numpy as np

        if np.dtype(a.dtype) != np.dtype(dtype):
            raise TypeError(
                f"{name} must have dtype {np.dtype(dtype).name}, but has {np.dtype(a.dtype).name}. "
                f"Convert it with {name}.astype(numpy.{np.dtype(dtype).name})."
            )
