"""Count and record a kernel's global-memory accesses, thread by thread, in the simulator (in either mode).

On a GPU, memory traffic is what usually limits a kernel; in the simulator timings mean nothing, but
every access can be *seen*. :func:`trace` runs a kernel in the simulator with its array arguments
wrapped so that each element read or written is logged with the block and thread that touched it::

    log = trace(matmul_naive_kernel, (2, 2), (16, 16), a, b, c, names=("a", "b", "c"))
    log.reads("a") + log.reads("b")          # global loads of the inputs, all threads
    log.per_thread("r")                       # {(block, thread): reads}
    log.warp_addresses("a", block=(0, 0), warp=0)  # element indices warp 0 read, in order

Only global-memory arrays passed as arguments are traced; shared memory (``cuda.shared.array``) and
local variables are not, which is exactly the distinction the tiling lesson is about.
"""

from __future__ import annotations

import sys
import threading
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Any, Iterable, Sequence

import numpy as np

from . import runtime

__all__ = ["Access", "AccessLog", "trace"]

Dim = tuple[int, int, int]


@dataclass(frozen=True)
class Access:
    """One element access: which array, read or write, by which block/thread, at which element."""

    array: str
    kind: str  # "r" or "w"
    block: Dim
    thread: Dim
    index: int  # flat (C-order) element index within the array


