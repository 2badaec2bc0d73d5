"""Launch-configuration helpers shared by every host launcher: checks with messages a learner can act on."""

from __future__ import annotations

import numbers
from typing import Any
from collections.abc import Sequence

from ..errors import UsageError, whole_number

__all__ = [
    "LaunchError",
    "MAX_BLOCK_DIMS",
    "MAX_GRID_DIMS",
    "MAX_THREADS_PER_BLOCK",
    "allocate_like",
    "blocks_for",
    "ceil_div",
    "check_array",
    "check_blocks",
    "check_launch",
    "check_out",
    "conv_out_size",
    "count",
    "is_numba_device_array",
    "launch_dim",
    "threads_2d",
]

MAX_THREADS_PER_BLOCK = 1024
# CUDA's limits per dimension (x, y, z), the same on every GPU since compute capability 3.0. The simulator
# enforces none of them, so the launchers check them here: a GPU refuses such a launch with a driver error.
MAX_BLOCK_DIMS = (1024, 1024, 64)
MAX_GRID_DIMS = (2**31 - 1, 65535, 65535)


class LaunchError(UsageError):
    """A launch configuration or an argument that no GPU would accept (a ValueError too)."""


def count(name: str, value: Any, *, low: int = 1, example: str = "") -> int:
    """``value`` as an int >= ``low`` (:func:`gpulab.errors.whole_number`), refused with a :class:`LaunchError`."""
    return whole_number(name, value, low=low, example=example, error=LaunchError)


def launch_dim(what: str, value: Any) -> int:
    """One number of a launch configuration as numba-cuda takes it: a whole number (an int, a NumPy integer),
    never a float, even 4.0 (numba refuses it: "griddim must be a sequence of integers"). ``what`` is "blocks" or
    "threads per block"."""
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real):
        if what == "blocks":
            fix = (
                "Python's / always gives a float, even 512 / 256 = 2.0. Round up with integer division: "
                "blocks = (n + threads - 1) // threads, or gpulab.kernels.ceil_div(n, threads)"
            )
        else:
            fix = "write it as an int (256, not 256.0), or int(...) a value you computed"
        raise LaunchError(
            f"{what} must be a whole number, but got {value!r} (a float); it is never rounded for you: {fix}."
        )
    raise LaunchError(
        f"{what} must be a whole number (or a tuple of up to 3 for a 2-D or 3-D launch), but got {value!r} "
        f"({type(value).__name__}), e.g. kernel[blocks, 256] with blocks = (n + 255) // 256."
    )


