"""The capacity planner: how many replicas of which configuration carry N req/s of a workload,
and which of them costs least.

It answers from what sweeps measured, never from a model of the hardware. A measurement's
per-replica rate is, by basis:

* **capacity** — a trial measured in capacity mode knows its per-replica capacity as an
  interval (``sweep_trials.capacity_low`` … ``capacity_high``, the centre
  ``capacity``); the plan sizes from the interval's *lower end*, the highest rate shown
  to pass, and says so. A confirmed configuration's row carries its confirmation's
  interval (fresh samples, not the search's reading). Its *objective* is the capacity per
  GPU of the replica and is never read as the rate; only rows stored before ``capacity``
  was recorded (whose objective was the per-replica capacity itself) fall back to the
  objective;
* **goodput lower bound** — a goodput-mode trial only knows the goodput it reached at the
  workload's own rate. A replica that served that much within the SLO can serve at least
  that much, so the goodput is a *lower bound* on its capacity and the plan may
  over-provision. It is used only for a (model, GPU) without any capacity measurement;
* **rescored probes** — no sweep measured the SLO asked for, but capacity trials under
  other SLOs kept their probes' percentiles: each trial's capacity under the new SLO is
  read off them (:mod:`slotune.tuner.planning.rescore`: the highest probed rate whose gate holds),
  with how sure that is (``confidence``). Configurations whose probes cannot decide and that could
  beat the answer are named in ``remeasure``. The best-config view keeps its own rule (a row is a
  measurement that met its own SLO); these answers are the planner's only.

Every measured configuration is a candidate: each (model, GPU, configuration) once, at
the lowest rate its measurements reached; a configuration one of whose capacity
measurements held nothing is none. Where a sweep confirmed a winner on a (model, GPU),
only confirmed configurations stand there — the sweep's answer, the same configuration
and interval the best-config view, the table and the report show, never a configuration
read once by the search's ranking probes. A
candidate needs ``replicas_for(target, rate, headroom)`` replicas of
``replica_gpus(config)`` GPUs each and costs ``gpus × price`` per hour. The plan is the
cheapest; where a GPU has no price, priced plans come first (by cost) and unpriced ones
after them (by GPUs). Ties: fewer GPUs, confirmed, the higher per-replica rate, the
earliest trial. The SLO is the caller's constraint, not the planner's choice:
measurements under several SLOs with none named is an error.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from slotune.tuner.db.records import SweepRecord, TrialRecord
from slotune.tuner.db.snapshot import SweepSnapshot, WorkloadSnapshot
from slotune.tuner.planning.rescore import (
    Confidence,
    TrialCapacity,
    combine,
    error_budget,
    trial_capacity,
)
from slotune.workers.contracts import SLO, TrialResult, replica_gpus
from slotune.workers.engines.vllm import vllm_command

__all__ = [
    "DEFAULT_HEADROOM",
    "AmbiguousSlo",
    "Basis",
    "CapacityOption",
    "CapacityPlan",
    "NothingMeasured",
    "PlanError",
    "Remeasure",
    "SloNeverMet",
    "plan_capacity",
    "replicas_for",
]

Basis = Literal["capacity", "goodput_lower_bound", "rescored_probes"]

_BASIS_NOTES: dict[Basis, str] = {
    "capacity": "per-replica capacity measured in capacity mode, sized from the lower end "
                "of its interval: the highest request rate one replica was shown to carry "
                "under the SLO (at the probes' stated confidence)",
    "goodput_lower_bound": "only goodput-mode measurements exist for this model on this GPU: "
                           "the goodput reached at the workload's own rate is a lower bound "
                           "on per-replica capacity, so this plan may over-provision; run a "
                           "capacity-mode sweep (mode: capacity) for a tight answer",
    "rescored_probes": "no sweep measured this SLO: each configuration's per-replica "
                       "capacity is read off the probes that capacity sweeps under other "
                       "SLOs stored — the highest probed rate at which this SLO's gate holds "
                       "on the stored percentiles, below the lowest rate at which it breaks "
                       "(no new measurement); confidence says how sure each is",
}


class PlanError(Exception):
    """The planner cannot answer; the message says why."""


class NothingMeasured(PlanError):
    """No finished measurement matches the question (HTTP 404)."""


class SloNeverMet(PlanError):
    """Configurations were measured, but none met the SLO (objective 0) (HTTP 422)."""


class AmbiguousSlo(PlanError):
    """Measurements exist under several SLOs and the caller named none (HTTP 422)."""


class CapacityOption(BaseModel):
    """The cheapest plan on one (model, GPU): the answer's alternatives, side by side."""

    model_config = ConfigDict(frozen=True)

    model: str
    gpu: str
    replicas: int
    gpus_per_replica: int
    gpus: int
    per_replica_rps: float
    """What the plan sizes from: the lowest rate the configuration's measurements reached
    (the capacity interval's lower end, or goodput as a lower bound)."""
    capacity_rps: float | None = None
    """capacity: the interval's centre, the capacity the best-config view reports."""
    capacity_high_rps: float | None = None
    """capacity: the interval's upper end (None: open, or not measured)."""
    planned_rps: float
    price_per_gpu_hour: float | None
    """USD per GPU-hour of ``gpu``; None where no price is known."""
    cost_per_hour: float | None
    """``gpus × price_per_gpu_hour`` (USD); None when unpriced."""
    basis: Basis
    config: dict[str, Any]
    vllm_command: str
    trial_ids: list[int]
    """The measurement the rate comes from first, then the configuration's other ones."""
    confirmed: bool
    """Any of its measurements was confirmed."""
    stale: str | None = None
    confidence: Confidence | None = None
    """``rescored_probes``: how sure the rescored capacity is (None otherwise)."""


