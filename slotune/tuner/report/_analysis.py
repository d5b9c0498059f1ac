"""What a sweep's report says, computed from the store's records (pure, no rendering).

:func:`analyse` turns a sweep, its trials, its cards and the workload's best rows into a
:class:`SweepReport`: the winner and how sure we are of it, the command line that
reproduces it, the binding constraint at the winner and the next step it implies, the
curves (per knob, and the Pareto front of p99 latency against throughput), ties (DESIGN
§3: when the rate no longer separates configurations), the failures, and where the
trials' time went (:class:`Utilisation`: each boot split by phase, measuring, teardown).
The HTML and Markdown renderers only lay this out.
"""

from __future__ import annotations

import math
import statistics
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import Field

from slotune.tuner.db.records import (
    BestConfig,
    CardRecord,
    EquivalentConfig,
    SweepRecord,
    TrialFields,
    TrialRecord,
)
from slotune.tuner.planning.answer import SweepAnswer
from slotune.tuner.planning.frontier import (  # one definition: the frontier owns it
    Frontier,
    pareto_front,
)
from slotune.tuner.strategies import NOISE_TOLERANCE, params_key, rank
from slotune.tuner.sweep.progress import ConfirmedCandidate, SweepProgress, TwinProgress
from slotune.workers.contracts import BOOT_PHASES, TrialResult
from slotune.workers.engines.vllm import vllm_command  # one definition: the adapter runs it
from slotune.workers.loadgen.diagnose.diagnosis import KNOBS

__all__ = [
    "LATENCY_METRICS",
    "UTILISATION_PARTS",
    "Confidence",
    "NextStep",
    "SweepReport",
    "TrialPoint",
    "TrialTime",
    "Utilisation",
    "analyse",
    "pareto_front",
    "utilisation",
]

LATENCY_METRICS: tuple[str, ...] = ("ttft", "tpot")
"""The p99 latencies plotted against each knob (and their SLO targets)."""


class TrialPoint(TrialFields):
    """One trial as the report shows it: the fields everyone reads
    (:class:`~slotune.tuner.db.records.TrialFields`, as the API's ``TrialOut``) and what the report
    reads out of its stored result."""

    metrics: dict[str, Any] = Field(default_factory=dict)
    """The result's metrics, as measured (vLLM bench names and ``slotune``'s own)."""
    headroom: float | None = None
    gate_passed: bool = False
    failure_message: str | None = None
    violated_rule: str | None = None
    quality: dict[str, Any] | None = None
    """The quality gate's verdict (a lossy configuration), as stored."""
    timings: dict[str, Any] = Field(default_factory=dict)
    """Where the trial's time went (``PhaseTimings``), as stored; older rows lack the
    boot phases."""

    @property
    def label(self) -> str:
        """How the report names this boot: ``#3``, ``#3 repeat 1``, ``baseline 0``."""
        if self.role == "repeat":
            return f"#{self.number} repeat {self.repeat}"
        if self.role == "baseline":
            return f"baseline {self.number}"
        return f"#{self.number}"

    def metric(self, name: str) -> float | None:
        value = self.metrics.get(name)
        return float(value) if isinstance(value, int | float) and math.isfinite(value) else None

    @property
    def goodput(self) -> float | None:
        return self.metric("request_goodput")

    @property
    def throughput(self) -> float | None:
        return self.metric("request_throughput")

    @property
    def measured(self) -> bool:
        return self.status == "ok"


