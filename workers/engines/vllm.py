"""The vLLM adapter: ``vllm serve MODEL --flag=value …`` on the GPUs Ray assigned, or the CPU.

The executable is the space's ``engine_binary``, else the worker's ``SLOTUNE_VLLM_BIN``,
else ``vllm`` on PATH — read on the worker, where the engine runs. The model is a Hugging
Face name or a local directory. The engine inherits what vLLM reads from the environment
(``VLLM_*``, ``HF_*``, compiler caches; secrets among them are redacted in every log),
and keeps its compile caches in the trial's own directory unless told otherwise. On the
CPU device (``gpu: cpu``, vLLM's CPU build) it gets no GPUs and the CPU platform is
selected explicitly.
"""

from __future__ import annotations

import os
from typing import ClassVar

from workers.engines.base import EngineAdapter, flag_args

VLLM_BIN_ENV = "SLOTUNE_VLLM_BIN"

VLLM_ARGS = frozenset({
    "max_num_seqs", "max_num_batched_tokens", "gpu_memory_utilization", "max_model_len",
    "enable_prefix_caching", "enable_chunked_prefill", "kv_cache_dtype", "quantization",
    "speculative_config", "tensor_parallel_size", "pipeline_parallel_size", "block_size",
    "enforce_eager", "load_format", "served_model_name", "dtype", "seed",
    "cpu_offload_gb", "max_logprobs", "disable_log_stats", "trust_remote_code",
    "long_prefill_token_threshold", "async_scheduling",
    "compilation_config", "scheduling_policy",
})
"""The ``vllm serve`` arguments a search space may set without declaring them.

Each is in ``vllm serve --help=all`` of vLLM 0.32.0; ``swap_space``,
``max_seq_len_to_capture`` and ``max_num_partial_prefills`` are gone from vLLM and so
from here (a space that still sets one must declare it, and vLLM will refuse it)."""


class VllmEngine(EngineAdapter):
    """Real vLLM (any build: CUDA, ROCm, CPU)."""

    kind = "vllm"
    known_args: ClassVar[frozenset[str]] = VLLM_ARGS
    health_poll_s = 1.0
    env_prefixes: ClassVar[tuple[str, ...]] = (
        "VLLM_", "HF_", "HUGGING_FACE_", "TRANSFORMERS_", "TORCHINDUCTOR_", "TRITON_",
        "NCCL_", "OMP_", "KMP_", "LD_PRELOAD", "XDG_CACHE_HOME",
    )

    @property
    def binary(self) -> str:
        return self.spec.engine_binary or os.environ.get(VLLM_BIN_ENV) or "vllm"

    def binary_hint(self) -> str:
        return (f"set {VLLM_BIN_ENV} (or the space's engine_binary) to the path of the "
                "`vllm` executable")

    def command(self, port: int) -> list[str]:
        return [self.binary, "serve", self.spec.model,
                "--host", self.host, "--port", str(port), *flag_args(self.spec.engine_flags)]

    def environment(self) -> dict[str, str]:
        env = super().environment()
        # Compile caches in the trial's directory: nothing shared between trials or left
        # behind after one, unless the operator points them somewhere on purpose.
        env.setdefault("VLLM_CACHE_ROOT", str(self.workdir / "vllm-cache"))
        env.setdefault("TORCHINDUCTOR_CACHE_DIR", str(self.workdir / "inductor-cache"))
        if self.spec.device == "cpu":
            env["VLLM_TARGET_DEVICE"] = "cpu"
            env.pop("CUDA_VISIBLE_DEVICES", None)
        return env
