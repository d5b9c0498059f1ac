"""A sweep's progress, typed: what the coordinator writes and the CLI, API and dashboard read.

The coordinator builds a :class:`SweepProgress` (:func:`sweep_progress`, from its tally
and what runs) and stores :meth:`SweepProgress.stored`
(JSON, unset fields left out) in ``sweeps.progress``; readers parse it back with
:meth:`SweepProgress.of`, which tolerates what older versions stored (unknown keys are
ignored, missing ones take their defaults). The API serves it under ``progress`` with
this schema; the dashboard reads the same JSON.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

if TYPE_CHECKING:  # the readers of a progress need none of the runner's parts
    from slotune.tuner.sweep.tally import Tally

__all__ = ["ConfirmationRun", "ConfirmedCandidate", "Phase", "SweepProgress",
           "TwinCallView", "TwinFit", "TwinProgress", "TwinRanked", "Waiting",
           "sweep_progress"]

Phase = Literal["queued", "search", "confirm", "done", "cancelled"]


class _Read(BaseModel):
    model_config = ConfigDict(extra="ignore", populate_by_name=True, serialize_by_alias=True)


class Waiting(_Read):
    """What a sweep with nothing running waits for (GPUs held by sibling sweeps), since when."""

    for_: str = Field(alias="for")
    since: str


class ConfirmationRun(_Read):
    """One confirmation re-run of a candidate."""

    objective: float | None = None
    status: str | None = None
    failure: str | None = None
    gate_passed: bool | None = None
    p99_ttft_ms: float | None = None
    p99_tpot_ms: float | None = None
    early_abort: str | None = None


class ConfirmedCandidate(_Read):
    """A top configuration re-run in the confirmation phase, and what its runs gave."""

    trial_id: int
    params: dict[str, Any]
    runs: list[float] = []
    mean: float | None = None
    stdev: float | None = None
    lcb: float | None = None
    """Lower confidence bound of the objective: the winner is the candidate with the best."""
    winner: bool = False
    details: list[ConfirmationRun] = []


class TwinCallView(_Read):
    """One configuration the twin booted: what it predicted before, what was measured."""

    number: int
    """The Optuna trial number (a sweep trial's ``number``)."""
    params: dict[str, Any]
    predicted: float
    band: float
    predicted_failure: str | None = None
    measured: float | None = None
    measured_low: float | None = None
    """Capacity mode: the objective at the interval's low end (the highest rate passed)."""
    measured_high: float | None = None
    """Capacity mode: the objective at the interval's high end (the lowest rate failed)."""
    status: str | None = None
    measured_failure: str | None = None
    error: float | None = None
    """How far the prediction fell outside the measured bracket, ÷ the measurement."""


class TwinRanked(_Read):
    """A configuration the twin never booted, with its last prediction."""

    params: dict[str, Any]
    predicted: float
    predicted_failure: str | None = None


class TwinFit(_Read):
    """The twin's last refit: how well it explains the probes, and which trials taught it."""

    residual: float
    trials: list[str] = []
    """The trials it was fitted to, by their ``run_id`` (``s3-t7-a1``)."""
    probes: int = 0
    fitted: list[str] = []


class TwinProgress(_Read):
    """The twin's work in a ``twin`` sweep: screened, booted, its calibration and calls."""

    candidates: int
    screened: int
    booted: int
    band: float
    noise: float | None = None
    """What the measurements resolve: their capacity intervals' median half-width."""
    gpu: str
    factors: dict[str, float]
    """Multipliers on the shipped calibration (compute, memory, overhead): the stored
    calibration a later sweep of the same model, GPU and engine version starts from."""
    start_factors: dict[str, float] = {}
    warm_start: str | None = None
    engine_version: str | None = None
    notes: list[str] = []
    fit: TwinFit | None = None
    screen_cpu_s: float = 0.0
    memory_misses: int = 0
    calls: list[TwinCallView] = []
    ranking: list[TwinRanked] = []


class SweepProgress(_Read):
    """Where a sweep stands: counts, the best so far, cost, and why it stopped or waits."""

    phase: Phase = "queued"
    trials: int = 0
    """Trials started (attempts of one configuration count once)."""
    done: int = 0
    running: int = 0
    failed: int = 0
    infeasible: int = 0
    max_trials: int | None = None
    best_objective: float | None = None
    best_trial_id: int | None = None
    best_number: int | None = None
    """The best trial's Optuna number (``trial N``, as the log, the table and the report
    name it); after confirmation, the confirmed winner's."""
    best_params: dict[str, Any] | None = None
    gpu_hours: float = 0.0
    eta_s: float | None = None
    updated_at: str | None = None
    stop_reason: str | None = None
    confirmation: list[ConfirmedCandidate] = []
    unconfirmed: str | None = None
    """Why no candidate held up in confirmation (then there is no winner)."""
    waiting: Waiting | None = None
    twin: TwinProgress | None = None
    """``twin`` sweeps: what the twin predicted and learned."""

    @classmethod
    def of(cls, raw: Mapping[str, Any] | None) -> SweepProgress:
        """The typed progress of what a sweep row holds (``{}`` for a queued sweep); a field
        an older version stored in another shape reads as unset rather than failing."""
        data = dict(raw or {})
        try:
            return cls.model_validate(data)
        except ValidationError as exc:
            bad = {err["loc"][0] for err in exc.errors() if err["loc"]}
            return cls.model_validate({k: v for k, v in data.items() if k not in bad})

    def stored(self) -> dict[str, Any]:
        """The JSON the sweep row keeps: every count and best-so-far field (null while
        unknown); the phase-specific ones (stop reason, confirmation, waiting) only when
        set."""
        unset = {k for k in _ONLY_WHEN_SET if not getattr(self, k)}
        return self.model_dump(mode="json", exclude=unset)


_ONLY_WHEN_SET = ("stop_reason", "confirmation", "unconfirmed", "waiting", "twin")


def sweep_progress(phase: Phase, tally: Tally, *, started: int, running: int,
                   max_trials: int, parallel: int, stop_reason: str | None = None,
                   waiting: Mapping[str, str] | None = None,
                   twin: Mapping[str, Any] | None = None) -> SweepProgress:
    """A runner's progress: its ``tally``, the trials ``started`` (finished, running or
    waiting) and ``running``, and an ETA of the trials left at ``parallel`` at a time."""
    remaining = max(0, max_trials - started)
    mean = tally.mean_duration()
    eta = None if mean is None else math.ceil((remaining + running) / parallel) * mean
    best_row = tally.best_row()
    return SweepProgress.model_validate({
        "phase": phase, "trials": started,
        "done": tally.count("ok"), "running": running,
        "failed": tally.count("failed"), "infeasible": tally.count("infeasible"),
        "max_trials": max_trials,
        "best_objective": tally.best[0] if tally.best else None,
        "best_trial_id": tally.best[1] if tally.best else None,
        "best_number": tally.best_number(),
        "best_params": best_row.params if best_row else None,
        "gpu_hours": round(tally.gpu_hours, 4), "eta_s": eta,
        "updated_at": datetime.now(UTC).isoformat(),
        "stop_reason": stop_reason,
        "confirmation": tally.confirmation,
        "unconfirmed": tally.unconfirmed,
        "waiting": waiting if phase == "search" else None,
        "twin": twin,
    })