@dataclass(frozen=True, slots=True)
class Confidence:
    """How sure the winner is: confirmed, and the spread of its repeated runs (goodput
    mode), or the capacity interval its confirmation measured (capacity mode)."""

    confirmed: bool
    repeats: int
    objectives: tuple[float, ...]
    mean: float | None
    stdev: float | None
    spread: float | None
    """(max − min) / mean of the repeats' objectives; None with one run."""
    interval: tuple[float, float | None] | None = None
    """Capacity mode: the winner's interval (req/s per replica), its confirmation's where
    it was confirmed."""

    def summary(self) -> str:
        state = "confirmed" if self.confirmed else "not confirmed"
        if self.interval is not None:
            low, high = self.interval
            span = f"{low:.3g}–{high:.3g}" if high is not None else f"≥ {low:.3g}"
            how = (f"{self.repeats} runs on fresh samples" if self.confirmed
                   else "the search's ranking probes only")
            return f"{state}: capacity interval {span} req/s ({how})"
        if self.repeats <= 1 or self.mean is None:
            return f"{state}: measured once (no repeats)"
        return (f"{state}: {self.repeats} runs, objective mean {self.mean:.4g} ± "
                f"{self.stdev or 0.0:.2g} (spread {100 * (self.spread or 0.0):.1f}%)")


@dataclass(frozen=True, slots=True)
class NextStep:
    """What the binding constraint at the winner says to do next."""

    wall: str | None
    label: str
    action: str
    knobs: tuple[str, ...] = ()
    replicas: int | None = None
    target_rate: float | None = None
    per_replica_capacity: float | None = None
    capacity_source: str | None = None


UTILISATION_PARTS: tuple[str, ...] = (*BOOT_PHASES, "boot_unsplit", "measure", "teardown",
                                      "other")
"""What a sweep's trial time is split into: each boot phase, a boot stored without its
phases, warm-up + measurement, teardown, and the rest (quality checks, the worker's own
work)."""


@dataclass(frozen=True, slots=True)
class TrialTime:
    """Where one trial's time went, seconds (None: not recorded)."""

    label: str
    """Which boot (:attr:`TrialPoint.label`)."""
    attempt: int
    status: str
    boot_s: float | None
    boot_phases: dict[str, float | None]
    """Each of ``BOOT_PHASES`` (None: the engine did not say); empty for a row stored
    before boots were split by phase."""
    measure_s: float | None
    """Warm-up and measurement together."""
    teardown_s: float | None
    total_s: float | None

    @property
    def parts(self) -> dict[str, float]:
        """This trial's seconds per :data:`UTILISATION_PARTS` entry; ``other`` is what the
        total holds beyond the recorded phases (never negative)."""
        parts = dict.fromkeys(UTILISATION_PARTS, 0.0)
        if self.boot_phases:
            parts.update({k: v or 0.0 for k, v in self.boot_phases.items()})
        else:
            parts["boot_unsplit"] = self.boot_s or 0.0
        parts["measure"] = self.measure_s or 0.0
        parts["teardown"] = self.teardown_s or 0.0
        parts["other"] = max(0.0, (self.total_s or 0.0) - sum(parts.values()))
        return parts


@dataclass(frozen=True, slots=True)
class Utilisation:
    """Where a sweep's trial time went: per trial, and in total by part."""

    trials: tuple[TrialTime, ...]
    seconds: dict[str, float]
    """Seconds per :data:`UTILISATION_PARTS` entry, over every trial."""

    @property
    def total_s(self) -> float:
        return sum(self.seconds.values())

    def share(self, part: str) -> float | None:
        """``part``'s fraction of all trial time (None: no time was recorded)."""
        total = self.total_s
        return self.seconds[part] / total if total > 0 else None

    @property
    def unsplit(self) -> int:
        """How many booted trials were stored without their boot's phases."""
        return sum(1 for t in self.trials if t.boot_s is not None and not t.boot_phases)


def utilisation(points: Sequence[TrialPoint]) -> Utilisation:
    """Each trial's time from its stored timings, and the sweep's total by part."""
    trials = tuple(_trial_time(t) for t in points)
    seconds = dict.fromkeys(UTILISATION_PARTS, 0.0)
    for t in trials:
        for part, value in t.parts.items():
            seconds[part] += value
    return Utilisation(trials, seconds)


