"""The simulated engine adapter: the same flags, served by ``python -m workers.sim``."""

from __future__ import annotations

import sys
from typing import ClassVar

from workers.engines.base import EngineAdapter, flag_args

SIM_ARGS = frozenset({
    "max_num_seqs", "max_num_batched_tokens", "gpu_memory_utilization", "max_model_len",
    "enable_prefix_caching", "enable_chunked_prefill", "kv_cache_dtype", "quantization",
    "speculative_config", "tensor_parallel_size", "block_size", "enforce_eager",
    "load_format", "served_model_name",
})
"""vLLM's arguments that the simulator models."""


class SimEngine(EngineAdapter):
    """The simulated vLLM engine as a real server process (no GPU needed)."""

    kind = "sim"
    known_args: ClassVar[frozenset[str]] = SIM_ARGS
    health_poll_s = 0.05

    def command(self, port: int) -> list[str]:
        sim = self.spec.sim
        flags = dict(self.spec.engine_flags)
        return [sys.executable, "-m", "workers.sim", "serve", self.spec.model,
                "--host", self.host, "--port", str(port), *flag_args(flags),
                "--sim-gpu", sim.gpu, "--sim-seed", str(sim.seed),
                "--sim-noise", str(sim.noise), "--sim-time-scale", str(sim.time_scale),
                "--sim-cost-model", sim.cost_model]
