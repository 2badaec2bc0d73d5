"""Everything that patches or instruments Numba's CUDA simulator, in one place.

Numba's simulator runs each CUDA thread of a block as a Python thread. gpulab changes it in these ways,
installed once by :func:`harden` (called at import in simulator mode, and by :func:`simulated` when
:mod:`gpulab.trace` runs a kernel in the simulator in gpu mode):

1. ``cuda.shared.array`` allocates a block's array under a lock (numba-cuda's own lookup is not
   thread-safe: two threads of one block could get different arrays and a correct tiled kernel would
   compute garbage);
2. each simulator thread counts the ``cuda.syncthreads()`` it has passed (its *barrier epoch*);
3. each simulator thread knows when it is inside a ``cuda.atomic.*`` call, and integer atomics wrap around
   silently as on a GPU (NumPy would warn "overflow encountered");
4. array indexing inside kernels takes one Python call instead of three (:func:`fast_arrays`), which
   halves the simulator's cost per loop iteration (same results, same exceptions);
5. a block's threads wait at ``cuda.syncthreads()`` on a condition instead of numba-cuda's busy
   polling loop (:mod:`gpulab.simulator.blocks`; same semantics), when they run as Python threads;
6. most blocks run their CUDA threads in turn in one Python thread instead: one after another when they
   cannot wait for each other, barrier by barrier when their waits are ``cuda.syncthreads()``
   statements and warp calls, in the kernel or the device functions it calls (:mod:`gpulab.simulator.in_turn`
   reads them; schedules a GPU may pick, the same every run, reversed in the harness's re-run). Measured on
   2 cores: 6.6 us per thread of an ``add`` kernel and 9.4 us with a barrier, against 0.3 and 0.6 ms as
   Python threads;
7. every new ``cuda.shared.array`` and ``cuda.local.array`` starts with a filler instead of leftovers or zeros
   (NaN for floating point, ``0xBAADF00D`` for integers), so a value read before it was written shows in the
   result; each block gets its own shared arrays, dynamic shared memory (``cuda.shared.array(0, ...)``)
   included (:mod:`gpulab.simulator.memory`, which also names a result that shows an integer filler);
8. ``math`` in a kernel or device function gives what CUDA gives where Python's ``math`` raises: ``log(0.0)`` is
   ``-inf``, ``exp(1000.0)`` ``inf``, ``sqrt(-1.0)`` ``nan``, and a float32 argument a float32 result
   (``exp(np.float32(100))`` is inf, as ``expf``): while it runs, its global ``math`` and the functions imported
   from it are :mod:`gpulab.simulator.ieee_math`'s (:mod:`gpulab.simulator.swap`, with the simulator's ``cuda``);
9. the simulator's ``cuda`` has the warp functions numba-cuda's lacks (``shfl_down_sync`` and the other shuffles,
   votes, ``syncwarp``, ``activemask``), with CUDA's rules and a clear error where a GPU's result is undefined or
   it would hang (:mod:`gpulab.simulator.warps`);
10. the host's copies, launches and synchronizes are told with their stream, its device and pinned allocations
    are told too, and ``cuda.pinned_array``'s arrays are known as pinned (:mod:`gpulab.simulator.streams`; what
    they do is unchanged);
11. a launch a GPU refuses (more than 1024 threads in a block, too many along one axis, a float grid) is refused
    with gpulab's launch error, and one of millions of threads is warned about, or refused, with the time it would
    take (:mod:`gpulab.simulator.limits`); a list or a string passed as a kernel argument is refused at the launch
    (:mod:`gpulab.simulator.launches`);
12. ``numba.cuda.random``'s generator gives the same states and draws without object mode's warnings, and creates
    states about 100x faster (:mod:`gpulab.simulator.xoroshiro`);
13. ``numba.vectorize([...], target="cuda")`` and ``guvectorize`` work, through numba-cuda's own dispatch
    (:mod:`gpulab.simulator.ufuncs`);
14. launching a device function, launching a kernel inside a kernel and calling a device function from the host
    are refused with numba-cuda's error on a GPU and what to do (:mod:`gpulab.simulator.device_calls`);
15. on the host, a device array (``cuda.to_device``'s) has numba-cuda's attributes only: ``d.sum()``, ``d.copy()``,
    ``d * 2`` are refused as on a GPU with what to do; ``==`` is object's, and a NumPy operand (``d - x``, ``d == x``)
    takes its turn through ``__array__`` as there (:mod:`gpulab.simulator.host_arrays`);
16. a launch from a thread that is not inside a kernel first stops and waits for a check the harness could not stop
    at its deadline, which may still hold the simulator's one kernel context (:mod:`gpulab.simulator.stopping`,
    which also stops stuck threads: :func:`stop_threads`, :func:`stop_thread`); only a thread inside a kernel gets
    the launch-in-a-kernel error.

Nothing is recorded unless an :class:`Instruments` is active (``with instrument(...) as ins:``): it
collects shared-memory sizes per block, every access to shared arrays, each thread's final
barrier count, the number of calls of each warp function, the host's stream calls (``stream_ops``) and its
device and pinned allocations among them (``allocations``).
:class:`Watched` is the one array view that logs element accesses (of arguments in :func:`gpulab.trace.trace`
and the exercise harness, of shared arrays here) as :class:`Access` records (both in
:mod:`gpulab.simulator.watched`, re-exported here). Used by :mod:`gpulab.trace` and
:mod:`gpulab.exercises`; :mod:`gpulab.runtime` only decides the mode.
"""

