"""Count and record a kernel's global-memory accesses, thread by thread, in the simulator (in either mode).

On a GPU, memory traffic is what usually limits a kernel; in the simulator timings mean nothing, but
every access can be *seen*. :func:`trace` runs a kernel in the simulator with its array arguments
wrapped so that each element read or written is logged with the block and thread that touched it::

    log = trace(matmul_naive_kernel, (2, 2), (16, 16), a, b, c, names=("a", "b", "c"))
    log.reads("a") + log.reads("b")          # global loads of the inputs, all threads
    log.per_thread("r")                       # {(block, thread): reads}
    log.warp_addresses("a", block=(0, 0), warp=0)  # element indices warp 0 read, in order

``log.accesses`` holds the accesses to the global-memory arrays passed as arguments only, not to shared memory or
local variables, which is exactly the distinction the tiling lesson is about. What happens on chip is counted
apart: each thread's ``cuda.syncthreads()`` (``log.barriers``), the warp-level calls, shuffles and votes
(``log.warp_ops``, summed over the threads; ``log.warp_calls`` per thread), and with ``shared=True`` every access
to a shared array (``log.shared``, named after the kernel's variable)::

    log = trace(sum_tree_kernel, 2, 256, x, partials, shared=True)
    log.max_barriers(), log.shared_writes("cache"), log.warp_ops["shfl_down_sync"]
    log.max_shared_reads()  # (17, ((0, 0, 0), (0, 0, 0))): the most shared reads by one thread, and which
    log.max_warp_calls()    # the most shuffles one thread made (0: the kernel has none)

Atomics are marked in the log (``Access.atomic``): ``log.atomics("hist")`` counts the updates of a global array made
with ``cuda.atomic.*``, and ``log.atomic_conflicts("hist")`` the most lanes of one warp whose atomic hit the same
element at once, which a GPU serialises (``shared=True`` for both: the same on shared arrays).
"""

from __future__ import annotations

import sys
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Any
from collections.abc import Iterable, Sequence

import numpy as np

from . import runtime, simulator
from .errors import UsageError
from .kernels._launch import ceil_div
from .simulator import Access
from .source import py_func

__all__ = ["Access", "AccessLog", "trace"]

Dim = tuple[int, int, int]


