"""What the API sends and accepts: its own pydantic schemas, apart from records and ORM.

Records (:mod:`slotune.tuner.db.records`) are the store's; these are the HTTP contract shared with
the dashboard, so a column added to a table does not silently become public API. The
``from_*`` constructors are the only place a record turns into a response.
"""

from __future__ import annotations

import math
from datetime import datetime
from typing import Any, Generic, TypeVar

from pydantic import BaseModel, ConfigDict, Field

from slotune.tuner.db.records import (
    BestConfig,
    CardRecord,
    NoPassingConfig,
    SweepFields,
    SweepRecord,
    TrialFields,
    TrialRecord,
    WorkloadRecord,
)
from slotune.tuner.planning.planner import DEFAULT_HEADROOM, CapacityPlan
from slotune.tuner.settings import GpuName, GpuPrice
from slotune.tuner.sweep.progress import SweepProgress
from slotune.workers.engines.vllm import vllm_command

__all__ = [
    "BestOut",
    "CapacityIn",
    "CapacityOut",
    "CardOut",
    "HealthOut",
    "ListOut",
    "SweepOut",
    "TrialMetrics",
    "TrialOut",
    "WorkloadOut",
]

T = TypeVar("T")

NAME_MAX = 200
# Names become SQL parameters; Postgres text cannot hold NUL, so refuse it at the edge.
NAME_PATTERN = r"^[^\x00]+$"


class _Out(BaseModel):
    model_config = ConfigDict(frozen=True)


class ListOut(_Out, Generic[T]):
    """One page and the total number of matches before paging."""

    data: list[T]
    count: int


class HealthOut(_Out):
    status: str
    database: str
    """``ok``, or why the database cannot serve (on 503)."""


class SweepOut(SweepFields):
    """A sweep (:class:`~slotune.tuner.db.records.SweepFields`), its progress typed."""

    progress: SweepProgress  # type: ignore[assignment]  # the stored dict, read typed
    """Trials done, the best so far, cost, why it stopped or what it waits for."""
    warnings: list[str] = Field(default_factory=list)
    """What was accepted but will not go as asked (on the answer to a new sweep): parts of
    the space no node can ever hold, against ``SLOTUNE_MAX_NODE_GPUS`` where declared."""

    @classmethod
    def from_record(cls, record: SweepRecord) -> SweepOut:
        data = record.model_dump(include=set(SweepFields.model_fields))
        data["progress"] = SweepProgress.of(record.progress)  # an old row's shapes read too
        return cls.model_validate(data)


_METRIC_KEYS = (
    "request_throughput", "request_goodput", "output_throughput",
    "p50_ttft_ms", "p90_ttft_ms", "p99_ttft_ms", "p50_tpot_ms", "p90_tpot_ms", "p99_tpot_ms",
    "p99_itl_ms", "p99_e2el_ms",
)


class TrialMetrics(_Out):
    """The compact subset of a trial's result the dashboard plots (vLLM bench names)."""

    request_throughput: float | None = None
    request_goodput: float | None = None
    output_throughput: float | None = None
    p50_ttft_ms: float | None = None
    p90_ttft_ms: float | None = None
    p99_ttft_ms: float | None = None
    p50_tpot_ms: float | None = None
    p90_tpot_ms: float | None = None
    p99_tpot_ms: float | None = None
    p99_itl_ms: float | None = None
    p99_e2el_ms: float | None = None
    gate_passed: bool | None = None
    headroom: float | None = None
    constraints: dict[str, float] = Field(default_factory=dict)
    failure_message: str | None = None
    early_abort: str | None = None

    @classmethod
    def from_result(cls, result: dict[str, Any] | None) -> TrialMetrics:
        if not result:
            return cls()
        metrics = result.get("metrics") or {}
        values: dict[str, Any] = {k: _number(metrics.get(k)) for k in _METRIC_KEYS}
        if result.get("request_goodput") is not None:  # ours wins over the bench copy
            values["request_goodput"] = _number(result["request_goodput"])
        return cls(**values, gate_passed=result.get("gate_passed"),
                   headroom=_number(result.get("headroom")),
                   constraints={k: v for k, v in (result.get("constraints") or {}).items()
                                if _number(v) is not None},
                   failure_message=result.get("failure_message"),
                   early_abort=result.get("early_abort"))


