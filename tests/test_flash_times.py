"""Lesson 12's reading of attention timings (gpulab.transformer.flash_times): figures from counts and measurements."""

from __future__ import annotations

import pytest

from gpulab import results
from gpulab.transformer import flash, flash_times

H200_NOTEBOOK = {"unfused kernels": 1.91e-3, "fused kernel": 2.40e-3, "CuPy (cuBLAS + elementwise)": 0.63e-3}


def test_a_slower_fused_kernel_is_read_from_its_bandwidth_and_occupancy():
    """The H200's notebook run of 2026-12-04: fused 2.40 ms, unfused 1.91 ms."""
    lines = flash_times.explain(H200_NOTEBOOK, 4096, 64, device="NVIDIA H200", slots=(132, 2048))
    text = "\n".join(lines)
    pred = flash.predicted_bytes(4096, 4096, 64, causal=True)
    assert f"{pred.fused / 1e6:,.0f} MB (counted) in 2.40 ms (measured)" in text
    assert f"= {pred.fused / 2.40e-3 / 1e9:,.0f} GB/s = 2% of the H200 SXM's 4,800 GB/s (spec sheet)" in text
    assert "256 blocks of 256 threads = 65,536 threads" in text and "hold 270,336 at once: 24%" in text
    assert "the last block 256 times the first's" in text
    assert "5.6x fewer bytes and took 1.26x the time: bytes were not what it waited for" in text
    assert "neither path used more than 17% of the bandwidth" in text


def test_a_faster_fused_kernel_is_not_explained_away():
    lines = flash_times.explain({"naive": 2e-3, "fused": 1e-3}, 1024, 64, device="NVIDIA H200", slots=None)
    text = "\n".join(lines)
    assert "took 0.50x the unfused path's time (measured)" in text
    assert "not what it waited for" not in text and "multiprocessors" not in text  # no slots: no occupancy line


def test_an_unknown_gpu_gets_no_made_up_bandwidth():
    text = "\n".join(flash_times.explain(H200_NOTEBOOK, 4096, 64, device="Some Future GPU", slots=None))
    assert "GB/s" in text and "spec sheet" not in text and "neither path" not in text
    assert "no share of the memory's bandwidth: Some Future GPU: this exact model has no row" in text
    # an H200 NVL (the PCIe board) is not the SXM board: no share of the SXM's 4,800 GB/s, the nearest row named
    text = "\n".join(flash_times.explain(H200_NOTEBOOK, 4096, 64, device="NVIDIA H200 NVL", slots=None))
    assert "% of the H200 SXM" not in text and "the nearest row is H200 SXM" in text, text


def test_slots_that_could_not_be_read_are_said_in_place_of_the_occupancy_line():
    why = "numba-cuda could not read the GPU's SM count (get_current_device().MULTIPROCESSOR_COUNT: KeyError: 16)"
    text = "\n".join(flash_times.explain(H200_NOTEBOOK, 4096, 64, device="NVIDIA H200", slots=why))
    assert f"256 blocks of 256 threads = 65,536 threads; how many this GPU holds at once is not shown: {why}" in text
    rows = [{"label": k, "seconds": v, "n": 4096, "d": 64} for k, v in H200_NOTEBOOK.items()]
    text = "\n".join(flash_times.explain_recording(rows, "NVIDIA H200"))  # recorded before gpu_slots existed
    assert "not shown: the recording has no SM count (recorded before gpulab read it)" in text
    text = "\n".join(flash_times.explain_recording([{**r, "slots_unread": why} for r in rows], "NVIDIA H200"))
    assert f"not shown: {why}" in text


def test_times_without_both_paths_are_refused():
    with pytest.raises(ValueError, match="an unfused \\(or naive\\) and a fused time"):
        flash_times.explain({"CuPy": 1e-3}, 64, 16, device="NVIDIA H200")


def test_the_committed_h200_recording_is_read():
    rec = results.latest("attention", device="NVIDIA H200")
    if rec is None:
        pytest.skip("no H200 recording with an attention section")
    text = "\n".join(flash_times.explain_recording(rec.sections["attention"], rec.device))
    assert "fused kernel:" in text and "of the H200 SXM's 4,800 GB/s (spec sheet)" in text


def test_gpu_slots_read_the_sm_count_and_the_architectures_threads_per_sm(monkeypatch):
    """The slot count of lesson 12's occupancy line: numba-cuda's SM count and the limits table's threads per SM,
    None where either is missing (the simulator's device has no SM count)."""
    from numba import cuda

    class Device:
        def __init__(self, sms, cc):
            self.MULTIPROCESSOR_COUNT, self.compute_capability = sms, cc

    # numba's simulator: its device has no SM count; said, with the error, instead of None
    sim = flash_times.gpu_slots()
    assert sim.startswith("numba-cuda could not read the GPU's SM count (get_current_device().MULTIPROCESSOR_COUNT: ")
    assert "Error" in sim, sim
    monkeypatch.setattr(cuda, "get_current_device", lambda: Device(132, (9, 0)))
    assert flash_times.gpu_slots() == (132, 2048)  # an H200
    monkeypatch.setattr(cuda, "get_current_device", lambda: Device(40, (7, 5)))
    assert flash_times.gpu_slots() == (40, 1024)  # a T4
    monkeypatch.setattr(cuda, "get_current_device", lambda: Device(40, (1, 0)))  # not in the limits table
    assert flash_times.gpu_slots().startswith("the GPU's threads per SM are unknown: no SM limits for (1, 0)")

    def no_driver():
        raise RuntimeError("CUDA driver library cannot be found\n(traceback)")

    monkeypatch.setattr(cuda, "get_current_device", no_driver)
    assert flash_times.gpu_slots() == (
        "numba-cuda could not read the GPU's SM count (get_current_device().MULTIPROCESSOR_COUNT: RuntimeError: "
        "CUDA driver library cannot be found)"
    )
