"""Run a simulated kernel's CUDA threads one after another, in the calling Python thread.

In a block with ``cuda.syncthreads()``, Numba's CUDA simulator starts one Python thread per CUDA thread
(gpulab's :mod:`gpulab.simulator.blocks` replaces its busy polling at the barrier with events, and runs
blocks without barriers in turn already): about 0.2 ms of CPU per CUDA thread, measured on this
course's 2-core machines (:func:`per_thread_seconds` measures it in this process).
That makes a one-thread-per-output tiled kernel (lab 04's tiled matmul) far too slow to train a
network with. For a kernel whose result does not depend on the thread schedule, which is what the
exercise harness establishes before the capstone registers a kernel ("same result with different
thread schedules"), running the threads of each block in turn gives the same result at a few
microseconds per CUDA thread:

* a kernel with ``cuda.syncthreads()`` statements is recompiled from its source as a generator that
  yields at each barrier, and every thread of the block is advanced to its next barrier before any
  thread goes past it, which is exactly what the barrier promises;
* a kernel without ``cuda.syncthreads()`` runs each thread to its end, one after another (as the
  simulator now does too, with array views that skip its attribute forwarding).

Anything else (a barrier inside a device function, a kernel whose source is not available, a
closure) runs on Numba's simulator unchanged. Only the capstone's training launches use this; the
checks run on the real simulator with its instruments.
"""

from __future__ import annotations

import ast
import inspect
import textwrap
import threading
import time
from typing import Any

import numpy as np
from numba import cuda, float32

from ..source import py_func

__all__ = ["launch", "per_thread_seconds"]

_PLANS: dict[Any, tuple[Any, bool] | None] = {}


def _is_barrier(node: ast.AST) -> bool:
    return (
        isinstance(node, ast.Expr)
        and isinstance(node.value, ast.Call)
        and not node.value.args
        and isinstance(node.value.func, ast.Attribute)
        and node.value.func.attr == "syncthreads"
        and isinstance(node.value.func.value, ast.Name)
        and node.value.func.value.id == "cuda"
    )


class _Yield(ast.NodeTransformer):
    def visit_Expr(self, node: ast.Expr) -> Any:
        return ast.copy_location(ast.Expr(ast.Yield(None)), node) if _is_barrier(node) else node


def _plan(fn: Any) -> tuple[Any, bool] | None:
    """(function to call per thread, is it a generator) or None when the kernel must use Numba's simulator."""
    if fn in _PLANS:
        return _PLANS[fn]
    plan: tuple[Any, bool] | None = None
    names = set(fn.__code__.co_names)
    if not fn.__code__.co_freevars and not names & {"syncthreads_count", "syncthreads_and", "syncthreads_or"}:
        if "syncthreads" not in names:
            plan = (fn, False)
        else:
            try:
                source = textwrap.dedent(inspect.getsource(fn))
                tree = ast.parse(source)
            except (OSError, TypeError, SyntaxError):
                tree = None
            if tree is not None and len(tree.body) == 1 and isinstance(tree.body[0], ast.FunctionDef):
                func = tree.body[0]
                n_barriers = sum(_is_barrier(n) for n in ast.walk(func))
                n_calls = sum(isinstance(n, ast.Attribute) and n.attr == "syncthreads" for n in ast.walk(func))
                if n_barriers == n_calls:  # every barrier is a plain statement `cuda.syncthreads()`
                    func.decorator_list = []
                    tree = ast.fix_missing_locations(_Yield().visit(tree))
                    ast.increment_lineno(tree, fn.__code__.co_firstlineno - 1)
                    space: dict[str, Any] = {}
                    exec(compile(tree, fn.__code__.co_filename, "exec"), fn.__globals__, space)  # noqa: S102
                    plan = (space[func.name], True)
    _PLANS[fn] = plan
    return plan


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
        "cuda.syncthreads() was called from a device function: gpulab's cooperative launch "
        "supports barriers only as statements in the kernel itself."
    )


def launch(kernel: Any, grid: Any, block: Any, *args: Any) -> None:
    """``kernel[grid, block](*args)`` in simulator mode, each block's threads run in turn (module docstring)."""
    from numba.cuda.errors import normalize_kernel_dimensions
    from numba.cuda.simulator import kernel as sim_kernel
    from numba.cuda.simulator import kernelapi

    fn = py_func(kernel)
    plan = _plan(fn) if callable(fn) and fn is not kernel else None
    if plan is None:
        kernel[grid, block](*args)
        return
    target, generator = plan
    grid_dim, block_dim = normalize_kernel_dimensions(grid, block)
    module = kernelapi.FakeCUDAModule(grid_dim, block_dim, 0)
    fake = [_fake_arg(a) for a in args]
    th = threading.current_thread()
    saved: dict[str, Any] = {
        k: th.__dict__[k] for k in ("threadIdx", "blockIdx", "thread_id", "syncthreads") if k in th.__dict__
    }
    scalars = _numpy_scalar_types(target)
    old_globals = {k: target.__globals__[k] for k in scalars}
    threads = list(np.ndindex(*block_dim))
    bx, by = block_dim[0], block_dim[1]
    try:
        th.syncthreads = _no_barrier  # type: ignore[attr-defined]
        target.__globals__.update(scalars)  # restored below, as the simulator restores `cuda`
        with sim_kernel._push_kernel_context(module), kernelapi.swapped_cuda_module(target, module):
            for b in np.ndindex(*grid_dim):
                th.blockIdx = kernelapi.Dim3(*b)  # type: ignore[attr-defined]
                if not generator:
                    for t in threads:
                        th.threadIdx = kernelapi.Dim3(*t)  # type: ignore[attr-defined]
                        th.thread_id = t[0] + bx * (t[1] + by * t[2])  # type: ignore[attr-defined]
                        target(*fake)
                    continue
                alive = [(t, target(*fake)) for t in threads]  # nothing runs until the first next()
                while alive:  # one round = every live thread up to its next barrier (or its end)
                    waiting = []
                    for t, gen in alive:
                        th.threadIdx = kernelapi.Dim3(*t)  # type: ignore[attr-defined]
                        th.thread_id = t[0] + bx * (t[1] + by * t[2])  # type: ignore[attr-defined]
                        try:
                            next(gen)
                            waiting.append((t, gen))
                        except StopIteration:
                            pass
                    alive = waiting
    finally:
        target.__globals__.update(old_globals)
        for k in ("threadIdx", "blockIdx", "thread_id", "syncthreads"):
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


def per_thread_seconds(threads: int = 2048) -> dict[str, float]:
    """CPU seconds per CUDA thread of an almost empty kernel with one barrier (blocks of 128), in this process:
    ``simulator`` (Numba's, a Python thread each) and ``cooperative`` (:func:`launch`); the least of 3 tries."""
    kernel = _reverse_in_block_kernel
    threads = max(128, threads - threads % 128)
    x = np.arange(threads, dtype=np.float32)
    y = np.empty_like(x)
    blocks = max(1, threads // 128)

    def cpu(fn: Any) -> float:
        best = float("inf")
        for _ in range(3):
            t0 = time.process_time()
            fn()
            best = min(best, time.process_time() - t0)
        return best / (blocks * 128)

    out = {"simulator": cpu(lambda: kernel[blocks, 128](x, y))}
    out["cooperative"] = cpu(lambda: launch(kernel, blocks, 128, x, y))
    if not np.array_equal(y, x.reshape(-1, 128)[:, ::-1].ravel()):
        raise RuntimeError("the cooperative launch reversed the blocks wrongly: a bug in gpulab, please report it")
    return out