class Remeasure(BaseModel):
    """A configuration whose stored probes cannot decide its capacity under the SLO asked
    for, and which could carry more per GPU than the answer: worth measuring under it."""

    model_config = ConfigDict(frozen=True)

    model: str
    gpu: str
    config: dict[str, Any]
    trial_ids: list[int]
    why: str
    at_least_rps: float | None
    """What its probes show it carries per replica (None: nothing decided)."""
    below_rps: float | None
    """The lowest probed rate that breaks the SLO (None: none did, or none decided)."""


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
    """Measured per-replica rate the plan sizes from (the capacity interval's lower end,
    or goodput as a lower bound): the lowest that the configuration's measurements
    reached."""
    capacity_rps: float | None = None
    """capacity: the interval's centre (the capacity the best-config view reports)."""
    capacity_high_rps: float | None = None
    """capacity: the interval's upper end."""
    planned_rps: float
    """What the replicas carry while keeping the headroom spare: ≥ ``target_rps``."""
    config: dict[str, Any]
    vllm_command: str
    basis: Basis
    basis_note: str
    confirmed: bool
    trial_ids: list[int]
    """The trial the rate comes from first, then the other measurements of the same
    configuration."""
    sweep_id: int
    measured_at: datetime | None
    engine_version: str | None = None
    stale: str | None = None
    """Set when the newest measurement of this (workload, model, gpu, slo) ran another
    engine version, GPU driver or model revision than the plan's trial: what changed."""
    price_per_gpu_hour: float | None = None
    """USD per GPU-hour of ``gpu`` (the request's ``gpu_prices``, else the server's);
    None where no price is known."""
    cost_per_hour: float | None = None
    """``gpus × price_per_gpu_hour`` (USD per hour); None when the GPU has no price."""
    options: list[CapacityOption] = []
    """The cheapest plan per (model, GPU), cheapest first (this plan is the first):
    unpriced GPUs after the priced ones, by GPUs."""
    notes: list[str] = []
    """Sentences to read before sizing on the plan: a stale measurement, unpriced GPUs,
    measurements under other SLOs that were not used."""
    confidence: Confidence | None = None
    """``basis: rescored_probes`` (no sweep measured the SLO; read off stored probes): how
    sure the per-replica rate is — the bracketing probes, unknown probes, the spread of
    the configuration's confirmation repeats."""
    remeasure: list[Remeasure] = []
    """``rescored_probes``: configurations whose probes cannot decide under this SLO and
    that could beat this plan per GPU — measure them under this SLO (a sweep) before
    trusting the ranking."""


