"""The simulated engine adapter: the same flags, served by ``python -m workers.sim``."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar

from workers.engines.base import EngineAdapter, flag_args
from workers.sim.catalog import UnknownCatalogEntry, get_gpu
from workers.sim.device_file import is_device_file

if TYPE_CHECKING:
    from workers.contracts import TrialSpec
    from workers.gpu import GPUProbe

SIM_ARGS = frozenset({
    "max_num_seqs", "max_num_batched_tokens", "gpu_memory_utilization", "max_model_len",
    "enable_prefix_caching", "enable_chunked_prefill", "kv_cache_dtype", "quantization",
    "speculative_config", "tensor_parallel_size", "data_parallel_size",
    "enable_expert_parallel", "block_size", "enforce_eager", "load_format",
    "served_model_name",
})
"""vLLM's arguments that the simulator models."""


class SimEngine(EngineAdapter):
    """The simulated vLLM engine as a real server process (no GPU needed)."""

    kind = "sim"
    known_args: ClassVar[frozenset[str]] = SIM_ARGS
    health_poll_s = 0.05

    @property
    def time_scale(self) -> float:
        return self.spec.sim.time_scale

    def hardware_facts(self, probe: GPUProbe) -> dict[str, Any]:
        with contextlib.suppress(UnknownCatalogEntry):
            gpu = get_gpu(self.spec.gpu)
            return {"gpu_name": f"{gpu.device_name} (simulated)",
                    "gpu_memory_bytes": gpu.memory_bytes}
        return {}

    @classmethod
    def repeat_spec(cls, spec: TrialSpec, repeat: int) -> TrialSpec:
        # Each repeat draws the simulator's noise (if any) from its own seed.
        return spec.model_copy(update={"sim": spec.sim.model_copy(
            update={"seed": spec.sim.seed + 1000 * (repeat + 1)})})

    @classmethod
    def gpu_type(cls, spec: TrialSpec, labels: Mapping[str, str]) -> str | None:
        # The simulator models one catalogue GPU: its trials go where that type is
        # declared (under the cluster's label for it, else under its own name). A device
        # file's GPU goes by the name inside the file, not by the file's path.
        name = spec.gpu
        if is_device_file(name):
            with contextlib.suppress(UnknownCatalogEntry):
                name = get_gpu(name).name
        return labels.get(name, name)

    def command(self, port: int) -> list[str]:
        sim = self.spec.sim
        flags = dict(self.spec.engine_flags)
        return [sys.executable, "-m", "workers.sim", "serve", self.spec.model,
                "--host", self.host, "--port", str(port), *flag_args(flags),
                "--sim-gpu", self.spec.gpu, "--sim-seed", str(sim.seed),
                "--sim-noise", str(sim.noise), "--sim-time-scale", str(sim.time_scale),
                "--sim-cost-model", sim.cost_model]
