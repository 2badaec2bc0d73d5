"""Run a simulated kernel's CUDA threads in turn in the calling Python thread: the capstone's training launches.

Numba's CUDA simulator gives each CUDA thread a Python thread. gpulab's simulator already runs most
blocks' threads in turn instead (:mod:`gpulab.simulator.in_turn` reads the kernel: one thread after
another without barriers, barrier by barrier with ``cuda.syncthreads()`` statements), in one
``BlockThread`` per block, with the instruments the checks need. Training launches the same kernels
thousands of times and needs none of that, so :func:`launch` goes further, with the same reading and
the same schedule: no thread per block, no per-launch simulator set-up, array views with their shape
stored, and Numba scalar types (``float32(0.0)``) mapped to NumPy's. :func:`per_thread_seconds`
measures a block with a barrier both ways in this process.

A kernel the reading cannot run in turn (a closure with a barrier, a kernel or device function with
a barrier whose source is not available) runs on the simulator unchanged. The result does not
depend on the schedule for a kernel the exercise harness passed ("same result with different thread
schedules"), which the capstone requires before it registers one.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import numpy as np
from numba import cuda, float32

from ..simulator.blocks import in_turn
from ..simulator.in_turn import plan
from ..source import py_func

__all__ = ["launch", "per_thread_seconds"]


def _fake_arg(arg: Any) -> Any:
    """The simulator's in-kernel view of an array, with its shape, size and ndim stored on the object
    (the same values; read without the simulator's three-call attribute forwarding)."""
    from numba.cuda.simulator.cudadrv.devicearray import FakeCUDAArray, FakeWithinKernelCUDAArray

    if isinstance(arg, np.ndarray) and arg.ndim > 0:
        fake = FakeWithinKernelCUDAArray(FakeCUDAArray(arg))
        fake.__dict__.update(shape=arg.shape, size=arg.size, ndim=arg.ndim)
        return fake
    return arg


def _numpy_scalar_types(fn: Any) -> dict[str, Any]:
    """Numba scalar types the kernel's globals name (``float32(0.0)``), mapped to NumPy's: in the
    simulator ``numba.float32(x)`` returns ``numpy.float32(x)`` after a slower lookup."""
    from numba.core import types

    out = {}
    for name, value in list(fn.__globals__.items()):
        if isinstance(value, types.Number) and hasattr(np, str(value)):
            out[name] = getattr(np, str(value))
    return out


def _no_barrier() -> None:
    raise RuntimeError(
        "a cuda.syncthreads() that gpulab's reading of the kernel could not see was called (reached through "
        "getattr or the like): gpulab's cooperative launch supports barriers written as cuda.syncthreads() "
        "statements in the kernel or a device function it calls."
    )


def launch(kernel: Any, grid: Any, block: Any, *args: Any) -> None:
    """``kernel[grid, block](*args)`` in simulator mode, each block's threads run in turn (module docstring)."""
    from numba.cuda.errors import normalize_kernel_dimensions
    from numba.cuda.simulator import kernel as sim_kernel
    from numba.cuda.simulator import kernelapi

    fn = py_func(kernel)
    how = plan(fn) if callable(fn) and fn is not kernel else None
    if how is None:
        kernel[grid, block](*args)
        return
    target, generator = how
    grid_dim, block_dim = normalize_kernel_dimensions(grid, block)
    module = kernelapi.FakeCUDAModule(grid_dim, block_dim, 0)
    fake = [_fake_arg(a) for a in args]
    th = threading.current_thread()
    saved: dict[str, Any] = {
        k: th.__dict__[k]
        for k in ("threadIdx", "blockIdx", "thread_id", "syncthreads", "_gpulab_epoch")
        if k in th.__dict__
    }
    scalars = _numpy_scalar_types(target)
    old_globals = {k: target.__globals__[k] for k in scalars}
    body = in_turn(target, generator, list(np.ndindex(*block_dim)), block_dim, tuple(fake))
    try:
        th.syncthreads = _no_barrier  # type: ignore[attr-defined]
        target.__globals__.update(scalars)  # restored below, as the simulator restores `cuda`
        with sim_kernel._push_kernel_context(module), kernelapi.swapped_cuda_module(target, module):
            for b in np.ndindex(*grid_dim):
                th.blockIdx = kernelapi.Dim3(*b)  # type: ignore[attr-defined]
                body()
    finally:
        target.__globals__.update(old_globals)
        for k in ("threadIdx", "blockIdx", "thread_id", "syncthreads", "_gpulab_epoch"):
            th.__dict__.pop(k, None)
        th.__dict__.update(saved)


@cuda.jit
def _reverse_in_block_kernel(x, y):  # one barrier: every thread reads what another thread of its block wrote
    s = cuda.shared.array(128, float32)
    t = cuda.threadIdx.x
    i = cuda.grid(1)
    s[t] = x[i]
    cuda.syncthreads()
    y[i] = s[cuda.blockDim.x - 1 - t]


def _threaded_kernel() -> Any:
    """The same kernel, as a closure (over its shared array's size): gpulab's reading leaves a closure with a
    barrier to Numba's threads, a Python thread per CUDA thread."""
    size = 128

    @cuda.jit
    def _reverse_in_block_threaded_kernel(x, y):
        s = cuda.shared.array(size, float32)
        t = cuda.threadIdx.x
        i = cuda.grid(1)
        s[t] = x[i]
        cuda.syncthreads()  # every thread's element is in s
        y[i] = s[cuda.blockDim.x - 1 - t]

    return _reverse_in_block_threaded_kernel


def per_thread_seconds(threads: int = 2048) -> dict[str, float]:
    """CPU seconds per CUDA thread of an almost empty kernel with one barrier (blocks of 128), in this process,
    the least of 3 tries: ``threads`` (Numba's simulator, a Python thread each), ``simulator`` (gpulab's: the
    block's threads in turn, barrier by barrier) and ``cooperative`` (:func:`launch`)."""
    threads = max(128, threads - threads % 128)
    x = np.arange(threads, dtype=np.float32)
    y = np.empty_like(x)
    blocks = threads // 128
    want = x.reshape(-1, 128)[:, ::-1].ravel()

    def cpu(fn: Any) -> float:
        best = float("inf")
        for _ in range(3):
            y[:] = 0
            t0 = time.process_time()
            fn()
            best = min(best, time.process_time() - t0)
            if not np.array_equal(y, want):
                raise RuntimeError("a simulated block reversed its chunk wrongly: a bug in gpulab, please report it")
        return best / threads

    k, threaded = _reverse_in_block_kernel, _threaded_kernel()
    return {
        "threads": cpu(lambda: threaded[blocks, 128](x, y)),
        "simulator": cpu(lambda: k[blocks, 128](x, y)),
        "cooperative": cpu(lambda: launch(k, blocks, 128, x, y)),
    }