DEFAULT_HEADROOM = 0.2
"""Share of each replica's capacity kept spare by default (bursts, a failed replica)."""


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


@dataclass(frozen=True, slots=True)
class _Measurement:
    sweep: SweepRecord
    own_slo: SLO
    """The SLO the sweep measured under (parsed once, in the snapshot)."""
    trial: TrialRecord
    basis: Basis
    per_replica: float
    rescored: TrialCapacity | None = None
    """``rescored_probes``: what the trial's probes say under the SLO asked for."""


@dataclass(frozen=True, slots=True)
class _Candidate:
    """One configuration of one (model, GPU): its measurements, the most conservative
    first."""

    measurements: tuple[_Measurement, ...]

    @property
    def first(self) -> _Measurement:
        return self.measurements[0]


def plan_capacity(
    snapshot: WorkloadSnapshot,
    *,
    target_rps: float,
    headroom: float = DEFAULT_HEADROOM,
    model: str | None = None,
    gpu: str | None = None,
    slo: str | None = None,
    gpu_prices: Mapping[str, float] | None = None,
) -> CapacityPlan:
    """Plan replicas for ``target_rps`` of the snapshot's workload (``slo``: canonical SLO
    key) at the least cost under ``gpu_prices`` (GPU name → USD per GPU-hour; the whole
    table, e.g. :meth:`slotune.tuner.settings.PlannerSettings.prices`; without it, the fewest GPUs
    win).

    Raises :class:`NothingMeasured`, :class:`SloNeverMet` or :class:`AmbiguousSlo` (an
    unknown workload has no snapshot: :func:`slotune.tuner.db.snapshot.load_workload` raised).
    """
    workload = snapshot.name
    prices = dict(gpu_prices or {})
    sweeps = [s for s in snapshot.sweeps
              if (model is None or s.sweep.model == model)
              and (gpu is None or s.sweep.gpu == gpu)]
    asked = _describe(workload, model, gpu, slo)
    every = [_measurement(s, t) for s in sweeps for t in s.ok_trials()
             # A confirmation repeat is one more measurement of its configuration (the
             # lowest rate stands); a quality baseline measured no load.
             if t.objective is not None and t.role != "baseline"]
    measured = [m for m in every if slo is None or m.sweep.slo_key == slo]
    others = sorted({m.sweep.slo_key for m in every} - {slo}) if slo is not None else []
    undecided: list[Remeasure] = []
    cannot = ""
    if not measured and slo is not None:
        # No sweep measured this SLO: read it off the probes sweeps under others stored.
        rescored_ones, undecided = _rescored(every, SLO.model_validate_json(slo))
        if rescored_ones and not [m for m in rescored_ones if m.per_replica > 0]:
            why = (f"no configuration holds SLO {slo} at any probed rate, by the probes "
                   f"stored under {_slo_list(others)}")
            if undecided:
                raise NothingMeasured(
                    f"{why}; the probes of {len(undecided)} configuration(s) cannot decide "
                    f"(e.g. {undecided[0].why}): measure {asked} under that SLO")
            raise SloNeverMet(why)
        measured = rescored_ones
        if undecided and not measured:
            cannot = f"; its stored probes cannot answer it ({undecided[0].why})"
    if not measured:
        if others:
            raise NothingMeasured(
                f"nothing measured yet for {asked}: no finished trial under that SLO; it was "
                f"measured under {_slo_list(others)}: name {'it' if len(others) == 1 else 'one'} "
                f"with slo{cannot}")
        raise NothingMeasured(f"nothing measured yet for {asked}: no finished trial")
    rescored = any(m.basis == "rescored_probes" for m in measured)
    # Rescored measurements keep their own sweeps' SLOs: the answer is under the one asked.
    slos = [slo] if rescored and slo is not None else sorted({m.sweep.slo_key
                                                               for m in measured})
    if len(slos) > 1:
        raise AmbiguousSlo(f"{asked} was measured under {len(slos)} SLOs ({'; '.join(slos)}); "
                           "name one with slo")
    # A capacity measurement of 0 (a confirmation repeat that broke the SLO at its lowest
    # probed rate) is the lowest rate that configuration reached: it sizes nothing, as
    # its confirmation did not crown it (rescored measurements stand together likewise).
    held_nothing = {_group_key(m) for m in measured
                    if m.basis == "capacity" and m.per_replica <= 0}
    candidates = _candidates(m for m in measured
                             if m.per_replica > 0 and _group_key(m) not in held_nothing)
    if not candidates:
        raise SloNeverMet(f"no configuration met the SLO {slos[0]} for {asked}: "
                          f"{len(measured)} trial(s) measured, every configuration held "
                          "nothing in at least one of them")

    options: dict[tuple[str, str], CapacityOption] = {}
    for candidate in candidates:
        option = _option(candidate, target_rps, headroom, prices.get(candidate.first.sweep.gpu),
                         _newest(measured, candidate.first))
        group = (option.model, option.gpu)
        if group not in options or _cost_rank(option) < _cost_rank(options[group]):
            options[group] = option
    ranked = sorted(options.values(), key=_cost_rank)
    chosen = ranked[0]
    rep = next(m for c in candidates for m in c.measurements
               if m.trial.id == chosen.trial_ids[0])
    remeasure = _worth_remeasuring(undecided, chosen) if rescored else []
    notes = _notes(chosen, ranked, [] if rescored else others)
    if rescored:
        measured_under = {s.sweep.slo_key: s.slo for s in sweeps}
        notes.insert(0, f"No sweep measured the SLO {SLO.model_validate_json(slo or '{}')}: "
                        "answered from the probes stored under "
                        + ", ".join(str(measured_under[o]) for o in others)
                        + ", without a new measurement.")
        if remeasure:
            notes.append(f"{len(remeasure)} configuration(s) could carry more per GPU but "
                         "their probes cannot decide under this SLO: see remeasure.")
    return CapacityPlan(
        workload=rep.sweep.workload, slo=slo if rescored and slo else rep.sweep.slo_key,
        target_rps=target_rps, headroom=headroom, **chosen.model_dump(),
        basis_note=_BASIS_NOTES[chosen.basis], sweep_id=rep.sweep.id,
        measured_at=rep.trial.finished_at, engine_version=rep.trial.engine_version,
        options=ranked, notes=notes, remeasure=remeasure,
    )


