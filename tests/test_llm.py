"""gpulab.transformer.llm: parameter counts of published shapes, FLOPs/bytes per step, the KV cache."""

from __future__ import annotations

import math

import numpy as np
import pytest

from gpulab import hardware
from gpulab.errors import UsageError
from gpulab.transformer import llm


def test_parameter_counts_match_the_published_models():
    assert abs(llm.MODELS["GPT-2 small"].params / 124.4e6 - 1) < 0.01  # 124M without biases and norms
    assert abs(llm.MODELS["Llama-2-7B"].params / 6.74e9 - 1) < 0.01
    assert abs(llm.MODELS["Llama-2-70B"].params / 68.98e9 - 1) < 0.01
    assert llm.MODELS["Llama-2-70B"].kv_dim == 8 * 128 and llm.MODELS["Llama-2-7B"].kv_dim == 4096
    assert llm.model("GPT-2 small") is llm.MODELS["GPT-2 small"]
    with pytest.raises(UsageError, match="known"):
        llm.model("GPT-5")


def test_block_costs_by_hand():
    t = llm.Transformer("toy", layers=2, d_model=8, heads=2, d_ff=16, vocab=10)
    assert t.block_params == 2 * 64 + 2 * 64 + 2 * 8 * 16
    c = llm.block_costs(t, new_tokens=3, context=5, batch=2, precision="fp32")
    pairs = 3 * 5 + (1 + 2 + 3)  # causal: the new tokens see the 5 cached ones and those before them
    assert c["attention_flops"] == 4 * 8 * pairs * 2
    assert c["matmul_flops"] == 2 * t.block_params * 3 * 2
    assert c["weights_bytes"] == t.block_params * 4
    assert c["kv_read_bytes"] == 2 * 8 * 8 * 2 * 4 and c["kv_write_bytes"] == 2 * 8 * 3 * 2 * 4
    assert c["activation_bytes"] == 2 * 8 * 3 * 2 * 4
    assert math.isclose(c["intensity"], c["flops"] / c["bytes"])
    whole = llm.step_costs(t, new_tokens=3, context=5, batch=2, precision="fp32")
    assert whole["flops"] == 2 * c["flops"] + 2 * 10 * 8 * 3 * 2
    assert whole["weights_bytes"] == 2 * c["weights_bytes"] + 10 * 8 * 4
    with pytest.raises(UsageError):
        llm.block_costs(t, new_tokens=0, context=5)
    with pytest.raises(UsageError, match="precision"):
        llm.block_costs(t, new_tokens=1, context=5, precision="int3")


def test_decode_is_bandwidth_bound_and_prefill_is_not():
    rows = llm.prefill_vs_decode("Llama-2-7B", prompt=2048, batch=1)
    prefill, decode = rows
    ridge = hardware.ridge_point("H100", "bf16")
    assert prefill["intensity"] > ridge > 100 * decode["intensity"]
    assert 0.9 < decode["intensity"] < 1.1  # bf16: each 2-byte weight does 2 FLOPs for the one token
    b1 = llm.decode_bound("Llama-2-7B", "H100", context=4096, batch=1)
    assert b1["bound"] == "memory bandwidth" and "spec sheet" in b1["label"]
    # batch 1: time ~ every weight and the cache read once at 3.35 TB/s
    weights = llm.MODELS["Llama-2-7B"].params * 2
    assert b1["step_s"] > weights / 3.35e12 and b1["tokens_per_s"] < 3.35e12 / weights
    b64 = llm.decode_bound("Llama-2-7B", "H100", context=512, batch=64)
    assert b64["tokens_per_s"] > 20 * b1["tokens_per_s"]  # batching shares the weight reads
    assert llm.peak_for("V100", "fp8") == 125 and llm.peak_for("H100", "fp8") == 1979


def test_kv_cache_budget():
    assert llm.kv_cache_bytes(32, 32, 128, 4096, 1, 2) == 2 * 32 * 32 * 128 * 4096 * 2  # 2 GiB per sequence
    b = llm.memory_budget("Llama-2-7B", context=4096, batch=8)
    assert b["kv_cache"] == 8 * 2 * 32 * 4096 * 4096 * 2 and b["weights"] == llm.MODELS["Llama-2-7B"].params * 2
    fp8 = llm.memory_budget("Llama-2-7B", context=4096, batch=8, kv_precision="fp8")
    assert fp8["kv_cache"] == b["kv_cache"] / 2
    n = llm.max_batch("Llama-2-7B", 80e9, context=4096)
    one = llm.memory_budget("Llama-2-7B", context=4096, batch=1)
    assert one["weights"] + n * one["kv_cache"] <= 80e9 < one["weights"] + (n + 1) * one["kv_cache"]
    assert llm.max_batch("Llama-2-70B", 80e9, context=4096) == 0  # 138 GB of BF16 weights
    gqa = llm.memory_budget("Llama-2-70B", context=4096, batch=1)["kv_cache"]
    assert gqa < one["kv_cache"]  # 8 K/V heads: the 70B model's cache per token is smaller than the 7B's
    with pytest.raises(UsageError):
        llm.kv_cache_bytes(32, 32, 128, 4096, 0)


def test_cnn_costs_are_counted_from_the_course_model():
    from gpulab import nn

    c = llm.cnn_costs(channels=(4, 8), hidden=16)
    net = nn.mnist_cnn(channels=(4, 8), hidden=16)
    assert c["params"] == net.num_parameters()
    # conv1: 28x28 outputs x 4 channels x 9 MACs; conv2: 14x14 x 8 x (4*9); fc1: 392x16; fc2: 16x10
    macs = 28 * 28 * 4 * 9 + 14 * 14 * 8 * 36 + 392 * 16 + 16 * 10
    assert c["forward_macs"] == macs
    assert 2 * macs < c["forward_flops"] < 2.2 * macs and 2.5 < c["training_flops"] / c["forward_flops"] < 3.5


def test_flops_table_labels_every_row():
    rows = llm.flops_table(cnn={"forward_flops": 8.0, "training_flops": 24.0, "params": 2.0})
    assert [r["workload"].split(" ")[0].rstrip(",") for r in rows] == ["course", "ResNet-50", "GPT-2", "DiT-XL/2"]
    assert rows[0]["how"].startswith("counted") and all(r["how"] for r in rows)
    assert all(r["how"].startswith("estimate") for r in rows[2:])
    gpt = rows[2]["forward_flops"]
    assert 2 * 124e6 < gpt < 2 * 124e6 * 1.25  # ~2 FLOPs per weight per token, plus attention
    assert 1.8e11 < rows[3]["forward_flops"] < 3e11  # DiT-XL/2: ~119 G multiply-adds per step
    assert 0.98 < rows[3]["params"] / 675e6 < 1.0  # the paper's 675 M, adaLN-Zero's modulation weights included
    assert np.all(np.array([r["training_flops"] / r["forward_flops"] for r in rows[1:]]) == 3)
    assert rows[0]["flops_per_weight_byte"] == 1.0  # 8 FLOPs over 2 FP32 weights
    assert 1 < rows[2]["flops_per_weight_byte"] < 1.25 < 100 < rows[3]["flops_per_weight_byte"]  # DiT reuses weights
