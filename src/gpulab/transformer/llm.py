"""Napkin math of transformer inference: FLOPs and bytes per step, prefill vs decode, the KV cache.

A decoder block holds its weights in the four attention projections (Q, K, V, output) and an MLP. For
each new token it multiplies every weight once (2 FLOPs per weight: a multiply and an add) and attends
to every earlier token (QK^T and PV: 4 x d_model FLOPs per token attended to). In **prefill** the whole
prompt is processed at once, so each weight read from memory serves ``prompt x batch`` tokens: the matmuls
are compute-bound. In **decode** one token per sequence is produced per step, so every weight (and the
whole KV cache) is read for ``batch`` tokens only: arithmetic intensity is about ``batch`` FLOP/byte at
2-byte weights, far below a GPU's ridge point (lesson 11's ``gpulab.hardware``, spec-sheet figures).

The byte counts here are a **lower bound on memory traffic** (each weight, cache entry and block input
and output moves once; real kernels move more), and the shapes of the named models are as published.
Nothing here is a measurement.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .. import hardware
from ..errors import UsageError

__all__ = [
    "MODELS",
    "PRECISION_BYTES",
    "Transformer",
    "block_costs",
    "cnn_costs",
    "decode_bound",
    "flops_table",
    "kv_cache_bytes",
    "max_batch",
    "memory_budget",
    "model",
    "peak_for",
    "prefill_vs_decode",
    "step_costs",
]

PRECISION_BYTES: dict[str, int] = {"fp32": 4, "bf16": 2, "fp16": 2, "fp8": 1}


@dataclass(frozen=True)
class Transformer:
    """The shape of a decoder-only transformer (biases and norms left out: well under 1% of the weights)."""

    name: str
    layers: int
    d_model: int
    heads: int
    kv_heads: int | None = None  # grouped-query attention: fewer K/V heads than query heads (None: the same)
    d_ff: int | None = None  # MLP hidden width (None: 4 x d_model)
    mlp_matrices: int = 2  # 2 (GPT: up, down) or 3 (SwiGLU: gate, up, down)
    vocab: int = 50257
    tied_embeddings: bool = True  # the output layer reuses the input embedding's weights
    source: str = ""

    @property
    def head_dim(self) -> int:
        return self.d_model // self.heads

    @property
    def kv_dim(self) -> int:
        """Width of K (and of V) per token: kv_heads x head_dim."""
        return (self.kv_heads or self.heads) * self.head_dim

    @property
    def block_params(self) -> int:
        """Weights of one block: Q and output projections (d x d each), K and V (d x kv_dim each), the MLP."""
        d = self.d_model
        return 2 * d * d + 2 * d * self.kv_dim + self.mlp_matrices * d * (self.d_ff or 4 * d)

    @property
    def embedding_params(self) -> int:
        return self.vocab * self.d_model * (1 if self.tied_embeddings else 2)

    @property
    def params(self) -> int:
        return self.layers * self.block_params + self.embedding_params


_GPT2 = "architecture from Radford et al. 2019, 'Language models are unsupervised multitask learners' (GPT-2)"
_LLAMA = "architecture from Touvron et al. 2023, 'Llama 2: open foundation and fine-tuned chat models'"
MODELS: dict[str, Transformer] = {
    "GPT-2 small": Transformer("GPT-2 small (124M)", 12, 768, 12, vocab=50257, source=_GPT2),
    "GPT-2 XL": Transformer("GPT-2 XL (1.5B)", 48, 1600, 25, vocab=50257, source=_GPT2),
    "Llama-2-7B": Transformer(
        "Llama-2-7B", 32, 4096, 32, d_ff=11008, mlp_matrices=3, vocab=32000, tied_embeddings=False, source=_LLAMA
    ),
    "Llama-2-70B": Transformer(
        "Llama-2-70B (GQA)",
        80,
        8192,
        64,
        kv_heads=8,
        d_ff=28672,
        mlp_matrices=3,
        vocab=32000,
        tied_embeddings=False,
        source=_LLAMA,
    ),
}


def model(name: str | Transformer) -> Transformer:
    """A model by key (``"GPT-2 small"``, ``"Llama-2-7B"``, ...); a Transformer is returned as is."""
    if isinstance(name, Transformer):
        return name
    if name in MODELS:
        return MODELS[name]
    raise UsageError(
        f"no model {name!r}; known: {', '.join(MODELS)}. Or describe one: Transformer(name, layers, "
        "d_model, heads, ...)."
    )


def _bytes(precision: str) -> int:
    if precision not in PRECISION_BYTES:
        raise UsageError(f"precision must be one of {', '.join(PRECISION_BYTES)}, got {precision!r}.")
    return PRECISION_BYTES[precision]


def _positive(**values: int) -> None:
    bad = {k: v for k, v in values.items() if not (isinstance(v, (int, float)) and v >= 0)}
    if bad or values.get("batch", 1) < 1:
        raise UsageError(f"sizes must be non-negative numbers and batch >= 1; got {values}.")


def block_costs(
    m: str | Transformer,
    *,
    new_tokens: int,
    context: int,
    batch: int = 1,
    precision: str = "bf16",
    kv_precision: str | None = None,
) -> dict[str, float]:
    """FLOPs and minimal bytes of **one block** in a step that adds ``new_tokens`` to each of ``batch``
    sequences already holding ``context`` tokens in the KV cache (prefill: context 0; decode: new_tokens 1).

    FLOPs: ``matmul`` = 2 x block weights x tokens; ``attention`` = 4 x d_model per (query, key) pair, with
    a causal mask (a new token at position p attends to p + 1 keys). Bytes: ``weights`` read once per step;
    ``kv_read`` (every cached and new K, V the step attends to) and ``kv_write`` (the new ones); ``activations``
    (the block's input and output). ``intensity`` = FLOPs / bytes.
    """
    t = _model_and_check(m, new_tokens, context, batch)
    w, kv = _bytes(precision), _bytes(kv_precision or precision)
    pairs = new_tokens * context + new_tokens * (new_tokens + 1) // 2  # (query, key) pairs per sequence
    flops_mm = 2.0 * t.block_params * new_tokens * batch
    flops_att = 4.0 * t.d_model * pairs * batch
    b_w = float(t.block_params * w)
    b_kv_read = 2.0 * t.kv_dim * (context + new_tokens) * batch * kv
    b_kv_write = 2.0 * t.kv_dim * new_tokens * batch * kv
    b_act = 2.0 * t.d_model * new_tokens * batch * w
    flops = flops_mm + flops_att
    nbytes = b_w + b_kv_read + b_kv_write + b_act
    return {
        "matmul_flops": flops_mm,
        "attention_flops": flops_att,
        "flops": flops,
        "weights_bytes": b_w,
        "kv_read_bytes": b_kv_read,
        "kv_write_bytes": b_kv_write,
        "activation_bytes": b_act,
        "bytes": nbytes,
        "intensity": flops / nbytes,
        "tokens": float(new_tokens * batch),
    }


def _model_and_check(m: str | Transformer, new_tokens: int, context: int, batch: int) -> Transformer:
    _positive(new_tokens=new_tokens, context=context, batch=batch)
    if new_tokens < 1:
        raise UsageError(f"a step adds at least one token per sequence; got new_tokens={new_tokens}.")
    return model(m)


def step_costs(
    m: str | Transformer,
    *,
    new_tokens: int,
    context: int,
    batch: int = 1,
    precision: str = "bf16",
    kv_precision: str | None = None,
) -> dict[str, float]:
    """:func:`block_costs` for the whole model: every block, plus the output layer (vocab x d_model weights,
    read once, applied to the new tokens)."""
    t = model(m)
    blk = block_costs(
        t, new_tokens=new_tokens, context=context, batch=batch, precision=precision, kv_precision=kv_precision
    )
    out = {k: v * t.layers for k, v in blk.items() if k not in ("intensity", "tokens")}
    head = t.vocab * t.d_model
    out["matmul_flops"] += 2.0 * head * new_tokens * batch
    out["flops"] += 2.0 * head * new_tokens * batch
    out["weights_bytes"] += head * _bytes(precision)
    out["bytes"] += head * _bytes(precision)
    out["intensity"] = out["flops"] / out["bytes"]
    out["tokens"] = float(new_tokens * batch)
    return out


def peak_for(dev: str | hardware.Device, precision: str) -> float:
    """Spec-sheet TFLOP/s of ``dev`` at ``precision`` (fp16 uses the BF16/FP16 column; a missing FP8 or BF16
    unit falls back to the next wider one, as the hardware would)."""
    d = hardware.device(dev)
    order = {"fp8": ("fp8", "bf16", "fp32"), "bf16": ("bf16", "fp32"), "fp16": ("bf16", "fp32"), "fp32": ("fp32",)}
    for p in order[precision if precision in order else "fp32"]:
        if d.peak(p):
            return float(d.peak(p))  # type: ignore[arg-type]
    raise UsageError(f"{d.name} has no peak for {precision} on its spec sheet.")


def decode_bound(
    m: str | Transformer, dev: str | hardware.Device, *, context: int, batch: int = 1, precision: str = "bf16"
) -> dict[str, Any]:
    """The roofline bound of one decode step on ``dev`` (spec sheet): time = max(FLOPs / peak, bytes /
    bandwidth); tokens per second = batch / time, and which of the two limits it. An upper bound on speed."""
    d = hardware.device(dev)
    c = step_costs(m, new_tokens=1, context=context, batch=batch, precision=precision)
    t_compute = c["flops"] / (peak_for(d, precision) * 1e12)
    t_memory = c["bytes"] / (d.memory_gbps * 1e9)
    step = max(t_compute, t_memory)
    return {
        "device": d.name,
        "step_s": step,
        "tokens_per_s": batch / step,
        "compute_s": t_compute,
        "memory_s": t_memory,
        "bound": "memory bandwidth" if t_memory >= t_compute else "compute",
        "intensity": c["intensity"],
        "ridge": peak_for(d, precision) * 1e3 / d.memory_gbps,
        "label": f"roofline bound from {d.name}'s spec sheet, not a measurement",
    }


def prefill_vs_decode(m: str | Transformer, *, prompt: int, batch: int = 1, precision: str = "bf16") -> list[dict]:
    """Two rows, one block each: prefill of a ``prompt``-token prompt, and one decode step at that context."""
    rows = []
    for phase, new, ctx in (("prefill", prompt, 0), ("decode", 1, prompt)):
        c = block_costs(m, new_tokens=new, context=ctx, batch=batch, precision=precision)
        rows.append(
            {
                "phase": phase,
                "tokens per sequence": new,
                "context": ctx,
                **c,
                "flops_per_token": c["flops"] / c["tokens"],
                "bytes_per_token": c["bytes"] / c["tokens"],
            }
        )
    return rows


def kv_cache_bytes(
    layers: int, kv_heads: int, head_dim: int, context: int, batch: int, bytes_per_value: float = 2
) -> float:
    """Bytes of the KV cache: a K and a V vector (kv_heads x head_dim values) per token, layer and sequence."""
    _positive(layers=layers, kv_heads=kv_heads, head_dim=head_dim, context=context, batch=batch)
    return 2.0 * layers * kv_heads * head_dim * context * batch * bytes_per_value


def memory_budget(
    m: str | Transformer, *, context: int, batch: int, precision: str = "bf16", kv_precision: str | None = None
) -> dict[str, float]:
    """``{"weights", "kv_cache"}`` in bytes for serving ``batch`` sequences of ``context`` tokens (activations
    of one decode step are small next to these and left out)."""
    t = model(m)
    kv = kv_cache_bytes(t.layers, t.kv_heads or t.heads, t.head_dim, context, batch, _bytes(kv_precision or precision))
    return {"weights": float(t.params * _bytes(precision)), "kv_cache": kv}


def max_batch(
    m: str | Transformer, memory_bytes: float, *, context: int, precision: str = "bf16", kv_precision: str | None = None
) -> int:
    """The most sequences of ``context`` tokens whose KV cache fits next to the weights (0: the weights alone
    do not fit)."""
    one = memory_budget(m, context=context, batch=1, precision=precision, kv_precision=kv_precision)
    free = memory_bytes - one["weights"]
    if free <= 0 or one["kv_cache"] <= 0:
        return 0
    return int(free // one["kv_cache"])


def cnn_costs(*, channels: tuple[int, int] = (32, 64), hidden: int = 128, image_size: int = 28) -> dict[str, float]:
    """The course CNN (:func:`gpulab.nn.mnist_cnn`) per image, **counted** by running it on one image through
    :class:`gpulab.nn.cost.WorkMeter`: forward and training-step FLOPs (2 per multiply-add of a conv or
    linear layer, 1 per iteration of every other op) and its parameters."""
    import numpy as np

    from .. import nn
    from ..nn.cost import WorkMeter

    net = nn.mnist_cnn(image_size=image_size, channels=channels, hidden=hidden, dropout=0.0)
    meter = WorkMeter()
    net.use_ops(meter)
    x, y = np.zeros((1, 1, image_size, image_size), np.float32), np.zeros(1, np.int64)
    net.eval()
    net.forward(x)
    fwd = dict(meter.work)
    meter.work.clear()
    net.train()
    nn.train_step(net, nn.SoftmaxCrossEntropy(), nn.SGD(net, lr=1e-3), x, y)
    step = dict(meter.work)

    def flops(work: dict[str, int]) -> float:
        return float(2 * work.get("matmul", 0) + sum(v for k, v in work.items() if k not in ("matmul", "im2col")))

    params = net.num_parameters()
    return {
        "forward_flops": flops(fwd),
        "training_flops": flops(step),
        "params": float(params),
        "forward_macs": float(fwd.get("matmul", 0)),
    }


def _transformer_flops(t: Transformer, tokens: int, *, causal: bool, head: bool) -> float:
    """Forward FLOPs of ``tokens`` tokens through all blocks (full or causal attention) and the output layer."""
    pairs = tokens * (tokens + 1) // 2 if causal else tokens * tokens
    f = t.layers * (2.0 * t.block_params * tokens + 4.0 * t.d_model * pairs)
    return f + (2.0 * t.vocab * t.d_model * tokens if head else 0.0)


# DiT-XL/2 (Peebles & Xie 2023): 28 blocks of width 1152, 16 heads; a 256x256 image is a 32x32x4 latent cut
# into 2x2 patches: 256 tokens, full (not causal) attention, no vocabulary.
DIT_XL2 = Transformer(
    "DiT-XL/2 denoiser",
    28,
    1152,
    16,
    vocab=0,
    source="architecture from Peebles & Xie 2023, 'Scalable diffusion models with transformers'",
)


def flops_table(*, context: int = 1024, cnn: dict[str, float] | None = None) -> list[dict[str, Any]]:
    """FLOPs per sample (image, token or denoising step): the course CNN (counted), a small GPT per token at
    ``context`` (napkin math), one DiT denoising step (napkin math), and lesson 00's ResNet-50 (its count).
    Training ~ 3 x forward (the backward pass costs about twice the forward). ``weight_bytes``: the weights
    at the precision such a model runs in; ``flops_per_weight_byte``: forward FLOPs per byte of weights, the
    arithmetic intensity at batch 1 (how often each weight is reused within one sample). Each row says how
    it was got."""
    c = cnn if cnn is not None else cnn_costs()
    g = MODELS["GPT-2 small"]
    gpt_tok = _transformer_flops(g, context, causal=True, head=True) / context  # mean over a full window
    # adaLN-Zero: each block also has 6 d^2 weights that turn the timestep and class into its scales, shifts
    # and gates, applied once per step (not per token): with them 669 M of the paper's 675 M parameters (the
    # rest: the embedders and the final layer)
    dit_ada = 6 * DIT_XL2.d_model**2
    dit_params = float(DIT_XL2.layers * (DIT_XL2.block_params + dit_ada))
    dit_step = _transformer_flops(DIT_XL2, 256, causal=False, head=False) + 2.0 * DIT_XL2.layers * dit_ada
    resnet = 2 * 3.8e9  # lesson 00: 3.8 G multiply-adds per 224x224 image
    rows: list[dict[str, Any]] = [
        {
            "workload": "course CNN (lesson 09)",
            "per": "image",
            "forward_flops": c["forward_flops"],
            "training_flops": c["training_flops"],
            "params": c["params"],
            "weight_bytes": 4 * c["params"],
            "how": "counted: gpulab.nn.cost.WorkMeter on gpulab.nn.mnist_cnn (FP32)",
        },
        {
            "workload": "ResNet-50 (lesson 00)",
            "per": "224x224 image",
            "forward_flops": resnet,
            "training_flops": 3 * resnet,
            "params": 25.6e6,
            "weight_bytes": 4 * 25.6e6,
            "how": "lesson 00's count (3.8 G multiply-adds; FP32)",
        },
        {
            "workload": f"GPT-2 small, context {context}",
            "per": "token",
            "forward_flops": gpt_tok,
            "training_flops": 3 * gpt_tok,
            "params": float(g.params),
            "weight_bytes": 2.0 * g.params,
            "how": "estimate: napkin math (2 x weights + attention; BF16), gpulab.transformer.llm",
        },
        {
            "workload": "DiT-XL/2, 256x256",
            "per": "denoising step",
            "forward_flops": dit_step,
            "training_flops": 3 * dit_step,
            "params": dit_params,
            "weight_bytes": 2.0 * dit_params,
            "how": "estimate: napkin math (256 tokens, 28 blocks with adaLN-Zero; BF16; one image takes ~50 steps)",
        },
    ]
    for r in rows:  # batch 1: every weight read once for one sample
        r["flops_per_weight_byte"] = float(r["forward_flops"]) / float(r["weight_bytes"])
    return rows
