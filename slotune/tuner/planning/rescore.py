"""Any SLO from stored probes: a configuration's capacity under an SLO no sweep used.

A capacity trial probes one booted engine at several rates and keeps, per probe, the
percentiles of TTFT, TPOT, ITL and E2E latency over the values its gate read
(:class:`~slotune.workers.contracts.CapacityProbe`, failed requests infinitely slow). The gate of
another SLO of those percentiles is then a comparison of stored numbers — the same gate,
:func:`slotune.workers.loadgen.score.gate.slo_gate`, that
:func:`slotune.workers.loadgen.score.scoring.score` applies live — so the morning-after question
("and under p99 TPOT ≤ 30 ms?") needs no new sweep. This module is the one place that rescores; the
planner (:mod:`slotune.tuner.planning.planner`) and the frontier
(:mod:`slotune.tuner.planning.frontier`) read it.

**A probe's verdict** under ``slo`` (:func:`probe_verdict`) is ``pass``, ``fail`` or
``unknown``:

* ``fail`` — its error rate exceeds the trial's ``max_error_rate``; no request completed;
  a targeted percentile is over its target (or infinite: failed requests); or it stopped
  early because too many requests broke its own target of one metric for its percentile
  to hold, and ``slo`` targets that metric at or below it, at the same or a higher
  percentile (each of those requests breaks ``slo`` too, and fewer may);
* ``unknown`` — it was stored before probes kept their percentiles; the percentile ``slo``
  asks for was not kept (e.g. p97); it stopped early and ``slo`` is looser than the SLO it
  stopped for (its percentiles cover only the requests before the stop); its client fell
  behind its schedule (the measurement is distorted);
* ``pass`` — otherwise.

**A trial's capacity** (:func:`trial_capacity`) is the highest probed rate that passes
below the lowest probed rate that fails (a noisy pass above a failure is not believed).
Where the probes bracket the answer — a pass at ``low``, a failure at ``high`` with a
finite worst observed/target ratio — the rate at which the worst ratio reaches 1 is also
given, interpolated linearly between the two probes (latency grows faster than linearly
near saturation, so the straight line overstates the rate a little: it is marked
``interpolated`` and the planner never sizes on it, only shows it).

**How sure** (:class:`Confidence`): the bracket (the passing probe below, the failing one
above, and how wide it is), the probes whose verdict is unknown where they would decide,
and — a configuration measured again in confirmation — the spread of its measurements'
capacities. A configuration is *undecided* when its true capacity could be above what the
probes show: no probe failed above it (the limit was never reached), or an unknown probe
sits between the pass and the failure. The planner names undecided configurations that
could beat its answer as worth re-measuring.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from slotune.workers.contracts import SLO, CapacityProbe, SLOMetric, TrialResult, TrialSpec
from slotune.workers.loadgen.score.gate import slo_gate
from slotune.workers.loadgen.score.scoring import percentile_key

__all__ = ["Confidence", "ProbeVerdict", "TrialCapacity", "Verdict", "combine",
           "error_budget", "probe_verdict", "trial_capacity"]

Verdict = Literal["pass", "fail", "unknown"]


def error_budget(stored_spec: Mapping[str, Any] | None) -> float:
    """The error budget a stored trial ran under (its spec's ``max_error_rate``; the
    spec's default where the row kept none)."""
    default = TrialSpec.model_fields["max_error_rate"].default
    return float((stored_spec or {}).get("max_error_rate", default))

TIGHT_BRACKET = 0.25
"""A bracket (failing rate ÷ passing rate − 1) within this is a *tight* answer."""


@dataclass(frozen=True, slots=True)
class ProbeVerdict:
    """One probe under one SLO: its verdict, why, and its worst observed/target ratio."""

    rate: float
    verdict: Verdict
    reason: str
    worst_ratio: float | None
    """max over the SLO's targets of observed/target (None: infinite or not known)."""


@dataclass(frozen=True, slots=True)
class TrialCapacity:
    """What one trial's probes say of its per-replica capacity under one SLO."""

    capacity: float | None
    """The highest probed rate that passes below the lowest that fails; 0.0 when the
    lowest probe fails; None when no probe can decide (every one unknown)."""
    failing_rate: float | None
    """The lowest probed rate that fails (the top of the bracket); None: none failed."""
    interpolated: float | None
    """Where the bracket allows: the rate at which the worst ratio reaches 1, linear
    between the bracketing probes — an estimate, never sized on."""
    undecided: str | None
    """Why the true capacity may be higher than ``capacity`` (None: the probes decide)."""
    probes: tuple[ProbeVerdict, ...]


class Confidence(BaseModel):
    """How sure a configuration's rescored capacity is (see the module docstring); the
    planner's answer carries it as is (API and CLI)."""

    model_config = ConfigDict(frozen=True)

    level: Literal["high", "medium", "low"]
    """high: a tight bracket, no unknown probe in it, repeats (if any) within 10%;
    low: undecided or no bracket; medium otherwise."""
    bracket: tuple[float, float | None]
    """(highest passing rate, lowest failing rate above it; None: never failed)."""
    probes: int
    """Probes of the configuration's measurements that decided (pass or fail)."""
    unknown_probes: int
    measurements: int
    """The search trial and its confirmation repeats."""
    spread: float | None
    """(max − min) ÷ max of the measurements' capacities (None: one measurement)."""
    undecided: str | None = None
    interpolated: float | None = None
    """The bracket's linear estimate of where the SLO breaks (marked: never sized on)."""
    capacities: tuple[float, ...] = ()
    """Each decided measurement's capacity (req/s per replica)."""


def probe_verdict(probe: CapacityProbe, slo: SLO, *, own_slo: SLO,
                  max_error_rate: float) -> ProbeVerdict:
    """The probe's gate under ``slo`` (``own_slo``: the SLO it was measured under)."""
    def verdict(v: Verdict, reason: str, worst: float | None = None) -> ProbeVerdict:
        return ProbeVerdict(probe.request_rate, v, reason, worst)

    if not probe.percentiles_ms or probe.num_requests is None:
        return verdict("unknown", "stored before probes kept their percentiles")
    key = percentile_key(slo.percentile)
    observed: dict[SLOMetric, float | None] = {}
    not_kept: tuple[str, dict[str, float | None]] | None = None
    for metric in slo.targets:
        row = probe.percentiles_ms.get(metric, {})
        if key in row:
            observed[metric] = row[key]
        elif not_kept is None:
            not_kept = (metric, row)
    failed = probe.failed_requests or 0
    gate = slo_gate(slo, observed, requests=probe.num_requests, failed=failed,
                    max_error_rate=max_error_rate)
    if gate.outcome == "over_budget":
        return verdict("fail", f"{failed} of {probe.num_requests} requests failed")
    if gate.outcome == "none_completed":
        return verdict("fail", "no request completed")
    if not_kept is not None:
        missing, row = not_kept
        return verdict("unknown", f"{key} {missing} was not kept (kept: "
                       f"{', '.join(row) or 'none'})")
    worst = gate.worst_ratio
    finite = worst if worst != math.inf else None
    if gate.outcome == "targets_broken":
        # Worded as stored verdicts always were: an infinite percentile names no target.
        return verdict("fail", "; ".join(
            f"{key} {c.metric} infinite (failed requests)" if c.observed_ms is None
            else f"{key} {c.metric} {c.observed_ms:.1f} ms > {c.target_ms:g} ms"
            for c in gate.checks if not c.ok), finite)
    if probe.early_abort is not None:
        if _breaks_too(slo, own_slo, probe.early_abort_metric):
            return verdict("fail", f"stopped early under a looser SLO: {probe.early_abort}")
        return verdict("unknown", "stopped early (its own SLO broke), so its percentiles "
                       "cover part of the run only")
    if probe.client_bound:
        return verdict("unknown", "the client fell behind its schedule (distorted)")
    return verdict("pass", "every target met", finite)


def trial_capacity(result: TrialResult, slo: SLO, *, own_slo: SLO,
                   max_error_rate: float) -> TrialCapacity:
    """One trial's capacity under ``slo`` from its probes (see the module docstring)."""
    verdicts = tuple(sorted((probe_verdict(p, slo, own_slo=own_slo,
                                           max_error_rate=max_error_rate)
                             for p in result.capacity_probes), key=lambda v: v.rate))
    fails = [v for v in verdicts if v.verdict == "fail"]
    failing = fails[0] if fails else None
    below = [v for v in verdicts if v.verdict == "pass"
             and (failing is None or v.rate < failing.rate)]
    passing = below[-1] if below else None
    decided = [v for v in verdicts if v.verdict != "unknown"]
    if not decided:
        return TrialCapacity(None, None, None, "no probe can be scored under this SLO "
                             f"({verdicts[0].reason if verdicts else 'no probes'})", verdicts)
    capacity = passing.rate if passing else 0.0
    lowest = verdicts[0].rate
    undecided = None
    gap = [v for v in verdicts if v.verdict == "unknown" and v.rate > capacity
           and (failing is None or v.rate < failing.rate)]
    if gap:
        where = ("above the highest pass" if failing is None
                 else "between the pass and the failure")
        undecided = (f"the probe at {gap[0].rate:.3g} req/s, {where}, cannot be scored: "
                     f"{gap[0].reason}")
    elif failing is None:
        undecided = (f"every probe up to {capacity:.3g} req/s passes: the limit under this "
                     "SLO was never reached")
    elif passing is None and failing.rate > lowest:
        undecided = (f"no probe below {failing.rate:.3g} req/s can be scored "
                     f"({verdicts[0].reason})")
    interpolated = None
    if (passing is not None and failing is not None and not gap
            and passing.worst_ratio is not None and failing.worst_ratio is not None
            and failing.worst_ratio > 1.0 > passing.worst_ratio - 1e-12):
        share = (1.0 - passing.worst_ratio) / (failing.worst_ratio - passing.worst_ratio)
        interpolated = passing.rate + share * (failing.rate - passing.rate)
    return TrialCapacity(capacity, failing.rate if failing else None, interpolated,
                         undecided, verdicts)


def combine(measured: Sequence[TrialCapacity]) -> tuple[float | None, Confidence]:
    """One configuration's measurements (search run, repeats): the lowest capacity stands
    (as the planner sizes on measured rates), with how sure it is."""
    decided = [m for m in measured if m.capacity is not None]
    capacities = tuple(m.capacity for m in decided if m.capacity is not None)
    decided_probes = sum(v.verdict != "unknown" for m in measured for v in m.probes)
    unknown = sum(v.verdict == "unknown" for m in measured for v in m.probes)
    if not decided:
        return None, Confidence(level="low", bracket=(0.0, None), probes=decided_probes,
                                unknown_probes=unknown, measurements=len(measured),
                                spread=None, undecided=measured[0].undecided if measured
                                else "no probes")
    rep = min(decided, key=lambda m: m.capacity or 0.0)
    assert rep.capacity is not None
    spread = ((max(capacities) - min(capacities)) / max(capacities)
              if len(capacities) > 1 and max(capacities) > 0 else None)
    undecided = next((m.undecided for m in decided if m.undecided), None)
    failing = rep.failing_rate
    tight = (failing is not None and rep.capacity > 0
             and failing / rep.capacity - 1 <= TIGHT_BRACKET)
    if undecided or failing is None or rep.capacity == 0:
        level: Literal["high", "medium", "low"] = "low"
    elif tight and (spread is None or spread <= 0.10):
        level = "high"
    else:
        level = "medium"
    return rep.capacity, Confidence(level=level, bracket=(rep.capacity, failing),
                                    probes=decided_probes, unknown_probes=unknown,
                                    measurements=len(measured), spread=spread,
                                    undecided=undecided, interpolated=rep.interpolated,
                                    capacities=capacities)


def _breaks_too(slo: SLO, own: SLO, metric: str | None) -> bool:
    """Whether a probe stopped early under ``own`` breaks ``slo`` too: the breakers of
    ``metric`` that stopped it (more than ``own``'s percentile allows) break ``slo``'s
    target of it as well (at or below ``own``'s), and ``slo`` allows no more of them (the
    same or a higher percentile). Older rows do not say which metric: not known."""
    if metric is None or slo.percentile < own.percentile:
        return False
    mine, theirs = slo.targets, own.targets
    return (metric in mine and metric in theirs
            and mine[metric] <= theirs[metric])
