"""The catalogue of GPUs and models the simulated engine knows.

GPU figures are public datasheet numbers (dense tensor throughput, no sparsity).
Model figures are the facts of each model's ``config.json``; the parameter count is
derived from them, so a model is added by copying its config, not by guessing.
A base model and its instruct variant share one architecture entry.
"""

from __future__ import annotations

from dataclasses import dataclass

GiB = 1 << 30


class UnknownCatalogEntry(ValueError):
    """A GPU or model name the catalogue does not hold; the message lists the valid ones."""


@dataclass(frozen=True, slots=True)
class GPUSpec:
    """One GPU type, from its datasheet."""

    name: str
    """Our short name, as passed to ``--sim-gpu``."""
    device_name: str
    """What ``torch.cuda.get_device_name`` would say (vLLM's defaults look at it)."""
    memory_bytes: int
    bf16_flops: float
    """Dense BF16 tensor throughput, FLOP/s (FP32 accumulate, as PyTorch GEMMs use)."""
    fp8_flops: float | None
    """Dense FP8 tensor throughput, FLOP/s; None where the GPU has no FP8 tensor cores."""
    memory_bandwidth: float
    """HBM/GDDR bandwidth, bytes/s."""
    interconnect_bandwidth: float
    """GPU-to-GPU bandwidth per direction, bytes/s (NVLink, or PCIe where there is none)."""
    interconnect_latency_s: float
    """Fixed latency of one all-reduce across the interconnect."""


