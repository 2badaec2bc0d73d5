"""doctor's GPU lines: the oldest GPU the course supports (the PTX check's target, sm_75: a T4) is stated for a GPU
older than it, and not for one at or above it. The device is faked: no GPU is needed."""

from __future__ import annotations

import pytest

from gpulab import doctor, timing
from gpulab.exercises import ptxcheck


def _lines(monkeypatch, cc, name):
    from numba import cuda

    class Device:
        compute_capability, MULTIPROCESSOR_COUNT = cc, 56

    class Context:
        def get_memory_info(self):
            return 15 << 30, 16 << 30

    monkeypatch.setattr(cuda, "get_current_device", Device)
    monkeypatch.setattr(cuda, "current_context", Context)
    monkeypatch.setattr(timing, "device_name", lambda: name)
    return doctor._gpu_lines()


@pytest.mark.parametrize(("cc", "name"), [((6, 0), "Tesla P100-PCIE-16GB"), ((7, 0), "Tesla V100-PCIE-16GB")])
def test_a_gpu_older_than_the_courses_floor_is_told_so(monkeypatch, cc, name):
    lines = _lines(monkeypatch, cc, name)
    assert not any(line.startswith("gpu: could not open") for line in lines), lines
    floor = [line for line in lines if "the oldest GPU the course supports" in line]
    assert len(floor) == 1, lines
    assert floor[0].startswith(f"compute capability {cc[0]}.{cc[1]} is older than 7.5 (a T4, Colab's)"), floor
    assert "compile kernels for sm_75" in floor[0] and "use a GPU of 7.5 or newer" in floor[0], floor
    assert ptxcheck.TARGET == (7, 5)  # the floor doctor states is the PTX row's target (target_words says so)
    assert "the oldest GPU the course supports" in ptxcheck.target_words()


@pytest.mark.parametrize(("cc", "name"), [((7, 5), "Tesla T4"), ((9, 0), "NVIDIA H200")])
def test_a_supported_gpu_gets_no_floor_line(monkeypatch, cc, name):
    lines = _lines(monkeypatch, cc, name)
    assert f"compute capability: {cc[0]}.{cc[1]}" in lines, lines
    assert not any("oldest GPU the course supports" in line for line in lines), lines