@dataclass
class AccessLog:
    """Every traced access of one launch, in the order the simulator performed them."""

    accesses: list[Access] = field(default_factory=list)
    grid: Dim = (1, 1, 1)
    block: Dim = (1, 1, 1)
    shapes: dict[str, tuple[int, ...]] = field(default_factory=dict)
    itemsize: dict[str, int] = field(default_factory=dict)
    # Byte strides of the arrays that are views with another layout than C order (a transpose, a slice): their
    # accesses are logged by C-order element number, and memory sectors are counted from the real addresses.
    strides: dict[str, tuple[int, ...]] = field(default_factory=dict)
    # On chip: cuda.syncthreads() each thread passed, {(block, thread): count}; warp-level calls (shuffles, votes,
    # syncwarp) by name, summed over the threads that made them; with trace(..., shared=True), every access to a
    # shared array, its ``array`` the name the kernel gives it (``cache = cuda.shared.array(...)``: "cache").
    barriers: dict[tuple[Dim, Dim], int] = field(default_factory=dict)
    warp_ops: Counter = field(default_factory=Counter)
    warp_calls: Counter = field(default_factory=Counter)  # (block, thread, warp function) -> calls
    shared: list[Access] = field(default_factory=list)
    shared_traced: bool = False

    def _select(self, array: str | None, kind: str | None) -> Iterable[Access]:
        return (a for a in self.accesses if (array is None or a.array == array) and (kind is None or a.kind == kind))

    def reads(self, array: str | None = None) -> int:
        """Number of element reads (of one array, or of all)."""
        return sum(1 for _ in self._select(array, "r"))

    def writes(self, array: str | None = None) -> int:
        """Number of element writes (of one array, or of all)."""
        return sum(1 for _ in self._select(array, "w"))

    def _shared(self, array: str | None, kind: str) -> int:
        if not self.shared_traced:
            raise UsageError(
                "shared-memory accesses were not logged in this trace: pass shared=True, e.g. "
                "trace(kernel, blocks, threads, *args, shared=True)."
            )
        return sum(1 for a in self.shared if (array is None or a.array == array) and a.kind == kind)

    def shared_reads(self, array: str | None = None) -> int:
        """Element reads of shared arrays (of the one the kernel names ``array``, or of all); needs ``shared=True``."""
        return self._shared(array, "r")

    def shared_writes(self, array: str | None = None) -> int:
        """Element writes of shared arrays (of the one the kernel names ``array``, or of all); needs ``shared=True``."""
        return self._shared(array, "w")

    def _lane(self, a: Access) -> int:
        """The linear thread id of ``a``'s thread in its block, ``x + y*bx + z*bx*by``, as the GPU numbers lanes."""
        bx, by, _ = self.block
        return a.thread[0] + a.thread[1] * bx + a.thread[2] * bx * by

    def _requests(self, accesses: Iterable[Access], warp_size: int) -> Iterable[tuple[tuple, Access]]:
        """Each access with its warp request ``(block, warp, k)``: a lane's k-th access is issued as one warp
        instruction with the other lanes' k-th."""
        seen: Counter = Counter()
        for a in accesses:
            tid = self._lane(a)
            k = seen[(a.block, tid)]
            seen[(a.block, tid)] += 1
            yield (a.block, tid // warp_size, k), a

    def _atomic_writes(self, array: str | None, shared: bool) -> list[Access]:
        if shared and not self.shared_traced:
            self._shared(array, "w")  # raises: say how to trace shared memory
        pool = self.shared if shared else self.accesses
        return [a for a in pool if a.atomic and a.kind == "w" and (array is None or a.array == array)]

    def atomics(self, array: str | None = None, shared: bool = False) -> int:
        """Number of ``cuda.atomic.*`` updates (one per element updated) of a global array argument, or of all;
        ``shared=True``: of the shared arrays instead (needs ``trace(..., shared=True)``)."""
        return len(self._atomic_writes(array, shared))

    def max_atomics_per_thread(self, array: str | None = None) -> int:
        """The most global ``cuda.atomic.*`` updates (of ``array``, or of any) one thread made."""
        counts: Counter = Counter((a.block, a.thread) for a in self._atomic_writes(array, False))
        return max(counts.values(), default=0)

    def atomic_conflicts(self, array: str | None = None, shared: bool = False, warp_size: int = 32) -> int:
        """The worst same-address conflict of one warp's atomics: the most lanes of one warp whose k-th atomic
        update (of ``array``, or of any array) hit the same element. 1 when no two lanes collide, 32 when a
        whole warp adds into one bin (the hardware then serves those 32 updates one after another); 0 when there
        were no atomics. ``shared=True`` counts the atomics on shared arrays (``trace(..., shared=True)``)."""
        targets: Counter = Counter(
            (*request, a.array, a.index) for request, a in self._requests(self._atomic_writes(array, shared), warp_size)
        )
        return max(targets.values(), default=0)

    def max_warp_calls(self, prefix: str = "shfl") -> int:
        """The most calls of the warp functions whose names start with ``prefix`` one thread made (default: the
        shuffles, ``shfl_sync``, ``shfl_down_sync``, ...; ``""``: every warp function); 0 when none was called."""
        counts: Counter = Counter()
        for (block, thread, name), n in self.warp_calls.items():
            if name.startswith(prefix):
                counts[(block, thread)] += n
        return max(counts.values(), default=0)

    def max_shared_reads(self, array: str | None = None) -> tuple[int, tuple[Dim, Dim] | None]:
        """``(reads, (block, thread))``: the most shared-memory element reads (of the shared array the kernel
        names ``array``, or of all) one thread made, and which thread; ``(0, None)`` for none. Needs ``shared=True``."""
        if not self.shared_traced:
            self._shared(array, "r")  # raises: say how to trace shared memory
        counts: Counter = Counter(
            (a.block, a.thread) for a in self.shared if a.kind == "r" and (array is None or a.array == array)
        )
        if not counts:
            return 0, None
        who, n = max(counts.items(), key=lambda kv: kv[1])
        return n, who

    def max_barriers(self) -> int:
        """The most ``cuda.syncthreads()`` one thread passed (0 for a kernel without a barrier)."""
        return max(self.barriers.values(), default=0)

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

    def warp_addresses(
        self, array: str, block: Sequence[int] = (0, 0, 0), warp: int = 0, kind: str | None = None, warp_size: int = 32
    ) -> dict[int, list[int]]:
        """``{lane: [element indices in access order]}`` for one warp of one block.

        Lanes are numbered as on the GPU: linear thread id ``x + y*bx + z*bx*by`` divided into warps.
        """
        blk = tuple(block) + (0,) * (3 - len(block))
        lanes: dict[int, list[int]] = defaultdict(list)
        for a in self._select(array, kind):
            if a.block != blk:
                continue
            tid = self._lane(a)
            if tid // warp_size == warp:
                lanes[tid % warp_size].append(a.index)
        return dict(sorted(lanes.items()))

    def byte_offsets(self, array: str) -> np.ndarray | None:
        """Byte offset from the first element of each element (by C-order element number) of an array passed
        as a strided view; None for C-ordered arrays, whose offset is the element number times the itemsize."""
        strides = self.strides.get(array)
        if strides is None:
            return None
        shape = self.shapes[array]
        return np.einsum("i...,i->...", np.indices(shape), np.asarray(strides)).ravel()

    def _sector(self, array: str, segment_bytes: int) -> Any:
        """``element number -> sector number`` for one array (its layout's real addresses)."""
        size, offsets = self.itemsize[array], self.byte_offsets(array)
        if offsets is None:
            return lambda i: i * size // segment_bytes
        return lambda i: int(offsets[i]) // segment_bytes

    def transactions(self, array: str, kind: str = "r", segment_bytes: int = 32, warp_size: int = 32) -> int:
        """Memory transactions the accesses would need if each warp's k-th accesses were issued together
        and served in aligned ``segment_bytes`` sectors (32-byte sectors, as on NVIDIA GPUs).

        A coalesced warp reading 32 consecutive float32 needs 4 sectors; a warp reading with a stride of
        32 floats needs 32.
        """
        groups: dict[tuple, set] = defaultdict(set)
        sector = self._sector(array, segment_bytes)
        for request, a in self._requests(self._select(array, kind), warp_size):
            groups[request].add(sector(a.index))
        return sum(len(s) for s in groups.values())

    def coalescing(
        self, array: str, kind: str = "r", segment_bytes: int = 32, warp_size: int = 32
    ) -> tuple[float, float]:
        """``(sectors per warp request, ideal sectors per request)`` for one array's reads or writes.

        A *request* is one access instruction of a warp (the k-th access of each lane, as in
        :meth:`transactions`); it costs the distinct aligned sectors its lanes touch (at the array's real
        addresses: a view's strides count, so a transpose's rows are not contiguous). Its ideal is
        what it would cost if the lanes of each row of the warp (same threadIdx.y and .z, consecutive
        threadIdx.x) touched consecutive elements: ceil(distinct elements x itemsize / 32) per row, where
        rows whose elements sit next to each other in memory, or share a sector, count as one row (two
        9-float rows of a 16 x 8 block that follow each other in memory: 72 bytes, 3 sectors, not 2 + 2).
        So 4 for 32 consecutive float32, 1 when all lanes read one element, and never more than the
        request's actual sectors. A ratio of 1 is coalesced; 8 means eight times the memory traffic.
        ``(0, 0)`` when there were none.
        """
        groups: dict[tuple, dict[tuple, set]] = defaultdict(lambda: defaultdict(set))
        for request, a in self._requests(self._select(array, kind), warp_size):
            groups[request][a.thread[1:]].add(a.index)
        if not groups:
            return 0.0, 0.0
        size, sector = self.itemsize[array], self._sector(array, segment_bytes)
        offsets = self.byte_offsets(array)
        offset = (lambda i: i * size) if offsets is None else (lambda i: int(offsets[i]))
        actual = ideal = 0
        for rows in groups.values():
            actual += len({sector(i) for elems in rows.values() for i in elems})
            ideal += _ideal_sectors([{offset(i) for i in e} for e in rows.values()], size, segment_bytes)
        return actual / len(groups), ideal / len(groups)


def _ideal_sectors(rows: list[set[int]], size: int, segment_bytes: int) -> int:
    """The ideal sectors of one warp request whose thread rows touch the byte offsets ``rows``: each row as if its
    elements were consecutive, rows that touch each other in memory (adjacent or overlapping elements, or one
    sector) merged into one run first. Every run needs ceil(its distinct bytes / segment) sectors, and runs share
    no sector, so the sum is at most the sectors the request touches."""
    touched = sorted({(o, r) for r, offs in enumerate(rows) for o in offs})
    parent = list(range(len(rows)))

    def root(r: int) -> int:
        while parent[r] != r:
            parent[r] = parent[parent[r]]
            r = parent[r]
        return r

    for (o1, r1), (o2, r2) in zip(touched, touched[1:]):
        if o2 <= o1 + size or (o1 + size - 1) // segment_bytes >= o2 // segment_bytes:  # next to it, or one sector
            parent[root(r2)] = root(r1)
    runs: dict[int, set[int]] = defaultdict(set)
    for r, offs in enumerate(rows):
        runs[root(r)] |= offs
    return sum(ceil_div(len(offs) * size, segment_bytes) for offs in runs.values())


def _dim3(d: int | Sequence[int]) -> Dim:
    t = (int(d),) if isinstance(d, (int, np.integer)) else tuple(int(x) for x in d)
    return (t + (1, 1, 1))[:3]  # type: ignore[return-value]


def trace(
    kernel: Any,
    griddim: int | Sequence[int],
    blockdim: int | Sequence[int],
    *args: Any,
    names: Sequence[str] | None = None,
    shared: bool = False,
) -> AccessLog:
    """Launch ``kernel[griddim, blockdim](*args)`` in the simulator and log every access to the
    NumPy array arguments. Results are written into the arrays as in a normal launch.

    Each thread's barriers and the warp-level calls are counted as well; ``shared=True`` also logs every
    access to the kernel's shared arrays (in ``log.shared``; each of them is logged, so it is slower).

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

        names = list(inspect.signature(py_func(kernel)).parameters)
    if not runtime.is_simulator():
        kernel = simulator.simulated(kernel)
    log = AccessLog(grid=_dim3(griddim), block=_dim3(blockdim))
    raw: list = []
    call_args = []
    for name, arg in zip(names, args):
        if isinstance(arg, np.ndarray) and arg.ndim > 0:
            view = simulator.watch(arg, name, raw)
            log.shapes[name] = arg.shape
            log.itemsize[name] = arg.itemsize
            if arg.size > 1 and not arg.flags.c_contiguous:
                log.strides[name] = arg.strides
            call_args.append(FakeCUDAArray(view))
        else:
            call_args.append(arg)
    call_args += list(args[len(names) :])
    switch = sys.getswitchinterval()
    try:
        sys.setswitchinterval(runtime.SIM_SWITCH_INTERVAL)  # as in simulator mode (set there at import)
        with simulator.instrument(watch_shared=shared) as ins:
            kernel[griddim, blockdim](*call_args)
    finally:
        sys.setswitchinterval(switch)
    log.accesses = raw
    log.barriers = dict(ins.barriers)
    log.warp_ops = Counter(ins.warp_ops)
    log.warp_calls = Counter(ins.warp_calls)
    if shared:
        log.shared = [a for _, logged, _ in ins.shared_logs.values() for a in logged]
        log.shared_traced = True
    return log
