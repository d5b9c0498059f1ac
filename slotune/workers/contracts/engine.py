"""What a trial boots: the engine, its flags (a space's fixed arguments under the sampled
knobs), its options and timeouts (:class:`EngineChoice`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar, Literal, Self, TypeVar

from pydantic import (
    Field,
    SerializeAsAny,
    ValidationInfo,
    field_validator,
    model_validator,
)

from slotune.workers.contracts._base import _Strict
from slotune.workers.contracts.options import EngineOptions, lift_engine_options, options_model

# --- trials --------------------------------------------------------------------------------

Device = Literal["gpu", "cpu"]
ObjectiveMode = Literal["goodput", "capacity"]

KnobValue = bool | int | float | str | dict[str, Any] | None
"""A knob's value: vLLM flag values, or a JSON object (``speculative_config``)."""


def engine_flags(fixed: Mapping[str, KnobValue], knobs: Mapping[str, KnobValue]
                 ) -> dict[str, KnobValue]:
    """A configuration's engine flags: a space's fixed arguments overridden by the
    sampled knobs (the one place they are merged: spaces, specs, the coordinator)."""
    return {**fixed, **knobs}


class TrialTimeouts(_Strict):
    """Wall-clock limits of one trial's phases, seconds."""

    startup_s: float = Field(900.0, gt=0)
    """Until ``/health`` answers 200 (vLLM with large models takes minutes)."""
    measure_s: float = Field(3600.0, gt=0)
    unresponsive_s: float = Field(60.0, gt=0)
    """An engine alive but unanswering (``/health``) this long while it is measured is
    ``hung``: the trial fails then, not when its requests time out (10 minutes)."""
    teardown_grace_s: float = Field(10.0, gt=0)
    """Between SIGTERM and SIGKILL of the engine's process group."""


_Options = TypeVar("_Options", bound=EngineOptions)


def engine_kind(value: str) -> str:
    """``value`` if it names a registered engine; else ``ValueError`` naming the valid ones
    (one check for a spec's and a space's ``engine``)."""
    options_model(value)
    return value


def options_for(engine: str, options: EngineOptions, owner: str) -> EngineOptions:
    """``options`` if they are ``engine``'s (its registered model), else ``ValueError``
    saying whose they are: the after-check of a spec and a space (a ``model_copy`` that
    changed the engine alone, say)."""
    model = options_model(engine)
    if type(options) is not model:
        raise ValueError(f"options: {type(options).__name__} are not the options of engine "
                         f"{engine} ({model.__name__}); this {owner} needs those")
    return options


def lift_sim_gpu(data: Any) -> Any:
    """Raw fields with the GPU in its place, ``gpu``, when given as ``sim.gpu`` (where
    earlier versions kept it); both, and different, are refused."""
    if not isinstance(data, dict) or not isinstance(data.get("sim"), dict) \
            or "gpu" not in data["sim"]:
        return data
    sim = dict(data["sim"])
    gpu = sim.pop("gpu")
    if data.get("gpu") not in (None, gpu):
        raise ValueError(f"sim.gpu {gpu!r} and gpu {data['gpu']!r} disagree: give the GPU "
                         "once, as gpu")
    return {**data, "sim": sim, "gpu": gpu}


class EngineChoice(_Strict):
    """An engine and its own options: one declaration, and one check, for a trial spec and
    for the search space that makes them (:class:`slotune.tuner.spaces.SearchSpace`)."""

    owner: ClassVar[str] = "trial"
    """How messages name what carries the choice (``trial``, ``space``)."""

    engine: str = "sim"
    """The engine adapter's kind (``sim``, ``vllm``: whatever :mod:`slotune.workers.engines`
    registers)."""
    options: SerializeAsAny[EngineOptions] = Field(default_factory=EngineOptions)
    """The engine's own options, of its registered model (:mod:`slotune.workers.contracts.options`):
    the simulated engine's ``seed``/``noise``/``time_scale``/``cost_model``, vLLM's
    ``engine_binary`` (None: the worker's ``SLOTUNE_VLLM_BIN``, else ``vllm`` on PATH).
    Also read as spelled before and as a space file writes them: ``sim: {…}``, and
    ``engine_binary`` at the top level."""

    @model_validator(mode="before")
    @classmethod
    def _older_shapes(cls, data: Any, info: ValidationInfo) -> Any:
        return lift_engine_options(lift_sim_gpu(data), cls.owner, "sim", cls.model_fields,
                                   info.context)

    @field_validator("engine")
    @classmethod
    def _registered_engine(cls, value: str) -> str:
        return engine_kind(value)

    @model_validator(mode="after")
    def _options_of_its_engine(self) -> Self:
        options_for(self.engine, self.options, self.owner)
        return self

    def options_of(self, model: type[_Options]) -> _Options:
        """The options as ``model``, for the adapter that reads them. Another engine's
        choice has none of ``model``'s options: their defaults (how the simulator models
        a vLLM spec)."""
        return self.options if isinstance(self.options, model) else model()
