"""gpulab.hardware: spec-sheet tables name their source and date."""

from __future__ import annotations

import numpy as np
import pytest

from gpulab import hardware
from gpulab.errors import UsageError


def test_every_table_entry_names_a_dated_source():
    for d in hardware.DEVICES.values():
        assert d.source.startswith("as of ") and " from " in d.source, d.name
        assert d.kind in ("CPU", "GPU", "TPU") and d.memory_gbps > 0 and d.memory_gb > 0
    for lk in hardware.INTERCONNECTS.values():
        assert lk.source.startswith("as of ") and lk.gbps > 0
    assert {"T4", "L4", "A100", "H100", "H200"} <= set(hardware.GPUS)
    assert len(hardware.TPUS) >= 3 and len(hardware.CPUS) >= 2


def test_spec_sheet_figures_are_consistent():
    g = hardware.GPUS
    assert g["H200"].bf16 == g["H100"].bf16 and g["H200"].memory_gbps > g["H100"].memory_gbps
    assert g["T4"].memory_type == "GDDR6" and g["H100"].memory_type == "HBM3" and g["H200"].memory_type == "HBM3e"
    for d in hardware.DEVICES.values():  # tensor units are faster than FP32 units where both exist
        if d.fp32 and d.bf16:
            assert d.bf16 >= d.fp32, d.name
    rows = hardware.spec_rows(["T4", "TPU v5e"])
    assert [r["device"] for r in rows] == ["T4", "TPU v5e (per chip)"] and rows[1]["FP32"] is None


def test_lookup_by_key_or_name_part_and_helpful_errors():
    assert hardware.device("H100") is hardware.GPUS["H100"]
    assert hardware.device("v5e") is hardware.TPUS["TPU v5e"]
    assert hardware.link("NVLink 4").gbps == 450
    with pytest.raises(UsageError, match="known: "):
        hardware.device("GTX 480")
    with pytest.raises(UsageError, match="fp32, tf32"):
        hardware.GPUS["T4"].peak("fp16")


def test_roofline_numbers():
    assert hardware.matmul_intensity(1024, 1024, 1024) == pytest.approx(2 * 1024**3 / (4 * 3 * 1024**2))
    assert hardware.matmul_intensity(1, 1, 1, 2) == pytest.approx(1 / 3)
    assert hardware.ridge_point("T4") == pytest.approx(8100 / 320)
    assert hardware.attainable_gflops(1.0, 8.1, 320) == 320
    assert hardware.attainable_gflops(1e4, 8.1, 320) == pytest.approx(8100)
    with pytest.raises(UsageError, match="no tf32 peak"):
        hardware.ridge_point("T4", "tf32")
    with pytest.raises(UsageError):
        hardware.matmul_intensity(0, 2, 2)


def test_attainable_takes_arrays():
    out = hardware.attainable_gflops(np.array([0.25, 1e4]), 989, 3350)
    assert out.tolist() == [0.25 * 3350, 989e3]
    with pytest.raises(UsageError):
        hardware.attainable_gflops(np.array([1.0, 0.0]), 1, 1)


def test_every_row_names_its_pages_and_labels_each_figure():
    kinds = (hardware.SPEC_SHEET, hardware.MEASURED, hardware.ESTIMATE, hardware.UNVERIFIED)
    for key, d in hardware.DEVICES.items():
        figs = d.figure_kinds()
        assert set(figs) == {f for f in hardware.FIGURES if getattr(d, f) is not None}, key
        for field, kind in figs.items():
            assert kind.startswith(kinds), (key, field, kind)
            if kind != hardware.SPEC_SHEET:  # anything but a spec-sheet value says why
                assert ":" in kind and len(kind.split(":", 1)[1].strip()) > 10, (key, field, kind)
        assert d.checked == hardware.CHECKED and d.refs, key  # every row was checked against public pages
        for ref in d.refs:
            assert ref.url.startswith("https://") and ref.title and ref.date, (key, ref)
    for key, lk in hardware.INTERCONNECTS.items():
        assert lk.gbps_kind.startswith(kinds) and lk.latency_kind.startswith(hardware.ESTIMATE), key
        assert lk.refs or lk.gbps_kind.startswith(hardware.UNVERIFIED), key
    rows = hardware.spec_rows()
    assert all(r["basis"].startswith("spec sheet") and r["checked"] == hardware.CHECKED for r in rows)
    cpu = hardware.spec_rows(["Xeon 8480+"])[0]
    assert "FP32: estimate" in cpu["basis"] and "memory GB: unverified estimate" in cpu["basis"]
    with pytest.raises(UsageError, match="field must be"):
        hardware.GPUS["T4"].figure_kind("fp16")


def test_figures_corrected_against_their_pages():
    t = hardware.TPUS
    assert t["TPU v6e"].memory_gbps == 1638 and t["TPU v4"].memory_gb == pytest.approx(32 * 2**30 / 1e9, abs=0.05)
    assert t["TPU v4"].watts == 192 and t["TPU v4"].figure_kind("watts").startswith("measured")
    assert "393" in t["TPU v5e"].note
    g = hardware.GPUS
    assert g["L4"].fp8 == 242.5 and (g["RTX 4090"].bf16, g["RTX 4090"].fp8) == (165.2, 330.3)
    assert (g["H200"].memory_gb, g["H200"].memory_gbps, g["H200"].watts) == (141, 4800, 700)
    # 81.7 is AMD's FP64 vector rate; FP32 vector is twice that, and 1/8 of the dense BF16 matrix rate (CDNA 3)
    assert g["MI300X"].fp32 == 163.4 == round(g["MI300X"].bf16 / 8, 1)
    assert g["MI300X"].figure_kind("fp32").startswith("estimate: computed, 1307.4 / 8")
    assert hardware.INTERCONNECTS["Ethernet 100 GbE"].gbps_kind.startswith("unverified estimate")


def test_bf16_format_says_fp16_where_the_chip_has_no_bf16():
    every = {**hardware.DEVICES, **hardware.BOARDS, **hardware.CPU_PARTS}
    fp16 = {k for k, d in every.items() if d.bf16_format == "FP16"}
    assert fp16 == {"V100", "T4", "V100 SXM2 16GB"}  # Volta and Turing: FP16 tensor cores, no BF16
    assert all(every[k].bf16 and every[k].tf32 is None for k in fp16)
    assert {every[k].bf16_format for k in ("A100", "H100", "MI300X", "TPU v5e", "Xeon 8480+")} == {"BF16"}
