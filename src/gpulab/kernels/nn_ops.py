"""Launchers of the CNN engine's CUDA kernels (:mod:`gpulab.nn`, backend ``"kernels"``).

The kernels live in :mod:`gpulab.kernels.nn_kernels` and are re-exported here (``nn_ops.relu_kernel``).
Every kernel is a **grid-stride loop**: each thread starts at its global index and steps by the
total number of threads in the grid, so a kernel is correct for *any* launch. That lets one kernel
run at two scales: on a GPU the launchers start one thread per element (the loop runs once); in
Numba's CUDA simulator, where every CUDA thread costs Python set-up before any work (about 15 us run
in turn, 0.3 ms as a Python thread of its own), they start a few threads (:data:`SIM_THREADS`) that
each loop over many elements, about 10x faster per element (measured numbers in :func:`simulator_cost`).

Each launcher takes ``kernel=`` so that a learner's kernel with the same signature can stand in for
the library's (:mod:`gpulab.capstone`). NumPy meaning of each launcher:

* :func:`gemm`           ``c = a @ b``
* :func:`im2col`         ``cols[(n,i,j), (a,b,c)] = xpad[n, c, i*s+a, j*s+b]``
* :func:`col2im`         the adjoint of im2col (sum of every column entry that came from a pixel)
* :func:`add_bias`       ``y += b`` row-wise;  :func:`sum_rows` ``d.sum(axis=0)`` (on a GPU in two passes:
  :func:`gpulab.kernels.nn_sum_rows.sum_rows_partials` sums chunks of rows, then one thread per column sums the
  chunks; the launcher and its passes live in :mod:`gpulab.kernels.nn_sum_rows`: only the launcher
  :func:`sum_rows` is re-exported here, the passes are read from that module)
* :func:`relu`           ``max(x, 0)``;  :func:`relu_backward` ``dout * (y > 0)``
* :func:`maxpool`        max over each k x k window and ``arg`` = a*k + b of its first maximum
* :func:`maxpool_backward`  each window's gradient to its maximum (``arg``)
* :func:`softmax_xent`   mean cross-entropy of softmax(logits) and its gradient ``(softmax - onehot) / N``
* :func:`adam_update`, :func:`sgd_update`  the optimizer steps, in place
* :func:`dropout`        ``x / (1 - p)`` where the draw ``u >= p``, else 0: one thread per generator state, exactly
  (the mask depends on the launch shape, :mod:`gpulab.nn.dropout`), not a grid-stride launch over the elements
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .. import runtime
from ..errors import UsageError
from ..nn.ops import check_labels, conv_out_hw
from ._launch import MAX_GRID_DIMS, ceil_div, check_array, check_launch
from .grid_stride import (
    SIM_THREADS,
    device_args,
    fast_simulator_arrays,
    launch_1d,
    launch_2d,
    simulator_cost,
)
from .nn_kernels import (
    PTX_SIGNATURES,
    adam_kernel,
    add_bias_kernel,
    col2im_kernel,
    dropout_kernel,
    gemm_kernel,
    im2col_kernel,
    maxpool_backward_kernel,
    maxpool_kernel,
    relu_backward_kernel,
    relu_kernel,
    sgd_kernel,
    softmax_xent_kernel,
    sum_rows_kernel,
    sum_rows_partials_kernel,
)
from .nn_sum_rows import sum_rows

__all__ = [
    "PTX_SIGNATURES",
    "SIM_THREADS",
    "adam_kernel",
    "adam_update",
    "add_bias",
    "add_bias_kernel",
    "col2im",
    "col2im_kernel",
    "device_args",
    "dropout",
    "dropout_kernel",
    "fast_simulator_arrays",
    "gemm",
    "gemm_kernel",
    "im2col",
    "im2col_kernel",
    "launch_1d",
    "launch_2d",
    "maxpool",
    "maxpool_backward",
    "maxpool_backward_kernel",
    "maxpool_kernel",
    "relu",
    "relu_backward",
    "relu_backward_kernel",
    "relu_kernel",
    "sgd_kernel",
    "sgd_update",
    "simulator_cost",
    "softmax_xent",
    "softmax_xent_kernel",
    "sum_rows",
    "sum_rows_kernel",
    "sum_rows_partials_kernel",
]

# ------------------------------------------------------------------------------------ launchers


def _xp(a: Any) -> Any:
    return runtime.array_module(a)


def gemm(a: Any, b: Any, *, kernel: Any = None, block: tuple[int, int] | None = None, cooperative: bool = False) -> Any:
    """``a @ b`` (float32, 2-D). Default: on a GPU :func:`gpulab.kernels.splitk.matmul_auto` (lesson 04's tiled or
    register-tiled matmul, or split-K for a small C and a long K, as :func:`gpulab.kernels.splitk.plan` says), in the
    simulator the grid-stride :func:`gemm_kernel`; ``kernel(a, b, c)`` must be a grid-stride kernel.

    With ``block=(bx, by)`` the kernel is launched with one thread per element of c instead (lab 03's
    and lab 04's matmuls: ``j, i = cuda.grid(2)`` and a bounds check), in blocks of bx x by threads
    (a tiled kernel's TILE x TILE). ``cooperative`` (simulator mode only) runs those threads with
    :func:`gpulab.kernels.cooperative.launch`, in turn in the calling thread: the simulator's schedule
    without its per-launch set-up, about half its cost per thread (what training uses; checks do not).
    """
    check_array("a", a, ndim=2, dtype=np.float32)
    check_array("b", b, ndim=2, dtype=np.float32)
    if a.shape[1] != b.shape[0]:
        raise UsageError(f"gemm: a is {tuple(a.shape)} and b is {tuple(b.shape)}; a's columns must equal b's rows.")
    xp = _xp(a)
    a, b = xp.ascontiguousarray(a), xp.ascontiguousarray(b)
    if kernel is None and runtime.is_gpu():
        from .splitk import matmul_auto

        return matmul_auto(a, b)
    c = xp.empty((a.shape[0], b.shape[1]), dtype=np.float32)  # (M, N)
    if block is None:
        launch_2d(kernel or gemm_kernel, c.shape[0], c.shape[1], a, b, c)
        return c
    bx, by = (int(v) for v in block)
    check_launch((ceil_div(c.shape[1], bx), 1), (bx, by))
    if c.size == 0:
        return c
    # One thread per element of c: the rows go in slices of at most 65,535 blocks along y (CUDA's limit),
    # each slice a launch on the rows of a and c it covers (contiguous views, so the kernel sees plain arrays).
    step = MAX_GRID_DIMS[1] * by
    for r0 in range(0, c.shape[0], step):
        a_r, c_r = a[r0 : r0 + step], c[r0 : r0 + step]
        grid = (ceil_div(c.shape[1], bx), ceil_div(c_r.shape[0], by))  # x over the columns of c
        check_launch(grid, (bx, by))
        if runtime.is_simulator():
            fast_simulator_arrays()
            if cooperative:
                from .cooperative import launch

                launch(kernel or gemm_kernel, grid, (bx, by), a_r, b, c_r)
                continue
        (kernel or gemm_kernel)[grid, (bx, by)](*device_args(a_r, b, c_r))
    return c


def im2col(x: Any, kh: int, kw: int, stride: int, pad: int, *, kernel: Any = None) -> tuple[Any, int, int]:
    """x (N, C, H, W) float32 -> cols (N*Ho*Wo, kh*kw*C), Ho, Wo (same layout as the NumPy backend)."""
    check_array("x", x, ndim=4, dtype=np.float32)
    n, c, h, w = (int(s) for s in x.shape)
    ho, wo = conv_out_hw(h, w, kh, kw, stride, pad)
    x = _xp(x).ascontiguousarray(x)
    cols = _xp(x).empty((n * ho * wo, kh * kw * c), dtype=np.float32)  # (N*Ho*Wo, kh*kw*C)
    launch_2d(kernel or im2col_kernel, cols.shape[0], cols.shape[1], x, cols, kh, kw, stride, pad, ho, wo)
    return cols, ho, wo


def col2im(dcols: Any, x_shape: tuple[int, ...], kh: int, kw: int, stride: int, pad: int, *, kernel: Any = None) -> Any:
    """dcols (N*Ho*Wo, kh*kw*C) -> dx (N, C, H, W): each pixel sums the entries it was copied to."""
    check_array("dcols", dcols, ndim=2, dtype=np.float32)
    n, c, h, w = (int(s) for s in x_shape)
    ho, wo = conv_out_hw(h, w, kh, kw, stride, pad)
    if tuple(dcols.shape) != (n * ho * wo, kh * kw * c):
        raise UsageError(
            f"col2im: dcols has shape {tuple(dcols.shape)}, but {tuple(x_shape)} with a {kh}x{kw} "
            f"kernel, stride {stride}, pad {pad} gives ({n * ho * wo}, {kh * kw * c})."
        )
    dcols = _xp(dcols).ascontiguousarray(dcols)
    dx = _xp(dcols).empty((n, c, h, w), dtype=np.float32)  # (N, C, H, W)
    launch_1d(kernel or col2im_kernel, dx.size, dcols, dx, kh, kw, stride, pad, ho, wo)
    return dx


def add_bias(y: Any, b: Any, *, kernel: Any = None) -> Any:
    """``y[i, :] += b`` in place for y (M, F) C-contiguous, b (F,); returns y."""
    check_array("y", y, ndim=2, dtype=np.float32)
    check_array("b", b, ndim=1, dtype=np.float32)
    if y.shape[1] != b.shape[0]:
        raise UsageError(f"bias of length {b.shape[0]} cannot be added to rows of length {y.shape[1]}.")
    if not y.flags.c_contiguous:
        y = _xp(y).ascontiguousarray(y)
    launch_2d(kernel or add_bias_kernel, y.shape[0], y.shape[1], y, _xp(b).ascontiguousarray(b))
    return y


def relu(x: Any, *, kernel: Any = None) -> Any:
    """``max(x, 0)`` elementwise (any shape, float32); returns a new C-contiguous array."""
    check_array("x", x, dtype=np.float32)
    x = _xp(x).ascontiguousarray(x)
    y = _xp(x).empty_like(x)
    launch_1d(kernel or relu_kernel, x.size, x.reshape(-1), y.reshape(-1))
    return y


def relu_backward(dout: Any, y: Any, *, kernel: Any = None) -> Any:
    """``dout * (y > 0)`` elementwise."""
    check_array("dout", dout, dtype=np.float32)
    if tuple(dout.shape) != tuple(y.shape):
        raise UsageError(f"relu_backward: dout {tuple(dout.shape)} and y {tuple(y.shape)} must have the same shape.")
    xp = _xp(dout)
    dout, y = xp.ascontiguousarray(dout), xp.ascontiguousarray(y)
    dx = xp.empty_like(dout)
    launch_1d(kernel or relu_backward_kernel, dx.size, dout.reshape(-1), y.reshape(-1), dx.reshape(-1))
    return dx


def maxpool(x: Any, k: int, stride: int, *, kernel: Any = None) -> tuple[Any, Any]:
    """x (N, C, H, W) -> (out (N, C, Ho, Wo), arg (N, C, Ho, Wo) int32 = a*k + b of the first max)."""
    check_array("x", x, ndim=4, dtype=np.float32)
    n, c, h, w = (int(s) for s in x.shape)
    ho, wo = conv_out_hw(h, w, k, k, stride, 0)
    xp = _xp(x)
    x = xp.ascontiguousarray(x)
    out = xp.empty((n, c, ho, wo), dtype=np.float32)
    arg = xp.empty((n, c, ho, wo), dtype=np.int32)
    launch_1d(kernel or maxpool_kernel, out.size, x, out, arg, k, stride)
    return out, arg


def maxpool_backward(dout: Any, arg: Any, x_shape: tuple[int, ...], k: int, stride: int, *, kernel: Any = None) -> Any:
    """dout (N, C, Ho, Wo) -> dx (N, C, H, W): each window's gradient goes to its maximum ``arg``."""
    check_array("dout", dout, ndim=4, dtype=np.float32)
    n, c, h, w = (int(s) for s in x_shape)
    ho, wo = conv_out_hw(h, w, k, k, stride, 0)
    if tuple(dout.shape) != (n, c, ho, wo) or tuple(arg.shape) != (n, c, ho, wo):
        raise UsageError(
            f"maxpool_backward: dout {tuple(dout.shape)} and arg {tuple(arg.shape)} must both be "
            f"{(n, c, ho, wo)} for input {tuple(x_shape)}, k={k}, stride={stride}."
        )
    xp = _xp(dout)
    dx = xp.empty((n, c, h, w), dtype=np.float32)
    launch_1d(
        kernel or maxpool_backward_kernel,
        dx.size,
        xp.ascontiguousarray(dout),
        xp.ascontiguousarray(arg.astype(np.int32, copy=False)),
        dx,
        k,
        stride,
    )
    return dx


def softmax_xent(logits: Any, labels: Any, *, kernel: Any = None) -> tuple[Any, Any]:
    """Mean cross-entropy loss of softmax(logits) and its gradient w.r.t. logits (N, K). The loss is a 0-d value
    where the logits are (a NumPy float32, or a 0-d CuPy array on the GPU, not read: ``float(loss)`` reads it)."""
    check_array("logits", logits, ndim=2, dtype=np.float32)
    n, classes = int(logits.shape[0]), int(logits.shape[1])
    check_labels(labels, n, classes)
    xp = _xp(logits)
    logits = xp.ascontiguousarray(logits)
    grad = xp.empty_like(logits)
    losses = xp.empty(n, dtype=np.float32)
    launch_1d(kernel or softmax_xent_kernel, n, logits, xp.ascontiguousarray(labels.astype(np.int64)), grad, losses)
    return losses.mean(), grad  # 0-d: read by whoever needs the number (on a GPU, a wait)


def _check_in_place(op: str, **arrays: Any) -> None:
    """Each array float32 and C-contiguous (an optimizer step updates them in place, through flat views)."""
    for name, a in arrays.items():
        check_array(name, a, dtype=np.float32)
        if not a.flags.c_contiguous:
            raise UsageError(f"{op}: {name} must be C-contiguous (it is updated in place).")


def adam_update(
    p: Any, g: Any, m: Any, v: Any, lr_t: float, b1: float, b2: float, eps_t: float, *, kernel: Any = None
) -> None:
    """In place: ``m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2; p -= lr_t m / (sqrt(v) + eps_t)``."""
    _check_in_place("adam_update", p=p, g=g, m=m, v=v)
    launch_1d(
        kernel or adam_kernel,
        p.size,
        p.reshape(-1),
        g.reshape(-1),
        m.reshape(-1),
        v.reshape(-1),
        np.float32(lr_t),
        np.float32(b1),
        np.float32(b2),
        np.float32(eps_t),
    )


def sgd_update(p: Any, g: Any, v: Any, lr: float, momentum: float, weight_decay: float, *, kernel: Any = None) -> None:
    """In place: ``v = momentum v + g + weight_decay p; p -= lr v``."""
    _check_in_place("sgd_update", p=p, g=g, v=v)
    launch_1d(
        kernel or sgd_kernel,
        p.size,
        p.reshape(-1),
        g.reshape(-1),
        v.reshape(-1),
        np.float32(lr),
        np.float32(momentum),
        np.float32(weight_decay),
    )


def dropout(x: Any, p: Any, states: Any, *, kernel: Any = None) -> Any:
    """Inverted dropout of ``x`` (any shape, float32) with lab 08's kernel ``kernel(x, states, p, y)``: ``T =
    states.size // 2`` threads, one generator state each (blocks of :data:`gpulab.nn.dropout.TPB`), a grid-stride
    loop over the elements; ``states`` (uint64 words, NumPy or CuPy as ``x``) advanced in place. In the
    simulator the threads run in turn (:mod:`gpulab.kernels.cooperative`). The backward is the same launch on
    ``dout`` with the states as they were before the forward.

    A float16 ``x`` (:class:`gpulab.nn.MixedPrecision`'s activations) runs the float32 kernel on a float32 copy
    and comes back float16, as the loss's softmax runs in float32 there: same mask, one rounding to float16."""
    from ..nn.dropout import TPB as DROPOUT_TPB
    from ..nn.dropout import check_dropout
    from ..xoroshiro import DTYPE

    if hasattr(x, "dtype") and np.dtype(x.dtype) == np.float16:
        return dropout(x.astype(np.float32), p, states, kernel=kernel).astype(np.float16)
    check_array("x", x, dtype=np.float32)
    check_dropout(p, states)
    xp = _xp(x)
    x = xp.ascontiguousarray(x)
    y = xp.empty_like(x)
    if x.size == 0:
        return y
    grid, block = int(states.shape[0]) // 2 // DROPOUT_TPB, DROPOUT_TPB  # exactly one thread per state
    check_launch(grid, block)
    kern = kernel or dropout_kernel
    if runtime.is_simulator():
        from .cooperative import launch

        fast_simulator_arrays()
        launch(kern, grid, block, x.reshape(-1), states.view(DTYPE), np.float32(p), y.reshape(-1))
        return y
    from numba import cuda

    if isinstance(states, np.ndarray):  # host words (a Dropout not moved with Sequential.to): Numba copies them
        view = states.view(DTYPE)  # to the device and back after the launch, so they still advance in place
    else:
        view = cuda.as_cuda_array(states, sync=False).view(DTYPE)  # CuPy words as numba.cuda.random's records
    kern[grid, block](*device_args(x.reshape(-1), view, np.float32(p), y.reshape(-1)))
    return y