@dataclass(frozen=True, slots=True)
class SweepReport:
    sweep: SweepRecord
    trials: tuple[TrialPoint, ...]
    """The configurations the sweep searched (one row per attempt)."""
    cards: tuple[CardRecord, ...]
    knobs: tuple[str, ...]
    winner: TrialPoint | None
    confidence: Confidence | None
    command: str | None
    next_step: NextStep
    slo_targets: dict[str, float]
    slo_percentile: float
    target_rate: float | None
    ties: tuple[TrialPoint, ...]
    """Distinct measured configurations within noise of the best objective (goodput)."""
    tie_note: str | None
    status_counts: dict[str, int]
    failure_counts: dict[str, int]
    infeasible_rules: dict[str, int]
    failure_examples: dict[str, str] = field(default_factory=dict)
    symptoms: tuple[dict[str, Any], ...] = ()
    """The playbook's symptoms beside the wall (the winner's, else every trial's, each
    kind once with how many trials showed it)."""
    answer: str | None = None
    """The seed's whole answer, one sentence (:mod:`slotune.tuner.planning.answer`; capacity
    mode)."""
    equivalent: tuple[EquivalentConfig, ...] = ()
    """Capacity mode: configurations the winner's interval cannot be told from."""
    allow_lossy: bool = False
    """Lossy values scored unchecked (``--allow-lossy``)."""
    twin: TwinProgress | None = None
    """A twin sweep's screening, calibration and predicted-against-measured calls."""
    boots: tuple[TrialPoint, ...] = ()
    """Every boot the sweep paid for: its trials, their confirmation repeats and its
    quality baseline (what the utilisation is of)."""
    frontier: Frontier | None = None
    """Capacity sweeps: every probed point of the workload on this model and GPU, under
    this sweep's SLO (:mod:`slotune.tuner.planning.frontier`); None for goodput sweeps."""

    @property
    def quality_checked(self) -> tuple[TrialPoint, ...]:
        """The trials whose configuration was lossy, with their quality verdicts."""
        return tuple(t for t in self.trials if t.quality)

    @property
    def measured(self) -> tuple[TrialPoint, ...]:
        return tuple(t for t in self.trials if t.measured)

    @property
    def utilisation(self) -> Utilisation:
        return utilisation(self.boots or self.trials)

    def knob_points(self, knob: str, metric: str) -> list[tuple[Any, float]]:
        """(knob value, metric) of every measured trial that has both."""
        out = []
        for t in self.measured:
            value = t.metric(metric)
            if knob in t.params and value is not None:
                out.append((t.params[knob], value))
        return out

    def best_per_value(self, knob: str) -> list[tuple[Any, TrialPoint]]:
        """For each value ``knob`` took, the measured trial with the best objective."""
        best: dict[str, tuple[Any, TrialPoint]] = {}
        for t in self.measured:
            if knob not in t.params:
                continue
            key = repr(t.params[knob])
            if key not in best or (t.objective or 0.0) > (best[key][1].objective or 0.0):
                best[key] = (t.params[knob], t)
        return sorted(best.values(), key=lambda vt: _order(vt[0]))

    def pareto(self, metric: str) -> tuple[list[tuple[float, float]], list[tuple[float, float]]]:
        """All (throughput, p99 ``metric``) points of measured trials, and their front."""
        points = [(t.throughput, t.metric(f"p99_{metric}_ms")) for t in self.measured]
        clean = [(x, y) for x, y in points if x is not None and y is not None]
        return clean, pareto_front(clean)


