"""Lesson 10's memory-budget explorer renders without interactive() and updates when a control changes."""

from __future__ import annotations

import ipywidgets as widgets

from gpulab.widgets.memory_budget import memory_budget_explorer, memory_budget_report


def test_explorer_is_plain_widgets_updated_explicitly():
    box = memory_budget_explorer()
    assert isinstance(box, widgets.VBox) and not isinstance(box, widgets.interactive)
    out, summary = box.children[2], box.children[3]
    assert isinstance(out, widgets.Output) and isinstance(summary, widgets.HTML)
    first = summary.value
    assert "parameters" in first and "GB" in first
    box.controls["log2_batch"].value = 12
    assert summary.value != first and "batch 4,096" in summary.value
    assert summary.value == memory_budget_report(1, 12, "adam", "fp32")[1]
