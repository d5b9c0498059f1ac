"""The simulated engine's start-up: the phases it takes and the log lines vLLM prints.

Figures only, no waiting: the real-time server sleeps what these say, the virtual-time
trial records them as they are (:mod:`slotune.workers.trial.virtual`).
"""

from __future__ import annotations

from slotune.workers.sim._flags import SIM_ENGINE_VERSION, EngineConfig
from slotune.workers.sim._memory import MemoryPlan
from slotune.workers.sim.catalog import GiB


def startup_log_lines(config: EngineConfig, plan: MemoryPlan) -> list[str]:
    """The start-up lines vLLM 0.32 logs on a GPU, with this configuration's figures.

    The words are vLLM's (``tests/fixtures/vllm/startup_healthy.log`` holds a real
    log); ``slotune.workers.engines.parse_startup_log`` reads the same facts from both.
    """
    max_concurrency = plan.kv_tokens / config.max_model_len
    phases = startup_phases(config, plan)
    load = phases["model_loading"]
    spec = config.speculative
    speculative = "None" if spec is None else (
        f"SpeculativeConfig(method={spec.method}, "
        f"num_spec_tokens={spec.num_speculative_tokens})")
    return [
        f"Resolved architecture for {config.model.name} on {config.gpu.device_name} "
        f"(simulated), tensor_parallel_size={config.tensor_parallel_size}, "
        f"data_parallel_size={config.data_parallel_size}, "
        f"enable_expert_parallel={config.enable_expert_parallel}",
        f"Using max model len {config.max_model_len}",
        *([f"Chunked prefill is enabled with max_num_batched_tokens="
           f"{config.max_num_batched_tokens}."] if config.enable_chunked_prefill else []),
        f"Initializing a V1 LLM engine (v{SIM_ENGINE_VERSION}) with config: "
        f"model='{config.model.name}', speculative_config={speculative}, "
        f"tokenizer='{config.model.name}', dtype=torch.bfloat16, "
        f"max_seq_len={config.max_model_len}, load_format={config.load_format}, "
        f"tensor_parallel_size={config.tensor_parallel_size}, pipeline_parallel_size=1, "
        f"quantization={config.quantization}, enforce_eager={config.enforce_eager}, "
        f"kv_cache_dtype={config.kv_cache_dtype}, device_config=cuda, seed={config.seed}, "
        f"served_model_name={config.served_model_name}, "
        f"enable_prefix_caching={config.enable_prefix_caching}, "
        f"enable_chunked_prefill={config.enable_chunked_prefill}",
        f"Starting to load model {config.model.name}...",
        f"Initializing model took {phases['initialize_model']:.6f} seconds",
        # vLLM's dummy loader fills the weights in place and reports no load time.
        *([f"Loading weights took {phases['load_weights']:.2f} seconds"]
          if "load_weights" in phases else []),
        f"Model loading took {round(plan.weights / GiB, 2)} GiB memory and {load:.6f} seconds",
        f"Available KV cache memory: {round(plan.kv_cache / GiB, 2)} GiB",
        f"GPU KV cache size: {plan.kv_tokens:,} tokens, Maximum concurrency for "
        f"{config.max_model_len:,} tokens per request: {max_concurrency:.2f}x",
        *([f"Graph capturing finished in {phases['graph_capture']:.0f} secs, took "
           f"{plan.cuda_graphs / GiB:.2f} GiB"] if "graph_capture" in phases else []),
        f"init engine (profile, create kv cache, warmup model) took "
        f"{phases['init_engine']:.2f} s",
    ]


def startup_phases(config: EngineConfig, plan: MemoryPlan) -> dict[str, float]:
    """The start-up phases the simulated engine reports, seconds, in the keys
    ``slotune.workers.engines.parse_startup_log`` reads from vLLM's lines (the log prints these;
    the virtual-time trial records them as they are). As in vLLM 0.32, "init engine"
    contains the graph capture; the simulator models no torch.compile."""
    load = load_seconds(config, plan)
    phases = {"initialize_model": INIT_MODEL_SECONDS, "model_loading": load}
    if config.load_format != "dummy":
        phases["load_weights"] = load
    graphs = 0.0
    if not config.enforce_eager:
        graphs = phases["graph_capture"] = graph_capture_seconds(config)
    phases["init_engine"] = PROFILE_SECONDS + graphs
    return phases


# Start-up phases the simulator reports but does not vary: building the model's modules,
# and the profile run with KV cache allocation and warm-up.
INIT_MODEL_SECONDS = 0.15
PROFILE_SECONDS = 1.0


def load_seconds(config: EngineConfig, plan: MemoryPlan) -> float:
    """Weight loading time vLLM would report (≈2 GB/s from a warm page cache; dummy is instant)."""
    if config.load_format == "dummy":
        return 0.1
    return plan.weights / 2e9


def graph_capture_seconds(config: EngineConfig) -> float:
    """CUDA graph capture time: one graph per batch-size bucket up to max_num_seqs."""
    return 2.0 + 0.01 * min(config.max_num_seqs, 512)
