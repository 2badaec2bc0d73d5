"""One name matcher: a GPU's reported name picks its own board's row, or none, through every public wrapper.

:func:`gpulab.hardware.board_key` is the only place that maps a device name (as CUDA, NVML and nvidia-smi report it)
to a spec row; ``hardware.gpu_named``, ``timing.lookup_peak`` / ``percent_of_peak``, ``pricing.offer_for`` and
the energy estimate's board power go through it. The table below runs through all of them, so they cannot drift.
"""

from __future__ import annotations

import pytest

from gpulab import energy, hardware, pricing, timing
from gpulab.errors import UsageError

# (reported name, key of its row in hardware.GPUS / hardware.BOARDS, or None: the tables have no row for that board)
NAMES = [
    ("Tesla T4", "T4"),
    ("NVIDIA T4", "T4"),
    ("NVIDIA L4", "L4"),
    ("NVIDIA L40S", "L40S"),  # not the L4 (whole words), which draws a fifth of its power
    ("NVIDIA L40", None),
    ("Tesla V100-SXM2-16GB", "V100 SXM2 16GB"),
    ("Tesla V100-SXM2-32GB", "V100"),
    ("Tesla V100-PCIE-16GB", None),  # PCIe board: 14 TFLOP/s FP32, 250 W, not the SXM2 row
    ("Tesla V100S-PCIE-32GB", None),
    ("Tesla P100-PCIE-16GB", None),
    ("NVIDIA A100-SXM4-80GB", "A100"),
    ("NVIDIA A100-SXM-80GB", "A100"),
    ("NVIDIA A100-SXM4-40GB", "A100 SXM 40GB"),  # Colab's A100
    ("NVIDIA A100-PCIE-40GB", "A100 PCIe 40GB"),
    ("NVIDIA A100 80GB PCIe", "A100 PCIe 80GB"),  # was the SXM row in timing.lookup_peak (wrong bandwidth, power)
    ("NVIDIA A100-SXM4-40GB MIG 1g.5gb", None),  # a MIG slice has a fraction of the board
    ("NVIDIA A10G", None),
    ("NVIDIA A10", None),
    ("NVIDIA RTX A6000", None),
    ("NVIDIA GeForce RTX 4090", "RTX 4090"),
    ("NVIDIA GeForce RTX 4090 D", None),  # the China variant: fewer SMs
    ("NVIDIA GeForce RTX 4090 Laptop GPU", None),
    ("NVIDIA H100 80GB HBM3", "H100"),  # the SXM5 board's name
    ("NVIDIA H100 PCIe", "H100 PCIe"),
    ("NVIDIA H100 NVL", "H100 NVL"),
    ("NVIDIA H100 80GB HBM2e", None),  # HBM2e is not the SXM row's HBM3
    ("NVIDIA H100 SXM5 64GB", None),
    ("NVIDIA H100 80GB HBM3 MIG 1g.10gb", None),
    ("NVIDIA H20", None),
    ("NVIDIA H800", None),
    ("NVIDIA H200", "H200"),
    ("NVIDIA H200 NVL", None),  # the PCIe board: lower peaks and power than the SXM row, not in the stored sources
    ("NVIDIA GH200 480GB", None),  # Grace Hopper superchip: not the H200 (nor the H100) board
    ("NVIDIA GH200 144G HBM3e", None),
    ("NVIDIA B200", None),
    ("NVIDIA GB200", None),
    ("AMD Instinct MI300X", "MI300X"),
    ("CUDA simulator (CPU)", None),
    ("", None),
]


def _row(key):
    return hardware.GPUS[key] if key in hardware.GPUS else hardware.BOARDS[key]


@pytest.mark.parametrize(("reported", "key"), NAMES)
def test_one_matcher_and_every_wrapper_agree(reported, key, monkeypatch):
    assert hardware.board_key(reported) == key
    row = hardware.gpu_named(reported)
    assert row is (None if key is None else _row(key))
    peak = timing.lookup_peak(reported)
    if key is None:
        assert peak is None and timing.percent_of_peak(100.0, reported) is None
    else:
        assert peak is timing.PEAKS[key]
        assert (peak.dram_gbps, peak.fp32_tflops, peak.tf32_tensor_tflops, peak.memory_gb) == (
            row.memory_gbps,
            row.fp32,
            row.tf32,
            row.memory_gb,
        )
        assert timing.percent_of_peak(row.memory_gbps / 2, reported) == pytest.approx(50.0)
    offer = pricing.offer_for(reported)
    assert offer is None or (key is not None and offer.hardware == key)
    monkeypatch.setattr(energy, "device_name", lambda: reported)
    monkeypatch.setattr(energy, "_nvidia_smi_power_limit", lambda: None)
    if row is not None and row.watts:
        watts, why, _ = energy._gpu_watts()
        assert watts == row.watts and row.name in why
    else:
        with pytest.raises(UsageError, match="no row in gpulab.hardware"):
            energy._gpu_watts()


