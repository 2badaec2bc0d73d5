"""Grid-stride launches: one thread per element on a GPU, a few looping threads in the simulator.

A grid-stride kernel loops ``for i in range(cuda.grid(1), n, cuda.gridsize(1))``, so it is correct
for any launch. On a GPU :func:`launch_1d` / :func:`launch_2d` start one thread per element (the loop
runs once); in Numba's CUDA simulator, where each CUDA thread costs Python set-up before any work
(gpulab runs a block's threads in turn: about 15 us per thread of this kernel; a Python thread each, as
Numba does, was 0.3 ms), they start :data:`SIM_THREADS` threads that each loop over many elements:
about 10x cheaper per element (:func:`simulator_cost` measures both in this process).
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
from numba import cuda

from .. import runtime
from ._launch import MAX_GRID_DIMS, blocks_for, check_launch

__all__ = [
    "BLOCK",
    "SIM_BLOCK",
    "SIM_THREADS",
    "TPB",
    "device_args",
    "fast_simulator_arrays",
    "launch_1d",
    "launch_2d",
    "simulator_cost",
]

TPB = 256  # threads per block for the 1-D launches on a GPU
BLOCK = (16, 16)  # (x, y) threads per block for the 2-D launches on a GPU
# In the simulator: one block of this many threads (1-D) or SIM_BLOCK (2-D). Measured on 2 cores,
# relu over 4096 floats: 1 thread 2.5 us/element, 8 threads 1.4, 32 threads 1.7; one thread per
# element (16 blocks of 256) 285 us/element with a Python thread each, 15.5 us run in turn (2026-12-01).
SIM_THREADS = 8
SIM_BLOCK = (4, 2)


def device_args(*args: Any) -> tuple:
    """Kernel arguments, with CuPy arrays wrapped as Numba device arrays **without a stream sync**.

    Numba synchronizes the stream a ``__cuda_array_interface__`` names each time a kernel receives
    such an object (``NUMBA_CUDA_ARRAY_INTERFACE_SYNC=1``, the default): one host-blocking sync per
    CuPy argument, a dozen per training step. Here it is not needed: CuPy works on its current stream
    (the legacy default stream unless a program changes it) and Numba launches on the same legacy
    default stream, which runs work in submission order, so the CuPy work that produced an argument
    has finished before the kernel starts. ``cuda.as_cuda_array(a, sync=False)`` skips that sync for
    these arrays only, leaving the global setting alone for other code. NumPy arrays and scalars pass
    through unchanged (simulator mode).
    """
    out = []
    for a in args:
        if not isinstance(a, np.ndarray) and hasattr(a, "__cuda_array_interface__") and not hasattr(a, "copy_to_host"):
            a = cuda.as_cuda_array(a, sync=False)  # a CuPy (or other CAI) array, not already Numba's
        out.append(a)
    return tuple(out)


def fast_simulator_arrays() -> None:
    """Faster array indexing inside simulated kernels: see :func:`gpulab.simulator.fast_arrays`."""
    if runtime.is_simulator():
        from .. import simulator

        simulator.fast_arrays()


def launch_1d(kernel: Any, n: int, *args: Any) -> None:
    """Launch a grid-stride kernel over ``n`` elements: one thread each on a GPU, a few in the simulator."""
    if n <= 0:
        return
    if runtime.is_simulator():
        fast_simulator_arrays()
        blocks, threads = 1, min(SIM_THREADS, n)
    else:
        blocks, threads = min(blocks_for(n, TPB), MAX_GRID_DIMS[0]), TPB  # grid-stride covers the rest
    check_launch(blocks, threads)
    kernel[blocks, threads](*device_args(*args))


def launch_2d(kernel: Any, rows: int, cols: int, *args: Any) -> None:
    """Launch a 2-D grid-stride kernel over (rows, cols); x covers the columns (the contiguous axis)."""
    if rows <= 0 or cols <= 0:
        return
    if runtime.is_simulator():
        fast_simulator_arrays()
        block = (min(SIM_BLOCK[0], cols), min(SIM_BLOCK[1], rows))
        blocks = (1, 1)
    else:
        block = BLOCK
        # At most 65,535 blocks along y (CUDA's limit; e.g. im2col's N*Ho*Wo rows pass it from a batch of
        # about 1,340 MNIST images): the kernel's grid-stride loop covers the rows beyond.
        blocks = (min(blocks_for(cols, block[0]), MAX_GRID_DIMS[0]), min(blocks_for(rows, block[1]), MAX_GRID_DIMS[1]))
    check_launch(blocks, block)
    kernel[blocks, block](*device_args(*args))


def simulator_cost(n: int = 2048, *, per_thread: bool = True) -> dict[str, float]:
    """Measured CPU seconds, in this process, of :func:`gpulab.kernels.nn_ops.relu_kernel` over ``n`` floats.

    ``grid_stride``: per element with this module's few-thread grid-stride launch; ``launch``: one
    launch of :data:`SIM_THREADS` threads on as many elements (thread start-up, the fixed cost);
    ``one_thread_per_element`` (when ``per_thread``): per element with one thread each in blocks
    of 128, the launch shape a GPU wants (slower here: about n * 15 us). CPU time (all threads of
    the process), the least of 3 tries, so that other programs on a busy machine distort it less.
    """
    fast_simulator_arrays()
    x = np.random.default_rng(0).standard_normal(n).astype(np.float32)
    y = np.empty_like(x)

    def cpu(fn: Any, repeat: int = 3) -> float:
        best = float("inf")
        for _ in range(repeat):
            t0 = time.process_time()
            fn()
            best = min(best, time.process_time() - t0)
        return best

    launch = cpu(lambda: launch_1d(_relu_kernel(), SIM_THREADS, x[:SIM_THREADS], y[:SIM_THREADS]))
    whole = cpu(lambda: launch_1d(_relu_kernel(), n, x, y))
    # Per element: the run's cost above one launch, but never under half the run's own cost per element.
    # On a busy machine the launch alone can measure as much as the whole run; the bare difference then
    # vanished and every estimate built on it said "seconds" for a run of hours (train started it).
    out = {"grid_stride": max(whole - launch, whole / 2) / n, "launch": launch}
    if per_thread:
        out["one_thread_per_element"] = cpu(lambda: _relu_kernel()[blocks_for(n, 128), 128](x, y), 1) / n
    return out


def _relu_kernel() -> Any:
    from .nn_ops import relu_kernel

    return relu_kernel