def ceil_div(n: int, d: int) -> int:
    """``ceil(n / d)`` for whole numbers: blocks needed to cover n elements with d threads each."""
    return -(-int(n) // int(d))


def conv_out_size(size: int, k: int, stride: int = 1, pad: int = 0) -> int:
    """Output length of a convolution or pooling window along one axis: ``(size + 2 pad - k) // stride + 1``."""
    return (int(size) + 2 * int(pad) - int(k)) // int(stride) + 1


def threads_2d(threads_per_block: Any) -> tuple[int, int]:
    """A 2-D block shape ``(x, y)``: x threads along a row (columns), y along a column (rows)."""
    if not isinstance(threads_per_block, (tuple, list)) or len(threads_per_block) != 2:
        raise LaunchError(
            f"this is a 2-D launch: threads_per_block must be a pair (x, y), e.g. (16, 16), but got "
            f"{threads_per_block!r}. x threads run along a row (columns), y along a column (rows)."
        )
    tx, ty = (count("threads_per_block", v) for v in threads_per_block)
    return tx, ty


def check_launch(blocks: int | Sequence[int], threads: int | Sequence[int]) -> None:
    """Reject a launch that CUDA would refuse: 0 threads or blocks, more than 1024 threads in one block, or
    more threads or blocks along one axis than CUDA allows (:data:`MAX_BLOCK_DIMS`, :data:`MAX_GRID_DIMS`)."""
    if isinstance(threads, (tuple, list)) and not 1 <= len(threads) <= 3:
        raise LaunchError(f"threads per block must have 1, 2 or 3 dimensions, but got {threads!r}.")
    if isinstance(blocks, (tuple, list)) and not 1 <= len(blocks) <= 3:
        raise LaunchError(f"the grid must have 1, 2 or 3 dimensions, but got {blocks!r}.")
    t = tuple(
        launch_dim("threads per block", x) for x in (threads if isinstance(threads, (tuple, list)) else (threads,))
    )
    b = tuple(launch_dim("blocks", x) for x in (blocks if isinstance(blocks, (tuple, list)) else (blocks,)))
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
    for axis, n, most in zip("xyz", t, MAX_BLOCK_DIMS):
        if n > most:
            raise LaunchError(
                f"a block can have at most {most} threads along {axis}, but {t} has {n}. CUDA limits a block "
                f"to {MAX_BLOCK_DIMS} threads along (x, y, z); put the long side along x, e.g. (256, 4, 1)."
            )
    for axis, n, most in zip("xyz", b, MAX_GRID_DIMS):
        if n > most:
            raise LaunchError(
                f"a grid can have at most {most:,} blocks along {axis}, but the launch asked for {n:,} (grid {b}). "
                "Use bigger blocks along that axis, put the long side of the work along x (up to 2**31 - 1 "
                "blocks), or cap the blocks and loop over the rest with a grid-stride loop."
            )


def blocks_for(n: int, threads: int) -> int:
    """Blocks needed so that ``blocks * threads >= n`` (at least 1)."""
    threads = count("threads_per_block", threads, example="Try 128 or 256 (a multiple of the 32-thread warp).")
    return max(1, ceil_div(n, threads))


def check_blocks(blocks: Any, threads: int, n: int, *, grid_stride: bool) -> int:
    """The block count to launch for ``n`` elements: ``blocks_for(n, threads)`` when ``blocks`` is None.

    A given ``blocks`` must be >= 1, and unless the kernel loops over the array (a grid-stride loop)
    ``blocks * threads`` must cover every element: a one-thread-per-element kernel with too few
    blocks leaves the rest of ``out`` unwritten (garbage, not an error, on a GPU).
    """
    if blocks is None:
        return blocks_for(n, threads)
    blocks = count("blocks", blocks, example="Leave blocks=None to cover every element.")
    if not grid_stride and blocks * threads < n:
        raise LaunchError(
            f"blocks={blocks} x threads_per_block={threads} = {blocks * threads} threads, but there are {n} "
            f"elements: with one thread per element {n - blocks * threads} of them would never be written. "
            f"Use blocks={blocks_for(n, threads)} (= ceil({n} / {threads})), leave blocks=None, or pass a "
            "grid-stride kernel (kernel=add_grid_stride_kernel) that loops over the array."
        )
    return blocks


def is_numba_device_array(a: Any) -> bool:
    """A Numba device array (``cuda.to_device`` / ``cuda.device_array``), not NumPy or CuPy."""
    import numpy as np

    return hasattr(a, "copy_to_host") and not isinstance(a, np.ndarray)


def allocate_like(a: Any, shape: Any, dtype: Any) -> Any:
    """An uninitialised output in ``a``'s world: a Numba device array for a Numba device array (so a
    launcher never allocates on the host and copies both ways), else ``a``'s array module's ``empty``."""
    if is_numba_device_array(a):
        from numba import cuda

        return cuda.device_array(shape, dtype=dtype)
    from .. import runtime

    return runtime.array_module(a).empty(shape, dtype=dtype)


def check_out(
    out: Any, shape: Any, dtype: Any, *, fix: str = "Leave out=None to let the launcher allocate it."
) -> None:
    """``out`` must have exactly ``shape`` and ``dtype``, be writable and C-contiguous: a wrong size gives a
    partial result and a narrower dtype a truncated one, silently, so they are refused here."""
    import numpy as np

    check_array("out", out)
    want, got = tuple(int(s) for s in shape), tuple(int(s) for s in out.shape)
    if got != want:
        raise LaunchError(f"out must have shape {want}, but has shape {got}. {fix}")
    if np.dtype(out.dtype) != np.dtype(dtype):
        raise LaunchError(
            f"out must have dtype {np.dtype(dtype).name} (the result's dtype), but has {np.dtype(out.dtype).name}: "
            f"the kernel would silently convert every value. {fix}"
        )
    flags = getattr(out, "flags", None)
    if flags is not None:
        if not _flag(flags, "c_contiguous"):
            raise LaunchError(f"out must be C-contiguous (a fresh array, not a strided view). {fix}")
        if not _flag(flags, "writeable", default=True):
            raise LaunchError(f"out is read-only (e.g. a broadcast view); pass a writable array. {fix}")


def _flag(flags: Any, name: str, default: bool = False) -> bool:
    """A flag of NumPy/CuPy (attributes) or Numba device arrays (a dict with upper-case keys)."""
    if hasattr(flags, name):
        return bool(getattr(flags, name))
    try:
        return bool(flags[name.upper()])
    except (KeyError, TypeError, IndexError):
        return default


def check_array(name: str, a: Any, *, ndim: int | None = None, dtype: Any = None, contiguous: bool = False) -> None:
    """Check an argument's dimensionality and dtype, explaining what was expected. ``contiguous=True``: a NumPy
    array must be one block of memory (C or Fortran order: ``m.T`` is), not a strided view like ``x[::2]``, which
    numba-cuda cannot copy to the device ("Array contains non-contiguous buffer"); a device array's strides are
    the kernel's to follow."""
    if not hasattr(a, "shape") or not hasattr(a, "dtype"):
        raise TypeError(
            f"{name} must be an array (NumPy, CuPy or a Numba device array), but got "
            f"{type(a).__name__}. Convert it with numpy.asarray({name}) first."
        )
    if ndim is not None and len(a.shape) != ndim:
        raise LaunchError(f"{name} must be {ndim}-D, but has shape {tuple(a.shape)} ({len(a.shape)}-D).")
    if contiguous:
        import numpy as np

        if isinstance(a, np.ndarray) and not (a.flags.c_contiguous or a.flags.f_contiguous):
            raise LaunchError(
                f"{name} is a strided view of another array (like x[::2]): its elements are not next to each other "
                f"in memory, and the copy to the device needs them to be. Pass a contiguous copy: "
                f"np.ascontiguousarray({name})."
            )
    if dtype is not None:
        import numpy as np

        if np.dtype(a.dtype) != np.dtype(dtype):
            raise TypeError(
                f"{name} must have dtype {np.dtype(dtype).name}, but has {np.dtype(a.dtype).name}. "
                f"Convert it with {name}.astype(numpy.{np.dtype(dtype).name})."
            )