from __future__ import annotations

import linecache
import sys
import threading
from collections import Counter
from typing import Any

import numpy as np

from ..source import py_func
from .blocks import THREAD_DONE, run_block
from .memory import DYNAMIC, Dim
from .memory import LOCK as _LOCK
from .memory import dynamic_shared_array, fast_arrays, filler, filler_hint, shared_array, uninitialised
from . import device_calls, host_arrays, launches, limits, recordings, stopping, streams, ufuncs, warps, xoroshiro
from .stopping import KernelTimeout, leave_running, settle, stop_thread, stop_threads
from .swap import install as install_swap
from .watched import Access, Watched, flat_indices, watch

__all__ = [
    "Access",
    "Instruments",
    "KernelTimeout",
    "Watched",
    "flat_indices",
    "harden",
    "instrument",
    "leave_running",
    "settle",
    "shared_array",
    "simulated",
    "stop_thread",
    "stop_threads",
    "watch",
    "fast_arrays",
    "dynamic_shared_array",
    "filler",
    "filler_hint",
    "uninitialised",
]

_ACTIVE: list[Instruments] = []
_ATOMICS = (
    "add",
    "sub",
    "and_",
    "or_",
    "xor",
    "inc",
    "dec",
    "exch",
    "max",
    "min",
    "nanmax",
    "nanmin",
    "compare_and_swap",
    "cas",
)


class Instruments:
    """What one instrumented launch records (see :func:`instrument`)."""

    def __init__(self, watch_shared: bool = False) -> None:
        self.watch_shared = watch_shared
        self.shared_bytes: dict[tuple, int] = {}  # (block, (file, line)) -> bytes
        self.shared_logs: dict[tuple, tuple[str, list, tuple]] = {}  # (file, line) -> (name, log, shape)
        self.shared_itemsize: dict[tuple, int] = {}  # (file, line) -> bytes per element
        self.barriers: dict[tuple[Dim, Dim], int] = {}  # (block, thread) -> cuda.syncthreads() passed
        self.warp_ops: Counter[str] = Counter()  # warp function (shfl_down_sync, ...) -> calls, all threads
        self.warp_calls: Counter[tuple[Dim, Dim, str]] = Counter()  # (block, thread, warp function) -> calls
        self.stream_ops: list[streams.StreamOp] = []  # copies, launches, synchronizes, in the order called
        self.allocations: list[streams.Allocation] = []  # device and pinned allocations, each placed among them
        self.mark = 0  # its number once entered: it notes only threads of blocks started later (recordings.py)

    def __enter__(self) -> Instruments:
        harden()
        with _LOCK:
            self.mark = recordings.number()
            _ACTIVE.append(self)
        return self

    def __exit__(self, *exc: Any) -> None:
        with _LOCK:
            _ACTIVE.remove(self)

    def _on_shared(self, res: np.ndarray, key: tuple, block: Dim, dynamic: int | None = None) -> np.ndarray:
        """Note a block's new shared array (``dynamic``: the bytes of its dynamic shared memory, which every
        ``cuda.shared.array(0, ...)`` views) and return it, or a view that logs its accesses."""
        if dynamic is None:
            self.shared_bytes[(block, key)] = res.nbytes
        else:
            self.shared_bytes[(block, DYNAMIC)] = dynamic
        if not self.watch_shared:
            return res
        if key not in self.shared_logs:
            self.shared_itemsize[key] = res.itemsize
            line = linecache.getline(key[0], key[1]).strip()
            label = line.split("=")[0].strip() if "=" in line else f"shared array (line {key[1]})"
            self.shared_logs[key] = (label, [], res.shape)
        label, log, _ = self.shared_logs[key]
        return watch(res, label, log, reads=True, lines=True)

    def shared_bytes_per_block(self) -> int:
        """The most shared memory one block allocated (bytes)."""
        per_block: dict[Dim, int] = {}
        for (block, _), n in self.shared_bytes.items():
            per_block[block] = per_block.get(block, 0) + n
        return max(per_block.values(), default=0)

    def unequal_barriers(self) -> tuple[Dim, tuple[Dim, int], tuple[Dim, int]] | None:
        """``(block, (thread, count), (thread, other count))`` for the first block whose threads
        passed different numbers of ``cuda.syncthreads()``, else None."""
        per_block: dict[Dim, dict[int, Dim]] = {}
        for (block, thread), n in sorted(self.barriers.items()):
            per_block.setdefault(block, {}).setdefault(n, thread)
        for block, counts in per_block.items():
            if len(counts) > 1:
                (n_hi, t_hi), (n_lo, t_lo) = max(counts.items()), min(counts.items())
                return block, (t_hi, n_hi), (t_lo, n_lo)
        return None