@dataclass
class AccessLog:
    """Every traced access of one launch, in the order the simulator performed them."""

    accesses: list[Access] = field(default_factory=list)
    grid: Dim = (1, 1, 1)
    block: Dim = (1, 1, 1)
    shapes: dict[str, tuple[int, ...]] = field(default_factory=dict)
    itemsize: dict[str, int] = field(default_factory=dict)

    def _select(self, array: str | None, kind: str | None) -> Iterable[Access]:
        return (a for a in self.accesses if (array is None or a.array == array) and (kind is None or a.kind == kind))

    def reads(self, array: str | None = None) -> int:
        """Number of element reads (of one array, or of all)."""
        return sum(1 for _ in self._select(array, "r"))

    def writes(self, array: str | None = None) -> int:
        """Number of element writes (of one array, or of all)."""
        return sum(1 for _ in self._select(array, "w"))

    def bytes_moved(self, array: str | None = None) -> int:
        """Bytes read plus written (each access counted at the element's size)."""
        return sum(self.itemsize[a.array] for a in self._select(array, None))

    def per_thread(self, kind: str = "r", array: str | None = None) -> dict[tuple[Dim, Dim], int]:
        """``{(block, thread): count}`` of reads (``"r"``) or writes (``"w"``), threads that did none included."""
        counts: Counter = Counter((a.block, a.thread) for a in self._select(array, kind))
        out = {}
        for b in np.ndindex(*self.grid[::-1]):
            for t in np.ndindex(*self.block[::-1]):
                key = (tuple(reversed(b)), tuple(reversed(t)))
                out[key] = counts.get(key, 0)
        return out

    def max_per_thread(self, kind: str = "r", array: str | None = None) -> int:
        return max(self.per_thread(kind, array).values(), default=0)

    def per_element(self, array: str, kind: str = "r") -> np.ndarray:
        """How many times each element of ``array`` was accessed, shaped like the array."""
        counts = np.zeros(int(np.prod(self.shapes[array])), dtype=np.int64)
        for a in self._select(array, kind):
            counts[a.index] += 1
        return counts.reshape(self.shapes[array])

    def warp_addresses(self, array: str, block: Sequence[int] = (0, 0, 0), warp: int = 0,
                       kind: str | None = None, warp_size: int = 32) -> dict[int, list[int]]:
        """``{lane: [element indices in access order]}`` for one warp of one block.

        Lanes are numbered as on the GPU: linear thread id ``x + y*bx + z*bx*by`` divided into warps.
        """
        blk = tuple(block) + (0,) * (3 - len(block))
        bx, by, _ = self.block
        lanes: dict[int, list[int]] = defaultdict(list)
        for a in self._select(array, kind):
            if a.block != blk:
                continue
            tid = a.thread[0] + a.thread[1] * bx + a.thread[2] * bx * by
            if tid // warp_size == warp:
                lanes[tid % warp_size].append(a.index)
        return dict(sorted(lanes.items()))

    def transactions(self, array: str, kind: str = "r", segment_bytes: int = 32, warp_size: int = 32) -> int:
        """Memory transactions the accesses would need if each warp's k-th accesses were issued together
        and served in aligned ``segment_bytes`` sectors (32-byte sectors, as on NVIDIA GPUs).

        A coalesced warp reading 32 consecutive float32 needs 4 sectors; a warp reading with a stride of
        32 floats needs 32.
        """
        bx, by, _ = self.block
        groups: dict[tuple, set] = defaultdict(set)
        seen: Counter = Counter()
        size = self.itemsize[array]
        for a in self._select(array, kind):
            tid = a.thread[0] + a.thread[1] * bx + a.thread[2] * bx * by
            key = (a.block, tid // warp_size, tid)
            k = seen[key]
            seen[key] += 1
            groups[(a.block, tid // warp_size, k)].add(a.index * size // segment_bytes)
        return sum(len(s) for s in groups.values())


class _Traced(np.ndarray):
    """An ndarray view that logs element reads and writes made from simulator threads."""

    _log: list
    _name: str

    def __array_finalize__(self, obj: Any) -> None:
        self._log = getattr(obj, "_log", None)
        self._name = getattr(obj, "_name", "?")

    def _record(self, kind: str, idx: Any) -> None:
        th = threading.current_thread()
        block, thread = getattr(th, "blockIdx", None), getattr(th, "threadIdx", None)
        if self._log is None or block is None:
            return  # not inside a simulated kernel thread
        shape = self.shape
        if isinstance(idx, tuple) and len(idx) == len(shape) and all(isinstance(i, (int, np.integer)) for i in idx):
            flat = [int(np.ravel_multi_index(tuple(int(i) % s if s else 0 for i, s in zip(idx, shape)), shape))]
        elif isinstance(idx, (int, np.integer)) and len(shape) == 1:
            flat = [int(idx) % shape[0]]
        else:
            flat = np.arange(int(np.prod(shape))).reshape(shape)[idx].ravel().tolist()
        b, t = (block.x, block.y, block.z), (thread.x, thread.y, thread.z)
        self._log.extend(Access(self._name, kind, b, t, f) for f in flat)

    def __getitem__(self, idx: Any) -> Any:
        out = np.ndarray.__getitem__(self, idx)
        if getattr(threading.current_thread(), "blockIdx", None) is not None:
            self._record("r", idx)
            if isinstance(out, _Traced):  # a slice/row taken inside a kernel: trace it as plain data
                return out.view(np.ndarray)
        return out

    def __setitem__(self, idx: Any, value: Any) -> None:
        self._record("w", idx)
        np.ndarray.__setitem__(self, idx, value)


def _dim3(d: int | Sequence[int]) -> Dim:
    t = (int(d),) if isinstance(d, (int, np.integer)) else tuple(int(x) for x in d)
    return (t + (1, 1, 1))[:3]  # type: ignore[return-value]


def trace(kernel: Any, griddim: int | Sequence[int], blockdim: int | Sequence[int], *args: Any,
          names: Sequence[str] | None = None) -> AccessLog:
    """Launch ``kernel[griddim, blockdim](*args)`` in the simulator and log every access to the
    NumPy array arguments. Results are written into the arrays as in a normal launch.

    ``names`` labels the arguments (default: the kernel's parameter names). In gpu mode the kernel's
    Python source is run in Numba's simulator all the same (on the CPU, so keep the launch small):
    counting accesses needs the simulator on every machine. Kernels that call
    ``@cuda.jit(device=True)`` functions can only be traced in simulator mode.
    """
    from numba.cuda.simulator.cudadrv.devicearray import FakeCUDAArray

    from .kernels._launch import check_launch

    check_launch(griddim, blockdim)
    if names is None:
        import inspect

        fn = getattr(kernel, "fn", None) or getattr(kernel, "py_func", kernel)
        names = list(inspect.signature(fn).parameters)
    if not runtime.is_simulator():
        kernel = _simulated(kernel)
    log = AccessLog(grid=_dim3(griddim), block=_dim3(blockdim))
    raw: list = []
    call_args = []
    for name, arg in zip(names, args):
        if isinstance(arg, np.ndarray) and arg.ndim > 0:
            view = arg.view(_Traced)
            view._log, view._name = raw, name
            log.shapes[name] = arg.shape
            log.itemsize[name] = arg.itemsize
            call_args.append(FakeCUDAArray(view))
        else:
            call_args.append(arg)
    call_args += list(args[len(names):])
    switch = sys.getswitchinterval()
    try:
        sys.setswitchinterval(runtime.SIM_SWITCH_INTERVAL)  # as in simulator mode (set there at import)
        kernel[griddim, blockdim](*call_args)
    finally:
        sys.setswitchinterval(switch)
    log.accesses = raw
    return log


def _simulated(kernel: Any) -> Any:
    """The simulator's version of a ``@cuda.jit`` kernel, for tracing in gpu mode.

    numba.cuda is the real CUDA target in gpu mode, so the kernel's Python function is wrapped in
    the simulator's kernel class directly; while it runs, the simulator swaps the function's
    ``cuda`` global for its fake CUDA module.
    """
    from numba.cuda.simulator.kernel import FakeCUDAKernel

    py_func = getattr(kernel, "py_func", None)
    if py_func is None:
        raise TypeError(
            f"trace expects a @cuda.jit kernel, but got {type(kernel).__name__}. Pass the kernel itself "
            "(e.g. gpulab.kernels.copy_kernel), not a launcher function or an already configured launch."
        )
    runtime.harden_simulator()  # the same shared-memory fix simulator mode gets
    return FakeCUDAKernel(py_func, device=False)
