"""While a simulated kernel or device function runs, its globals' ``cuda`` and ``math`` are the simulator's.

numba-cuda's simulator binds a kernel's global ``cuda`` to its fake CUDA module for the time of a launch
(``kernelapi.swapped_cuda_module``, used by ``FakeCUDAKernel`` for kernels and device functions).
:func:`swapped_modules` does that and, in the same scan of the globals, binds any global that is the ``math``
module to :mod:`gpulab.simulator.ieee_math` and any function imported from it (``from math import exp``) to
that module's version: CUDA's ``inf`` / ``nan`` where Python's ``math`` raises. Same discipline as numba-cuda's:
the per-module lock and reference count it keeps (the first entry swaps, the last exit restores, also when the
kernel raised), so host code sees the real ``math`` again once the launch is over. :func:`install` (called by
:func:`gpulab.simulator.harden`) puts it in place of numba-cuda's function, where the simulator and
:mod:`gpulab.kernels.cooperative` look it up.
"""

from __future__ import annotations

import math
import threading
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from . import ieee_math

__all__ = ["install", "stand_ins", "swapped_modules"]

# id(math object) -> (the object, its stand-in): looked up by id, as a global may be unhashable
_STAND_INS: dict[int, tuple[Any, Any]] = {id(math): (math, ieee_math)}
_STAND_INS.update({id(getattr(math, n)): (getattr(math, n), getattr(ieee_math, n)) for n in ieee_math.REPLACED})


def stand_ins(globs: dict[str, Any], cuda: Any, fake_cuda: Any) -> dict[str, Any]:
    """name -> what it is bound to while a simulated kernel runs, for the globals ``globs`` that are ``cuda``
    (the fake CUDA module), the ``math`` module or one of the functions :mod:`.ieee_math` replaces."""
    ids = _STAND_INS
    out = {}
    for k in [k for k, v in globs.items() if v is cuda or id(v) in ids]:  # one pass, in C but for the hits
        v = globs[k]
        if v is cuda:
            out[k] = fake_cuda
        elif ids[id(v)][0] is v:
            out[k] = ids[id(v)][1]
    return out


# numba-cuda's own registry (per-globals locks, reference counts, saved values), so that an entry through its
# function and one through this one count together; versions without it get the same registry here. Looked up
# once, by install() (this runs at every device function call, in every simulated thread).
_OWN: tuple[Any, Any, Any, Any] = (threading.Lock(), defaultdict(threading.Lock), defaultdict(int), {})
_REGISTRY: list[Any] = []  # [numba.cuda, register lock, locks, reference counts, saved values]


def _registry() -> list[Any]:
    if not _REGISTRY:
        from numba import cuda
        from numba.cuda.simulator import kernelapi as api

        names = ("_locks_register_lock", "_globals_locks", "_swap_refcount", "_swap_orig")
        found = tuple(getattr(api, n, None) for n in names)
        _REGISTRY[:] = [cuda, *(found if all(v is not None for v in found) else _OWN)]
    return _REGISTRY


@contextmanager
def swapped_modules(fn: Any, fake_cuda_module: Any) -> Iterator[None]:
    """numba-cuda's ``swapped_cuda_module(fn, fake_cuda_module)``, which also swaps ``math`` (module docstring)."""
    cuda, register_lock, locks, refcount, saved = _REGISTRY or _registry()
    globs = fn.__globals__
    gid = id(globs)
    with register_lock:  # one lock per globals dict, created under a global lock (as numba-cuda)
        lock = locks[gid]
    with lock:
        if refcount[gid] == 0:  # the first entry swaps
            new = stand_ins(globs, cuda, fake_cuda_module)
            saved[gid] = {k: globs[k] for k in new}
            globs.update(new)
        refcount[gid] += 1
    try:
        yield
    finally:
        with lock:
            refcount[gid] -= 1
            if refcount[gid] == 0:  # the last exit restores
                globs.update(saved.pop(gid))
                del refcount[gid]


def install() -> None:
    """Use :func:`swapped_modules` wherever numba-cuda's simulator swaps ``cuda`` (idempotent)."""
    from numba.cuda.simulator import kernel as sim_kernel
    from numba.cuda.simulator import kernelapi

    _registry()
    kernelapi.swapped_cuda_module = swapped_modules
    sim_kernel.swapped_cuda_module = swapped_modules  # kernel.py imported the name
