"""The capacity planner: how many replicas of which configuration carry N req/s of a workload.

It answers from what sweeps measured, never from a model of the hardware:

* **capacity basis** — a trial measured in capacity mode knows its per-replica capacity
  (the highest request rate at which the SLO gate held, ``sweep_trials.capacity``);
* **goodput lower bound** — a goodput-mode trial only knows the goodput it reached at the
  workload's own rate. A replica that served that much within the SLO can serve at least
  that much, so the goodput is a *lower bound* on its capacity and the plan may
  over-provision. Capacity measurements are preferred whenever one exists.

Among the measurements of one (model, GPU), the pick follows ``best_config_per_workload``:
confirmed trials first, then the highest per-replica rate, then the earliest trial. Across
models/GPUs the plan needing the fewest GPUs wins. The SLO is the caller's constraint, not
the planner's choice: measurements under several SLOs with none named is an error.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from tuner.db.records import SweepRecord, TrialRecord
from tuner.store import Store
from workers.contracts import replica_gpus
from workers.engines.vllm import vllm_command

__all__ = [
    "AmbiguousSlo",
    "Basis",
    "CapacityPlan",
    "NothingMeasured",
    "PlanError",
    "SloNeverMet",
    "plan_capacity",
    "replicas_for",
]

Basis = Literal["capacity", "goodput_lower_bound"]

_BASIS_NOTES: dict[Basis, str] = {
    "capacity": "per-replica capacity measured in capacity mode: the highest request rate "
                "at which the SLO gate held on one replica",
    "goodput_lower_bound": "only goodput-mode measurements exist: the goodput reached at the "
                           "workload's own rate is a lower bound on per-replica capacity, so "
                           "this plan may over-provision; run a capacity-mode sweep "
                           "(mode: capacity) for a tight answer",
}


class PlanError(Exception):
    """The planner cannot answer; the message says why."""


class NothingMeasured(PlanError):
    """No finished measurement matches the question (HTTP 404)."""


class SloNeverMet(PlanError):
    """Configurations were measured, but none met the SLO (objective 0) (HTTP 422)."""


class AmbiguousSlo(PlanError):
    """Measurements exist under several SLOs and the caller named none (HTTP 422)."""


class CapacityPlan(BaseModel):
    """The answer: replicas × configuration, and what it rests on."""

    model_config = ConfigDict(frozen=True)

    workload: str
    model: str
    gpu: str
    slo: str
    """Canonical SLO JSON, as in ``best_config_per_workload``."""
    target_rps: float
    headroom: float
    replicas: int
    gpus_per_replica: int
    gpus: int
    per_replica_rps: float
    """Measured per-replica rate (capacity, or goodput as a lower bound)."""
    planned_rps: float
    """What the replicas carry while keeping the headroom spare: ≥ ``target_rps``."""
    config: dict[str, Any]
    vllm_command: str
    basis: Basis
    basis_note: str
    confirmed: bool
    trial_ids: list[int]
    """The chosen trial first, then the other measurements of the same configuration."""
    sweep_id: int
    measured_at: datetime | None
    engine_version: str | None = None
    stale: str | None = None
    """Set when the newest measurement of this (workload, model, gpu, slo) ran another
    engine version, GPU driver or model revision than the plan's trial: what changed."""


def replicas_for(target_rps: float, per_replica_rps: float, headroom: float) -> int:
    """The fewest whole replicas whose capacity, less ``headroom`` kept spare, covers the
    target: ``ceil(target / (per_replica × (1 − headroom)))``, at least one."""
    if not (target_rps > 0 and per_replica_rps > 0 and 0 <= headroom < 1):
        raise ValueError("need target_rps > 0, per_replica_rps > 0 and 0 <= headroom < 1")
    usable = per_replica_rps * (1.0 - headroom)
    replicas = max(1, math.ceil(target_rps / usable))
    # The division may round one way and the multiplication the other: settle on the
    # smallest count that covers the target in the same arithmetic callers check with.
    while replicas * usable < target_rps:
        replicas += 1
    while replicas > 1 and (replicas - 1) * usable >= target_rps:
        replicas -= 1
    return replicas


class _Candidate(BaseModel):
    model_config = ConfigDict(frozen=True)

    sweep: SweepRecord
    trial: TrialRecord
    basis: Basis
    per_replica: float