def test_every_gpu_row_is_named_and_finds_itself():
    rows = {**{k: d for k, d in hardware.GPUS.items() if d.kind == "GPU"}, **hardware.BOARDS}
    assert set(hardware.BOARD_NAMES) == set(rows)  # every GPU row says how drivers name its board
    assert set(timing.PEAKS) == set(rows)  # one table of figures: timing's peaks are these rows
    for key, d in rows.items():
        assert hardware.board_key(d.name) == key, d.name  # a row's own name picks that row
        assert hardware.board_key(f"NVIDIA {d.name}") == key, d.name
        assert timing.PEAKS[key].basis == hardware.basis(d)  # estimates stay labelled in the peaks
    assert not set(hardware.BOARDS) & set(hardware.DEVICES)  # lesson 11's tables are unchanged


def test_offers_are_priced_for_their_own_board():
    assert pricing.offer_for("Tesla T4") is pricing.PRICES["T4"]
    assert pricing.offer_for("NVIDIA A100-SXM4-40GB") is pricing.PRICES["A100"]  # p4d: 8x A100 40GB
    assert pricing.offer_for("NVIDIA H100 80GB HBM3") is pricing.PRICES["H100"]  # p5: 8x H100 SXM
    for name in ("NVIDIA A100-SXM4-80GB", "NVIDIA H100 PCIe", "NVIDIA H200", "NVIDIA GH200 480GB"):
        assert pricing.offer_for(name) is None, name  # no offer for that board in the table


def test_boards_are_labelled_like_the_lesson_tables():
    for key, d in hardware.BOARDS.items():
        assert d.kind == "GPU" and d.source.startswith("as of ") and d.refs and d.checked == hardware.CHECKED, key
        for field, kind in d.figure_kinds().items():
            assert kind == hardware.SPEC_SHEET or (":" in kind and len(kind.split(":", 1)[1]) > 10), (key, field)
        assert hardware.device(key) is d  # by exact key, e.g. for pricing.my_price(hardware="H100 PCIe")
    b = hardware.BOARDS
    assert b["H100 PCIe"].fp32 < hardware.GPUS["H100"].fp32 and b["H100 PCIe"].watts < hardware.GPUS["H100"].watts
    assert (b["A100 PCIe 80GB"].memory_gbps, b["A100 PCIe 80GB"].watts) == (1935, 300)
    assert b["H100 NVL"].figure_kind("fp32").startswith("unverified estimate")  # no stored copy of that column


def test_a_board_without_its_own_row_is_said_so_with_the_nearest_row_labelled():
    """The H200 NVL (PCIe card, 600 W, lower FP32 and tensor peaks than the SXM board; same 141 GB at 4.8 TB/s) has
    no row: its peaks were in none of the stored sources. Its name finds no figures (not the SXM row's), and what
    is printed says the exact model is not in the tables and names the nearest row as the nearest."""
    assert "H200 NVL" not in hardware.BOARDS and hardware.board_key("NVIDIA H200 NVL") is None
    assert hardware.nearest_row("NVIDIA H200 NVL") == "H200" and hardware.nearest_row("NVIDIA H200 PCIe") == "H200"
    assert hardware.nearest_row("Tesla V100-PCIE-16GB") == "V100"
    for own_or_none in ("NVIDIA H200", "NVIDIA GB200", "NVIDIA GeForce GT 710", "CUDA simulator (CPU)"):
        assert hardware.nearest_row(own_or_none) is None, own_or_none  # its own row, or no chip of the tables
    note = hardware.missing_row_note("NVIDIA H200 NVL")
    assert note == (
        "NVIDIA H200 NVL: this exact model has no row in gpulab's spec tables; the nearest row is H200 SXM (key "
        "'H200'), another board or variant of the same chip: its figures are not this GPU's, so none is used here"
    )
    assert hardware.missing_row_note("NVIDIA GB200").endswith("has no row in gpulab's spec tables (nor does its chip)")
    assert hardware.missing_row_note("NVIDIA H200") == "NVIDIA H200: its row in gpulab's spec tables is H200 SXM"


