"""The shapes the simulator's facts take: a GPU's datasheet and a model's architecture.

Kept apart from :mod:`slotune.workers.sim.catalog` so that the readers of facts
(:mod:`slotune.workers.sim.model_config` for a ``config.json``,
:mod:`slotune.workers.sim.device_file` for a datasheet file) and the catalogue built from them
import the same types without importing each other. Import them from
:mod:`slotune.workers.sim.catalog`.
"""

from __future__ import annotations

from dataclasses import dataclass

GiB = 1 << 30


class UnknownCatalogEntry(ValueError):
    """A GPU or model the simulator cannot model: a name the catalogue does not hold (the
    message lists the valid ones), or a ``config.json`` / device file it refuses (the
    subclasses :class:`~slotune.workers.sim.model_config.ModelConfigError` and
    :class:`~slotune.workers.sim.device_file.DeviceFileError`; the message names the file and
    field)."""


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
class MoESpec:
    """A mixture-of-experts model's experts, from its ``config.json``
    (:mod:`slotune.workers.sim.model_config` reads each family's field names)."""

    num_experts: int
    """Routed experts in each MoE layer."""
    experts_per_token: int
    """Routed experts each token goes to (top-k)."""
    expert_intermediate_size: int
    """The MLP width of one routed expert."""
    num_moe_layers: int
    """Layers whose MLP is the experts; the others have a dense MLP of ``intermediate_size``."""
    shared_intermediate_size: int = 0
    """Total MLP width of the shared experts every token also goes through (0: none)."""

    @property
    def expert_params(self) -> int:
        """Parameters of one routed expert (gate, up and down projections), per hidden unit."""
        return 3 * self.expert_intermediate_size


@dataclass(frozen=True, slots=True)
class ModelSpec:
    """One model architecture, from its ``config.json``."""

    name: str
    """The catalogue's Hugging Face name, a cached snapshot's name, or a directory as given."""
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
    moe: MoESpec | None = None
    """The experts of a mixture-of-experts model; None for a dense one."""

    @property
    def params(self) -> int:
        """Parameter count derived from the architecture (embeddings included; every
        expert's weights, since all of them are resident)."""
        return self._dense_params + self.routed_expert_params

    @property
    def routed_expert_params(self) -> int:
        """Parameters of all routed experts of all MoE layers (0 for a dense model)."""
        moe = self.moe
        if moe is None:
            return 0
        return moe.num_moe_layers * moe.num_experts * moe.expert_params * self.hidden_size

    @property
    def active_routed_params(self) -> int:
        """Routed-expert parameters one token is multiplied by: its top-k experts in each
        MoE layer (0 for a dense model)."""
        moe = self.moe
        if moe is None:
            return 0
        return moe.num_moe_layers * moe.experts_per_token * moe.expert_params * self.hidden_size

    @property
    def active_params(self) -> int:
        """Parameters one token's forward pass multiplies by: a dense model's all, a MoE
        model's all but the routed experts it is not sent to."""
        return self._dense_params + self.active_routed_params

    @property
    def _dense_params(self) -> int:
        """Everything but the routed experts: attention, dense MLPs, shared experts,
        routers, norms, embeddings."""
        h, layers = self.hidden_size, self.num_layers
        q = h * self.num_attention_heads * self.head_dim
        kv = 2 * h * self.num_kv_heads * self.head_dim
        o = self.num_attention_heads * self.head_dim * h
        heads = self.num_attention_heads + 2 * self.num_kv_heads
        bias = heads * self.head_dim if self.qkv_bias else 0
        norms = 2 * h
        moe_layers = 0 if self.moe is None else self.moe.num_moe_layers
        mlp = (layers - moe_layers) * 3 * h * self.intermediate_size
        if self.moe is not None:  # each MoE layer: a router and the shared experts
            mlp += moe_layers * h * (self.moe.num_experts + 3 * self.moe.shared_intermediate_size)
        embed = self.vocab_size * h
        lm_head = 0 if self.tie_word_embeddings else self.vocab_size * h
        return layers * (q + kv + o + bias + norms) + mlp + embed + lm_head + h

    @property
    def matmul_params(self) -> int:
        """Parameters that take part in every token's GEMMs (the embedding lookup does not;
        of a MoE model's routed experts, only the ones the token is sent to)."""
        embedding = self.vocab_size * self.hidden_size
        return self.active_params - (0 if self.tie_word_embeddings else embedding)

    def kv_bytes_per_token(self, kv_dtype_bytes: float, tensor_parallel_size: int = 1) -> float:
        """KV cache bytes one token occupies on one GPU (K and V, every layer)."""
        kv_heads_per_gpu = max(1, self.num_kv_heads // tensor_parallel_size)
        return 2 * self.num_layers * kv_heads_per_gpu * self.head_dim * kv_dtype_bytes