def plan_capacity(
    store: Store,
    *,
    workload: str,
    target_rps: float,
    headroom: float = 0.2,
    model: str | None = None,
    gpu: str | None = None,
    slo: str | None = None,
) -> CapacityPlan:
    """Plan replicas for ``target_rps`` of ``workload`` (``slo``: canonical SLO key).

    Raises :class:`~tuner.store.NotFound` for an unknown workload, :class:`NothingMeasured`,
    :class:`SloNeverMet` or :class:`AmbiguousSlo`.
    """
    store.get_workload(workload)  # NotFound for an unknown name, before anything else
    sweeps = [s for s in store.list_sweeps(workload=workload, limit=None).data
              if (model is None or s.model == model) and (gpu is None or s.gpu == gpu)
              and (slo is None or s.slo_key == slo)]
    asked = _describe(workload, model, gpu, slo)
    measured = [_candidate(s, t) for s in sweeps
                for t in store.list_trials(s.id, status="ok", limit=None).data
                if t.objective is not None]
    if not measured:
        raise NothingMeasured(f"nothing measured yet for {asked}: no finished trial")
    slos = sorted({c.sweep.slo_key for c in measured})
    if len(slos) > 1:
        raise AmbiguousSlo(f"{asked} was measured under {len(slos)} SLOs ({'; '.join(slos)}); "
                           "name one with slo")
    feasible = [c for c in measured if c.per_replica > 0]
    pool = [c for c in feasible if c.basis == "capacity"] or feasible
    if not pool:
        raise SloNeverMet(f"no configuration met the SLO {slos[0]} for {asked}: "
                          f"{len(measured)} trial(s) measured, all with objective 0")

    best_per_group: dict[tuple[str, str], _Candidate] = {}
    for c in sorted(pool, key=_view_rank):
        best_per_group.setdefault((c.sweep.model, c.sweep.gpu), c)
    plans = [_plan(c, pool, target_rps, headroom, _newest(measured, c))
             for c in best_per_group.values()]
    return min(plans, key=lambda p: (p.gpus, not p.confirmed, -p.per_replica_rps,
                                     p.trial_ids[0]))


def _candidate(sweep: SweepRecord, trial: TrialRecord) -> _Candidate:
    objective = trial.objective or 0.0
    if trial.capacity is not None:
        return _Candidate(sweep=sweep, trial=trial, basis="capacity", per_replica=trial.capacity)
    if sweep.mode == "capacity":  # capacity mode's objective is the capacity itself
        return _Candidate(sweep=sweep, trial=trial, basis="capacity", per_replica=objective)
    return _Candidate(sweep=sweep, trial=trial, basis="goodput_lower_bound",
                      per_replica=objective)


def _view_rank(c: _Candidate) -> tuple[bool, float, int]:
    # best_config_per_workload's order: confirmed first, higher first, earliest first.
    return (not c.trial.confirmed, -c.per_replica, c.trial.id)


def _newest(measured: Sequence[_Candidate], chosen: _Candidate) -> _Candidate:
    """The newest measurement of the chosen one's (model, gpu)."""
    group = [c for c in measured
             if (c.sweep.model, c.sweep.gpu) == (chosen.sweep.model, chosen.sweep.gpu)]
    return max(group, key=lambda c: (c.trial.finished_at is not None, c.trial.finished_at
                                     or datetime.min, c.trial.id))


def _plan(chosen: _Candidate, pool: Sequence[_Candidate], target_rps: float,
          headroom: float, newest: _Candidate) -> CapacityPlan:
    config = dict(chosen.trial.config)
    replicas = replicas_for(target_rps, chosen.per_replica, headroom)
    per_gpu = replica_gpus(config)
    repeats = [c.trial.id for c in sorted(pool, key=lambda c: c.trial.id)
               if c.trial.id != chosen.trial.id and c.trial.config == config
               and (c.sweep.model, c.sweep.gpu) == (chosen.sweep.model, chosen.sweep.gpu)]
    return CapacityPlan(
        workload=chosen.sweep.workload, model=chosen.sweep.model, gpu=chosen.sweep.gpu,
        slo=chosen.sweep.slo_key, target_rps=target_rps, headroom=headroom,
        replicas=replicas, gpus_per_replica=per_gpu, gpus=replicas * per_gpu,
        per_replica_rps=chosen.per_replica,
        planned_rps=replicas * chosen.per_replica * (1.0 - headroom),
        config=config, vllm_command=vllm_command(chosen.sweep.model, config),
        basis=chosen.basis, basis_note=_BASIS_NOTES[chosen.basis],
        confirmed=chosen.trial.confirmed, trial_ids=[chosen.trial.id, *repeats],
        sweep_id=chosen.sweep.id, measured_at=chosen.trial.finished_at,
        engine_version=chosen.trial.engine_version,
        stale=_staleness(chosen.trial, newest.trial),
    )


def _staleness(trial: TrialRecord, newest: TrialRecord) -> str | None:
    """What changed between ``trial`` and the newest measurement of its group, if anything."""
    changed = []
    for what, field in (("engine", "engine_version"), ("GPU driver", "gpu_driver"),
                        ("model revision", "model_revision")):
        before, after = getattr(trial, field), getattr(newest, field)
        if before != after:
            changed.append(f"{what} {before or 'unknown'} → {after or 'unknown'}")
    if not changed:
        return None
    return (f"measured before the newest measurement (trial {newest.id}) changed "
            f"{', '.join(changed)}: re-measure before sizing on it")


def _describe(workload: str, model: str | None, gpu: str | None, slo: str | None) -> str:
    filters = [f"{k}={v}" for k, v in (("model", model), ("gpu", gpu), ("slo", slo)) if v]
    return f"workload {workload!r}" + (f" ({', '.join(filters)})" if filters else "")