def analyse(sweep: SweepRecord, trials: Sequence[TrialRecord], cards: Sequence[CardRecord],
            *, workload_spec: Mapping[str, Any] | None = None,
            best_rows: Sequence[BestConfig] = (), answer: SweepAnswer | None = None,
            frontier: Frontier | None = None) -> SweepReport:
    """Everything the report says about ``sweep`` (``trials``: every row of the sweep;
    only search rows are configurations, the others count in the utilisation)."""
    boots = tuple(_point(t) for t in trials)
    points = tuple(p for p in boots if p.role == "search")
    measured = [t for t in points if t.measured]
    winner = _winner(measured)
    knobs = _knobs(sweep, points)
    slo_targets = {k: float(v) for k, v in sweep.slo.items()
                   if k != "percentile" and isinstance(v, int | float)}
    percentile = float(sweep.slo.get("percentile") or 99.0)
    target_rate = _target_rate(workload_spec, measured)
    confirmation = SweepProgress.of(sweep.progress).confirmation
    confidence = _confidence(winner, measured, confirmation) if winner else None
    command = vllm_command(sweep.model, winner.config or winner.params) if winner else None
    ties = _ties(sweep, measured)
    tie_note = None
    if len(ties) >= 3 and sweep.mode == "goodput":
        rate = f" at {target_rate:g} req/s" if target_rate else ""
        tie_note = (f"{len(ties)} of {len({params_key(t.params) for t in measured})} "
                    f"measured configurations are within {NOISE_TOLERANCE:.0%} of the best "
                    f"goodput: the workload's rate{rate} no longer separates "
                    "configurations — capacity mode is the answer (rank them by the highest "
                    "rate each carries under the SLO). Among these, the one with the most SLO "
                    "headroom ranks first.")
    status_counts = Counter(t.status for t in points)
    failure_counts = Counter(t.failure_class or t.status for t in points
                             if t.status in ("failed", "lost"))
    rules = Counter(t.violated_rule or t.failure_message or "unknown rule"
                    for t in points if t.status == "infeasible")
    examples: dict[str, str] = {}
    for t in points:
        if t.status in ("failed", "lost") and t.failure_message:
            examples.setdefault(t.failure_class or t.status, t.failure_message)
    return SweepReport(
        sweep=sweep, trials=points, cards=tuple(cards), knobs=knobs, winner=winner,
        confidence=confidence, command=command,
        next_step=_next_step(sweep, winner, target_rate, best_rows, answer),
        slo_targets=slo_targets, slo_percentile=percentile, target_rate=target_rate,
        ties=ties, tie_note=tie_note, status_counts=dict(status_counts),
        symptoms=_symptoms(winner, points),
        failure_counts=dict(failure_counts), infeasible_rules=dict(rules),
        failure_examples=examples, answer=answer.sentence if answer else None,
        equivalent=_equivalent(winner, best_rows),
        allow_lossy=bool((sweep.space.get("quality") or {}).get("allow_lossy")),
        twin=SweepProgress.of(sweep.progress).twin, boots=boots, frontier=frontier,
    )


# --- helpers -------------------------------------------------------------------------------

def _order(value: Any) -> tuple[int, float, str]:
    if value is None:
        return (0, 0.0, "")
    if isinstance(value, bool):
        return (1, float(value), "")
    if isinstance(value, int | float):
        return (2, float(value), "")
    return (3, 0.0, str(value))


def _point(trial: TrialRecord) -> TrialPoint:
    result = trial.result or {}
    headroom = result.get("headroom")
    return TrialPoint(
        **trial.model_dump(include=set(TrialFields.model_fields) - {"timings", "diagnosis"}),
        metrics=dict(result.get("metrics") or {}),
        headroom=float(headroom) if isinstance(headroom, int | float) else None,
        gate_passed=bool(result.get("gate_passed", False)),
        diagnosis=trial.diagnosis or result.get("diagnosis"),
        failure_message=result.get("failure_message"),
        violated_rule=result.get("violated_rule"),
        quality=result.get("quality"),
        timings=dict(trial.timings or result.get("timings") or {}),
    )