def _measurement(measured: SweepSnapshot, trial: TrialRecord) -> _Measurement:
    sweep, own = measured.sweep, measured.slo
    objective = trial.objective or 0.0
    if trial.capacity is not None:
        low = trial.capacity_low if trial.capacity_low is not None else trial.capacity
        return _Measurement(sweep=sweep, own_slo=own, trial=trial, basis="capacity",
                            per_replica=low)
    if sweep.mode == "capacity":
        # Rows stored before capacity was recorded: their objective was the per-replica
        # capacity (now every capacity-mode row stores it, and the objective is per GPU).
        return _Measurement(sweep=sweep, own_slo=own, trial=trial, basis="capacity",
                            per_replica=objective)
    return _Measurement(sweep=sweep, own_slo=own, trial=trial, basis="goodput_lower_bound",
                        per_replica=objective)


def _rescored(every: Sequence[_Measurement], slo: SLO
              ) -> tuple[list[_Measurement], list[Remeasure]]:
    """Every capacity measurement with probes, its capacity read off them under ``slo``;
    and the configurations whose measurements cannot decide.

    A configuration's measurements (search run, repeats) stand together, as
    :func:`slotune.tuner.planning.rescore.combine` takes them (the frontier's grid too): when one of
    them breaks the SLO at its lowest probed rate, the configuration carries less than that on a
    re-run, and every measurement of it counts 0 — not a candidate."""
    groups: dict[tuple[str, str, str], list[tuple[_Measurement, TrialCapacity]]] = {}
    for m in every:
        if m.basis != "capacity" or not m.trial.result:
            continue
        result = TrialResult.model_validate(m.trial.result)
        if not result.capacity_probes:
            continue
        found = trial_capacity(result, slo, own_slo=m.own_slo,
                               max_error_rate=error_budget(m.trial.spec))
        key = _group_key(m)
        groups.setdefault(key, []).append((m, found))
    out: list[_Measurement] = []
    undecided = []
    for (model, gpu, _), items in groups.items():
        capacity, confidence = combine([found for _, found in items])
        out += [_Measurement(sweep=m.sweep, own_slo=m.own_slo, trial=m.trial,
                             basis="rescored_probes",
                             per_replica=found.capacity if capacity else 0.0, rescored=found)
                for m, found in items if found.capacity is not None]
        if confidence.undecided is not None:
            undecided.append(Remeasure(
                model=model, gpu=gpu, config=dict(items[0][0].trial.config),
                trial_ids=sorted(m.trial.id for m, _ in items), why=confidence.undecided,
                at_least_rps=capacity, below_rps=confidence.bracket[1]))
    return out, undecided


