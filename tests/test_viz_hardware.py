"""viz.hardware figures and the all-reduce explorer: built from spec sheets and say so."""

from __future__ import annotations

import plotly.graph_objects as go
import pytest

from gpulab import hardware, viz, widgets


def test_roofline_devices_one_roof_per_device_with_that_precision():
    fig = viz.roofline_devices(
        ["T4", "H100", "TPU v5e", "EPYC 9654"],
        "bf16",
        [{"label": "matmul", "intensity": 100.0}, {"label": "m", "intensity": 1, "gflops": 50}],
    )
    assert isinstance(fig, go.Figure) and "spec sheets" in fig.layout.title.text
    roofs = [t for t in fig.data if t.name and "GB/s" in t.name]
    assert len(roofs) == 3  # the EPYC has no BF16 unit on its spec sheet: no roof
    h100 = next(t for t in roofs if t.name.startswith("H100"))
    assert max(h100.y) == pytest.approx(989e3)
    t4 = next(t for t in roofs if t.name.startswith("T4"))  # Turing has no BF16: its roof is FP16's, and says so
    assert t4.name.startswith("T4 (FP16: no BF16): 320 GB/s") and "no BF16" not in h100.name
    with pytest.raises(ValueError):
        viz.roofline_devices(["T4"], points=[{"label": "x", "intensity": 0}])


def test_spec_table_lists_every_device_with_its_source():
    fig = viz.spec_table()
    cells = fig.data[0].cells.values
    assert len(cells[0]) == len(hardware.DEVICES) and all(s.startswith("as of") for s in cells[-1])
    assert all("checked " + hardware.CHECKED in s and "<a href='https://" in s for s in cells[-1])
    header = [h.replace("<b>", "").replace("</b>", "") for h in fig.data[0].header.values]
    assert cells[header.index("basis")] == [r["basis"] for r in hardware.spec_rows()]
    assert "Spec sheets" in fig.layout.title.text and "sparsity" in fig.layout.title.text


def test_step_time_figure_marks_the_crossover():
    fig = viz.step_time_figure(0.3, 100e6, "PCIe 4.0 x16")
    names = [t.name for t in fig.data]
    n = hardware.crossover_gpus(0.3, 100e6, 31.5, latency_us=5)
    assert names[:3] == ["compute", "communication", "step"] and any("about" in s for s in names)
    assert "not a measurement" in fig.layout.title.text and "an estimate" in fig.layout.title.text and n is not None


def test_systolic_figure_has_one_frame_per_clock():
    fig = viz.systolic_figure(2, 3, 4)
    assert len(fig.data) == 2 + 3 + 4 - 2 == len(fig.layout.sliders[0].steps)
    assert sum(bool(t.visible) for t in fig.data) == 1


def test_cost_figure_and_explorer():
    rows = [
        {"label": "T4", "hours": 2.0, "dollars": 1.0, "kwh": 0.1},
        {"label": "v5e", "hours": 1.0, "dollars": 1.2, "kwh": None},
    ]
    fig = viz.cost_figure(rows, "cost", "estimates")
    assert len(fig.data) == 3 and fig.data[2].text[1] == "n/a"
    t, html = widgets.allreduce_report("PCIe 4.0 x16", 25, 300, 64)
    assert t["communication"] > t["compute"] and "46 GPUs" in html and "not a measurement" in html
    box = widgets.allreduce_explorer()  # plain widgets, no interactive(): that stalls nbclient after the cell
    import ipywidgets

    assert isinstance(box, ipywidgets.VBox) and not isinstance(box, ipywidgets.interactive)
    assert len(box.controls) == 5 and "NVLink 4" in box.children[3].value
    box.controls["link_name"].value = "PCIe 4.0 x16"
    box.controls["log2_gpus"].value = 6
    assert box.children[3].value == widgets.allreduce_report("PCIe 4.0 x16", 25, 300, 64)[1]


def test_power_trace_draws_the_samples_and_refuses_an_estimate():
    from gpulab.energy import EnergyReading, estimate
    from gpulab.errors import UsageError

    r = EnergyReading(30.0, 0.1, "NVML total-energy counter", "GPU", True, 1, ((0.0, 250.0), (0.05, 350.0)), "x")
    fig = viz.power_trace(r, title="One epoch")
    assert list(fig.data[0].y) == [250.0, 350.0] and "measured" in fig.layout.title.text
    assert fig.layout.shapes[0].y0 == 300.0  # the average: 30 J / 0.1 s
    with pytest.raises(UsageError, match="0 power sample"):
        viz.power_trace(estimate(1.0, 10.0, "spec sheet"))
