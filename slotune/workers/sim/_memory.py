"""The simulated engine's memory plan: where one GPU's memory goes, and the KV cache left.

Sized as vLLM's start-up profiling does (weights, non-torch memory, the profile run's
activation peak, CUDA graphs; the KV cache gets the rest of what
``gpu_memory_utilization`` asks for), with vLLM's refusals when it does not fit, and the
step size past which the memory profiling did not see would run out at run time.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from slotune.workers.sim._flags import EngineConfig, EngineConfigError
from slotune.workers.sim.catalog import GiB
from slotune.workers.sim.cost_model import KV_BYTES, WEIGHT_BYTES

# Memory vLLM's profiling finds outside weights, activations and KV: the CUDA context,
# cuBLAS workspaces and NCCL buffers ("non-torch memory"), and CUDA graphs.
NON_TORCH_BYTES = int(0.85 * GiB)
NCCL_BYTES_PER_PEER = int(0.12 * GiB)
CUDA_GRAPH_BASE_BYTES = int(0.5 * GiB)
# Allocations the profile run does not see (allocator fragmentation, transient buffers of
# a large first batch). They must fit in what gpu_memory_utilization leaves free; a value
# too close to 1 OOMs under the first large batch, as it does on real GPUs.
RUNTIME_UNPROFILED_BYTES = int(0.5 * GiB)
RUNTIME_ACTIVATION_SHARE = 0.4
CONSERVING_MEMORY_URL = "https://docs.vllm.ai/en/latest/configuration/conserving_memory/"


@dataclass(frozen=True, slots=True)
class MemoryPlan:
    """Where one GPU's memory goes, as vLLM's start-up profiling would report it (bytes)."""

    total: int
    requested: int
    weights: int
    non_torch: int
    activation_peak: int
    cuda_graphs: int
    kv_cache: int
    kv_bytes_per_block: int
    num_blocks: int
    block_size: int

    @property
    def kv_tokens(self) -> int:
        return self.num_blocks * self.block_size



def activation_bytes_per_token(config: EngineConfig) -> float:
    """Peak activation memory per batched token on one rank.

    bf16 buffers of the profile run: residual, norms and attention projections (≈16
    hidden-sized vectors) and the fused gate/up output with its activation (≈6
    intermediate-sized vectors, split across TP ranks). A MoE layer's are the top-k
    experts' (fused-MoE keeps a token's k intermediate rows), over the widest the rank
    holds: whole experts with expert parallelism, a TP × DP slice without.
    """
    m, tp = config.model, config.tensor_parallel_size
    width = m.intermediate_size / tp
    layout = config.hardware.expert_layout
    if m.moe is not None and layout is not None:
        expert = m.moe.expert_intermediate_size / (1 if layout.expert_parallel
                                                     else layout.devices)
        width = m.moe.experts_per_token * expert + m.moe.shared_intermediate_size / tp
    return 2.0 * (16 * m.hidden_size + 6 * width)


def weight_bytes(config: EngineConfig) -> int:
    """Weights on one device: quantised layers; embeddings and lm_head stay in bf16.

    Everything is split across the TP ranks of a DP rank, except a MoE model's routed
    experts: all of them resident, spread over all TP × DP devices
    (:func:`slotune.workers.sim.moe.expert_layout`: the busiest device's share)."""
    m = config.model
    embed = m.vocab_size * m.hidden_size * (1 if m.tie_word_embeddings else 2)
    experts = m.routed_expert_params
    layer_params = m.params - embed - experts
    per_param = WEIGHT_BYTES[config.quantization or "bf16"]
    layout = config.hardware.expert_layout
    share = 0.0 if layout is None else layout.weight_share
    return int((layer_params * per_param + embed * 2.0) / config.tensor_parallel_size
               + experts * per_param * share)


def plan_memory(config: EngineConfig) -> MemoryPlan:
    """Size the KV cache as vLLM's profiling does, refusing what vLLM refuses."""
    total = config.gpu.memory_bytes
    requested = int(config.gpu_memory_utilization * total)
    weights = weight_bytes(config)
    if weights > total:
        raise EngineConfigError(
            f"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate "
            f"{weights / GiB:.2f} GiB for the model weights. GPU 0 has a total capacity of "
            f"{total / GiB:.2f} GiB. Use a larger --tensor-parallel-size or --quantization."
        )
    # NCCL buffers for each peer the device talks to: its TP group, and the DP group's.
    peers = config.tensor_parallel_size * config.data_parallel_size - 1
    non_torch = NON_TORCH_BYTES + NCCL_BYTES_PER_PEER * peers
    # The sampler's dummy run holds fp32 logits for max_num_seqs rows, plus the probs and
    # sort buffers of top-p/top-k: about four logits-sized tensors.
    sampler_logits = config.max_num_seqs * config.model.vocab_size * 4 * 4
    activation = int(config.max_num_batched_tokens * activation_bytes_per_token(config)
                     + sampler_logits)
    graphs = 0 if config.enforce_eager else CUDA_GRAPH_BASE_BYTES + config.max_num_seqs * 64 * 1024
    kv_cache = requested - weights - non_torch - activation - graphs
    kv_per_token = config.model.kv_bytes_per_token(
        KV_BYTES[config.kv_cache_dtype], config.tensor_parallel_size
    )
    block_bytes = int(kv_per_token * config.block_size)
    if kv_cache <= 0:
        raise EngineConfigError(
            "No available memory for the cache blocks. Try increasing "
            "`gpu_memory_utilization` when initializing the engine (this flag also controls "
            "CPU memory reservation on the CPU backend, despite its name). "
            f"See {CONSERVING_MEMORY_URL} for more details."
        )
    num_blocks = kv_cache // block_bytes
    needed_blocks = math.ceil(config.max_model_len / config.block_size)
    if needed_blocks > num_blocks:
        needed = needed_blocks * block_bytes
        estimated_max_len = num_blocks * config.block_size
        estimate = ("" if estimated_max_len <= 0 else "Based on the available memory, the "
                    f"estimated maximum model length is {estimated_max_len}. ")
        raise EngineConfigError(
            f"To serve at least one request with the model's max seq len "
            f"({config.max_model_len}), ({round(needed / GiB, 2)} GiB KV cache is needed, "
            "which is larger than the available KV cache memory "
            f"({round(kv_cache / GiB, 2)} GiB). {estimate}"
            "Try increasing `gpu_memory_utilization` (which also controls CPU memory on the "
            "CPU backend) or decreasing `max_model_len` when initializing the engine. "
            f"See {CONSERVING_MEMORY_URL} for more details."
        )
    return MemoryPlan(
        total=total, requested=requested, weights=weights, non_torch=non_torch,
        activation_peak=activation, cuda_graphs=graphs, kv_cache=kv_cache,
        kv_bytes_per_block=block_bytes, num_blocks=num_blocks, block_size=config.block_size,
    )


def runtime_oom_tokens(config: EngineConfig) -> int | None:
    """The smallest step size (batched tokens) that OOMs at run time, or None if none does.

    What gpu_memory_utilization leaves free must hold the allocations profiling does not
    see; those grow with the step's batch.
    """
    headroom = config.gpu.memory_bytes * (1.0 - config.gpu_memory_utilization)
    per_token = activation_bytes_per_token(config) * RUNTIME_ACTIVATION_SHARE
    spare = headroom - RUNTIME_UNPROFILED_BYTES
    if spare < 0:
        return 1
    tokens = int(spare / per_token) + 1
    return tokens if tokens <= config.max_num_batched_tokens else None
