"""The simulated engine's configuration: vLLM's flags, defaults, refusals and memory model.

Everything here happens before the first request: parse the flags vLLM would take,
fill in the defaults vLLM would choose for this GPU, refuse what vLLM refuses (with
vLLM's own sentences), and size the KV cache the way vLLM's memory profiling does.
"""

from __future__ import annotations

import argparse
import json
import math
import os
from dataclasses import dataclass, field
from typing import Any

from workers.sim.catalog import GiB, GPUSpec, ModelSpec, get_gpu, get_model
from workers.sim.cost_model import KV_BYTES, WEIGHT_BYTES, HardwareSetup

DEFAULT_GPU_MEMORY_UTILIZATION = 0.92
DEFAULT_BLOCK_SIZE = 16
VALID_BLOCK_SIZES = (1, 8, 16, 32, 64, 128)
QUANTIZATIONS = ("fp8", "awq", "gptq")
KV_CACHE_DTYPES = ("auto", "fp8", "fp8_e4m3", "fp8_e5m2")
SIM_GPUS = ("a100-80g", "h100-sxm", "h200", "l40s", "rtx4090")

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


class EngineConfigError(ValueError):
    """A configuration vLLM would refuse at start-up; the message is vLLM's own sentence."""


@dataclass(frozen=True, slots=True)
class SpeculativeConfig:
    """``--speculative-config``: n-gram or draft-model speculation, k tokens per step."""

    method: str
    num_speculative_tokens: int
    acceptance_rate: float
    """Probability that each proposed token is accepted (a workload property; sim flag)."""
    draft_cost_fraction: float
    """Cost of proposing k tokens relative to one target step (0 for n-gram lookup)."""

    @classmethod
    def parse(cls, text: str, acceptance_rate: float) -> SpeculativeConfig:
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise EngineConfigError(
                f"--speculative-config must be JSON, e.g. "
                f'\'{{"method":"ngram","num_speculative_tokens":5}}\': {exc}'
            ) from exc
        if not isinstance(data, dict):
            raise EngineConfigError("--speculative-config must be a JSON object")
        method = str(data.get("method", "ngram"))
        if method not in ("ngram", "eagle", "eagle3", "draft_model", "mtp"):
            raise EngineConfigError(
                f"Unsupported speculative method {method!r}; the simulator models "
                "ngram, eagle, eagle3, draft_model and mtp."
            )
        k = data.get("num_speculative_tokens")
        if not isinstance(k, int) or k < 1:
            raise EngineConfigError("num_speculative_tokens must be a positive integer.")
        draft_cost = 0.0 if method == "ngram" else 0.08 * k
        return cls(method, k, acceptance_rate, draft_cost)


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


@dataclass(frozen=True, slots=True)
class EngineConfig:
    """A fully resolved engine configuration (defaults filled in, validated)."""

    model: ModelSpec
    gpu: GPUSpec
    served_model_name: str
    max_num_seqs: int
    max_num_batched_tokens: int
    gpu_memory_utilization: float
    max_model_len: int
    enable_prefix_caching: bool
    enable_chunked_prefill: bool
    kv_cache_dtype: str
    quantization: str | None
    tensor_parallel_size: int
    block_size: int
    enforce_eager: bool
    load_format: str
    speculative: SpeculativeConfig | None
    seed: int = 0
    noise: float = 0.0
    time_scale: float = 1.0
    cost_model: str = "roofline"
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def hardware(self) -> HardwareSetup:
        return HardwareSetup(
            model=self.model,
            gpu=self.gpu,
            tensor_parallel_size=self.tensor_parallel_size,
            weight_format=self.quantization or "bf16",
            kv_cache_dtype=self.kv_cache_dtype,
            enforce_eager=self.enforce_eager,
        )

    def resolved(self) -> dict[str, Any]:
        """The engine arguments as vLLM would log them (what a trial records)."""
        return {
            "model": self.model.name,
            "served_model_name": self.served_model_name,
            "max_num_seqs": self.max_num_seqs,
            "max_num_batched_tokens": self.max_num_batched_tokens,
            "gpu_memory_utilization": self.gpu_memory_utilization,
            "max_model_len": self.max_model_len,
            "enable_prefix_caching": self.enable_prefix_caching,
            "enable_chunked_prefill": self.enable_chunked_prefill,
            "kv_cache_dtype": self.kv_cache_dtype,
            "quantization": self.quantization,
            "tensor_parallel_size": self.tensor_parallel_size,
            "block_size": self.block_size,
            "enforce_eager": self.enforce_eager,
            "speculative_config": None if self.speculative is None else {
                "method": self.speculative.method,
                "num_speculative_tokens": self.speculative.num_speculative_tokens,
            },
            "sim_gpu": self.gpu.name,
        }