def instrument(watch_shared: bool = False) -> Instruments:
    """``with instrument() as ins:`` records shared-memory sizes and barrier counts of every launch
    in the block; ``watch_shared=True`` also logs every shared-memory access (in ``ins.shared_logs``)."""
    return Instruments(watch_shared)


def harden() -> None:
    """Install gpulab's changes to the simulator (idempotent; see the module docstring)."""
    from numba.cuda.simulator import kernel as sim_kernel
    from numba.cuda.simulator import kernelapi

    fast_arrays()
    install_swap()  # kernels' `math` -> ieee_math while they run
    warps.install()  # cuda.shfl_down_sync and the other warp functions
    limits.install()  # kernel[1, 2048] refused, as a GPU refuses it
    launches.install()  # kernel[4, 256]([1.0, 2.0], ...) refused at the launch, as numba-cuda's typing refuses it
    xoroshiro.install()  # numba.cuda.random: silent, fast, the same numbers
    if not streams.ON_OP:
        streams.ON_OP.append(_on_stream_op)
    streams.install()  # copies, launches and synchronizes with their stream
    ufuncs.install()  # vectorize(target="cuda") and guvectorize run numba-cuda's own dispatch
    stopping.install()  # a launch from the host first stops a check left running (before device_calls' test)
    device_calls.install()  # dev[1, 32](...), kernel[...] in a kernel, dev(x) on the host: refused as on a GPU
    host_arrays.install()  # d.sum(), d * 2 on the host: refused as on a GPU
    cls = kernelapi.FakeCUDAShared
    if getattr(cls.array, "_gpulab_locked", False):
        return
    original = cls.array

    def array(self: Any, shape: Any, dtype: Any, alignment: Any = None) -> Any:
        if alignment is not None:  # unsupported: numba-cuda's error
            return original(self, shape, dtype, alignment)  # type: ignore[call-arg]
        caller = sys._getframe(1)
        key = (caller.f_code.co_filename, caller.f_lineno)
        if shape == 0:  # dynamic shared memory, sized by the launch
            return dynamic_shared_array(self, key, dtype, _on_shared)
        return shared_array(self, key, shape, dtype, _on_shared)

    def wrap_atomic(orig: Any) -> Any:
        def atomic(*a: Any, **k: Any) -> Any:
            th = threading.current_thread()
            th._gpulab_atomic = True  # type: ignore[attr-defined]
            try:
                if len(a) > 1 and _integer(a[1]):  # (self, array, index, val): integers wrap, as on a GPU
                    with np.errstate(over="ignore"):
                        return orig(*a, **k)
                return orig(*a, **k)
            finally:
                th._gpulab_atomic = False  # type: ignore[attr-defined]

        return atomic

    def local_array(self: Any, shape: Any, dtype: Any, alignment: Any = None) -> Any:
        if alignment is not None:
            raise RuntimeError("Array alignment is not supported in cudasim")
        return uninitialised(shape, dtype)

    kernelapi.FakeCUDALocal.array = local_array  # type: ignore[method-assign]

    for name in _ATOMICS:
        orig = getattr(kernelapi.FakeCUDAAtomic, name, None)
        if orig is not None:
            setattr(kernelapi.FakeCUDAAtomic, name, wrap_atomic(orig))

    thread_cls = sim_kernel.BlockThread
    orig_sync, orig_run = thread_cls.syncthreads, thread_cls.run

    def syncthreads(th: Any) -> Any:
        th._gpulab_epoch = getattr(th, "_gpulab_epoch", 0) + 1
        block = getattr(th._manager, "_gpulab_block", None)
        if block is None:
            return orig_sync(th)
        return block.wait(th)

    def run(th: Any) -> None:
        escaped: BaseException | None = None
        try:
            stopping.started(th)  # stoppable from here: inside the try, so a stop always reaches the finally
            orig_run(th)
        except BaseException as exc:  # noqa: BLE001 - a second stop landed in numba-cuda's own handler
            escaped = exc
        finally:
            stopping.leaving(th)  # no stop may land in the bookkeeping below (the block would wait for ever)
            if escaped is not None and th.exception is None:  # else the block counts this thread as finished
                th.exception = (escaped, escaped.__traceback__)
            _thread_done(th)
            block = getattr(th._manager, "_gpulab_block", None)
            if block is not None:
                block.finished(th)

    warps.ON_CALL.append(_on_warp_call)
    THREAD_DONE.append(_thread_done)  # threads run in turn (blocks.py) finish inside one BlockThread
    sim_kernel.BlockManager.run = run_block  # type: ignore[method-assign]
    thread_cls.syncthreads = syncthreads  # type: ignore[method-assign]
    thread_cls.run = run  # type: ignore[method-assign]
    thread_cls._gpulab_guarded = True  # type: ignore[attr-defined]  # stop_threads waits for stopping.started
    array._gpulab_locked = True  # type: ignore[attr-defined]
    cls.array = array  # type: ignore[method-assign]


