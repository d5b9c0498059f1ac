"""The simulated engine adapter: the same flags, served by ``python -m slotune.workers.sim``.

Its options (:class:`SimOptions`, a spec's ``options`` when its engine is ``sim``) are
the ``--sim-*`` flags; spaces and stored specs write them as ``sim: {…}``.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar

from pydantic import Field

from slotune.workers.contracts.options import EngineOptions
from slotune.workers.engines.base import EngineAdapter, flag_args
from slotune.workers.sim.catalog import UnknownCatalogEntry, get_gpu
from slotune.workers.sim.device_file import is_device_file

if TYPE_CHECKING:
    from slotune.workers.contracts import TrialSpec
    from slotune.workers.gpu import GPUProbe

SIM_ARGS = frozenset({
    "max_num_seqs", "max_num_batched_tokens", "gpu_memory_utilization", "max_model_len",
    "enable_prefix_caching", "enable_chunked_prefill", "kv_cache_dtype", "quantization",
    "speculative_config", "tensor_parallel_size", "data_parallel_size",
    "enable_expert_parallel", "block_size", "enforce_eager", "load_format",
    "served_model_name",
})
"""vLLM's arguments that the simulator models."""


class SimOptions(EngineOptions):
    """Options of the simulated engine (``--sim-*`` flags); other engines refuse them.

    The GPU it models is not one of them: that is the trial's (and the space's) ``gpu``,
    which every engine has.
    """

    title: ClassVar[str] = "the simulated engine"

    seed: int = 0
    noise: float = Field(0.0, ge=0)
    time_scale: float = Field(1.0, gt=0)
    """The engine runs this much faster than real time; the load generator compensates."""
    cost_model: str = "roofline"


def sim_options(spec: TrialSpec) -> SimOptions:
    """The simulator's options for ``spec``: its own, or (another engine's spec, which the
    simulator models too) the defaults."""
    return spec.options_of(SimOptions)


class SimEngine(EngineAdapter):
    """The simulated vLLM engine as a real server process (no GPU needed)."""

    kind = "sim"
    options_model = SimOptions
    simulated = True
    known_args: ClassVar[frozenset[str]] = SIM_ARGS
    health_poll_s = 0.05

    @property
    def time_scale(self) -> float:
        return sim_options(self.spec).time_scale

    def hardware_facts(self, probe: GPUProbe) -> dict[str, Any]:
        with contextlib.suppress(UnknownCatalogEntry):
            gpu = get_gpu(self.spec.gpu)
            return {"gpu_name": f"{gpu.device_name} (simulated)",
                    "gpu_memory_bytes": gpu.memory_bytes}
        return {}

    @classmethod
    def repeat_spec(cls, spec: TrialSpec, repeat: int) -> TrialSpec:
        # Each repeat draws the simulator's noise (if any) from its own seed.
        sim = sim_options(spec)
        return spec.model_copy(update={"options": sim.model_copy(
            update={"seed": sim.seed + 1000 * (repeat + 1)})})

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
        sim = sim_options(self.spec)
        flags = dict(self.spec.engine_flags)
        return [sys.executable, "-m", "slotune.workers.sim", "serve", self.spec.model,
                "--host", self.host, "--port", str(port), *flag_args(flags),
                "--sim-gpu", self.spec.gpu, "--sim-seed", str(sim.seed),
                "--sim-noise", str(sim.noise), "--sim-time-scale", str(sim.time_scale),
                "--sim-cost-model", sim.cost_model]
