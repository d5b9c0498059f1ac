"""The twin's learnable numbers: three multipliers on the shipped roofline calibration.

The simulator's roofline has a dozen fitted factors per GPU
(``slotune/workers/sim/calibration.py``). A sweep's measurements cannot pin a dozen numbers down,
but they can tell how far the real engine is from the prior in three directions that every step time
decomposes into:

* ``compute`` — the achieved share of the tensor peak (GEMMs, prefill attention);
* ``memory`` — the achieved share of the memory bandwidth (weights, activations, KV);
* ``overhead`` — the fixed costs per step, layer, attention pass and sequence.

A multiplier of 1 is the prior; 0.7 on ``compute`` means kernels reach 70% of the
efficiency the prior assumed. The twin fits these (bounded) and nothing else.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields, replace
from typing import Any

from slotune.workers.sim.calibration import (
    COMPUTE_FACTORS,
    MEMORY_FACTORS,
    OVERHEAD_FACTORS,
    RooflineCalibration,
)

__all__ = ["FACTOR_BOUNDS", "TwinFactors"]

FACTOR_BOUNDS = (1 / 3, 3.0)
"""How far a multiplier may move from the prior: beyond it the prior is wrong in kind."""


@dataclass(frozen=True, slots=True)
class TwinFactors:
    """Multipliers on the prior calibration (1 = the prior)."""

    compute: float = 1.0
    memory: float = 1.0
    overhead: float = 1.0

    def __post_init__(self) -> None:
        low, high = FACTOR_BOUNDS
        for f in fields(self):
            value = getattr(self, f.name)
            if not (math.isfinite(value) and low <= value <= high):
                raise ValueError(f"twin factor {f.name}={value!r} is outside [{low:.3g}, {high}]")

    def apply(self, prior: RooflineCalibration) -> RooflineCalibration:
        """The prior with these multipliers applied (what the twin simulates with)."""
        changes: dict[str, float] = {}
        for names, factor in ((COMPUTE_FACTORS, self.compute), (MEMORY_FACTORS, self.memory),
                              (OVERHEAD_FACTORS, self.overhead)):
            for name in names:
                changes[name] = getattr(prior, name) * factor
        return replace(prior, **changes)

    def as_log(self) -> list[float]:
        return [math.log(self.compute), math.log(self.memory), math.log(self.overhead)]

    @classmethod
    def from_log(cls, values: list[float]) -> TwinFactors:
        low, high = FACTOR_BOUNDS
        c, m, o = (min(high, max(low, math.exp(v))) for v in values)
        return cls(compute=c, memory=m, overhead=o)

    def moved_from(self, other: TwinFactors) -> float:
        """The largest ratio between a multiplier here and in ``other`` (≥ 1)."""
        return max(max(a / b, b / a) for a, b in zip(self.as_tuple(), other.as_tuple(),
                                                      strict=True))

    def as_tuple(self) -> tuple[float, float, float]:
        return (self.compute, self.memory, self.overhead)

    def as_dict(self) -> dict[str, float]:
        return {"compute": round(self.compute, 4), "memory": round(self.memory, 4),
                "overhead": round(self.overhead, 4)}

    @classmethod
    def from_dict(cls, data: Any) -> TwinFactors:
        if not isinstance(data, dict):
            raise ValueError(f"twin factors must be an object, got {data!r}")
        return cls(**{f.name: float(data.get(f.name, 1.0)) for f in fields(cls)})
