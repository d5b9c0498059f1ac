"""The vLLM adapter: ``vllm serve MODEL --flag value …`` on the GPUs Ray assigned."""

from __future__ import annotations

from typing import ClassVar

from workers.engines.base import EngineAdapter, flag_args

VLLM_ARGS = frozenset({
    "max_num_seqs", "max_num_batched_tokens", "gpu_memory_utilization", "max_model_len",
    "enable_prefix_caching", "enable_chunked_prefill", "kv_cache_dtype", "quantization",
    "speculative_config", "tensor_parallel_size", "pipeline_parallel_size", "block_size",
    "enforce_eager", "load_format", "served_model_name", "dtype", "seed", "swap_space",
    "cpu_offload_gb", "max_logprobs", "disable_log_stats", "trust_remote_code",
    "long_prefill_token_threshold", "max_num_partial_prefills", "async_scheduling",
    "compilation_config", "max_seq_len_to_capture", "scheduling_policy",
})
"""The ``vllm serve`` arguments a search space may set without declaring them."""


class VllmEngine(EngineAdapter):
    """Real vLLM. The binary is the spec's ``vllm_binary`` (default ``vllm``)."""

    kind = "vllm"
    known_args: ClassVar[frozenset[str]] = VLLM_ARGS
    health_poll_s = 1.0

    def command(self, port: int) -> list[str]:
        return [self.spec.vllm_binary, "serve", self.spec.model,
                "--host", self.host, "--port", str(port), *flag_args(self.spec.engine_flags)]