def _worth_remeasuring(undecided: Sequence[Remeasure], chosen: CapacityOption
                       ) -> list[Remeasure]:
    """The undecided configurations that could carry more per GPU than the answer: their
    lowest failing rate (if any) is above what the answer carries per GPU."""
    per_gpu = chosen.per_replica_rps / chosen.gpus_per_replica
    worth = [r for r in undecided if r.gpu == chosen.gpu and r.model == chosen.model
             and (r.below_rps is None or r.below_rps / replica_gpus(r.config) > per_gpu)]
    return sorted(worth, key=lambda r: -(r.at_least_rps or 0.0) / replica_gpus(r.config))[:5]


def _candidates(feasible: Iterable[_Measurement]) -> list[_Candidate]:
    """One candidate per (model, GPU, configuration), from that (model, GPU)'s best basis:
    capacity where it has any capacity measurement, else the probes rescored under the
    SLO asked for, else the goodput lower bound."""
    by_group: dict[tuple[str, str], list[_Measurement]] = {}
    for m in feasible:
        by_group.setdefault((m.sweep.model, m.sweep.gpu), []).append(m)
    candidates = []
    for group in by_group.values():
        present = {m.basis for m in group}
        basis: Basis = next(b for b in ("capacity", "rescored_probes", "goodput_lower_bound")
                            if b in present)
        if basis == "capacity":
            # A confirmed configuration's search row carries its confirmation's interval;
            # where a sweep confirmed an answer on this (model, GPU), that answer stands —
            # the configuration the table, the report and the dashboard name — never one
            # read once by the search's ranking probes. Without one, every configuration
            # measured competes on what it costs for the target.
            group = [m for m in group if m.trial.role == "search" and m.basis == basis]
            if any(m.trial.confirmed for m in group):
                group = [m for m in group if m.trial.confirmed]
        by_config: dict[str, list[_Measurement]] = {}
        for m in group:
            if m.basis == basis:
                by_config.setdefault(_config_key(m.trial.config), []).append(m)
        candidates += [_Candidate(tuple(sorted(ms, key=lambda m: (m.per_replica, m.trial.id))))
                       for ms in by_config.values()]
    return candidates


