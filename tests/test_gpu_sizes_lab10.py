"""Lab 10's checks at their gpu-mode sizes, with the GPU's float32 work emulated in NumPy (the tier of
tests/test_gpu_sizes.py, for lab 10's problems, whose host adapters take other arguments).

The unscale kernel multiplies by a power of two (exact in float32), so its check allows no error at all; the
emulation proves that a correct kernel meets it on 4 M gradients with inf and nan among them. The ring and the
hierarchical all-reduce add at most 32 float32 buffers: their tolerance must hold for any order of those additions
(a learner's ring may add in its own order), which an emulation whose sums are rounded exactly proves.
"""

from __future__ import annotations

import gpulab  # noqa: F401 - picks the mode before numba is imported

import numpy as np
import pytest

from gpulab import problems, runtime

L = problems.lab10
F32 = np.float32


def _unscale(grads, inv_scale, clip, found_inf):
    """One float32 multiply per element, in place, the finite results clipped to [-clip, clip]; the flag set if
    any result is inf or nan."""
    xp = runtime.array_module(grads)
    g = grads * xp.float32(inv_scale)
    finite = xp.isfinite(g)
    grads[...] = xp.where(finite, xp.clip(g, -clip, clip), g)
    if not bool(finite.all()):
        found_inf[0] = 1


def _run_with_loss_scaling(batches, scale, growth_interval):
    """The lab's loop with the kernel replaced by :func:`_unscale` (float32 throughout)."""
    xp = runtime.array_module(batches)
    steps, n = batches.shape
    total, scales, applied, good = xp.zeros(n, F32), [], [], 0
    for t in range(steps):
        grads, found = batches[t].copy(), xp.zeros(1, np.int32)
        _unscale(grads, F32(1 / scale), F32(np.inf), found)
        scales.append(scale)
        applied.append(int(runtime.to_host(found)[0]) == 0)
        if not applied[-1]:
            scale, good = scale / 2, 0
            continue
        total += grads
        good += 1
        if good == growth_interval:
            scale, good = scale * 2, 0
    return scales, applied, total


def _exactly_rounded(rs, ag):
    """The reference phases, but each device's reduced chunk is the exact sum rounded once to float32 (the
    result of the best order of additions), so that the ring's own float32 order is one order among others."""

    def reduce_scatter(bufs):
        xp = runtime.array_module(*bufs)
        exact = xp.stack(bufs).astype(np.float64).sum(axis=0).astype(F32)
        sent = rs(bufs)
        b = L.chunk_bounds(bufs[0].size, len(bufs))
        for i, buf in enumerate(bufs):
            buf[b[i] : b[i + 1]] = exact[b[i] : b[i + 1]]
        return sent

    return reduce_scatter, ag


EMULATIONS = {
    "UNSCALE": {"host": _unscale, "launch": None},
    "SCALER": {"host": L.scaler_host(_run_with_loss_scaling)},
    "RING": {"host": L.ring_host(L.reduce_scatter, L.all_gather)},
    "HIERARCHICAL": {"host": L.hierarchical_host(L.hierarchical_allreduce)},
    # integer arithmetic on the host: the reference host is what any correct answer gives (run as gpulab's own)
    "BUDGET": {"trusted": True},
}


def test_every_lab10_problem_has_an_emulation():
    assert set(EMULATIONS) == {n for n in L.__all__ if isinstance(getattr(L, n), problems.lab10.Problem)}


@pytest.mark.parametrize("name", sorted(EMULATIONS))
def test_lab10_check_passes_a_float32_emulation_at_gpu_sizes(name):
    problem = getattr(L, name)
    res = problem.check(scale="gpu", race_check=False, ptx=None, **EMULATIONS[name])
    assert res.passed, res
    assert len(res.checks) >= len(problem.sizes_for("gpu"))


def test_the_largest_cases_are_gpu_sized():
    assert L.UNSCALE.gpu_sizes[-1] > 1 << 22 and L.RING.gpu_sizes[-1][1] > 1 << 20
    assert L.SCALER.gpu_sizes[-1][1] > 1 << 20 and L.HIERARCHICAL.gpu_sizes[-1][2] > 1 << 18


def test_the_ring_tolerance_holds_for_exactly_rounded_sums():
    other = L.ring_host(*_exactly_rounded(L.reduce_scatter, L.all_gather))
    assert L.RING.check(host=other, scale="gpu", race_check=False).passed
    hier = L.hierarchical_host(L.hierarchical_allreduce, *_exactly_rounded(L.reduce_scatter, L.all_gather))
    assert L.HIERARCHICAL.check(host=hier, scale="gpu", race_check=False).passed


def test_the_order_of_additions_does_change_float32_bits():
    """The tolerance is needed: with none, exactly rounded sums fail at gpu sizes (the tier has teeth)."""
    other = L.ring_host(*_exactly_rounded(L.reduce_scatter, L.all_gather))
    res = L.RING.check(host=other, scale="gpu", race_check=False, rtol=0, atol=0, sizes=[(8, (1 << 16) + 3)])
    assert not res.passed
