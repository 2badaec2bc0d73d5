"""How the capstone's checks (lab 09) launch a learner's kernel: one host function per op (:data:`HOSTS`).

Each launches the kernel as the launcher training uses does (:mod:`gpulab.kernels.nn_ops`: the same grid-stride
launch over the same count, the same arguments), but into the harness's output buffers: those come pre-filled,
so an element the kernel never writes is named as such, where a launcher's own uninitialised output would show
garbage that differs from run to run (and read as a race). :data:`gpulab.capstone_problems.PROBLEMS` says what
each op must compute; :class:`gpulab.capstone_ops.LearnerOps` (``verify``) runs these again during training.

Not a reference module for :mod:`gpulab.exercises.own_code`: these launch the kernel they are given (the
learner's), and the capstone's check wraps them around every registered kernel.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from . import runtime
from .nn.ops import conv_out_hw

__all__ = ["HOSTS", "gemm_block_launch"]


def _k():
    """:mod:`gpulab.kernels.nn_ops`, imported when a check runs (importing this module compiles nothing)."""
    from .kernels import nn_ops

    return nn_ops


def _launch_1d(kern: Any, n: int, *args: Any) -> None:
    _k().launch_1d(kern, n, *args)


def _launch_2d(kern: Any, rows: int, cols: int, *args: Any) -> None:
    _k().launch_2d(kern, rows, cols, *args)


def _flat(a: Any) -> Any:
    return runtime.array_module(a).ascontiguousarray(a).reshape(-1)


def gemm_block_launch(c: Any, block: tuple[int, int]) -> tuple[tuple[int, int], tuple[int, int]]:
    """(grid, block) of a one-thread-per-output matmul over ``c`` in ``block``s: x over the columns of c."""
    from .kernels._launch import ceil_div

    bx, by = (int(v) for v in block)
    return (ceil_div(c.shape[1], bx), ceil_div(c.shape[0], by)), (bx, by)


def _gemm_host(
    kern: Any,
    a: Any,
    b: Any,
    c: Any,
    block: tuple[int, int] | None = None,
    cooperative: bool = False,
    swapped: bool = False,
) -> None:
    """``gemm``'s launches for small checks: grid-stride over c, or one thread per element of c in ``block``s
    (``cooperative``: in the simulator, run in turn as training does, :mod:`gpulab.kernels.cooperative`;
    ``swapped``: the grid and the block with x and y exchanged, for the check's test of a kernel that takes the
    row from x, see :meth:`gpulab.exercises.run.Runner.config`)."""
    if block is None:
        _launch_2d(kern, c.shape[0], c.shape[1], a, b, c)
        return
    from .kernels._launch import MAX_GRID_DIMS, check_launch
    from .kernels.grid_stride import device_args, fast_simulator_arrays

    grid, (bx, by) = gemm_block_launch(c, block)
    if swapped:
        grid, (bx, by) = (grid[1], grid[0]), (by, bx)
    elif grid[1] > MAX_GRID_DIMS[1]:
        c[...] = _k().gemm(a, b, kernel=kern, block=block)  # gemm slices the rows; no check is this big
        return
    check_launch(grid, (bx, by))
    if c.size == 0:
        return
    if runtime.is_simulator():
        fast_simulator_arrays()
        if cooperative:
            from .kernels.cooperative import launch

            launch(kern, grid, (bx, by), a, b, c)
            return
    kern[grid, (bx, by)](*device_args(a, b, c))


def _im2col_host(kern: Any, x: Any, k: int, s: int, p: int, cols: Any) -> None:
    ho, wo = conv_out_hw(x.shape[2], x.shape[3], k, k, s, p)
    _launch_2d(kern, cols.shape[0], cols.shape[1], x, cols, k, k, s, p, ho, wo)


def _col2im_host(kern: Any, d: Any, xs: tuple, k: int, s: int, p: int, dx: Any) -> None:
    ho, wo = conv_out_hw(xs[2], xs[3], k, k, s, p)
    _launch_1d(kern, dx.size, d, dx, k, k, s, p, ho, wo)


def _xent_host(kern: Any, z: Any, y: Any, grad: Any, losses: Any) -> None:
    _k().check_labels(y, z.shape[0], z.shape[1])
    xp = runtime.array_module(z)
    _launch_1d(kern, z.shape[0], z, xp.ascontiguousarray(y.astype(np.int64)), grad, losses)


def _adam_host(kern: Any, p, g, m, v, lr, b1, b2, eps, p2, m2, v2) -> None:
    p2[...], m2[...], v2[...] = p, m, v  # in place, on copies of the inputs
    _k().adam_update(p2, g, m2, v2, lr, b1, b2, eps, kernel=kern)


def _dropout_host(kern: Any, x: Any, words: Any, p: Any, y: Any) -> None:
    """Training's launch (:func:`gpulab.kernels.nn_ops.dropout`: one thread per state, blocks of 32) on a copy of
    the states, into the check's buffer; in the simulator on Numba's simulator (the checks' schedules and races)."""
    from .nn.dropout import TPB, check_dropout
    from .problems._dropout import as_states

    check_dropout(p, words)
    if x.size:
        kern[int(words.shape[0]) // 2 // TPB, TPB](_flat(x), as_states(words.copy()), np.float32(p), y.reshape(-1))


HOSTS: dict[str, Callable[..., None]] = {
    "matmul": _gemm_host,
    "im2col": _im2col_host,
    "col2im": _col2im_host,
    "relu": lambda kern, x, y: _launch_1d(kern, y.size, _flat(x), y.reshape(-1)),
    "relu_backward": lambda kern, d, y, dx: _launch_1d(kern, dx.size, _flat(d), _flat(y), dx.reshape(-1)),
    "maxpool": lambda kern, x, k, s, out, arg: _launch_1d(kern, out.size, x, out, arg, k, s),
    "maxpool_backward": lambda kern, d, arg, xs, k, s, dx: _launch_1d(kern, dx.size, d, arg, dx, k, s),
    "softmax_xent": _xent_host,
    "adam_update": _adam_host,
    "dropout_forward": _dropout_host,
    "dropout_backward": _dropout_host,
}
