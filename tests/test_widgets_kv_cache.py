"""Lesson 12's KV-cache explorer: plain widgets (no interactive()), updated when a control changes."""

from __future__ import annotations

import ipywidgets as widgets

from gpulab.hardware import GPUS
from gpulab.transformer import llm
from gpulab.widgets.kv_cache import kv_cache_explorer, kv_cache_figure, kv_cache_report


def test_explorer_is_plain_widgets_updated_explicitly():
    box = kv_cache_explorer()
    assert isinstance(box, widgets.VBox) and not isinstance(box, widgets.interactive)
    out, summary = box.children[2], box.children[3]
    assert isinstance(out, widgets.Output) and isinstance(summary, widgets.HTML)
    first = summary.value
    assert "Llama-2-7B" in first and "KV cache" in first and "spec sheets" in first
    box.controls["log2_batch"].value = 6
    assert summary.value != first and "batch 64" in summary.value
    assert summary.value == kv_cache_report("Llama-2-7B", 12, 6, "bf16")[1]


def test_report_numbers_come_from_llm():
    budget, html = kv_cache_report("Llama-2-70B", 12, 0, "bf16")
    assert budget == llm.memory_budget("Llama-2-70B", context=4096, batch=1, precision="bf16")
    assert "H100 (80 GB): the weights alone do not fit" in html and "MI300X (192 GB): <b>fits</b>" in html
    _, html8 = kv_cache_report("Llama-2-70B", 12, 0, "fp8")
    assert "H100 (80 GB): <b>fits</b>" in html8 and "tokens/s (memory bandwidth-bound)" in html8
    # FP8 fits an A100's memory, but the A100 has no FP8 tensor cores: the report says the math is wider
    a100 = next(line for line in html8.split("<li>") if line.startswith("A100"))
    h100 = next(line for line in html8.split("<li>") if line.startswith("H100"))
    assert "no FP8 tensor cores, so FP8 only stores the numbers: the math runs at BF16/FP16" in a100
    assert "no FP8 tensor cores" not in h100


def test_figure_has_both_parts_and_every_gpu():
    budget = {"weights": 14e9, "kv_cache": 2e9}
    fig = kv_cache_figure(budget, "x")
    assert [b.name for b in fig.data] == ["weights", "kv cache"] and fig.data[0].y[0] == 14.0
    assert len(fig.layout.shapes) == len(GPUS) and "spec sheets" in fig.layout.title.text


def test_weights_that_fit_without_room_for_one_sequence_are_not_called_too_big():
    # Llama-2-70B in BF16 (138 GB) fits an H200's 141 GB, but one 32k-token sequence (10.7 GB) does not;
    # before, the report said "the weights alone do not fit"
    _, html = kv_cache_report("Llama-2-70B", 15, 0, "bf16")
    assert "H200 (141 GB): the weights fit, but the 3.0 GB left do not hold one sequence's KV cache" in html, html
    assert "H100 (80 GB): the weights alone do not fit" in html