def default_scheduler_limits(gpu: GPUSpec) -> tuple[int, int]:
    """vLLM's API-server defaults: (max_num_batched_tokens, max_num_seqs) for this GPU."""
    if gpu.memory_bytes >= 70 * GiB and "a100" not in gpu.device_name.lower():
        return 8192, 1024
    return 2048, 256


def check_tensor_parallel(model: ModelSpec, tensor_parallel_size: int) -> None:
    """vLLM's check (ModelConfig.verify_with_parallel_config), in its own words."""
    if tensor_parallel_size < 1:
        raise EngineConfigError(f"tensor_parallel_size must be >= 1, got {tensor_parallel_size}.")
    if model.num_attention_heads % tensor_parallel_size:
        raise EngineConfigError(
            f"Total number of attention heads ({model.num_attention_heads}) must be "
            f"divisible by tensor parallel size ({tensor_parallel_size})."
        )


def build_config(
    model: str,
    *,
    sim_gpu: str = "h100-sxm",
    served_model_name: str | None = None,
    max_num_seqs: int | None = None,
    max_num_batched_tokens: int | None = None,
    gpu_memory_utilization: float = DEFAULT_GPU_MEMORY_UTILIZATION,
    max_model_len: int | None = None,
    enable_prefix_caching: bool = True,
    enable_chunked_prefill: bool = True,
    kv_cache_dtype: str = "auto",
    quantization: str | None = None,
    speculative_config: str | None = None,
    tensor_parallel_size: int = 1,
    block_size: int = DEFAULT_BLOCK_SIZE,
    enforce_eager: bool = False,
    load_format: str = "auto",
    sim_seed: int = 0,
    sim_noise: float = 0.0,
    sim_time_scale: float = 1.0,
    sim_cost_model: str = "roofline",
    sim_acceptance_rate: float = 0.6,
) -> EngineConfig:
    """Resolve defaults and run vLLM's argument checks (not the memory check)."""
    model_spec = get_model(model)
    gpu = get_gpu(sim_gpu)
    if kv_cache_dtype not in KV_BYTES:
        raise EngineConfigError(
            f"Unknown kv cache dtype {kv_cache_dtype!r}; valid: {', '.join(KV_CACHE_DTYPES)}"
        )
    if quantization is not None and quantization not in WEIGHT_BYTES:
        raise EngineConfigError(
            f"Unknown quantization method: {quantization}. Must be one of {list(QUANTIZATIONS)}."
        )
    check_tensor_parallel(model_spec, tensor_parallel_size)
    if gpu_memory_utilization > 1.0:
        raise EngineConfigError(
            f"GPU memory utilization must be less than 1.0. Got {gpu_memory_utilization}."
        )
    if gpu_memory_utilization <= 0.0:
        raise EngineConfigError(
            f"GPU memory utilization must be greater than 0. Got {gpu_memory_utilization}."
        )
    if block_size not in VALID_BLOCK_SIZES:
        raise EngineConfigError(
            f"Invalid block size {block_size}; valid: {', '.join(map(str, VALID_BLOCK_SIZES))}"
        )
    derived_len = model_spec.max_position_embeddings
    if max_model_len is None:
        max_model_len = derived_len
    elif max_model_len > derived_len:
        raise EngineConfigError(
            f"User-specified max_model_len ({max_model_len}) is greater than the derived "
            f"max_model_len (max_position_embeddings={derived_len} or model_max_length=None "
            "in model's config.json). To allow overriding this maximum, set the env var "
            "VLLM_ALLOW_LONG_MAX_MODEL_LEN=1."
        )
    elif max_model_len < 1:
        raise EngineConfigError(f"max_model_len must be positive, got {max_model_len}.")
    default_tokens, default_seqs = default_scheduler_limits(gpu)
    if max_num_seqs is None:
        max_num_seqs = default_seqs
    if max_num_batched_tokens is None:
        max_num_batched_tokens = default_tokens
        if not enable_chunked_prefill:
            # Without chunked prefill a prompt must fit one step, so vLLM raises the budget.
            max_num_batched_tokens = max(max_model_len, default_tokens)
    if max_num_seqs < 1:
        raise EngineConfigError(f"max_num_seqs must be positive, got {max_num_seqs}.")
    if max_num_batched_tokens < max_num_seqs:
        raise EngineConfigError(
            f"max_num_batched_tokens ({max_num_batched_tokens}) must be greater than or "
            f"equal to max_num_seqs ({max_num_seqs})."
        )
    if not enable_chunked_prefill and max_num_batched_tokens < max_model_len:
        raise EngineConfigError(
            f"max_num_batched_tokens ({max_num_batched_tokens}) is smaller than max_model_len "
            f"({max_model_len}). This effectively limits the maximum sequence length to "
            "max_num_batched_tokens and makes vLLM reject longer sequences. Please increase "
            "max_num_batched_tokens or decrease max_model_len."
        )
    if not 0.0 <= sim_acceptance_rate <= 1.0:
        raise EngineConfigError(
            f"--sim-acceptance-rate must be in [0, 1], got {sim_acceptance_rate}."
        )
    if sim_noise < 0:
        raise EngineConfigError(f"--sim-noise must be >= 0, got {sim_noise}.")
    if sim_time_scale <= 0:
        raise EngineConfigError(f"--sim-time-scale must be > 0, got {sim_time_scale}.")
    speculative = (
        SpeculativeConfig.parse(speculative_config, sim_acceptance_rate)
        if speculative_config else None
    )
    return EngineConfig(
        model=model_spec,
        gpu=gpu,
        served_model_name=served_model_name or model,
        max_num_seqs=max_num_seqs,
        max_num_batched_tokens=max_num_batched_tokens,
        gpu_memory_utilization=gpu_memory_utilization,
        max_model_len=max_model_len,
        enable_prefix_caching=enable_prefix_caching,
        enable_chunked_prefill=enable_chunked_prefill,
        kv_cache_dtype=kv_cache_dtype,
        quantization=quantization,
        tensor_parallel_size=tensor_parallel_size,
        block_size=block_size,
        enforce_eager=enforce_eager,
        load_format=load_format,
        speculative=speculative,
        seed=sim_seed,
        noise=sim_noise,
        time_scale=sim_time_scale,
        cost_model=sim_cost_model,
    )


