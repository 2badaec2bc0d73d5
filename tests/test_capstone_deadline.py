"""The capstone's deadlines (gpulab.capstone_problems): a stuck grid-stride kernel is named after 10 s (it was
60 s), the course's kernels finish far inside it, and a matmul in 256-thread blocks keeps 60 s."""

from __future__ import annotations

import time

from numba import cuda

from gpulab import capstone
from gpulab.capstone_problems import BLOCK_TIMEOUT, GRID_STRIDE_TIMEOUT
from gpulab.exercises import races, run
from gpulab.kernels import nn_ops as k

LIBRARY = {op: getattr(k, kernel) for op, kernel in capstone.COURSE_KERNELS.items()}  # the course's kernels


@cuda.jit
def relu_stuck(x, y):
    i = cuda.grid(1)
    while i < y.size:
        y[i] = max(x[i], 0.0)
        i + cuda.gridsize(1)  # noqa: B018 - the mistake: the sum is not assigned, so i never advances


def test_a_stuck_kernel_is_named_within_the_short_deadline():
    start = time.perf_counter()
    res = capstone.Capstone().register("relu", relu_stuck)
    elapsed = time.perf_counter() - start
    assert res.status == "timeout", res
    assert f"did not finish within {GRID_STRIDE_TIMEOUT:g} s" in res.message and "infinite loop" in res.hint
    assert elapsed < GRID_STRIDE_TIMEOUT + 15, f"{elapsed:.1f} s"  # before: 60 s


def test_deadlines_per_kind_of_launch():
    cap = capstone.Capstone()
    for op, kern in LIBRARY.items():
        assert cap.problem(op, kern)["timeout"] == GRID_STRIDE_TIMEOUT
    assert cap.problem("matmul", k.gemm_kernel, block=(16, 16))["timeout"] == BLOCK_TIMEOUT


def test_the_course_kernels_finish_far_inside_the_deadline(monkeypatch):
    """The safety margin: every launch of every op's check with the course's kernel takes under a fifth of the
    deadline (measured 0.15 s at most, on the shared 2-core machine at load 10)."""
    times: list[float] = []
    original = run.run_with_deadline

    def timed(fn, timeout):
        start = time.perf_counter()
        try:
            return original(fn, timeout)
        finally:
            times.append(time.perf_counter() - start)

    monkeypatch.setattr(run, "run_with_deadline", timed)
    monkeypatch.setattr(races, "run_with_deadline", timed)
    cap = capstone.Capstone()
    for op, kern in LIBRARY.items():
        times.clear()
        assert cap.register(op, kern, trusted=True).passed, op
        assert times and max(times) < GRID_STRIDE_TIMEOUT / 5, (op, times)