def _integer(array: Any) -> bool:
    """Whether ``array`` (an atomic's target) holds integers. NumPy warns "overflow encountered in scalar add"
    where a GPU's integer atomics wrap silently (a count added to the ``0xBAADF00D`` filler of
    :func:`uninitialised`, a ``uint32`` taken below 0): only those warnings are silenced, only inside the atomic
    (``np.errstate`` is per thread); floating-point overflow to inf still warns."""
    try:
        return np.dtype(getattr(array, "dtype", None)).kind in "iu"
    except TypeError:
        return False


def _on_shared(res: np.ndarray, key: tuple, block: Dim, dynamic: int | None) -> np.ndarray:
    """Active instruments see each new shared array (called with the lock held; see ``memory.shared_array``), those
    begun before its block started aside."""
    th = threading.current_thread()
    for ins in _ACTIVE:
        if recordings.belongs(ins.mark, th):
            res = ins._on_shared(res, key, block, dynamic)
    return res


def _on_warp_call(name: str) -> None:
    """Active instruments count a call of the warp function ``name`` by the simulated CUDA thread that makes it
    (the current one: a thread's own Python thread, or its block's while the block runs its threads in turn),
    those begun before its block started aside."""
    if _ACTIVE:
        th: Any = threading.current_thread()
        b, t = getattr(th, "blockIdx", None), getattr(th, "threadIdx", None)
        key = ((b.x, b.y, b.z), (t.x, t.y, t.z), name) if b is not None and t is not None else None
        with _LOCK:
            for ins in _ACTIVE:
                if not recordings.belongs(ins.mark, th):
                    continue
                ins.warp_ops[name] += 1
                if key is not None:
                    ins.warp_calls[key] += 1


def _on_stream_op(build: Any) -> None:
    """Active instruments note a host call on a stream or an allocation (``build()`` makes its
    :class:`~.streams.StreamOp` or :class:`~.streams.Allocation`, placed after the stream calls noted so far)."""
    if _ACTIVE:
        op = build()
        with _LOCK:
            for ins in _ACTIVE:
                if isinstance(op, streams.Allocation):
                    ins.allocations.append(op._replace(after=len(ins.stream_ops)))
                else:
                    ins.stream_ops.append(op)


def _thread_done(th: Any) -> None:
    """Active instruments note how many barriers the simulated CUDA thread ``th`` passed, those begun before its
    block started aside (a thread of an earlier launch that is still leaving)."""
    if _ACTIVE:
        b, t = th.blockIdx, th.threadIdx
        key = ((b.x, b.y, b.z), (t.x, t.y, t.z))
        for ins in list(_ACTIVE):
            if recordings.belongs(ins.mark, th):
                ins.barriers[key] = getattr(th, "_gpulab_epoch", 0)


def simulated(kernel: Any) -> Any:
    """The simulator's version of a ``@cuda.jit`` kernel (for tracing in gpu mode).

    numba.cuda is the real CUDA target in gpu mode, so the kernel's Python function is wrapped in
    the simulator's kernel class directly; while it runs, the simulator swaps the function's
    ``cuda`` global for its fake CUDA module.
    """
    from numba.cuda.simulator.kernel import FakeCUDAKernel

    fn = py_func(kernel)
    if fn is kernel or not callable(fn):
        raise TypeError(
            f"trace expects a @cuda.jit kernel, but got {type(kernel).__name__}. Pass the kernel itself "
            "(e.g. gpulab.kernels.copy_kernel), not a launcher function or an already configured launch."
        )
    harden()
    return FakeCUDAKernel(fn, device=False)