class TrialOut(TrialFields):
    """A trial (:class:`~slotune.tuner.db.records.TrialFields`) and the metrics the dashboard
    plots."""

    metrics: TrialMetrics

    @classmethod
    def from_record(cls, record: TrialRecord) -> TrialOut:
        fields = record.model_dump(include=set(TrialFields.model_fields))
        return cls(**fields, metrics=TrialMetrics.from_result(record.result))


class CardOut(CardRecord):
    """An experiment card as stored (:class:`~slotune.tuner.db.records.CardRecord`)."""

    @classmethod
    def from_record(cls, record: CardRecord) -> CardOut:
        return cls.model_validate(record.model_dump())


class BestOut(BestConfig):
    """One row of ``best_config_per_workload`` (:class:`~slotune.tuner.db.records.BestConfig`)
    and the command line that reproduces it."""

    vllm_command: str

    @classmethod
    def from_record(cls, record: BestConfig) -> BestOut:
        return cls(**record.model_dump(), vllm_command=vllm_command(record.model, record.config))


class NoPassingOut(NoPassingConfig):
    """A (workload, model, gpu, slo) that was measured and where nothing met the SLO
    (:class:`~slotune.tuner.db.records.NoPassingConfig`, its ``reason`` included), and the
    command line of the configuration that came closest."""

    closest_command: str
    """The ``vllm serve`` command of the closest configuration."""

    @classmethod
    def from_record(cls, record: NoPassingConfig) -> NoPassingOut:
        return cls(**record.model_dump(exclude={"reason"}),
                   closest_command=vllm_command(record.model, record.closest_config))


class BestListOut(ListOut[BestOut]):
    """The best configurations, and the measured groups that have none."""

    without_passing: list[NoPassingOut] = []
    """Where no configuration meets the SLO: not a winner, a capacity problem."""


class WorkloadOut(_Out):
    name: str
    spec: dict[str, Any]
    best: list[BestOut]
    """The best configuration per (model, gpu, slo) measured so far."""
    created_at: datetime
    updated_at: datetime

    @classmethod
    def from_record(cls, record: WorkloadRecord, best: list[BestConfig]) -> WorkloadOut:
        return cls(name=record.name, spec=record.spec, created_at=record.created_at,
                   updated_at=record.updated_at, best=[BestOut.from_record(b) for b in best])


GPU_PRICES_MAX = 64
"""The most GPU prices one capacity question may carry."""


class CapacityIn(BaseModel):
    """How many replicas for ``target_rps`` of ``workload``?"""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    workload: str = Field(min_length=1, max_length=NAME_MAX, pattern=NAME_PATTERN)
    model: str | None = Field(None, min_length=1, max_length=NAME_MAX, pattern=NAME_PATTERN)
    gpu: str | None = Field(None, min_length=1, max_length=NAME_MAX, pattern=NAME_PATTERN)
    slo: str | None = Field(None, min_length=1, max_length=NAME_MAX, pattern=NAME_PATTERN)
    """``ttft:300,tpot:50`` or the canonical JSON of the view; required when the workload
    was measured under several SLOs."""
    target_rps: float = Field(gt=0, le=1e7)
    headroom: float = Field(DEFAULT_HEADROOM, ge=0, le=0.95)
    """Fraction of each replica's capacity kept spare (bursts, failover)."""
    gpu_prices: dict[GpuName, GpuPrice] | None = Field(None, max_length=GPU_PRICES_MAX)
    """GPU name → USD per GPU-hour, over the server's ``SLOTUNE_GPU_PRICES`` per name; the
    plan is the cheapest that carries the target."""


class CapacityOut(CapacityPlan):
    """The planner's answer (:class:`~slotune.tuner.planning.planner.CapacityPlan`), as the API
    and ``slotune plan --json`` give it."""

    @classmethod
    def from_plan(cls, plan: CapacityPlan) -> CapacityOut:
        return cls.model_validate(plan.model_dump())


def _number(value: Any) -> float | None:
    # JSON has no inf/NaN: a stored one must not make the whole response unserialisable.
    if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    return None
