"""Lesson 12's KV-cache explorer: plain widgets (no interactive()), updated when a control changes."""

from __future__ import annotations

import ipywidgets as widgets

from gpulab.hardware import GPUS
from gpulab.transformer import llm
from gpulab.widgets.kv_cache import FP8_STORAGE_ONLY, kv_cache_explorer, kv_cache_figure, kv_cache_report


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


def _row(html: str, key: str) -> str:
    return next(line for line in html.split("<li>") if line.startswith(f"{key} ("))


def test_fp8_fits_in_memory_but_is_storage_only_without_fp8_tensor_cores():
    # FP8 fits an A100's memory, but the A100 has no FP8 tensor cores: true of memory, not of speed. The flag sits
    # next to "fits", in the words of FP8_STORAGE_ONLY, for every GPU whose spec row has no FP8 peak
    _, html8 = kv_cache_report("Llama-2-70B", 12, 0, "fp8")
    flag = "this GPU has no FP8 tensor cores: FP8 is storage only there, compute upcasts"
    assert FP8_STORAGE_ONLY == flag
    assert _row(html8, "A100").startswith(f"A100 (80 GB): <b>fits</b> in memory; <b>{flag}</b> (to BF16/FP16);")
    for key in ("H100", "H200", "MI300X"):  # FP8 tensor cores on their spec sheets: no flag
        assert "<b>fits</b> in memory" in _row(html8, key) and flag not in _row(html8, key), key
    _, small = kv_cache_report("Llama-2-7B", 12, 4, "fp8")  # a smaller batch fits a T4: flagged there too
    assert _row(small, "T4").startswith("T4 (16 GB): does not fit; largest batch") and flag in _row(small, "T4")
    assert flag in _row(small, "V100") and flag not in _row(small, "L4")  # Volta: none; Ada: FP8 tensor cores
    no_fp8 = {k for k, d in GPUS.items() if not d.peak("fp8")}
    assert no_fp8 == {k for k in GPUS if flag in _row(small, k)} and {"V100", "T4", "A100"} <= no_fp8
    _, bf16 = kv_cache_report("Llama-2-7B", 12, 3, "bf16")
    assert flag not in bf16 and "A100 (80 GB): <b>fits</b> in memory; largest batch" in bf16


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