def activation_bytes_per_token(config: EngineConfig) -> float:
    """Peak activation memory per batched token on one rank.

    bf16 buffers of the profile run: residual, norms and attention projections (≈16
    hidden-sized vectors) and the fused gate/up output with its activation (≈6
    intermediate-sized vectors, split across TP ranks).
    """
    m, tp = config.model, config.tensor_parallel_size
    return 2.0 * (16 * m.hidden_size + 6 * m.intermediate_size / tp)


def weight_bytes(config: EngineConfig) -> int:
    """Weights on one rank: quantised layers; embeddings and lm_head stay in bf16."""
    m = config.model
    embed = m.vocab_size * m.hidden_size * (1 if m.tie_word_embeddings else 2)
    layer_params = m.params - embed
    per_param = WEIGHT_BYTES[config.quantization or "bf16"]
    return int((layer_params * per_param + embed * 2.0) / config.tensor_parallel_size)


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
    non_torch = NON_TORCH_BYTES + NCCL_BYTES_PER_PEER * (config.tensor_parallel_size - 1)
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
            "`gpu_memory_utilization` when initializing the engine."
        )
    num_blocks = kv_cache // block_bytes
    needed_blocks = math.ceil(config.max_model_len / config.block_size)
    if needed_blocks > num_blocks:
        needed = needed_blocks * block_bytes
        estimated_max_len = num_blocks * config.block_size
        raise EngineConfigError(
            f"To serve at least one request with the models's max seq len "
            f"({config.max_model_len}), ({needed / GiB:.2f} GiB KV cache is needed, which is "
            f"larger than the available KV cache memory ({kv_cache / GiB:.2f} GiB). Based on "
            f"the available memory, the estimated maximum model length is {estimated_max_len}. "
            "Try increasing `gpu_memory_utilization` or decreasing `max_model_len` when "
            "initializing the engine."
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


def startup_log_lines(config: EngineConfig, plan: MemoryPlan) -> list[str]:
    """The start-up lines vLLM logs, with this configuration's figures."""
    max_concurrency = plan.kv_tokens / config.max_model_len
    return [
        f"Resolved architecture for {config.model.name} on {config.gpu.device_name} "
        f"(simulated), tensor_parallel_size={config.tensor_parallel_size}",
        f"Chunked prefill is {'enabled' if config.enable_chunked_prefill else 'disabled'} "
        f"with max_num_batched_tokens={config.max_num_batched_tokens}.",
        f"Loading weights took {load_seconds(config, plan):.2f} seconds",
        f"Model loading took {plan.weights / GiB:.4f} GiB and {load_seconds(config, plan):.6f} "
        "seconds",
        f"Available KV cache memory: {plan.kv_cache / GiB:.2f} GiB",
        f"GPU KV cache size: {plan.kv_tokens:,} tokens",
        f"Maximum concurrency for {config.max_model_len:,} tokens per request: "
        f"{max_concurrency:.2f}x",
        *([] if config.enforce_eager else [
            f"Graph capturing finished in {graph_capture_seconds(config):.0f} secs, took "
            f"{plan.cuda_graphs / GiB:.2f} GiB"
        ]),
    ]


def load_seconds(config: EngineConfig, plan: MemoryPlan) -> float:
    """Weight loading time vLLM would report (≈2 GB/s from a warm page cache; dummy is instant)."""
    if config.load_format == "dummy":
        return 0.1
    return plan.weights / 2e9


def graph_capture_seconds(config: EngineConfig) -> float:
    """CUDA graph capture time: one graph per batch-size bucket up to max_num_seqs."""
    return 2.0 + 0.01 * min(config.max_num_seqs, 512)


def _bool_flag(parser: argparse.ArgumentParser, name: str, default: bool, help_text: str) -> None:
    parser.add_argument(
        f"--{name}", action=argparse.BooleanOptionalAction, default=default, help=help_text
    )


def add_engine_arguments(parser: argparse.ArgumentParser) -> None:
    """vLLM's flag names (as ``vllm serve`` spells them) plus the simulator's own."""
    parser.add_argument("model", help="model name, e.g. Qwen/Qwen2.5-7B-Instruct")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--served-model-name", default=None)
    parser.add_argument("--max-num-seqs", type=int, default=None)
    parser.add_argument("--max-num-batched-tokens", type=int, default=None)
    parser.add_argument("--gpu-memory-utilization", type=float,
                        default=DEFAULT_GPU_MEMORY_UTILIZATION)
    parser.add_argument("--max-model-len", type=int, default=None)
    _bool_flag(parser, "enable-prefix-caching", True, "reuse KV blocks of shared prefixes")
    _bool_flag(parser, "enable-chunked-prefill", True, "split long prompts across steps")
    parser.add_argument("--kv-cache-dtype", choices=KV_CACHE_DTYPES, default="auto")
    parser.add_argument("--quantization", "-q", choices=QUANTIZATIONS, default=None)
    parser.add_argument("--speculative-config", default=None,
                        help='JSON, e.g. \'{"method":"ngram","num_speculative_tokens":5}\'')
    parser.add_argument("--tensor-parallel-size", "-tp", type=int, default=1)
    parser.add_argument("--block-size", type=int, default=DEFAULT_BLOCK_SIZE)
    _bool_flag(parser, "enforce-eager", False, "run without CUDA graphs")
    parser.add_argument("--load-format", default="auto")
    # The --sim-* defaults can come from SLOTUNE_SIM_* variables, so a launcher that only
    # speaks vLLM's flags (the vllm adapter pointed at this entry) can still pick them.
    env = os.environ.get
    parser.add_argument("--sim-gpu", choices=SIM_GPUS, default=env("SLOTUNE_SIM_GPU", "h100-sxm"),
                        help="the simulated GPU type (env SLOTUNE_SIM_GPU)")
    parser.add_argument("--sim-seed", type=int, default=int(env("SLOTUNE_SIM_SEED", "0")))
    parser.add_argument("--sim-noise", type=float, default=float(env("SLOTUNE_SIM_NOISE", "0")),
                        help="run-to-run jitter of step times (relative std dev); 0 = exact")
    parser.add_argument("--sim-time-scale", type=float,
                        default=float(env("SLOTUNE_SIM_TIME_SCALE", "1")),
                        help="run the real-time driver this many times faster than real time")
    parser.add_argument("--sim-cost-model", default=env("SLOTUNE_SIM_COST_MODEL", "roofline"))
    parser.add_argument("--sim-acceptance-rate", type=float, default=0.6,
                        help="speculative decoding: probability each proposed token is accepted")
    parser.add_argument("--sim-startup-delay", type=float, default=None,
                        help="seconds to wait before /health turns 200 "
                             "(default: the modelled load time divided by the time scale, ≤ 2 s)")


def config_from_args(args: argparse.Namespace) -> EngineConfig:
    return build_config(
        args.model,
        sim_gpu=args.sim_gpu,
        served_model_name=args.served_model_name,
        max_num_seqs=args.max_num_seqs,
        max_num_batched_tokens=args.max_num_batched_tokens,
        gpu_memory_utilization=args.gpu_memory_utilization,
        max_model_len=args.max_model_len,
        enable_prefix_caching=args.enable_prefix_caching,
        enable_chunked_prefill=args.enable_chunked_prefill,
        kv_cache_dtype=args.kv_cache_dtype,
        quantization=args.quantization,
        speculative_config=args.speculative_config,
        tensor_parallel_size=args.tensor_parallel_size,
        block_size=args.block_size,
        enforce_eager=args.enforce_eager,
        load_format=args.load_format,
        sim_seed=args.sim_seed,
        sim_noise=args.sim_noise,
        sim_time_scale=args.sim_time_scale,
        sim_cost_model=args.sim_cost_model,
        sim_acceptance_rate=args.sim_acceptance_rate,
    )