def _config_key(config: Mapping[str, Any]) -> str:
    return json.dumps(config, sort_keys=True, default=str)


def _group_key(m: _Measurement) -> tuple[str, str, str]:
    """A measurement's (model, GPU, configuration)."""
    return m.sweep.model, m.sweep.gpu, _config_key(m.trial.config)


def _option(candidate: _Candidate, target_rps: float, headroom: float, price: float | None,
            newest: _Measurement) -> CapacityOption:
    rep = candidate.first  # the lowest rate: the one the plan rests on
    config = dict(rep.trial.config)
    replicas = replicas_for(target_rps, rep.per_replica, headroom)
    gpus = replicas * replica_gpus(config)
    others = sorted(m.trial.id for m in candidate.measurements[1:])
    return CapacityOption(
        model=rep.sweep.model, gpu=rep.sweep.gpu, replicas=replicas,
        gpus_per_replica=replica_gpus(config), gpus=gpus, per_replica_rps=rep.per_replica,
        capacity_rps=rep.trial.capacity if rep.basis == "capacity" else None,
        capacity_high_rps=rep.trial.capacity_high if rep.basis == "capacity" else None,
        planned_rps=replicas * rep.per_replica * (1.0 - headroom),
        price_per_gpu_hour=price, cost_per_hour=None if price is None else gpus * price,
        basis=rep.basis, config=config, vllm_command=vllm_command(rep.sweep.model, config),
        trial_ids=[rep.trial.id, *others],
        confirmed=any(m.trial.confirmed for m in candidate.measurements),
        stale=_staleness(rep.trial, newest.trial),
        confidence=None if rep.rescored is None else combine(
            [m.rescored for m in candidate.measurements if m.rescored is not None])[1],
    )


def _cost_rank(o: CapacityOption) -> tuple[bool, float, int, bool, float, int]:
    # Priced before unpriced; then cost (rounded: 0.1 × 3 and 0.3 are the same price),
    # fewer GPUs, confirmed, the higher per-replica rate, the earliest trial.
    cost = 0.0 if o.cost_per_hour is None else round(o.cost_per_hour, 6)
    return (o.cost_per_hour is None, cost, o.gpus, not o.confirmed, -o.per_replica_rps,
            min(o.trial_ids))


def _newest(measured: Sequence[_Measurement], chosen: _Measurement) -> _Measurement:
    """The newest measurement of the chosen one's (model, gpu)."""
    group = [m for m in measured
             if (m.sweep.model, m.sweep.gpu) == (chosen.sweep.model, chosen.sweep.gpu)]
    return max(group, key=lambda m: (m.trial.finished_at is not None, m.trial.finished_at
                                     or datetime.min, m.trial.id))


def _notes(chosen: CapacityOption, options: Sequence[CapacityOption],
           other_slos: Sequence[str]) -> list[str]:
    notes = []
    if chosen.stale:
        notes.append(f"The plan's configuration on {chosen.gpu} was {chosen.stale}.")
    unpriced = sorted({o.gpu for o in options if o.price_per_gpu_hour is None})
    if unpriced and len(unpriced) < len(options):
        notes.append(f"No price for {', '.join(unpriced)}: plans on them are ranked after the "
                     "priced ones, by GPUs; give gpu_prices (or SLOTUNE_GPU_PRICES) to compare "
                     "them by cost.")
    elif unpriced:
        notes.append(f"No price for {', '.join(unpriced)}: plans are compared by GPUs and "
                     "cost_per_hour is null; give gpu_prices (or SLOTUNE_GPU_PRICES) to "
                     "compare them by cost.")
    if other_slos:
        notes.append(f"The same workload was also measured under {_slo_list(other_slos)}; "
                     "those measurements were not used: the plan holds the SLO asked for.")
    return notes


def _slo_list(slos: Sequence[str]) -> str:
    return ("another SLO " if len(slos) == 1 else f"{len(slos)} other SLOs ") + "; ".join(slos)


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
