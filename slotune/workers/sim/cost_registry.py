"""The step-time cost models by name: the roofline (the default) and AIConfigurator's.

Apart from the models themselves (:mod:`slotune.workers.sim.cost_model`) so that a model built
on their interface (:mod:`slotune.workers.sim.aiconfigurator_model`) and the registry that names
it import in one direction only.
"""

from __future__ import annotations

from collections.abc import Callable

from slotune.workers.sim.calibration import RooflineCalibration
from slotune.workers.sim.cost_model import CostModel, HardwareSetup, RooflineCostModel

__all__ = ["COST_MODELS", "CostModelFactory", "make_cost_model"]

CostModelFactory = Callable[[HardwareSetup], CostModel]

def _aiconfigurator(setup: HardwareSetup) -> CostModel:
    # Imported on use: the package behind it is an optional extra, and heavy.
    from slotune.workers.sim.aiconfigurator_model import AIConfiguratorCostModel

    return AIConfiguratorCostModel(setup)


COST_MODELS: dict[str, CostModelFactory] = {
    "roofline": RooflineCostModel,
    "aiconfigurator": _aiconfigurator,
}


def make_cost_model(name: str, setup: HardwareSetup,
                    calibration: RooflineCalibration | None = None) -> CostModel:
    """Build a registered cost model; an unknown name lists the valid ones.

    ``calibration`` (the roofline's only) replaces the one the engine would load: the
    twin runs the same simulator with the factors it learned."""
    try:
        factory = COST_MODELS[name]
    except KeyError:
        raise ValueError(
            f"unknown cost model {name!r}; valid: {', '.join(sorted(COST_MODELS))}"
        ) from None
    if calibration is None:
        return factory(setup)
    if name != RooflineCostModel.name:
        raise ValueError(f"a calibration applies to the roofline cost model, not {name!r}")
    return RooflineCostModel(setup, calibration)
