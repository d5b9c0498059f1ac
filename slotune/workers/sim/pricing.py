"""What a planned step costs: its modelled time, the run-time OOM, speculation and noise.

The cost model (:mod:`slotune.workers.sim.cost_model`) prices the step's shape; on top of it
come the drafting overhead of speculative decoding, this rank's run-to-run noise, and
the refusal of a batch the memory outside the KV cache cannot hold
(:func:`slotune.workers.sim.config.runtime_oom_tokens`).
"""

from __future__ import annotations

import math
import random

from slotune.workers.sim.config import EngineConfig, runtime_oom_tokens
from slotune.workers.sim.cost_model import CostModel, StepCost
from slotune.workers.sim.request import EngineCrashed, PlannedStep

__all__ = ["StepPricer"]


class StepPricer:
    """Prices planned steps for one engine configuration."""

    def __init__(self, config: EngineConfig, cost_model: CostModel, rng: random.Random) -> None:
        self.config = config
        self.cost_model = cost_model
        self.rng = rng
        self.oom_tokens = runtime_oom_tokens(config)
        spec = config.speculative
        self.spec_draft_cost = spec.draft_cost_fraction if spec else 0.0

    def price(self, planned: PlannedStep) -> tuple[StepCost, float]:
        """The planned step's modelled cost and its duration with this rank's noise;
        raises :class:`EngineCrashed` for a batch the memory left outside the KV cache
        cannot hold."""
        shape = planned.shape
        tokens = shape.num_tokens
        if self.oom_tokens is not None and tokens >= self.oom_tokens:
            raise EngineCrashed(
                f"torch.OutOfMemoryError: CUDA out of memory while running a batch of {tokens} "
                f"tokens: gpu_memory_utilization={self.config.gpu_memory_utilization} leaves "
                "too little memory outside the KV cache for this step's activations. Lower "
                "--gpu-memory-utilization or --max-num-batched-tokens."
            )
        cost = self.cost_model.step_cost(shape)
        duration = cost.total_s
        if shape.decode_seqs and self.spec_draft_cost:
            duration *= 1.0 + self.spec_draft_cost
        noise = self.config.noise
        if noise > 0:
            duration *= math.exp(self.rng.gauss(0.0, noise) - noise * noise / 2)
        return cost, duration
