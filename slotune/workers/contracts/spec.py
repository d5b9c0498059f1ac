"""One configuration to boot and measure: :class:`TrialSpec`, and the GPUs a replica takes."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import (
    Field,
)

from slotune.workers.contracts._base import RUN_ID_ALIASES
from slotune.workers.contracts.capacity import (
    CapacitySearch,
)
from slotune.workers.contracts.engine import (
    Device,
    EngineChoice,
    KnobValue,
    ObjectiveMode,
    TrialTimeouts,
    engine_flags,
    engine_kind,
)
from slotune.workers.contracts.options import options_model
from slotune.workers.contracts.quality import GoldenCheck, QualityGate
from slotune.workers.contracts.slo import SLO
from slotune.workers.contracts.workload import (
    Workload,
)


class TrialSpec(EngineChoice):
    """One configuration to boot, warm up, measure against the SLO and tear down."""

    run_id: str = Field(min_length=1, validation_alias=RUN_ID_ALIASES)
    """The name of this engine run (``s3-t7-a1``: sweep 3, Optuna trial 7, attempt 1;
    ``optuna-7`` outside a sweep): the engine's process, workdir and logs carry it. Not
    the trial's database id (``trial_id`` everywhere else)."""
    model: str = Field(min_length=1)
    knobs: dict[str, KnobValue] = Field(default_factory=dict)
    """The sampled knob values, by vLLM's argument name (``max_num_seqs``)."""
    engine_args: dict[str, KnobValue] = Field(default_factory=dict)
    """Fixed engine arguments of the space (not searched), same naming."""
    allowed_extra_args: tuple[str, ...] = ()
    """Argument names beyond the known vLLM flags that the space declares acceptable."""
    workload: Workload
    slo: SLO
    mode: ObjectiveMode = "goodput"
    capacity: CapacitySearch = Field(default_factory=CapacitySearch)
    timeouts: TrialTimeouts = Field(default_factory=TrialTimeouts)
    gpu: str = Field("h100-sxm", min_length=1)
    """The GPU type the trial targets: the catalogue GPU (or the absolute path of the
    device file) the simulated engine models; for a real engine the space's GPU kind (a
    typed cluster maps it to its nodes' label)."""
    device: Device = "gpu"
    """Where the engine computes: GPUs (Ray assigns them), or the CPU (vLLM's CPU build:
    the trial reserves CPUs instead, one per tensor-parallel rank)."""
    env_passthrough: tuple[str, ...] = ("HF_HOME", "HF_TOKEN", "HUGGING_FACE_HUB_TOKEN",
                                        "NCCL_DEBUG")
    """Environment variables handed through to the engine (secrets are redacted in logs);
    an adapter adds the families its engine reads (vLLM: ``VLLM_*``, ``HF_*``, …)."""
    early_abort: bool = True
    max_error_rate: float = Field(0.05, ge=0, le=1)
    """Above this share of failed requests the trial is ``benchmark_errors``."""
    quality: QualityGate | None = None
    """Set when the configuration is lossy (the space says which values are): the check
    it must pass before it scores."""
    golden_reference: GoldenCheck | None = None
    """Set on a quality baseline: boot, answer these golden prompts greedily, stop — no
    load, no score (the answers are the result's ``golden_answers``, the reference of
    every lossy trial of the sweep)."""

    def for_engine(self, engine: str) -> TrialSpec:
        """This trial on another engine, with that engine's default options."""
        if engine == self.engine:
            return self
        return self.model_copy(update={"engine": engine_kind(engine),
                                       "options": options_model(engine)()})

    @property
    def engine_flags(self) -> dict[str, KnobValue]:
        """Fixed arguments overridden by the sampled knobs (:func:`engine_flags`)."""
        return engine_flags(self.engine_args, self.knobs)

    def baseline(self) -> TrialSpec:
        """The lossless baseline of a lossy configuration: the same trial with the quality
        gate's lossless values (what its golden answers are compared with)."""
        if self.quality is None:
            raise ValueError(f"trial {self.run_id} is lossless: it has no baseline")
        lossless = self.quality.baseline
        return self.model_copy(update={
            "run_id": f"{self.run_id}-baseline", "quality": None,
            "knobs": {**self.knobs, **{k: v for k, v in lossless.items() if k in self.knobs}},
            "engine_args": {**self.engine_args, **{k: v for k, v in lossless.items()
                                                   if k not in self.knobs}}})

    @property
    def served_model(self) -> str:
        """The model name requests must carry (``served_model_name`` when the space sets it)."""
        name = self.engine_flags.get("served_model_name")
        return name if isinstance(name, str) and name else self.model

    @property
    def model_revision(self) -> str | None:
        """Which weights: the ``revision`` flag, else the snapshot a local Hugging Face
        cache path points at (``…/snapshots/<commit>``), else None (not known here)."""
        flag = self.engine_flags.get("revision")
        if isinstance(flag, str) and flag:
            return flag
        parts = self.model.replace("\\", "/").split("/")
        if "snapshots" in parts[:-1]:
            return parts[parts.index("snapshots") + 1] or None
        return None

    @property
    def tensor_parallel_size(self) -> int:
        return _parallel_size(self.engine_flags.get("tensor_parallel_size", 1))

    @property
    def gpus(self) -> int:
        """Devices one replica of this configuration occupies (:func:`replica_gpus`)."""
        return replica_gpus(self.engine_flags)


def replica_gpus(flags: Mapping[str, Any]) -> int:
    """Devices one replica of a configuration occupies: tensor × pipeline × data parallel
    size (GPUs; CPU cores for vLLM's CPU build, one per rank). A ``vllm serve`` with
    ``--data-parallel-size N`` is one server (one API endpoint) over N engine ranks of
    TP × PP devices each, so it is one replica of N × TP × PP devices; expert parallelism
    adds none (it reuses those ranks for the experts). The one definition the
    coordinator schedules, placement checks, the stored view's ``gpus`` and the per-GPU
    objective divide by, and the capacity planner counts."""
    return (_parallel_size(flags.get("tensor_parallel_size"))
            * _parallel_size(flags.get("pipeline_parallel_size"))
            * _parallel_size(flags.get("data_parallel_size")))


def _parallel_size(value: Any) -> int:
    """A parallel size as given (unset or unreadable: 1)."""
    try:
        return max(1, int(value))
    except (TypeError, ValueError):
        return 1