@pytest.mark.parametrize(
    ("reported", "board"),
    [
        ("NVIDIA H100 NVL MIG 1g.12gb", "H100 NVL"),  # was the H100 SXM row, though the NVL board has its own
        ("NVIDIA H100 PCIe MIG 1g.10gb", "H100 PCIe"),
        ("NVIDIA A100 80GB PCIe MIG 1g.10gb", "A100 PCIe 80GB"),  # was the A100 SXM row
        ("NVIDIA A100-PCIE-40GB MIG 2g.10gb", "A100 PCIe 40GB"),
        ("NVIDIA A100-SXM4-40GB MIG 1g.5gb", "A100 SXM 40GB"),
        ("NVIDIA H100 80GB HBM3 MIG 1g.10gb", "H100"),
    ],
)
def test_a_mig_slice_names_its_own_boards_row_as_a_fraction_of_it(reported, board):
    """A MIG slice has a fraction of its board's SMs and memory: no figures, but the row named is its own board's
    (not the chip's SXM row), and the note says the slice's figures are a fraction of that board's."""
    assert hardware.board_key(reported) is None and hardware.nearest_row(reported) == board
    name = _row(board).name
    assert hardware.missing_row_note(reported) == (
        f"{reported}: a MIG slice (a fraction of a GPU's SMs and memory) has no row in gpulab's spec tables; its "
        f"board's row is {name} (key {board!r}): the slice's figures are a fraction of the board's, so none is used "
        "here"
    )


def test_a_slice_of_a_board_without_a_row_and_a_form_without_a_row():
    assert hardware.nearest_row("NVIDIA H200 NVL MIG 1g.18gb") == "H200"  # no H200 NVL row: the chip's row
    note = hardware.missing_row_note("NVIDIA H200 NVL MIG 1g.18gb")
    assert "a MIG slice" in note and "nor does its board; the nearest row is H200 SXM (key 'H200')" in note, note
    assert hardware.nearest_row("NVIDIA H100 PCIe 94GB") == "H100 PCIe"  # the same form factor's row first
    assert hardware.nearest_row("NVIDIA A100-PCIE-64GB") == "A100 PCIe 40GB"


def test_a_grace_hopper_superchip_names_a_hopper_row_not_as_its_figures():
    """The GH200's GPU is a Hopper part (H100/H200 class) on a module with a Grace CPU: not "no chip of the tables",
    but no row either, as the module's power and memory differ."""
    assert hardware.board_key("NVIDIA GH200 480GB") is None and hardware.gpu_named("NVIDIA GH200 480GB") is None
    assert hardware.nearest_row("NVIDIA GH200 480GB") == "H100"  # 96 GB of HBM3, as the H100
    assert hardware.nearest_row("NVIDIA GH200 144G HBM3e") == "H200"  # HBM3e, as the H200
    note = hardware.missing_row_note("NVIDIA GH200 480GB")
    assert "nor does its chip" not in note and "its GPU is a Hopper part of the H100/H200 class" in note, note
    assert note.endswith(
        "The nearest row is H100 SXM (key 'H100'): its figures are not this GPU's, so none is used here"
    )


def test_doctor_and_the_energy_estimate_name_the_nearest_row(monkeypatch):
    from numba import cuda

    from gpulab import doctor

    class Device:
        compute_capability, MULTIPROCESSOR_COUNT = (9, 0), 132

    class Context:
        def get_memory_info(self):
            return 139 << 30, 140 << 30

    monkeypatch.setattr(cuda, "get_current_device", Device)
    monkeypatch.setattr(cuda, "current_context", Context)
    monkeypatch.setattr(timing, "device_name", lambda: "NVIDIA H200 NVL")
    lines = doctor._gpu_lines()
    peaks = next(line for line in lines if line.startswith("peaks:"))
    assert peaks == f"peaks: {hardware.missing_row_note('NVIDIA H200 NVL')}; % of peak will not be shown", lines
    monkeypatch.setattr(energy, "device_name", lambda: "NVIDIA H200 NVL")
    monkeypatch.setattr(energy, "_nvidia_smi_power_limit", lambda: None)
    with pytest.raises(UsageError, match="the nearest row is H200 SXM .* its figures are not this GPU's"):
        energy._gpu_watts()  # not the SXM board's 700 W for a 600 W card