@dataclass(frozen=True, slots=True)
class ModelSpec:
    """One model architecture, from its ``config.json``."""

    name: str
    hidden_size: int
    num_layers: int
    num_attention_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    vocab_size: int
    max_position_embeddings: int
    tie_word_embeddings: bool = False
    qkv_bias: bool = False
    aliases: tuple[str, ...] = ()

    @property
    def params(self) -> int:
        """Parameter count derived from the architecture (embeddings included)."""
        h, layers = self.hidden_size, self.num_layers
        q = h * self.num_attention_heads * self.head_dim
        kv = 2 * h * self.num_kv_heads * self.head_dim
        o = self.num_attention_heads * self.head_dim * h
        heads = self.num_attention_heads + 2 * self.num_kv_heads
        bias = heads * self.head_dim if self.qkv_bias else 0
        mlp = 3 * h * self.intermediate_size
        norms = 2 * h
        per_layer = q + kv + o + bias + mlp + norms
        embed = self.vocab_size * h
        lm_head = 0 if self.tie_word_embeddings else self.vocab_size * h
        return layers * per_layer + embed + lm_head + h

    @property
    def matmul_params(self) -> int:
        """Parameters that take part in every token's GEMMs (the embedding lookup does not)."""
        embedding = self.vocab_size * self.hidden_size
        return self.params - (0 if self.tie_word_embeddings else embedding)

    def kv_bytes_per_token(self, kv_dtype_bytes: float, tensor_parallel_size: int = 1) -> float:
        """KV cache bytes one token occupies on one GPU (K and V, every layer)."""
        kv_heads_per_gpu = max(1, self.num_kv_heads // tensor_parallel_size)
        return 2 * self.num_layers * kv_heads_per_gpu * self.head_dim * kv_dtype_bytes


_TB = 1e12
_GB = 1e9

GPUS: dict[str, GPUSpec] = {
    g.name: g
    for g in (
        GPUSpec("a100-80g", "NVIDIA A100-SXM4-80GB", 80 * GiB, 312 * _TB, None,
                2039 * _GB, 300 * _GB, 8e-6),
        GPUSpec("h100-sxm", "NVIDIA H100 80GB HBM3", 80 * GiB, 989 * _TB, 1979 * _TB,
                3350 * _GB, 450 * _GB, 6e-6),
        GPUSpec("h200", "NVIDIA H200", 141 * 10**9, 989 * _TB, 1979 * _TB,
                4800 * _GB, 450 * _GB, 6e-6),
        GPUSpec("l40s", "NVIDIA L40S", 48 * GiB, 362 * _TB, 733 * _TB,
                864 * _GB, 32 * _GB, 20e-6),
        GPUSpec("rtx4090", "NVIDIA GeForce RTX 4090", 24 * GiB, 165.2 * _TB, 330.3 * _TB,
                1008 * _GB, 32 * _GB, 20e-6),
    )
}

GPU_ALIASES = {
    "a100": "a100-80g", "a100_sxm": "a100-80g", "h100": "h100-sxm", "h100_sxm": "h100-sxm",
    "h200_sxm": "h200", "h200-sxm": "h200", "a100-sxm": "a100-80g", "4090": "rtx4090",
    "rtx-4090": "rtx4090",
}

_LLAMA31_8B = dict(hidden_size=4096, num_layers=32, num_attention_heads=32, num_kv_heads=8,
                   head_dim=128, intermediate_size=14336, vocab_size=128256,
                   max_position_embeddings=131072)
_LLAMA31_70B = dict(hidden_size=8192, num_layers=80, num_attention_heads=64, num_kv_heads=8,
                    head_dim=128, intermediate_size=28672, vocab_size=128256,
                    max_position_embeddings=131072)

MODELS: dict[str, ModelSpec] = {
    m.name: m
    for m in (
        ModelSpec("Qwen/Qwen2.5-7B-Instruct", hidden_size=3584, num_layers=28,
                  num_attention_heads=28, num_kv_heads=4, head_dim=128, intermediate_size=18944,
                  vocab_size=152064, max_position_embeddings=32768, qkv_bias=True,
                  aliases=("Qwen/Qwen2.5-7B",)),
        ModelSpec("Qwen/Qwen2.5-32B-Instruct", hidden_size=5120, num_layers=64,
                  num_attention_heads=40, num_kv_heads=8, head_dim=128, intermediate_size=27648,
                  vocab_size=152064, max_position_embeddings=32768, qkv_bias=True,
                  aliases=("Qwen/Qwen2.5-32B",)),
        ModelSpec("Qwen/Qwen3-8B", hidden_size=4096, num_layers=36, num_attention_heads=32,
                  num_kv_heads=8, head_dim=128, intermediate_size=12288, vocab_size=151936,
                  max_position_embeddings=40960, aliases=("Qwen/Qwen3-8B-Base",)),
        ModelSpec("meta-llama/Llama-3.1-8B-Instruct", **_LLAMA31_8B,  # type: ignore[arg-type]
                  aliases=("meta-llama/Llama-3.1-8B", "meta-llama/Meta-Llama-3.1-8B",
                           "meta-llama/Meta-Llama-3.1-8B-Instruct")),
        ModelSpec("meta-llama/Llama-3.1-70B-Instruct", **_LLAMA31_70B,  # type: ignore[arg-type]
                  aliases=("meta-llama/Llama-3.1-70B", "meta-llama/Meta-Llama-3.1-70B",
                           "meta-llama/Meta-Llama-3.1-70B-Instruct")),
    )
}


def get_gpu(name: str) -> GPUSpec:
    """Look up a GPU by our name or a common alias (case-insensitive)."""
    key = name.strip().lower()
    key = GPU_ALIASES.get(key, key)
    try:
        return GPUS[key]
    except KeyError:
        raise UnknownCatalogEntry(
            f"unknown GPU {name!r}; valid: {', '.join(sorted(GPUS))}"
        ) from None


def get_model(name: str) -> ModelSpec:
    """Look up a model by its Hugging Face name or an alias (a base model, an older name)."""
    lowered = name.strip().lower()
    for model in MODELS.values():
        if lowered == model.name.lower() or lowered in (a.lower() for a in model.aliases):
            return model
    raise UnknownCatalogEntry(f"unknown model {name!r}; valid: {', '.join(sorted(MODELS))}")
