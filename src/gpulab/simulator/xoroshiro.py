"""``numba.cuda.random`` in the simulator: :mod:`gpulab.xoroshiro`'s host generator in place of numba's object-mode
fallback (the same states and draws, without its warnings, about 100x faster to create states)."""

from __future__ import annotations

import warnings
from typing import Any

from ..xoroshiro import init_state, init_states_cpu, next_u64, uniform_float32, uniform_float64

__all__ = ["install"]


def install() -> None:
    """In simulator mode, point ``numba.cuda.random``'s functions at these (idempotent; a kernel that imports
    them after ``import gpulab`` gets them). Does nothing in gpu mode, where they are device functions."""
    from .. import runtime

    if not runtime.is_simulator():
        return
    with warnings.catch_warnings():  # its import says "nopython=False ... has no effect" in the simulator
        warnings.simplefilter("ignore", DeprecationWarning)
        import numba.cuda.random as ncr

    if getattr(ncr, "_gpulab_random", False):
        return
    mod: Any = ncr
    fast = {
        "init_xoroshiro128p_states_cpu": init_states_cpu,
        "init_xoroshiro128p_state": init_state,
        "xoroshiro128p_next": next_u64,
        "xoroshiro128p_uniform_float32": uniform_float32,
        "xoroshiro128p_uniform_float64": uniform_float64,
    }
    mod._gpulab_originals = {name: getattr(ncr, name) for name in fast}
    for name, fn in fast.items():
        setattr(mod, name, fn)
    for name in ("xoroshiro128p_jump", "xoroshiro128p_normal_float32", "xoroshiro128p_normal_float64"):
        fn = getattr(ncr, name)
        mod._gpulab_originals[name] = fn
        setattr(mod, name, getattr(fn, "py_func", fn))  # numba's Python, calling the functions above
    mod._gpulab_random = True
