"""gpulab.multigpu: the ring all-reduce time matches the bytes lesson 10's ring sends; step time and crossover."""

from __future__ import annotations

import numpy as np
import pytest

from gpulab import hardware, multigpu, scaling
from gpulab.errors import UsageError


@pytest.mark.parametrize("n", [2, 3, 4, 8])
def test_allreduce_time_uses_the_bytes_lesson_10s_ring_sends(n):
    buf = np.ones(4096, np.float32)
    _, sent = scaling.ring_allreduce([buf] * n)
    assert multigpu.allreduce_seconds(buf.nbytes, n, 10.0) == pytest.approx(sent / 10e9, rel=1e-3)
    assert multigpu.allreduce_seconds(buf.nbytes, n, 10.0, latency_us=1) == pytest.approx(
        sent / 10e9 + 2 * (n - 1) * 1e-6, rel=1e-3
    )


def test_step_time_and_crossover():
    assert multigpu.allreduce_seconds(1e9, 1, 10) == 0
    t = multigpu.step_seconds(1.0, 1e9, 4, 10.0)
    assert t["compute"] == 0.25 and t["communication"] == pytest.approx(1.5 * 0.1)
    assert t["step"] == pytest.approx(0.4)
    assert multigpu.step_seconds(1.0, 1e9, 4, 10.0, overlap=True)["step"] == 0.25
    assert multigpu.step_seconds(1.0, 1e9, 4, 10.0, fixed_global_batch=False)["compute"] == 1.0
    n = multigpu.crossover_gpus(1.0, 1e9, 10.0)
    before = multigpu.step_seconds(1.0, 1e9, n - 1, 10.0)
    after = multigpu.step_seconds(1.0, 1e9, n, 10.0)
    assert before["communication"] <= before["compute"] and after["communication"] > after["compute"]
    assert multigpu.crossover_gpus(1.0, 1e9, 450.0) > multigpu.crossover_gpus(1.0, 1e9, 31.5)  # faster link, later
    assert multigpu.crossover_gpus(1.0, 1.0, 1e6, max_gpus=8) is None
    with pytest.raises(UsageError):
        multigpu.allreduce_seconds(1.0, 0, 10)


def test_hardware_re_exports_the_model_lesson_11_and_lab_11_call():
    assert hardware.allreduce_seconds is multigpu.allreduce_seconds
    assert hardware.step_seconds is multigpu.step_seconds
    assert hardware.crossover_gpus is multigpu.crossover_gpus
