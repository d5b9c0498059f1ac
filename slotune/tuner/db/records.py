"""What the store hands out: frozen pydantic records, detached from any session.

The coordinator and the API read these, never ORM objects, so nothing lazy-loads
after its transaction has ended. List methods return a :class:`Page` (``{data, count}``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Generic, TypeVar

from pydantic import BaseModel, ConfigDict, computed_field

__all__ = [
    "BestConfig",
    "CardRecord",
    "ExecutorChoice",
    "Lease",
    "NoPassingConfig",
    "OrphanTrial",
    "Page",
    "SweepFields",
    "SweepRecord",
    "TrialFields",
    "TrialRecord",
    "WorkloadRecord",
]

T = TypeVar("T")


class _Record(BaseModel):
    model_config = ConfigDict(frozen=True, from_attributes=True)


class Page(BaseModel, Generic[T]):
    """One page of a list and the total number of matches (ignoring offset/limit)."""

    model_config = ConfigDict(frozen=True)

    data: list[T]
    count: int


class WorkloadRecord(_Record):
    id: int
    name: str
    spec: dict[str, Any]
    created_at: datetime
    updated_at: datetime


@dataclass(frozen=True)
class Lease:
    """A coordinator's hold on one sweep, from one claim: the fence its writes carry.

    The store refuses (:class:`~slotune.tuner.db.errors.LeaseLost`) any write made under a lease
    once the sweep was claimed again (a takeover, a restart, a resume), so a coordinator
    that wakes from a stall cannot touch what its successor does.
    """

    sweep_id: int
    holder: str
    epoch: int


class ExecutorChoice(BaseModel):
    """Where a sweep's trials run: the executor's kind and the GPUs it was given."""

    model_config = ConfigDict(frozen=True)

    kind: str
    gpus: int

    def describe(self) -> str:
        return f"the {self.kind} executor with {self.gpus} GPU{'s' if self.gpus != 1 else ''}"


class SweepFields(_Record):
    """A sweep as everyone reads it: the API answers these fields (``SweepOut``, with the
    progress typed); :class:`SweepRecord` adds what only the store and the coordinator
    use."""

    id: int
    name: str
    workload: str
    """The workload's name."""
    space: dict[str, Any]
    slo: dict[str, Any]
    slo_key: str
    model: str
    gpu: str
    strategy: str
    mode: str
    status: str
    budget: dict[str, Any]
    """What the sweep may spend (``max_trials``, ``max_gpu_hours``, …; ``SweepBudget``)."""
    seed: int = 0
    """The strategy's sampler seed: the same seed, space and results propose the same
    configurations."""
    progress: dict[str, Any]
    owner: str | None
    claimed_by: str | None
    heartbeat_at: datetime | None
    optuna_study_name: str | None
    stop_reason: str | None
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None


class SweepRecord(SweepFields):
    workload_id: int
    lease_epoch: int = 0
    executor: ExecutorChoice | None = None
    """Where its trials run (None: not claimed yet, or stored before this was kept)."""

    @property
    def lease(self) -> Lease | None:
        """The hold the claim that returned this record gave its coordinator."""
        if self.claimed_by is None:
            return None
        return Lease(sweep_id=self.id, holder=self.claimed_by, epoch=self.lease_epoch)


class TrialFields(_Record):
    """A trial as everyone reads it: the API answers these fields (``TrialOut``, with the
    metrics the dashboard plots); :class:`TrialRecord` adds the spec, the whole result and
    the engine's facts."""

    id: int
    sweep_id: int
    role: str = "search"
    """``search`` (a configuration of the search), ``repeat`` (a confirmation re-run of
    trial ``repeat_of``) or ``baseline`` (the sweep's lossless quality baseline)."""
    number: int
    repeat: int = 0
    repeat_of: int | None = None
    attempt: int
    status: str
    failure_class: str | None
    params: dict[str, Any]
    config: dict[str, Any]
    objective: float | None
    capacity: float | None
    """Capacity mode: the centre of the measured interval (req/s per replica); on a
    confirmed configuration's search row, its confirmation's."""
    capacity_low: float | None = None
    """The highest rate shown to pass."""
    capacity_high: float | None = None
    """The lowest rate shown to fail (None: the ceiling passed, or not known)."""
    gpus: int = 1
    """GPUs one replica of its configuration occupies (TP × PP × DP)."""
    confirmed: bool
    repeats: int = 0
    """Confirmation re-runs it held up in (its capacity is then theirs)."""
    worker: str | None
    started_at: datetime | None
    finished_at: datetime | None
    timings: dict[str, Any] | None
    diagnosis: dict[str, Any] | None


class TrialRecord(TrialFields):
    spec: dict[str, Any] | None
    result: dict[str, Any] | None
    engine: str | None = None
    engine_version: str | None = None
    gpu_driver: str | None = None
    model_revision: str | None = None
    headroom: float | None = None
    node: str | None
    created_at: datetime
    heartbeat_at: datetime | None


class OrphanTrial(_Record):
    """A trial whose coordinator died: now ``lost``; its params are to be re-enqueued."""

    trial_id: int
    number: int
    attempt: int
    params: dict[str, Any]


