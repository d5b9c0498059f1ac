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
import platform
import shlex
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from workers.engines.base import EngineAdapter, flag_args

if TYPE_CHECKING:
    from workers.gpu import GPUProbe

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
    occupies_gpus = True
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

    def hardware_facts(self, probe: GPUProbe) -> dict[str, Any]:
        if self.spec.device == "cpu":
            return {"gpu_name": f"cpu ({_cpu_model()})"}
        gpus = probe.gpus(self.gpu_ids)
        if not gpus:
            return {}
        return {"gpu_name": gpus[0].name, "gpu_memory_bytes": gpus[0].memory_total,
                "gpu_driver": probe.driver_version()}

    def command(self, port: int) -> list[str]:
        return [*serve_argv(self.spec.model, self.spec.engine_flags, self.binary),
                "--host", self.host, "--port", str(port)]

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


def serve_argv(model: str, flags: Mapping[str, Any], binary: str = "vllm") -> list[str]:
    """``vllm serve MODEL --flag=value …``: the one spelling of a configuration as vLLM's
    command line (the engine adapter runs it; reports, the API and the CLI show it)."""
    return [binary, "serve", model, *flag_args({k: v for k, v in flags.items() if k != "model"})]


def vllm_command(model: str, flags: Mapping[str, Any]) -> str:
    """The shell-quoted ``vllm serve`` line that reproduces a configuration."""
    return shlex.join(serve_argv(model, flags))


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.partition(":")[2].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()