def _seconds(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and math.isfinite(value) else None


def _trial_time(t: TrialPoint) -> TrialTime:
    timings = t.timings
    warmup, measure = _seconds(timings.get("warmup_s")), _seconds(timings.get("measure_s"))
    measuring = None if warmup is None and measure is None else (warmup or 0.0) + (measure or 0.0)
    # A row stored before boots were split has none of the phase keys: its boot stays
    # one unknown block rather than reading as "no compile, no weights".
    phases = ({k: _seconds(timings.get(k)) for k in BOOT_PHASES}
              if any(k in timings for k in BOOT_PHASES) else {})
    return TrialTime(label=t.label, attempt=t.attempt, status=t.status,
                     boot_s=_seconds(timings.get("boot_s")), boot_phases=phases,
                     measure_s=measuring, teardown_s=_seconds(timings.get("teardown_s")),
                     total_s=_seconds(timings.get("total_s")))


def _as_result(t: TrialPoint) -> TrialResult:
    return TrialResult(run_id=str(t.id), status="ok", objective=t.objective or 0.0,
                       headroom=t.headroom)


def _winner(measured: Sequence[TrialPoint]) -> TrialPoint | None:
    """The confirmed trial (the coordinator's pick after re-runs), else the best by the
    search's own ranking (objective; within noise, more headroom)."""
    confirmed = [t for t in measured if t.confirmed]
    pool = confirmed or list(measured)
    if not pool:
        return None
    order = rank([_as_result(t) for t in pool])
    best = pool[order[0]]
    return best if (best.objective or 0.0) > 0 or best.confirmed else None


def _confidence(winner: TrialPoint, measured: Sequence[TrialPoint],
                confirmation: Sequence[ConfirmedCandidate] = ()) -> Confidence:
    """The winner's runs: its search trial(s) and the coordinator's confirmation repeats
    (kept in the sweep's progress, not as trials); in capacity mode, its interval."""
    if winner.capacity and winner.capacity_low:
        return Confidence(winner.confirmed, winner.repeats, (), None, None, None,
                          (winner.capacity_low, winner.capacity_high))
    key = params_key(winner.params)
    runs = [t.objective or 0.0 for t in measured if params_key(t.params) == key]
    for candidate in confirmation:
        if params_key(candidate.params) == key:
            runs += candidate.runs
    if len(runs) < 2:
        return Confidence(winner.confirmed, len(runs), tuple(runs), None, None, None)
    mean = statistics.fmean(runs)
    spread = (max(runs) - min(runs)) / mean if mean > 0 else None
    return Confidence(winner.confirmed, len(runs), tuple(runs), mean, statistics.stdev(runs),
                      spread)


def _knobs(sweep: SweepRecord, points: Sequence[TrialPoint]) -> tuple[str, ...]:
    """The searched knobs: the space's, else every param name that varies."""
    space_knobs = sweep.space.get("knobs")
    names = (tuple(space_knobs) if isinstance(space_knobs, Mapping) and space_knobs
             else tuple(dict.fromkeys(k for t in points for k in t.params)))
    # a knob the trials never moved draws a single column of points: leave it out
    varied = tuple(k for k in names
                   if len({repr(t.params.get(k)) for t in points if t.measured}) > 1)
    return varied or names


def _target_rate(spec: Mapping[str, Any] | None,
                 measured: Sequence[TrialPoint]) -> float | None:
    raw: Any = None
    if spec:
        raw = (spec.get("arrivals") or {}).get("request_rate")
    if raw is None:
        raw = next((t.metrics.get("request_rate") for t in measured
                    if t.metrics.get("request_rate") is not None), None)
    try:
        rate = float(raw)
    except (TypeError, ValueError):
        return None
    return rate if math.isfinite(rate) and rate > 0 else None


def _ties(sweep: SweepRecord, measured: Sequence[TrialPoint]) -> tuple[TrialPoint, ...]:
    top = max((t.objective or 0.0 for t in measured), default=0.0)
    if top <= 0:
        return ()
    seen: dict[str, TrialPoint] = {}
    for t in measured:
        if (t.objective or 0.0) >= top * (1 - NOISE_TOLERANCE):
            seen.setdefault(params_key(t.params), t)
    return tuple(seen.values())


def _symptoms(winner: TrialPoint | None, points: Sequence[TrialPoint]
              ) -> tuple[dict[str, Any], ...]:
    """The winner's symptoms; without a winner, those of every trial, each kind once."""
    chosen = [winner] if winner is not None else list(points)
    seen: dict[str, dict[str, Any]] = {}
    for point in chosen:
        for symptom in (point.diagnosis or {}).get("symptoms") or []:
            entry = seen.setdefault(str(symptom.get("kind")), {**symptom, "trials": 0})
            entry["trials"] += 1
    return tuple(seen.values())


def _equivalent(winner: TrialPoint | None, best_rows: Sequence[BestConfig]
                ) -> tuple[EquivalentConfig, ...]:
    """The winner's equivalent set, as the best-config view's row of it gives it."""
    if winner is None:
        return ()
    row = next((r for r in best_rows if r.trial_id == winner.id), None)
    return tuple(row.equivalent) if row is not None else ()


def _next_step(sweep: SweepRecord, winner: TrialPoint | None, target_rate: float | None,
               best_rows: Sequence[BestConfig], answer: SweepAnswer | None = None) -> NextStep:
    if winner is None:
        return NextStep(None, "no winner", "no configuration met the SLO: widen the space "
                        "(or relax the SLO / lower the rate) and look at the failures below")
    diagnosis = winner.diagnosis or {}
    wall = str(diagnosis["wall"]) if diagnosis.get("wall") else None
    label = str(diagnosis.get("label") or wall or "no diagnosis")
    default_knobs: dict[str, list[str]] = {str(w): ks for w, ks in KNOBS.items()}
    knobs = tuple(str(k) for k in (diagnosis.get("knobs") or default_knobs.get(wall or "", [])))
    capacity, source = _capacity(sweep, winner, best_rows)
    replicas = None
    if answer is not None:  # the answer's own plan: one replica count in the report
        plan = answer.plan
        replicas, capacity = plan.replicas, plan.per_replica_rps
        source = (f"the capacity interval's lower end, {plan.headroom:.0%} headroom: the "
                  "answer's plan")
    elif target_rate is not None and capacity:
        replicas = max(1, math.ceil(target_rate / capacity - 1e-9))
    if wall == "queue":
        if replicas is not None and capacity is not None:
            action = (f"queue-bound: one replica is past its knee, tuning won't move it. For "
                      f"{target_rate:g} req/s at {capacity:.3g} req/s per replica "
                      f"({source}): {replicas} replicas of this config.")
        else:
            action = ("queue-bound: one replica is past its knee, tuning won't move it; add "
                      "replicas — run a capacity-mode sweep to measure the per-replica rate")
        return NextStep(wall, label, action, knobs, replicas, target_rate, capacity, source)
    if wall in ("prefill", "decode", "kv"):
        action = f"{label}: the next experiments are the knobs that move this wall"
        return NextStep(wall, label, action, knobs, replicas, target_rate, capacity, source)
    if wall == "limit":
        action = ("at the limit: no wall stands out at this rate, stop tuning this config; "
                  "more traffic needs more replicas")
        if replicas is not None and capacity is not None:
            action += (f" ({replicas} for {target_rate:g} req/s at {capacity:.3g} req/s per "
                       f"replica, {source})")
        return NextStep(wall, label, action, (), replicas, target_rate, capacity, source)
    return NextStep(wall, label, "no diagnosis was recorded for the winner (no engine "
                    "metrics): rerun it with metrics scraping to see its wall")


def _capacity(sweep: SweepRecord, winner: TrialPoint,
              best_rows: Sequence[BestConfig]) -> tuple[float | None, str | None]:
    """Per-replica capacity: measured (capacity mode), else the workload's best row for the
    same model/GPU/SLO, else the winner's goodput (a lower bound at the offered rate)."""
    if winner.capacity:
        return winner.capacity, "measured in capacity mode"
    for row in best_rows:
        if (row.capacity and row.model == sweep.model and row.gpu == sweep.gpu
                and row.slo == sweep.slo_key):
            return row.capacity, f"measured by trial {row.trial_id} in capacity mode"
    rate = _target_rate(None, [winner])
    if winner.goodput and rate and winner.gate_passed \
            and winner.goodput >= rate * (1 - NOISE_TOLERANCE):
        return rate, ("carries the offered rate under the SLO; its ceiling is unmeasured "
                      "(capacity mode measures it)")
    if winner.goodput:
        return winner.goodput, "estimated from the winner's goodput at the offered rate"
    return None, None
