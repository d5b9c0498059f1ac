"""The simulated engine's configuration: vLLM's flags, defaults, refusals and memory model.

Everything here happens before the first request: parse the flags vLLM would take,
fill in the defaults vLLM would choose for this GPU, refuse what vLLM refuses (with
vLLM's own sentences), and size the KV cache the way vLLM's memory profiling does.

This module is the one place callers import it from; the parts live apart, one concern
each: the flags and the resolved :class:`EngineConfig` (:mod:`slotune.workers.sim._flags`), the
memory plan (:mod:`slotune.workers.sim._memory`) and the start-up's phases and log lines
(:mod:`slotune.workers.sim._startup`).
"""

from __future__ import annotations

from slotune.workers.sim._flags import (
    DEFAULT_BLOCK_SIZE,
    DEFAULT_GPU_MEMORY_UTILIZATION,
    KV_CACHE_DTYPES,
    METHODS_NEEDING_A_MODEL,
    PYDANTIC_ERRORS_URL,
    QUANTIZATIONS,
    SIM_ENGINE_VERSION,
    SIM_GPUS,
    SPECULATIVE_METHODS,
    VALID_BLOCK_SIZES,
    EngineConfig,
    EngineConfigError,
    SpeculativeConfig,
    add_engine_arguments,
    build_config,
    check_parallel_layout,
    check_tensor_parallel,
    config_from_args,
    default_scheduler_limits,
)
from slotune.workers.sim._memory import (
    CONSERVING_MEMORY_URL,
    CUDA_GRAPH_BASE_BYTES,
    NCCL_BYTES_PER_PEER,
    NON_TORCH_BYTES,
    RUNTIME_ACTIVATION_SHARE,
    RUNTIME_UNPROFILED_BYTES,
    MemoryPlan,
    activation_bytes_per_token,
    plan_memory,
    runtime_oom_tokens,
    weight_bytes,
)
from slotune.workers.sim._startup import (
    INIT_MODEL_SECONDS,
    PROFILE_SECONDS,
    graph_capture_seconds,
    load_seconds,
    startup_log_lines,
    startup_phases,
)

__all__ = [
    "CONSERVING_MEMORY_URL",
    "CUDA_GRAPH_BASE_BYTES",
    "DEFAULT_BLOCK_SIZE",
    "DEFAULT_GPU_MEMORY_UTILIZATION",
    "INIT_MODEL_SECONDS",
    "KV_CACHE_DTYPES",
    "METHODS_NEEDING_A_MODEL",
    "NCCL_BYTES_PER_PEER",
    "NON_TORCH_BYTES",
    "PROFILE_SECONDS",
    "PYDANTIC_ERRORS_URL",
    "QUANTIZATIONS",
    "RUNTIME_ACTIVATION_SHARE",
    "RUNTIME_UNPROFILED_BYTES",
    "SIM_ENGINE_VERSION",
    "SIM_GPUS",
    "SPECULATIVE_METHODS",
    "VALID_BLOCK_SIZES",
    "EngineConfig",
    "EngineConfigError",
    "MemoryPlan",
    "SpeculativeConfig",
    "activation_bytes_per_token",
    "add_engine_arguments",
    "build_config",
    "check_parallel_layout",
    "check_tensor_parallel",
    "config_from_args",
    "default_scheduler_limits",
    "graph_capture_seconds",
    "load_seconds",
    "plan_memory",
    "runtime_oom_tokens",
    "startup_log_lines",
    "startup_phases",
    "weight_bytes",
]