class CardRecord(_Record):
    """One experiment of the guided strategy, as stored and as the API answers it."""

    id: int
    sweep_id: int
    step: int
    symptom: str
    evidence: dict[str, Any]
    hypothesis: str
    variable: str
    values: list[Any]
    """Every value tried, in the order tried."""
    expected_direction: str
    controls: dict[str, Any] | None = None
    """What was held fixed (model, GPU, workload and seed, engine and version, the other
    knobs, the trial order)."""
    stop_condition: list[str] | None = None
    """The rules that end a value's run at once."""
    result: dict[str, Any] | None
    """``summary``, ``results`` (one row per value: value, status, objective, p99 TTFT and
    TPOT, headroom, failure) and ``baseline_value``."""
    verdict: str | None
    """supported, rejected or inconclusive (None while the experiment runs)."""
    rollback: Any | None
    """The incumbent's full configuration and the check that restores it."""
    created_at: datetime


class EquivalentConfig(_Record):
    """A configuration of the same sweep whose capacity interval per GPU overlaps the
    winner's: the measurements cannot tell it from the winner (issue 37's equivalent
    set). ``confirmed``: its interval is from the confirmation; else from the search's
    ranking probes (wider, and only a ranking)."""

    trial_id: int
    number: int
    config: dict[str, Any]
    capacity: float
    capacity_low: float
    capacity_high: float | None
    gpus: int
    confirmed: bool


def per_gpu_interval(low: float | None, high: float | None, gpus: int
                     ) -> tuple[float, float]:
    """A capacity interval per GPU of the replica (``high`` None: unbounded)."""
    g = max(gpus, 1)
    return (low or 0.0) / g, (math.inf if high is None else high / g)


def overlaps(a: tuple[float, float], b: tuple[float, float]) -> bool:
    """Whether two intervals share a point."""
    return a[0] <= b[1] and b[0] <= a[1]


class BestConfig(_Record):
    """One row of ``best_config_per_workload``: a configuration that met the SLO (see
    migration 0003 and docs/reference/best-config-view.md for the columns). The API
    answers it as it is, with the command line that reproduces it
    (``api.schemas.BestOut``)."""

    workload: str
    model: str
    gpu: str
    slo: str
    """Canonical SLO JSON, e.g. ``{"percentile":99.0,"tpot":50.0,"ttft":300.0}``."""
    config: dict[str, Any]
    objective: float
    """goodput mode: request goodput (req/s); capacity mode: capacity per GPU."""
    capacity: float | None
    """Capacity mode: what one replica carries (req/s): the centre of its interval,
    measured by the sweep's confirmation where the row is confirmed."""
    capacity_low: float | None = None
    """The interval's low end: the highest rate shown to pass (the planner sizes on it)."""
    capacity_high: float | None = None
    """The interval's high end: the lowest rate shown to fail (None: none did)."""
    gpus: int = 1
    """Devices one replica occupies (TP × PP × DP)."""
    capacity_per_gpu: float | None = None
    """``capacity / gpus``: what the view ranks by (None: no capacity measured)."""
    confirmed: bool
    trial_id: int
    measured_at: datetime | None
    engine: str | None = None
    """``vllm``, or ``sim`` (the simulated engine)."""
    engine_version: str | None = None
    gpu_driver: str | None = None
    model_revision: str | None = None
    repeats: int = 0
    """Confirmation re-runs the configuration held up in (0: not confirmed)."""
    sweep_id: int | None = None
    number: int | None = None
    """The trial's Optuna number in its sweep (``trial N`` in the log and the report)."""
    equivalent: list[EquivalentConfig] = []
    """Capacity mode: the configurations of its sweep that measurements cannot tell from
    it (their intervals per GPU overlap): it was picked among them by the stated rule —
    lossless before lossy, fewer GPUs a replica, then the higher capacity per GPU."""
    stale: bool = False
    """The newest measurement of this (workload, model, gpu, slo) ran another engine
    version, GPU driver or model revision: re-measure before relying on this row."""


class NoPassingConfig(_Record):
    """One row of ``workloads_without_passing_config``: measured, and nothing met the SLO."""

    workload: str
    model: str
    gpu: str
    slo: str
    request_rate: float | None
    """The workload's rate (req/s) at which nothing passed; None in capacity mode."""
    closest: int
    """The trial that came closest (smallest worst observed/target ratio)."""
    closest_config: dict[str, Any]
    closest_ratio: float | None
    """Its worst observed/target SLO ratio (1.3: 30 % over target)."""
    trials: int
    measured_at: datetime | None

    @computed_field  # type: ignore[prop-decorator]
    @property
    def reason(self) -> str:
        """What a reader is told instead of a winner."""
        rate = self.request_rate
        at = f" at {rate:g} req/s" if rate and rate < float("inf") else ""
        missed = ("" if self.closest_ratio is None else
                  f"; the closest (trial {self.closest}) missed its worst SLO target by "
                  f"{(self.closest_ratio - 1) * 100:.0f}%")
        return (f"no configuration meets the SLO{at} ({self.trials} measured){missed}: a "
                "capacity problem (more replicas, a larger GPU, or capacity mode), not a "
                "tuning one")
